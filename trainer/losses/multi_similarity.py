"""The multi-similarity loss of Wang et al. (CVPR 2019), a binary baseline through pytorch-metric-learning."""

from __future__ import annotations

from pytorch_metric_learning import losses as pml
from pytorch_metric_learning.distances import CosineSimilarity
from pytorch_metric_learning.reducers import SumReducer

from labeldist.trainer.losses.binary_triplet import AnchorPairLoss


class MultiSimilarityLoss(AnchorPairLoss):
    r"""Multi-similarity loss (Wang, Han, Huang, Dong, Scott, "Multi-Similarity Loss with General Pair Weighting
    for Deep Metric Learning", CVPR 2019, Eq. 12), a binary baseline for continuous labels.

    .. math::
        L = \frac{1}{\alpha} \log\Big[1 + \sum_{p \in P} e^{-\alpha (S_{ap} - \lambda)}\Big]
          + \frac{1}{\beta} \log\Big[1 + \sum_{n \in N} e^{\beta (S_{an} - \lambda)}\Big]

    the paper's term of one anchor :math:`a`, with :math:`S` the cosine similarity and pytorch-metric-learning's
    defaults :math:`\alpha = 2, \beta = 50, \lambda = 0.5` (those of the authors' code). Positives and negatives by
    the binary rule (:func:`~labeldist.client.pml.binary_split`): in each minibatch the
    ``positives`` items (default: a fifth, 30 of 149) nearest the anchor in label space are its positives :math:`P`,
    every other item a negative :math:`N`. The anchor is the only query (only its label distances are known). Only
    the loss is used, not the paper's pair mining step (its miner needs class labels). Computed by
    pytorch-metric-learning's ``MultiSimilarityLoss`` on the pairs of
    :func:`~labeldist.trainer.losses.binary_triplet.binary_pairs`; PML gives one loss per row of the similarity
    matrix and every row but the anchor's is 0 (no pairs), so a sum reducer returns the anchor's term itself (its
    default mean would divide it by the batch size)."""

    def __init__(
        self,
        positives: int | None = None,
        alpha: float = 2.0,
        beta: float = 50.0,
        base: float = 0.5,
        reduction: str = "mean",
        anchors: str | None = None,
    ) -> None:
        ms = pml.MultiSimilarityLoss(
            alpha=alpha, beta=beta, base=base, distance=CosineSimilarity(), reducer=SumReducer()
        )
        super().__init__(positives, ms, reduction, anchors)
