"""Retrieval metrics against label distances: a query's retrieved items are judged by their label distances
to the query, not by class agreement (Kim et al., CVPR 2019, §5; Zhou et al., AAAI 2020).

Arrays: ``retrieved`` (Q, K) gallery indices in ranking order (best first); ``label_distances`` (Q, G) the
label distance from each query to every gallery item. Every ``@K`` metric is returned for K = 1..K_max as an
array of length K_max (entry ``k - 1`` is the metric at K = k).
"""

from __future__ import annotations

import numpy as np

from labeldist.errors import UsageError

METRICS = ("euclidean", "cosine")


def retrieve(queries: np.ndarray, gallery: np.ndarray, k: int, metric: str = "euclidean") -> np.ndarray:
    """The ``k`` gallery items nearest each query in embedding space, nearest first (ties by index).

    ``metric``: ``euclidean`` (squared Euclidean) or ``cosine`` (L2-normalise both, then the same).

    >>> retrieve(np.array([[0.0], [3.0]]), np.array([[2.0], [0.5], [-1.0]]), 2).tolist()
    [[1, 2], [0, 1]]
    """
    if metric not in METRICS:
        raise UsageError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
    q, g = np.asarray(queries, dtype=np.float64), np.asarray(gallery, dtype=np.float64)
    if metric == "cosine":
        q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        g = g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
    d = (q * q).sum(1)[:, None] - 2 * q @ g.T + (g * g).sum(1)[None, :]
    return np.argsort(d, axis=1, kind="stable")[:, :k]


def _gather(label_distances: np.ndarray, retrieved: np.ndarray) -> np.ndarray:
    return np.take_along_axis(np.asarray(label_distances, dtype=np.float64), retrieved, axis=1)


def mean_label_distance(label_distances: np.ndarray, retrieved: np.ndarray) -> np.ndarray:
    r"""Mean label distance of the top K retrieved, averaged over queries (Kim et al., §5, "mean pose distance").

    .. math:: \mathrm{MLD@}K = \frac{1}{|Q|} \sum_{q} \frac{1}{K} \sum_{i=1}^{K} D(y_q, y_{\pi_q(i)})

    :math:`\pi_q(i)` the i-th retrieved item. Smaller is better.

    >>> mean_label_distance(np.array([[1.0, 3.0, 2.0]]), np.array([[0, 2]])).tolist()
    [1.0, 1.5]
    """
    d = _gather(label_distances, retrieved)
    return (np.cumsum(d, axis=1) / np.arange(1, d.shape[1] + 1)).mean(0)


def ndcg(label_distances: np.ndarray, retrieved: np.ndarray) -> np.ndarray:
    r"""The modified nDCG@K of Kim et al. (CVPR 2019, Eq. 12), for continuous labels.

    .. math::
        \mathrm{nDCG@}K(q) = \frac{1}{Z_K} \sum_{i=1}^{K} \frac{2^{r_i}}{\log_2(i + 1)},
        \qquad r_i = -\log_2\big(1 + D(y_q, y_{\pi_q(i)})\big)

    so the gain :math:`2^{r_i} = 1 / (1 + D)` is 1 for a label-identical item and falls with the label
    distance (the authors' code, ``2**(-log2(d + 1))``). :math:`Z_K` is the same sum over the oracle ranking
    (the gallery sorted by label distance), so the oracle scores exactly 1 and any other ranking at most 1.
    Averaged over queries; larger is better.

    >>> ndcg(np.array([[0.0, 1.0]]), np.array([[0, 1]])).tolist()
    [1.0, 1.0]
    """
    ld = np.asarray(label_distances, dtype=np.float64)
    k = retrieved.shape[1]
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    dcg = np.cumsum(discount / (1.0 + _gather(ld, retrieved)), axis=1)
    oracle = np.sort(ld, axis=1)[:, :k]
    ideal = np.cumsum(discount / (1.0 + oracle), axis=1)
    return (dcg / ideal).mean(0)


def coherent_score(label_distances: np.ndarray, retrieved: np.ndarray, embedding_scores: np.ndarray) -> np.ndarray:
    r"""Coherent Score CS@K of Zhou et al. (AAAI 2020): Kendall's rank correlation between the ranking by the
    embedding and the ranking by relevance, over each query's top K retrieved items.

    .. math:: \mathrm{CS@}K(q) = \tau\big( (s_q(\pi_q(i)))_{i \le K},\ (-D(y_q, y_{\pi_q(i)}))_{i \le K} \big)

    :math:`s_q` the embedding score (larger = more similar: a similarity, or minus a distance) of the retrieved
    items, ``embedding_scores`` (Q, K) in ranking order; :math:`\tau` Kendall's tau-b (ties counted as in
    ``scipy.stats.kendalltau``). 1: the top K are in exactly the order of their relevance; -1: reversed.
    Averaged over queries where it is defined (K >= 2 and neither side constant); entry 0 (K = 1) is NaN.

    >>> float(coherent_score(np.array([[1.0, 2.0, 3.0]]), np.array([[0, 1, 2]]), np.array([[3.0, 2.0, 1.0]]))[2])
    1.0
    """
    d = _gather(label_distances, retrieved)
    s = np.asarray(embedding_scores, dtype=np.float64)
    # tau-b of every prefix at once: column j of the pair matrices holds the pairs (i, j), i < j
    sign_s = np.sign(s[:, :, None] - s[:, None, :])
    sign_r = np.sign(d[:, None, :] - d[:, :, None])  # relevance = -distance
    upper = np.triu(np.ones(d.shape[1], dtype=bool), k=1)
    concord = np.cumsum(((sign_s * sign_r) * upper).sum(1), axis=1)  # (Q, K): n_c - n_d over pairs in the prefix
    ties_s = np.cumsum(((sign_s == 0) & upper).sum(1), axis=1)
    ties_r = np.cumsum(((sign_r == 0) & upper).sum(1), axis=1)
    k = np.arange(1, d.shape[1] + 1)
    n0 = k * (k - 1) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = concord / np.sqrt((n0 - ties_s) * (n0 - ties_r))
    tau[~np.isfinite(tau)] = np.nan
    out = np.full(d.shape[1], np.nan)
    defined = np.isfinite(tau).any(0)
    out[defined] = np.nanmean(tau[:, defined], axis=0)
    return out


def recall_at_k(retrieved: np.ndarray, ground_truth: np.ndarray) -> np.ndarray:
    r"""R@K: the fraction of queries whose ground-truth item is among the top K retrieved.

    .. math:: \mathrm{R@}K = \frac{1}{|Q|} \sum_q \mathbb{1}\big[ g_q \in \{\pi_q(1), \dots, \pi_q(K)\} \big]

    ``ground_truth`` (Q,) gallery indices. With continuous labels there is no ground truth; the trainer's
    evaluation uses the label-nearest gallery item (the oracle's first) as :math:`g_q`.

    >>> recall_at_k(np.array([[2, 0, 1], [1, 2, 0]]), np.array([0, 0])).tolist()
    [0.0, 0.5, 1.0]
    """
    hits = np.asarray(retrieved) == np.asarray(ground_truth)[:, None]
    return np.cumsum(hits, axis=1).clip(max=1).mean(0)


def retrieval_metrics(
    query_embeddings: np.ndarray,
    gallery_embeddings: np.ndarray,
    label_distances: np.ndarray,
    k_max: int = 100,
    metric: str = "euclidean",
) -> dict[str, np.ndarray]:
    """Every metric above for K = 1..k_max: ``mean_label_distance``, ``ndcg``, ``coherent_score`` and
    ``recall`` (ground truth: each query's label-nearest gallery item)."""
    k_max = min(k_max, gallery_embeddings.shape[0])
    retrieved = retrieve(query_embeddings, gallery_embeddings, k_max, metric)
    q, g = np.asarray(query_embeddings, dtype=np.float64), np.asarray(gallery_embeddings, dtype=np.float64)
    if metric == "cosine":
        q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        g = g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
    scores = -((q[:, None, :] - g[retrieved]) ** 2).sum(-1)  # minus squared distance, ranking order
    nearest = np.argmin(np.asarray(label_distances), axis=1)
    return {
        "k": np.arange(1, k_max + 1),
        "mean_label_distance": mean_label_distance(label_distances, retrieved),
        "ndcg": ndcg(label_distances, retrieved),
        "coherent_score": coherent_score(label_distances, retrieved, scores),
        "recall": recall_at_k(retrieved, nearest),
    }
