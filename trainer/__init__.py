"""The trainer: losses, retrieval metrics, models, image inputs and the ``trainer`` command (fit / eval), over the
HTTP client and minibatch streams of :mod:`labeldist.client` (re-exported here)."""

from labeldist.client import (
    Batches,
    FeatureInputs,
    LabelDistClient,
    Minibatch,
    MinibatchStream,
    Prefetcher,
    RequestRejected,
    ServiceError,
    ServiceUnavailable,
    StoreNotFound,
)
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
