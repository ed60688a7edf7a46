"""Losses over dense-triplet minibatches, one per file; each docstring gives its formula and paper."""

from labeldist.errors import UsageError
from labeldist.trainer.losses.base import BatchLoss
from labeldist.trainer.losses.binary_triplet import BinaryTripletLoss, binary_pairs, binary_triplets
from labeldist.trainer.losses.dense_triplet import DenseTripletLoss
from labeldist.trainer.losses.ladder import LadderLoss
from labeldist.trainer.losses.lifted import LiftedStructureLoss
from labeldist.trainer.losses.log_ratio import LogRatioLoss, log_ratio_gradient
from labeldist.trainer.losses.multi_similarity import MultiSimilarityLoss
from labeldist.trainer.losses.proxy_anchor import ProxyAnchorLoss, neighbourhood_classes

#: loss names of the ``trainer`` command
LOSSES: dict[str, type[BatchLoss]] = {
    "log_ratio": LogRatioLoss,
    "dense_triplet": DenseTripletLoss,
    "binary_triplet": BinaryTripletLoss,
    "ladder": LadderLoss,
    "lifted": LiftedStructureLoss,
    "proxy_anchor": ProxyAnchorLoss,
    "multi_similarity": MultiSimilarityLoss,
}


def make_loss(
    name: str, *, n_items: int | None = None, embedding_dim: int | None = None, **kwargs: object
) -> BatchLoss:
    """The loss registered as ``name``; ValueError naming the known losses otherwise. With ``n_items`` (the
    training store's size) and ``embedding_dim``, the loss of a run (:meth:`BatchLoss.for_run`: proxy losses
    size their proxies by them)."""
    try:
        cls = LOSSES[name]
    except KeyError:
        raise UsageError(f"unknown loss {name!r}; known: {', '.join(LOSSES)}") from None
    if n_items is not None and embedding_dim is not None:
        return cls.for_run(n_items=n_items, embedding_dim=embedding_dim, **kwargs)
    return cls(**kwargs)  # type: ignore[arg-type]


__all__ = [
    "LOSSES",
    "BatchLoss",
    "BinaryTripletLoss",
    "DenseTripletLoss",
    "LadderLoss",
    "LiftedStructureLoss",
    "LogRatioLoss",
    "MultiSimilarityLoss",
    "ProxyAnchorLoss",
    "binary_pairs",
    "binary_triplets",
    "log_ratio_gradient",
    "make_loss",
    "neighbourhood_classes",
]
