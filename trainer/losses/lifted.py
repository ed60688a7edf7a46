"""The lifted structured loss of Oh Song et al. (CVPR 2016), a binary baseline through pytorch-metric-learning."""

from __future__ import annotations

import math

import torch
from pytorch_metric_learning import losses as pml
from pytorch_metric_learning.distances import LpDistance
from pytorch_metric_learning.reducers import MeanReducer

from labeldist.trainer.losses.binary_triplet import AnchorPairLoss, positives_among


class LiftedStructureLoss(AnchorPairLoss):
    r"""Lifted structured embedding loss (Oh Song, Xiang, Jegelka, Savarese, "Deep Metric Learning via Lifted
    Structured Feature Embedding", CVPR 2016, Eq. 4), a binary baseline for continuous labels.

    .. math::
        J_{ap} = \log \sum_{n \in N} \exp\big(\alpha - D(f_a, f_n)\big) + D(f_a, f_p), \qquad
        L = \frac{1}{2|P|} \sum_{p \in P} \big[ J_{ap} \big]_+^2

    Positives and negatives by the binary rule (:func:`~labeldist.client.pml.binary_split`): in
    each minibatch the ``positives`` items nearest the anchor in label space (default: a fifth, 30 of 149) are its
    positives :math:`P`, every other item a negative :math:`N`; only pairs with the anchor are used, since only the
    anchor's label distances are known (the paper's :math:`J_{ij}` also sums the negatives of :math:`j`, whose
    labels we do not have). :math:`f` L2-normalised, :math:`D` the Euclidean distance, margin :math:`\alpha = 1`
    (the paper's). Computed by pytorch-metric-learning's ``LiftedStructureLoss`` on the pairs of
    :func:`~labeldist.trainer.losses.binary_triplet.binary_pairs`, averaged over positive pairs. Chance level: for
    equal embedding distances :math:`J_{ap} = \log |N| + \alpha`, so :math:`L = (\log |N| + \alpha)^2 / 2`."""

    def __init__(
        self, positives: int | None = None, margin: float = 1.0, reduction: str = "mean", anchors: str | None = None
    ) -> None:
        lifted = pml.LiftedStructureLoss(
            neg_margin=margin,
            pos_margin=0.0,
            distance=LpDistance(normalize_embeddings=True, p=2, power=1),
            reducer=MeanReducer(),
        )
        super().__init__(positives, lifted, reduction, anchors)
        self.margin = margin

    def anchor_chance(self, distances: torch.Tensor) -> torch.Tensor:
        negatives = distances.shape[1] - positives_among(self.positives, distances.shape[1])
        value = 0.5 * max(math.log(negatives) + self.margin, 0.0) ** 2
        return torch.full(distances.shape[:1], value, dtype=distances.dtype)
