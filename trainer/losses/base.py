"""The shared base of the losses: it checks shapes and reduces; a loss only computes (``compute``)."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

REDUCTIONS = ("mean", "sum", "none")


class BatchLoss(nn.Module):
    """A loss over dense-triplet minibatches (anchor first), as :class:`labeldist.client.data.Minibatch` holds them.

    ``forward(embeddings, distances, pairwise=None)`` takes embeddings ``(B, n, d)`` (or ``(n, d)`` for one
    minibatch), the label distances from each anchor to its ``n - 1`` items ``(B, n - 1)`` and, for losses
    with ``needs_pairwise``, the batch's label-distance matrix ``(B, n, n)``; subclasses implement
    :meth:`compute`, one loss value per minibatch, and the base reduces them (``reduction``: mean, sum, none).

    ``normalized`` says whether the loss L2-normalises embeddings, in which case retrieval ranks by cosine.
    A loss with ``needs_indices`` also gets the minibatch's store indices ``(B, n)`` (``indices=``), passed to
    :meth:`compute` as the keyword ``indices`` (proxy losses name their classes by store item). A loss with
    learnable parameters (proxies) is trained with the model: the fit loop puts ``parameters()`` in the
    optimizer at ``lr_scale`` times the model's learning rate and saves ``state_dict()`` in the checkpoint.
    :meth:`describe` is what the run log records about the loss (e.g. thresholds calibrated on the data).
    """

    needs_pairwise: ClassVar[bool] = False
    needs_indices: ClassVar[bool] = False
    normalized: ClassVar[bool] = False
    #: learning-rate multiplier of the loss's own parameters (1 = the model's)
    lr_scale: ClassVar[float] = 1.0

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        if reduction not in REDUCTIONS:
            raise ValueError(f"unknown reduction {reduction!r}; known: {', '.join(REDUCTIONS)}")
        self.reduction = reduction

    @classmethod
    def for_run(cls, *, n_items: int, embedding_dim: int, **options: object) -> BatchLoss:
        """The loss of a run over a store of ``n_items`` items with ``embedding_dim``-d embeddings; only losses
        with parameters sized by the run (proxies) use them."""
        return cls(**options)  # type: ignore[arg-type]

    def describe(self) -> dict[str, object]:
        """What the run log records about this loss beyond its options (nothing, for most losses)."""
        return {}

    def collapsed_value(self) -> float | None:
        """The loss when every embedding coincides, where a collapsed run's loss sits (a triplet loss: its margin),
        or None where it is not a constant (labeldist.trainer.monitor watches for it)."""
        return None

    def compute(self, embeddings: torch.Tensor, distances: torch.Tensor, pairwise: torch.Tensor | None) -> torch.Tensor:
        """Per-minibatch losses ``(B,)`` from checked inputs."""
        raise NotImplementedError

    def forward(
        self,
        embeddings: torch.Tensor,
        distances: torch.Tensor,
        pairwise: torch.Tensor | None = None,
        indices: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if embeddings.dim() == 2:
            embeddings = embeddings[None]
            distances = distances[None]
            pairwise = None if pairwise is None else pairwise[None]
            indices = None if indices is None else indices[None]
        if embeddings.dim() != 3 or embeddings.shape[1] < 3:
            raise ValueError(f"embeddings must have shape (B, n, d) with n >= 3, got {tuple(embeddings.shape)}")
        b, n, _ = embeddings.shape
        if tuple(distances.shape) != (b, n - 1):
            raise ValueError(f"distances must have shape (B, n - 1) = {(b, n - 1)}, got {tuple(distances.shape)}")
        if self.needs_pairwise:
            if pairwise is None:
                raise ValueError(f"{type(self).__name__} needs the batch's pairwise label distances (pairwise=True)")
            if tuple(pairwise.shape) != (b, n, n):
                raise ValueError(f"pairwise must have shape (B, n, n) = {(b, n, n)}, got {tuple(pairwise.shape)}")
        extra: dict[str, torch.Tensor] = {}
        if self.needs_indices:
            if indices is None:
                raise ValueError(f"{type(self).__name__} needs the minibatch's store indices (indices=)")
            if tuple(indices.shape) != (b, n):
                raise ValueError(f"indices must have shape (B, n) = {(b, n)}, got {tuple(indices.shape)}")
            extra["indices"] = indices.to(embeddings.device, torch.long)
        if not torch.isfinite(distances).all():
            bad = int((~torch.isfinite(distances)).sum())
            raise ValueError(f"{bad} label distances are not finite (e.g. poses with no joint in common)")
        if embeddings.dtype in (torch.float16, torch.bfloat16):
            embeddings = embeddings.float()  # losses in float32 even under mixed precision
        losses = self.compute(
            embeddings, distances.to(embeddings), None if pairwise is None else pairwise.to(embeddings), **extra
        )
        if self.reduction == "mean":
            return losses.mean()
        return losses.sum() if self.reduction == "sum" else losses
