"""The ladder loss with hard contrastive sampling of Zhou et al. (AAAI 2020)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from trainer.losses.base import BatchLoss

RELEVANCE = ("one_minus", "inverse")


class LadderLoss(BatchLoss):
    r"""Ladder loss with hard contrastive sampling (Zhou et al., "Ladder Loss for Coherent Visual-Semantic
    Embedding", AAAI 2020, Eq. 6-8), every batch item acting as a query.

    Thresholds :math:`\theta_1 > \dots > \theta_{L-1}` on the relevance :math:`r(q, c)` split the other items
    :math:`c` of the batch into levels :math:`\mathcal{N}_1` (:math:`r \ge \theta_1`), ...,
    :math:`\mathcal{N}_L` (:math:`r < \theta_{L-1}`). With cosine similarity :math:`s`:

    .. math::
        L(q) = \sum_{l=1}^{L-1} \beta_l \Big[ \alpha_l - \min_{c \in \mathcal{N}_{1:l}} s(q, c)
                                                 + \max_{c \in \mathcal{N}_{l+1:L}} s(q, c) \Big]_+

    the hardest pair across each rung of the ladder (Eq. 8; a rung with an empty side adds 0); the minibatch's
    loss is the mean over its queries. Defaults: margins :math:`\alpha = (0.2, 0.01)` and weights
    :math:`\beta = (1, 0.25)` as the paper; thresholds ``(0.9, 0.63)``: 0.63 is the paper's, and 0.9 stands in
    for its first level, the ground-truth caption (relevance 1), which a single-modality store does not have.
    Relevance comes from the batch's pairwise label distances: ``one_minus`` :math:`r = 1 - D` for relevance
    stores (which hold :math:`1 - R`), ``inverse`` :math:`r = 1 / (1 + D)` for other distances.
    """

    needs_pairwise = True
    normalized = True

    def __init__(
        self,
        thresholds: Sequence[float] = (0.9, 0.63),
        margins: Sequence[float] = (0.2, 0.01),
        betas: Sequence[float] = (1.0, 0.25),
        relevance: str = "one_minus",
        reduction: str = "mean",
    ) -> None:
        super().__init__(reduction)
        if not len(thresholds) == len(margins) == len(betas) >= 1:
            raise ValueError(f"thresholds, margins and betas need one value per rung, got {thresholds}, "
                             f"{margins}, {betas}")  # fmt: skip
        if list(thresholds) != sorted(thresholds, reverse=True):
            raise ValueError(f"thresholds must be decreasing (most relevant level first), got {thresholds}")
        if relevance not in RELEVANCE:
            raise ValueError(f"unknown relevance {relevance!r}; known: {', '.join(RELEVANCE)}")
        self.thresholds, self.margins, self.betas = list(thresholds), list(margins), list(betas)
        self.relevance = relevance

    def compute(self, embeddings: torch.Tensor, distances: torch.Tensor, pairwise: torch.Tensor | None) -> torch.Tensor:
        assert pairwise is not None
        f = F.normalize(embeddings, dim=-1)
        s = f @ f.transpose(1, 2)  # (B, n, n) cosine similarities
        r = 1.0 - pairwise if self.relevance == "one_minus" else 1.0 / (1.0 + pairwise)
        level = sum((r < t).long() for t in self.thresholds)  # 0 = most relevant
        other = ~torch.eye(s.shape[1], dtype=torch.bool, device=s.device)
        loss = torch.zeros(s.shape[:2], dtype=s.dtype, device=s.device)
        for rung, (alpha, beta) in enumerate(zip(self.margins, self.betas), start=1):
            near, far = other & (level < rung), other & (level >= rung)
            hardest_near = s.masked_fill(~near, float("inf")).amin(-1)
            hardest_far = s.masked_fill(~far, float("-inf")).amax(-1)
            both = near.any(-1) & far.any(-1)
            hinge = F.relu(alpha - hardest_near + hardest_far)
            loss = loss + beta * torch.where(both, hinge, torch.zeros_like(hinge))
        return loss.mean(-1)
