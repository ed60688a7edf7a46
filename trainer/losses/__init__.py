"""Losses over dense-triplet minibatches, one per file; each docstring gives its formula and paper."""

from trainer.losses.base import BatchLoss
from trainer.losses.binary_triplet import BinaryTripletLoss, binary_triplets
from trainer.losses.dense_triplet import DenseTripletLoss
from trainer.losses.ladder import LadderLoss
from trainer.losses.log_ratio import LogRatioLoss, log_ratio_gradient

#: loss names of the ``trainer`` command
LOSSES: dict[str, type[BatchLoss]] = {
    "log_ratio": LogRatioLoss,
    "dense_triplet": DenseTripletLoss,
    "binary_triplet": BinaryTripletLoss,
    "ladder": LadderLoss,
}


def make_loss(name: str, **kwargs: object) -> BatchLoss:
    """The loss registered as ``name``; ValueError naming the known losses otherwise."""
    try:
        cls = LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; known: {', '.join(LOSSES)}") from None
    return cls(**kwargs)  # type: ignore[arg-type]


__all__ = [
    "LOSSES",
    "BatchLoss",
    "BinaryTripletLoss",
    "DenseTripletLoss",
    "LadderLoss",
    "LogRatioLoss",
    "binary_triplets",
    "log_ratio_gradient",
    "make_loss",
]
