"""The shared base of the losses: it checks shapes, takes the anchors and reduces; a loss only computes
(``compute``)."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from labeldist.errors import UsageError

REDUCTIONS = ("mean", "sum", "none")
#: which members of a minibatch a loss takes as anchors: the first (the authors' code), or every one
ANCHORS = ("first", "all")


def anchor_orders(n: int, device: torch.device | None = None) -> torch.Tensor:
    """``(n, n)`` int64: row ``q`` lists the members of an ``n``-member minibatch with ``q`` first and the others in
    their order, the minibatch as seen from anchor ``q``.

    >>> anchor_orders(3).tolist()
    [[0, 1, 2], [1, 0, 2], [2, 0, 1]]
    """
    rows = torch.arange(n, device=device)
    others = rows.expand(n, n)[~torch.eye(n, dtype=torch.bool, device=device)].reshape(n, n - 1)
    return torch.cat([rows[:, None], others], dim=1)


def every_anchor(
    embeddings: torch.Tensor, pairwise: torch.Tensor, indices: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Each member of each minibatch as the anchor of its own view: embeddings ``(B, n, d)`` and pairwise label
    distances ``(B, n, n)`` become ``(B n, n, d)`` embeddings, anchor first, and ``(B n, n - 1)`` label distances
    from that anchor (row ``b n + q`` is member ``q`` of minibatch ``b``); store ``indices`` ``(B, n)`` follow."""
    b, n, d = embeddings.shape
    order = anchor_orders(n, embeddings.device)
    views = embeddings[:, order].reshape(b * n, n, d)
    idx = None if indices is None else indices[:, order].reshape(b * n, n)
    return views, anchor_distances(pairwise), idx


def anchor_distances(pairwise: torch.Tensor) -> torch.Tensor:
    """``(B n, n - 1)``: the label distances from each member of each minibatch (pairwise ``(B, n, n)``) to the
    others, in the order of :func:`anchor_orders`."""
    n = pairwise.shape[-1]
    order = anchor_orders(n, pairwise.device)
    return pairwise[:, order[:, :1], order[:, 1:]].reshape(-1, n - 1)


class BatchLoss(nn.Module):
    """A loss over dense-triplet minibatches (anchor first), as :class:`labeldist.client.data.Minibatch` holds them.

    ``forward(embeddings, distances, pairwise=None)`` takes embeddings ``(B, n, d)`` (or ``(n, d)`` for one
    minibatch), the label distances from each anchor to its ``n - 1`` items ``(B, n - 1)`` and, for losses
    with :attr:`needs_pairwise`, the batch's label-distance matrix ``(B, n, n)``; subclasses implement
    :meth:`compute`, one loss value per minibatch, and the base reduces them (``reduction``: mean, sum, none).

    **Anchors.** ``anchors="first"`` scores the minibatch from its first member, as the authors' code does (Kim et
    al. take the distances of the minibatch to its anchor only). ``anchors="all"`` scores it from every member in
    turn, by the minibatch's pairwise label distances, and averages:

    .. math::
        L_{all} = \\frac{1}{n} \\sum_{q=1}^{n} L(\\text{the minibatch with } q \\text{ as its anchor})

    so a step sees :math:`n(n-1)` label distances instead of :math:`n-1`: from random weights the one anchor's
    31 distances of a minibatch of 32 are too few to learn from (RESULTS.md). ``compute`` still scores one
    anchor per view: the base hands it every member's view (:func:`every_anchor`). A loss that already scores
    every member as a query (``queries_itself``, the ladder) honours ``self.anchors`` in its own ``compute``.

    **Chance level.** :meth:`chance_level` is the loss of embeddings that know nothing of the labels, for this
    minibatch (log-ratio: every embedding distance equal; a triplet loss: its margin), or None where no such
    value exists; the fit loop logs it beside the loss and warns when the loss does not get below it.

    ``normalized`` says whether the loss L2-normalises embeddings, in which case retrieval ranks by cosine.
    A loss with ``needs_indices`` also gets the minibatch's store indices ``(B, n)`` (``indices=``), passed to
    :meth:`compute` as the keyword ``indices`` (proxy losses name their classes by store item). A loss with
    learnable parameters (proxies) is trained with the model: the fit loop puts ``parameters()`` in the
    optimizer at ``lr_scale`` times the model's learning rate and saves ``state_dict()`` in the checkpoint.
    :meth:`describe` is what the run log records about the loss (e.g. thresholds calibrated on the data).
    """

    #: the loss always takes the minibatch's pairwise label distances (the ladder: every member a query)
    pairwise_always: ClassVar[bool] = False
    #: ``compute`` scores every member as a query itself and honours ``self.anchors`` (else: the first member)
    queries_itself: ClassVar[bool] = False
    #: the anchors when none are given
    default_anchors: ClassVar[str] = "first"
    needs_indices: ClassVar[bool] = False
    normalized: ClassVar[bool] = False
    #: learning-rate multiplier of the loss's own parameters (1 = the model's)
    lr_scale: ClassVar[float] = 1.0

    def __init__(self, reduction: str = "mean", anchors: str | None = None) -> None:
        super().__init__()
        if reduction not in REDUCTIONS:
            raise UsageError(f"unknown reduction {reduction!r}; known: {', '.join(REDUCTIONS)}")
        anchors = self.default_anchors if anchors is None else anchors
        if anchors not in ANCHORS:
            raise UsageError(f"unknown anchors {anchors!r}; known: {', '.join(ANCHORS)}")
        self.reduction, self.anchors = reduction, anchors

    @property
    def needs_pairwise(self) -> bool:
        """Whether a minibatch must bring its pairwise label distances (every member an anchor needs them)."""
        return self.pairwise_always or self.anchors == "all"

    @classmethod
    def for_run(cls, *, n_items: int, embedding_dim: int, **options: object) -> BatchLoss:
        """The loss of a run over a store of ``n_items`` items with ``embedding_dim``-d embeddings; only losses
        with parameters sized by the run (proxies) use them."""
        return cls(**options)  # type: ignore[arg-type]

    def describe(self) -> dict[str, object]:
        """What the run log records about this loss beyond its options (nothing, for most losses)."""
        return {}

    def anchor_chance(self, distances: torch.Tensor) -> torch.Tensor | None:
        """Per view ``(A,)``: the loss of one anchor's view (label distances ``(A, m)`` to its items) for
        embeddings that know nothing of the labels, or None where the loss has no such value."""
        return None

    def compute(self, embeddings: torch.Tensor, distances: torch.Tensor, pairwise: torch.Tensor | None) -> torch.Tensor:
        """Per-minibatch losses ``(B,)`` from checked inputs."""
        raise NotImplementedError

    def _check(
        self,
        embeddings: torch.Tensor,
        distances: torch.Tensor,
        pairwise: torch.Tensor | None,
        indices: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The inputs as ``(B, n, d)``, ``(B, n - 1)``, ``(B, n, n)`` and ``(B, n)``; ValueError naming a bad shape."""
        if embeddings.dim() == 2:
            embeddings = embeddings[None]
            distances = distances[None]
            pairwise = None if pairwise is None else pairwise[None]
            indices = None if indices is None else indices[None]
        if embeddings.dim() != 3 or embeddings.shape[1] < 3:
            raise UsageError(f"embeddings must have shape (B, n, d) with n >= 3, got {tuple(embeddings.shape)}")
        b, n, _ = embeddings.shape
        if tuple(distances.shape) != (b, n - 1):
            raise UsageError(f"distances must have shape (B, n - 1) = {(b, n - 1)}, got {tuple(distances.shape)}")
        if self.needs_pairwise:
            if pairwise is None:
                why = "every member an anchor" if self.anchors == "all" else "every member a query"
                raise UsageError(
                    f"{type(self).__name__} ({why}) needs the batch's pairwise label distances (pairwise=True)"
                )
            if tuple(pairwise.shape) != (b, n, n):
                raise UsageError(f"pairwise must have shape (B, n, n) = {(b, n, n)}, got {tuple(pairwise.shape)}")
            if not torch.isfinite(pairwise).all():
                bad = int((~torch.isfinite(pairwise)).sum())
                raise UsageError(f"{bad} pairwise label distances are not finite (e.g. poses with no joint in common)")
        if self.needs_indices:
            if indices is None:
                raise UsageError(f"{type(self).__name__} needs the minibatch's store indices (indices=)")
            if tuple(indices.shape) != (b, n):
                raise UsageError(f"indices must have shape (B, n) = {(b, n)}, got {tuple(indices.shape)}")
        if not torch.isfinite(distances).all():
            bad = int((~torch.isfinite(distances)).sum())
            raise UsageError(f"{bad} label distances are not finite (e.g. poses with no joint in common)")
        return embeddings, distances, pairwise, indices

    def _views(self, distances: torch.Tensor, pairwise: torch.Tensor | None) -> tuple[torch.Tensor, int]:
        """The label distances of each anchor's view ``(A, m)`` and the views per minibatch."""
        if self.anchors == "first":
            return distances, 1
        if pairwise is None:
            raise UsageError(
                f"{type(self).__name__} (every member an anchor) needs the batch's pairwise label distances"
            )
        return anchor_distances(pairwise), pairwise.shape[-1]

    def _reduce(self, losses: torch.Tensor) -> torch.Tensor:
        if self.reduction == "mean":
            return losses.mean()
        return losses.sum() if self.reduction == "sum" else losses

    @torch.no_grad()
    def chance_level(
        self, distances: torch.Tensor, pairwise: torch.Tensor | None = None
    ) -> torch.Tensor | float | None:
        """The loss that embeddings knowing nothing of the labels would give on this minibatch, reduced as the loss
        is (see the class docstring), or None where the loss has no such value. A loss that scores every member
        as a query itself (the ladder) overrides it."""
        if distances.dim() == 1:
            distances = distances[None]
            pairwise = None if pairwise is None else pairwise[None]
        views, per_batch = self._views(distances.double(), None if pairwise is None else pairwise.double())
        chance = self.anchor_chance(views)
        if chance is None:
            return None
        return self._reduce(chance.reshape(-1, per_batch).mean(1))

    def forward(
        self,
        embeddings: torch.Tensor,
        distances: torch.Tensor,
        pairwise: torch.Tensor | None = None,
        indices: torch.Tensor | None = None,
    ) -> torch.Tensor:
        embeddings, distances, pairwise, indices = self._check(embeddings, distances, pairwise, indices)
        if embeddings.dtype in (torch.float16, torch.bfloat16):
            embeddings = embeddings.float()  # losses in float32 even under mixed precision
        distances = distances.to(embeddings)
        pairwise = None if pairwise is None else pairwise.to(embeddings)
        indices = None if indices is None else indices.to(embeddings.device, torch.long)
        b, n, _ = embeddings.shape
        views = self.anchors == "all" and not self.queries_itself
        if views:
            assert pairwise is not None  # _check
            embeddings, distances, indices = every_anchor(embeddings, pairwise, indices)
            pairwise = None  # each view has one anchor
        extra = {"indices": indices} if self.needs_indices else {}
        losses = self.compute(embeddings, distances, pairwise, **extra)
        if views:  # one loss per member's view, averaged per minibatch
            losses = losses.reshape(b, n).mean(1)
        return self._reduce(losses)
