"""The trainer: an HTTP client of labeldist's service, minibatch datasets with prefetch, losses, retrieval
metrics, models, and the ``trainer`` command (fit / eval)."""

from labeldist.trainer.client import (
    Batches,
    LabelDistClient,
    RequestRejected,
    ServiceError,
    ServiceUnavailable,
    StoreNotFound,
)
from labeldist.trainer.data import FeatureInputs, Minibatch, MinibatchStream
from labeldist.trainer.images import ImageInputError, ImageInputs, open_images
from labeldist.trainer.losses import BinaryTripletLoss, DenseTripletLoss, LadderLoss, LogRatioLoss, make_loss
from labeldist.trainer.metrics import (
    coherent_score,
    mean_label_distance,
    ndcg,
    recall_at_k,
    retrieval_metrics,
    retrieve,
)
from labeldist.trainer.models import EmbeddingMLP, ResNetEmbedding
from labeldist.trainer.prefetch import Prefetcher

__all__ = [
    "Batches",
    "BinaryTripletLoss",
    "DenseTripletLoss",
    "EmbeddingMLP",
    "FeatureInputs",
    "ImageInputError",
    "ImageInputs",
    "LabelDistClient",
    "LadderLoss",
    "LogRatioLoss",
    "Minibatch",
    "MinibatchStream",
    "Prefetcher",
    "RequestRejected",
    "ResNetEmbedding",
    "ServiceError",
    "ServiceUnavailable",
    "StoreNotFound",
    "coherent_score",
    "make_loss",
    "open_images",
    "mean_label_distance",
    "ndcg",
    "recall_at_k",
    "retrieval_metrics",
    "retrieve",
]
