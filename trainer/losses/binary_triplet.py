"""The binary baseline L(Triplet) + M(Binary) of Kim et al. (CVPR 2019): nearest-in-label = positive."""

from __future__ import annotations

import torch
from pytorch_metric_learning.distances import LpDistance
from pytorch_metric_learning.losses import TripletMarginLoss
from pytorch_metric_learning.reducers import MeanReducer

from labeldist.client.pml import binary_split, check_positives
from labeldist.trainer.losses.base import BatchLoss

#: an anchor's share of positives among its minibatch's items when no count is given: Kim et al.'s 30 of 149
POSITIVE_SHARE = 30 / 149


def positives_among(positives: int | None, m: int) -> int:
    """The number of positives among a minibatch's ``m`` items: ``positives``, or for None the paper's share of them
    (:data:`POSITIVE_SHARE`: 30 of 149, 6 of 31), at least 1 and leaving a negative. ValueError unless it leaves at
    least one negative (:func:`labeldist.client.pml.check_positives`).

    >>> positives_among(None, 149), positives_among(None, 31), positives_among(3, 31)
    (30, 6, 3)
    """
    if positives is None:
        positives = min(max(round(POSITIVE_SHARE * m), 1), m - 1)
    check_positives(positives, m)
    return positives


def binary_triplets(distances: torch.Tensor, positives: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The binary miner: every (anchor, positive, negative) of :func:`binary_split` is a triplet. Returns PML's
    ``indices_tuple`` (anchor rows, positive rows, negative rows)."""
    pos, neg = binary_split(distances, positives)
    p, n = torch.meshgrid(pos, neg, indexing="ij")
    return torch.zeros(p.numel(), dtype=torch.long, device=distances.device), p.reshape(-1), n.reshape(-1)


def binary_pairs(
    distances: torch.Tensor, positives: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The pairs of :func:`binary_split`: (anchor, positive) for each positive and (anchor, negative) for each
    negative, as PML's pair ``indices_tuple`` (a1, p, a2, n). Only pairs with the anchor: the service sends the
    label distances from the anchor, so these are the only pairs whose label relation is known."""
    pos, neg = binary_split(distances, positives)
    zeros = torch.zeros(len(distances), dtype=torch.long, device=distances.device)
    return zeros[: len(pos)], pos, zeros[: len(neg)], neg


class AnchorPairLoss(BatchLoss):
    """A pytorch-metric-learning pair loss applied to each minibatch's anchor pairs (:func:`binary_pairs`): the
    shared body of the binary baselines that take pairs (lifted structure, multi-similarity)."""

    normalized = True

    def __init__(
        self, positives: int | None, pml_loss: torch.nn.Module, reduction: str = "mean", anchors: str | None = None
    ) -> None:
        super().__init__(reduction, anchors)
        self.positives = positives
        self.pml_loss = pml_loss

    def compute(self, embeddings: torch.Tensor, distances: torch.Tensor, pairwise: torch.Tensor | None) -> torch.Tensor:
        positives = positives_among(self.positives, distances.shape[1])
        return torch.stack(
            [
                self.pml_loss(embeddings[b], indices_tuple=binary_pairs(distances[b], positives))
                for b in range(embeddings.shape[0])
            ]
        )


class BinaryTripletLoss(BatchLoss):
    r"""Triplet loss with binary mining, the baseline L(Triplet)+M(Binary) of Kim et al. (CVPR 2019, §5).

    .. math::
        L = \frac{1}{|P||N|} \sum_{p \in P} \sum_{n \in N} \big[ D(f_a, f_p) - D(f_a, f_n) + \delta \big]_+

    :math:`P` the ``positives`` items nearest the anchor in label space (default: a fifth, 30 of 149), :math:`N` the
    other items of the minibatch, :math:`f` L2-normalised, :math:`D` the squared Euclidean distance (Eq. 2 of the
    paper), margin :math:`\delta = 0.2`. The label distances serve only to split positives from negatives: their
    values are thrown away, which is what the paper's continuous losses improve on. Computed by
    pytorch-metric-learning's ``TripletMarginLoss`` on the triplets of :func:`binary_triplets`. ``anchors="all"``
    takes every member of the minibatch as :math:`a` in turn and averages (:class:`BatchLoss`); chance level: the
    margin (equal embedding distances make every hinge :math:`\delta`).
    """

    normalized = True

    def __init__(
        self, positives: int | None = None, margin: float = 0.2, reduction: str = "mean", anchors: str | None = None
    ) -> None:
        super().__init__(reduction, anchors)
        self.positives = positives
        self.triplet = TripletMarginLoss(
            margin=margin, distance=LpDistance(normalize_embeddings=True, p=2, power=2), reducer=MeanReducer()
        )

    def anchor_chance(self, distances: torch.Tensor) -> torch.Tensor:
        return torch.full(distances.shape[:1], float(self.triplet.margin), dtype=distances.dtype)

    def compute(self, embeddings: torch.Tensor, distances: torch.Tensor, pairwise: torch.Tensor | None) -> torch.Tensor:
        positives = positives_among(self.positives, distances.shape[1])
        losses = [
            self.triplet(embeddings[b], indices_tuple=binary_triplets(distances[b], positives))
            for b in range(embeddings.shape[0])
        ]
        return torch.stack(losses)
