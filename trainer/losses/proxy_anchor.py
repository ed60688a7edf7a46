"""The proxy-anchor loss of Kim et al. (CVPR 2020), a binary baseline through pytorch-metric-learning."""

from __future__ import annotations

import torch
from pytorch_metric_learning import losses as pml

from labeldist.client.pml import binary_split
from labeldist.errors import UsageError
from labeldist.trainer.losses.base import BatchLoss
from labeldist.trainer.losses.binary_triplet import positives_among


def neighbourhood_classes(indices: torch.Tensor, distances: torch.Tensor, positives: int) -> torch.Tensor:
    """Class labels of one minibatch (store indices ``indices`` ``(n,)``, anchor first; label distances from the
    anchor ``(n - 1,)``): the anchor and its ``positives`` label-nearest items (:func:`binary_split`) share the
    anchor's store index as class, every other item is the class of its own store index."""
    labels = indices.clone()
    pos, _ = binary_split(distances, positives)
    labels[pos] = indices[0]
    return labels


class ProxyAnchorLoss(BatchLoss):
    r"""Proxy-anchor loss (Kim, Kim, Cho, Kwak, "Proxy Anchor Loss for Deep Metric Learning", CVPR 2020, Eq. 4),
    a binary baseline for continuous labels.

    .. math::
        L = \frac{1}{|P^+|} \sum_{p \in P^+} \log\Big(1 + \sum_{x \in X_p^+} e^{-\alpha (s(x, p) - \delta)}\Big)
          + \frac{1}{|P|} \sum_{p \in P} \log\Big(1 + \sum_{x \in X_p^-} e^{\alpha (s(x, p) + \delta)}\Big)

    over the learnable proxies :math:`P` (:math:`P^+` those with a positive in the batch), :math:`X_p^+` the
    batch's embeddings of proxy :math:`p`'s class, :math:`X_p^-` the others, :math:`s` the cosine similarity,
    :math:`\alpha = 32, \delta = 0.1` (the paper's).

    Classes from continuous labels (:func:`neighbourhood_classes`): one class, and one proxy, per store item —
    ``num_classes`` is the training store's item count. In each minibatch the anchor and its ``positives`` (default:
    a fifth, 30 of 149) label-nearest items (the binary rule of
    :func:`~labeldist.client.pml.binary_split`) take the anchor's class; every other item keeps
    its own. Proxy :math:`i` so stands for the label neighbourhood of item :math:`i`, learnt from the minibatches
    anchored at :math:`i`; random others of a minibatch count as negatives of every other class, the usual
    assumption of class-based metric learning (Stanford Online Products, which the paper uses, is alike: ~11k
    classes of ~5 images). A class id is a store index, so the same item gets the same proxy in every minibatch. The
    proxies are parameters of this module: the fit loop trains them with the model at ``lr_scale`` = 100 times its
    learning rate (the paper's setting) and keeps them in the checkpoint. Computed by pytorch-metric-learning's
    ``ProxyAnchorLoss`` on those labels."""

    needs_indices = True
    normalized = True
    lr_scale = 100.0

    def __init__(
        self,
        num_classes: int,
        embedding_size: int,
        positives: int | None = None,
        margin: float = 0.1,
        alpha: float = 32.0,
        reduction: str = "mean",
        anchors: str | None = None,
    ) -> None:
        super().__init__(reduction, anchors)
        self.positives, self.num_classes = positives, num_classes
        self.proxy_anchor = pml.ProxyAnchorLoss(num_classes, embedding_size, margin=margin, alpha=alpha)

    @classmethod
    def for_run(cls, *, n_items: int, embedding_dim: int, **options: object) -> ProxyAnchorLoss:
        return cls(num_classes=n_items, embedding_size=embedding_dim, **options)  # type: ignore[arg-type]

    def compute(
        self,
        embeddings: torch.Tensor,
        distances: torch.Tensor,
        pairwise: torch.Tensor | None,
        *,
        indices: torch.Tensor,
    ) -> torch.Tensor:
        positives = positives_among(self.positives, distances.shape[1])
        if int(indices.min()) < 0 or int(indices.max()) >= self.num_classes:
            raise UsageError(
                f"store indices must lie in 0..{self.num_classes - 1} (one proxy per store item), got "
                f"{int(indices.min())}..{int(indices.max())}"
            )
        return torch.stack(
            [
                self.proxy_anchor(embeddings[b], neighbourhood_classes(indices[b], distances[b], positives))
                for b in range(embeddings.shape[0])
            ]
        )
