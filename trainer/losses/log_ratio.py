"""The log-ratio loss of Kim et al. (CVPR 2019) and its analytic gradient."""

from __future__ import annotations

import torch

from labeldist.trainer.losses.base import BatchLoss


class LogRatioLoss(BatchLoss):
    r"""Log-ratio loss over the dense triplets of a minibatch (Kim et al., "Deep Metric Learning Beyond Binary
    Supervision", CVPR 2019, Eq. 5 and Eq. 10).

    .. math::
        \ell_{lr}(a, i, j) = \left( \log \frac{D(f_a, f_i) + \epsilon}{D(f_a, f_j) + \epsilon}
                                 - \log \frac{D(y_a, y_i) + \epsilon}{D(y_a, y_j) + \epsilon} \right)^2,
        \qquad L = \frac{2}{m (m - 1)} \sum_{1 \le i < j \le m} \ell_{lr}(a, i, j)

    :math:`f` are embeddings, :math:`D(f_a, f_i) = \lVert f_a - f_i \rVert_2^2` the squared Euclidean distance,
    :math:`D(y_a, y_i)` the label distance, and the sum runs over all pairs of the minibatch's :math:`m` items
    sharing the anchor :math:`a` (Eq. 10 with uniform weights). No margin: the loss only asks ratios of
    embedding distances to equal ratios of label distances, so it is invariant to the embedding's scale and
    needs no normalisation. :math:`\epsilon` (default 1e-6, as the authors' code) keeps the logarithms finite
    when two items coincide in embedding or label space. Writing :math:`x_i = \log(D(f_a, f_i) + \epsilon) -
    \log(D(y_a, y_i) + \epsilon)`, :math:`\ell_{lr} = (x_i - x_j)^2`, so :math:`L` is twice the sample variance
    of :math:`x` (computed so: O(m) instead of O(m^2)). ``squared=False`` uses the unsquared Euclidean
    distance, as the authors' public code does.

    ``anchors="all"`` takes every member of the minibatch as :math:`a` in turn and averages (:class:`BatchLoss`).
    Chance level: embeddings that know nothing of the labels give every :math:`D(f_a, f_i)` alike, so
    :math:`x_i` is a constant minus :math:`\log(D(y_a, y_i) + \epsilon)` and :math:`L = 2\,
    \mathrm{var}_i \log(D(y_a, y_i) + \epsilon)`, the variance of the anchor's log label distances.
    """

    def __init__(
        self, eps: float = 1e-6, squared: bool = True, reduction: str = "mean", anchors: str | None = None
    ) -> None:
        super().__init__(reduction, anchors)
        self.eps, self.squared = eps, squared

    def anchor_chance(self, distances: torch.Tensor) -> torch.Tensor:
        return 2.0 * torch.log(distances + self.eps).var(dim=1, unbiased=True)

    def compute(self, embeddings: torch.Tensor, distances: torch.Tensor, pairwise: torch.Tensor | None) -> torch.Tensor:
        d_f = (embeddings[:, 1:] - embeddings[:, :1]).pow(2).sum(-1)
        if not self.squared:
            d_f = d_f.clamp_min(1e-12).sqrt()
        x = torch.log(d_f + self.eps) - torch.log(distances + self.eps)
        return 2.0 * x.var(dim=1, unbiased=True)


def log_ratio_gradient(embeddings: torch.Tensor, distances: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    r"""The gradient of one minibatch's :class:`LogRatioLoss` (``squared=True``, mean over pairs) with respect to
    its embeddings ``(n, d)``, anchor first, from Eq. 6-9 of Kim et al. For a triplet with
    :math:`\delta = \log\frac{D_{ai}}{D_{aj}} - \log\frac{D(y_a, y_i)}{D(y_a, y_j)}` and
    :math:`D_{ai} = D(f_a, f_i) + \epsilon`:

    .. math::
        \frac{\partial \ell}{\partial f_a} = 4\delta\Big(\frac{f_a - f_i}{D_{ai}} - \frac{f_a - f_j}{D_{aj}}\Big),\quad
        \frac{\partial \ell}{\partial f_i} = 4\delta\,\frac{f_i - f_a}{D_{ai}},\quad
        \frac{\partial \ell}{\partial f_j} = -4\delta\,\frac{f_j - f_a}{D_{aj}},

    summed over the pairs :math:`i < j` and divided by their number.
    """
    f = embeddings.detach().double()
    y = distances.detach().double()
    m = f.shape[0] - 1
    i, j = torch.triu_indices(m, m, offset=1) + 1  # item rows of every pair
    d = (f[1:] - f[0]).pow(2).sum(-1) + eps  # D_ai + eps, item k at row k - 1
    d_ai, d_aj = d[i - 1], d[j - 1]
    delta = torch.log(d_ai / d_aj) - torch.log((y[i - 1] + eps) / (y[j - 1] + eps))
    u_i = (f[i] - f[0]) / d_ai[:, None]  # (f_i - f_a) / D_ai
    u_j = (f[j] - f[0]) / d_aj[:, None]
    grad = torch.zeros_like(f)
    grad[0] = (4 * delta[:, None] * (u_j - u_i)).sum(0)
    grad.index_add_(0, i, 4 * delta[:, None] * u_i)
    grad.index_add_(0, j, -4 * delta[:, None] * u_j)
    return (grad / len(delta)).to(embeddings.dtype)
