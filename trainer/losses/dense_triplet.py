"""Triplet loss on every dense triplet of a minibatch, L(Triplet) + M(Dense) of Kim et al. (CVPR 2019)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from labeldist.trainer.losses.base import BatchLoss


class DenseTripletLoss(BatchLoss):
    r"""Triplet loss over all dense triplets of a minibatch (Kim et al., CVPR 2019, Eq. 11).

    .. math::
        L = \frac{1}{|T|} \sum_{(a, i, j) \in T} \big[ D(f_a, f_i) - D(f_a, f_j) + \delta \big]_+,
        \qquad T = \{ (a, i, j) : D(y_a, y_i) < D(y_a, y_j) \}

    over every ordered pair of the minibatch's items whose label distances to the anchor :math:`a` differ
    (the nearer one acts as positive), :math:`f` L2-normalised embeddings, :math:`D` the squared Euclidean
    distance, margin :math:`\delta = 0.03` as in the paper, :math:`[\cdot]_+` the hinge. The mean runs over
    all triplets of :math:`T`, satisfied ones included (as the authors' code). ``anchors="all"`` takes every
    member of the minibatch as :math:`a` in turn and averages (:class:`BatchLoss`). Chance level: embeddings
    that know nothing of the labels order no triplet, and equal embedding distances make every hinge
    :math:`\delta`: the margin (0 for an anchor without a triplet).
    """

    normalized = True

    def __init__(self, margin: float = 0.03, reduction: str = "mean", anchors: str | None = None) -> None:
        super().__init__(reduction, anchors)
        self.margin = margin

    def anchor_chance(self, distances: torch.Tensor) -> torch.Tensor:
        has_triplet = (distances[:, :, None] < distances[:, None, :]).flatten(1).any(1)
        return has_triplet.to(distances) * self.margin

    def compute(self, embeddings: torch.Tensor, distances: torch.Tensor, pairwise: torch.Tensor | None) -> torch.Tensor:
        f = F.normalize(embeddings, dim=-1)
        d_f = (f[:, 1:] - f[:, :1]).pow(2).sum(-1)  # (B, m)
        nearer = (distances[:, :, None] < distances[:, None, :]).to(f)  # [b, i, j]: i is the positive
        hinge = F.relu(d_f[:, :, None] - d_f[:, None, :] + self.margin)
        return (hinge * nearer).sum((1, 2)) / nearer.sum((1, 2)).clamp_min(1)
