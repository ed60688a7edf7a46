r"""Exact k nearest sentences by blocked matrix products, for :class:`~labeldist.distances.sts.SentenceRelevance`.

A row block of sentences is compared with every distinct text by float32 matrix products, chunk by chunk of
columns: the bi-encoder's unit embeddings and, for the gated scorers, the CBoW unit vectors. Each product bounds
the exact relevance (the float64 product of the same float32 rows, :func:`product_radius`), so each row keeps only
the texts whose distance can reach its k-th (:func:`labeldist.core.knn.bounded_candidates`); their exact distances
are computed as :meth:`SentenceRelevance.block` computes them (float64 products), and the k nearest picked as
:func:`labeldist.core.knn.topk_rows` picks them from the float32 rows a store keeps, ties by index. Identical texts
share one column (:attr:`Sentences.text_ids`) and are at distance 0.

The matrices are made once per process: the embeddings memory-mapped from the file the job's preparation left
(:func:`labeldist.sts.scorers.load_embeddings`; the processes of a machine share its pages), the CBoW vectors
computed from the labels.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numba
import numpy as np

from labeldist.core.knn import bounded_candidates, largest_candidates
from labeldist.labels.sentences import Sentences
from labeldist.sts.scorers import mean_vectors, unit_rows


class SentenceRelevance(Protocol):
    """What the search reads of :class:`labeldist.distances.sts.SentenceRelevance` (which imports this module)."""

    scorer: str
    below: str | None
    cbow_threshold: float | None

    def params(self) -> dict[str, Any]: ...

    def text_embeddings(self, texts: list[str]) -> np.ndarray: ...


#: text columns per product of the coarse-to-fine bounds: (rows, CHUNK_COLUMNS) float64 arrays of 32 MiB
CHUNK_COLUMNS = 4096
#: rows per block of a kNN-only store: 1,024 rows by 8,192 columns is the fastest float32 product measured here
#: (5.8 ns a pair on one core against 6.6 at 256 rows; benchmarks/bench_scale.py)
SEARCH_ROWS = 1024
#: rows whose exact values are computed in one float64 product: as large as a block's own products, so that
#: BLAS sums them in the same order (its small-matrix kernels sum in another)
EXACT_GROUP = 64


def product_radius(dim: int) -> float:
    r"""A bound on :math:`|\hat s - s|` for unit rows of ``dim`` float32 numbers: :math:`\hat s` their float32
    product (any summation order), :math:`s` the float64 one, plus two float32 spacings below 1, so that a
    column ruled out by the bound also differs from the k-th in the float32 a store keeps.

    Each of the ``dim`` terms has a rounding error below :math:`2u|a_i b_i|` and the sum of the float32 terms one
    below :math:`(\text{dim} - 1) u \sum |a_i b_i|` (Higham, "Accuracy and Stability of Numerical Algorithms",
    §3.1), with :math:`u = 2^{-24}` and :math:`\sum |a_i b_i| \le 1` for unit rows; doubled for the float64 side
    and the rows' own rounding to unit norm.

    >>> round(product_radius(384) * 1e5, 2)
    4.63
    """
    u = 2.0**-24
    return 2.0 * (dim + 3) * u + 2.0 * u


@dataclass
class TextMatrices:
    """What a block search needs of one label set under one distance, made once per process.

    ``texts`` the distinct texts sorted, ``inverse`` (N,) each item's text, ``members``/``member_offsets`` the
    items of each text (CSR); ``bert`` (M, d) float32 unit embeddings or None; ``cbow`` (M, 50) float64 CBoW unit
    vectors and ``cbow32`` their float32 copy, or None; ``defined`` (M,) whether each text has a CBoW vector.
    """

    texts: list[str]
    inverse: np.ndarray
    members: np.ndarray
    member_offsets: np.ndarray
    bert: np.ndarray | None
    cbow: np.ndarray | None
    cbow32: np.ndarray | None
    defined: np.ndarray


_MATRICES: dict[tuple[int, str], TextMatrices] = {}
_MATRICES_LOCK = threading.Lock()


def text_matrices(distance: SentenceRelevance, labels: Sentences) -> TextMatrices:
    """The :class:`TextMatrices` of ``labels`` under ``distance``, made on first use in this process and kept
    while ``labels`` lives (a Dask worker keeps the job's scattered labels, so once per worker and job)."""
    key = (id(labels), repr(sorted(distance.params().items(), key=lambda kv: kv[0])))
    with _MATRICES_LOCK:
        if key not in _MATRICES:
            _MATRICES[key] = make_text_matrices(distance, labels)
            weakref.finalize(labels, _MATRICES.pop, key, None)
        return _MATRICES[key]


def make_text_matrices(distance: SentenceRelevance, labels: Sentences) -> TextMatrices:
    """Build :class:`TextMatrices` (see :func:`text_matrices`)."""
    texts, inverse = labels.text_ids
    order = np.argsort(inverse, kind="stable")
    offsets = np.concatenate([[0], np.cumsum(np.bincount(inverse, minlength=len(texts)))]).astype(np.int64)
    first = order[offsets[:-1]]  # one item of each text: same text, same tokens
    defined = labels.cbow_defined[first]
    cbow = cbow32 = None
    if distance.scorer != "bert":
        item_starts, item_stops = labels.token_offsets[first], labels.token_offsets[first + 1]
        tokens = np.concatenate([labels.tokens[a:b] for a, b in zip(item_starts, item_stops)] or [np.zeros(0, int)])
        offs = np.concatenate([[0], np.cumsum(item_stops - item_starts)]).astype(np.int64)
        cbow = unit_rows(mean_vectors(tokens, offs, labels.vectors))
        cbow32 = cbow.astype(np.float32)
    bert = distance.text_embeddings(texts) if distance.scorer != "cbow" else None
    return TextMatrices(texts, inverse, order.astype(np.int64), offsets, bert, cbow, cbow32, defined)


def gated_bounds(
    distance: SentenceRelevance, m: TextMatrices, row_texts: np.ndarray
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """For each chunk of text columns, ``(start, center, radius)``: the interval of the coarse-to-fine distance of
    the texts ``row_texts`` to the chunk's texts (:func:`labeldist.core.knn.bounded_candidates`), each row's own text
    at +inf. The two float32 products per chunk, then :func:`gated_interval` entry by entry."""
    rb, rc = product_radius(m.bert.shape[1]), product_radius(m.cbow32.shape[1])
    eb, ec = np.ascontiguousarray(m.bert[row_texts]), m.cbow32[row_texts]
    row_defined = m.defined[row_texts]
    local = np.arange(len(row_texts))
    for start in range(0, len(m.texts), CHUNK_COLUMNS):
        stop = min(start + CHUNK_COLUMNS, len(m.texts))
        center = np.empty((len(row_texts), stop - start))
        radius = np.empty_like(center)
        gated_interval(
            np.matmul(ec, m.cbow32[start:stop].T),
            np.matmul(eb, m.bert[start:stop].T),
            rc,
            rb,
            row_defined,
            m.defined[start:stop],
            distance.cbow_threshold,
            distance.below == "coarse",
            center,
            radius,
        )
        own = (row_texts >= start) & (row_texts < stop)
        center[local[own], row_texts[own] - start] = np.inf
        yield start, center, radius


@numba.njit(cache=True, nogil=True)
def gated_interval(
    cbow: np.ndarray,
    bert: np.ndarray,
    cbow_radius: float,
    bert_radius: float,
    row_defined: np.ndarray,
    col_defined: np.ndarray,
    threshold: float,
    coarse_fill: bool,
    center: np.ndarray,
    radius: np.ndarray,
) -> None:
    r"""Into ``center`` and ``radius`` (float64): the interval of :math:`1 - R` for each pair, from its float32
    CBoW and BERT products, each within its radius of the exact product (:func:`product_radius`), both clipped to
    [0, 1]. The gate :math:`R = R_\text{fine}` if :math:`R_\text{coarse} \ge \theta`, else the fill (the coarse
    score, or 0; Zhou et al., AAAI 2020, §3.3): where the CBoW interval lies wholly above the threshold (or a
    sentence has no CBoW vector) the BERT interval, wholly below it the fill's, across it the union of both.
    One pass over the pairs (the same float64 operations as the formula written with NumPy arrays, a dozen
    passes).
    """
    for i in range(cbow.shape[0]):
        for j in range(cbow.shape[1]):
            c = np.float64(cbow[i, j])
            cbow_lo = min(max(c - cbow_radius, 0.0), 1.0)
            cbow_hi = min(max(c + cbow_radius, 0.0), 1.0)
            b = np.float64(bert[i, j])
            fine_lo = 1.0 - min(max(b + bert_radius, 0.0), 1.0)
            fine_hi = 1.0 - min(max(b - bert_radius, 0.0), 1.0)
            below_lo, below_hi = (1.0 - cbow_hi, 1.0 - cbow_lo) if coarse_fill else (1.0, 1.0)
            if not (row_defined[i] and col_defined[j]) or cbow_lo >= threshold:
                lo, hi = fine_lo, fine_hi
            elif cbow_hi < threshold:
                lo, hi = below_lo, below_hi
            else:
                lo, hi = min(fine_lo, below_lo), max(fine_hi, below_hi)
            center[i, j] = (hi + lo) / 2.0
            radius[i, j] = (hi - lo) / 2.0


def exact_relevance(distance: SentenceRelevance, m: TextMatrices, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Relevance of the text pairs ``(a[t], b[t])`` (distinct texts), float64, as
    :meth:`SentenceRelevance.relevance` computes it: float64 products of the same rows, through the gate."""
    out = np.empty(len(a))
    for start in range(0, len(a), EXACT_GROUP * 128):
        sl = slice(start, start + EXACT_GROUP * 128)
        out[sl] = _exact_group(distance, m, a[sl], b[sl])
    return out


def _products(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``x[a[t]] . x[b[t]]`` in float64, clipped to [0, 1], each from one float64 matrix product of the distinct
    rows and columns involved, as a block's product computes it."""
    ra, ia = np.unique(a, return_inverse=True)
    rb_, ib = np.unique(b, return_inverse=True)
    out = np.empty(len(a))
    for g in range(0, len(ra), EXACT_GROUP):
        sel = (ia >= g) & (ia < g + EXACT_GROUP)
        cols = np.unique(ib[sel])
        prod = np.asarray(x[ra[g : g + EXACT_GROUP]], dtype=np.float64) @ np.asarray(x[rb_[cols]], dtype=np.float64).T
        out[sel] = prod[ia[sel] - g, np.searchsorted(cols, ib[sel])]
    return np.clip(out, 0.0, 1.0)


def _exact_group(distance: SentenceRelevance, m: TextMatrices, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if distance.scorer == "bert":
        return _products(m.bert, a, b)
    cbow = _products(m.cbow, a, b)
    if distance.scorer == "cbow":
        return cbow
    undefined = ~(m.defined[a] & m.defined[b])
    gate = undefined | (cbow >= distance.cbow_threshold)
    out = np.where(gate, np.nan, cbow if distance.below == "coarse" else 0.0)
    if gate.any():
        out[gate] = _products(m.bert, a[gate], b[gate])
    return out


def search_block(
    distance: SentenceRelevance, labels: Sentences, start: int, stop: int, k: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """The exact k nearest of items ``start:stop`` among all ``labels`` (the item itself excluded), as
    :func:`labeldist.core.knn.topk_rows` picks them from the float32 rows of :meth:`SentenceRelevance.block`.

    Returns indices (n, k) int32, distances (n, k) float32 and the number of exact distances computed.
    """
    m = text_matrices(distance, labels)
    n = stop - start
    row_texts = m.inverse[start:stop]
    if distance.scorer == "coarse_to_fine":
        r, c, _, tau = bounded_candidates(gated_bounds(distance, m, row_texts), n, k)
        whole = tau >= 1.0  # a k-th distance of 1 ties with every pair under the gate: the whole row decides
    else:  # 1 - clip(s) by one product: the k largest products, unclipped
        vectors = m.bert if distance.scorer == "bert" else m.cbow32
        radius = product_radius(vectors.shape[1])
        r, c, _, sigma = largest_candidates(np.ascontiguousarray(vectors[row_texts]), vectors, k, radius, row_texts)
        whole = sigma <= 2 * radius  # a k-th relevance that may clip to 0 ties with every column at distance 1
    if whole.any():
        keep = ~whole[r]
        wr = np.repeat(np.flatnonzero(whole), len(m.texts))
        wc = np.tile(np.arange(len(m.texts)), int(whole.sum()))
        other = wc != row_texts[wr]
        r, c = np.concatenate([r[keep], wr[other]]), np.concatenate([c[keep], wc[other]])
    values = 1.0 - exact_relevance(distance, m, row_texts[r], c)
    n_exact = len(values)
    # candidate texts to items: every item of a text, and the other items of the row's own text at distance 0
    shared = np.flatnonzero(np.diff(m.member_offsets)[row_texts] > 1)
    r = np.concatenate([r, shared])
    c = np.concatenate([c, row_texts[shared]])
    values = np.concatenate([values, np.zeros(len(shared))])
    counts = np.diff(m.member_offsets)[c]
    item_rows = np.repeat(r, counts)
    item_values = np.repeat(values, counts).astype(np.float32)
    starts = np.repeat(m.member_offsets[c], counts)
    within = np.arange(len(item_rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    items = m.members[starts + within]
    mine = items != item_rows + start
    item_rows, item_values, items = item_rows[mine], item_values[mine], items[mine]
    return pick_topk(item_rows, items, item_values, n, k) + (n_exact,)


def pick_topk(
    rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n_rows: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k smallest (value, column) among its candidate entries, ties by column index, padded with -1 /
    +inf: (n, k) int32 and (n, k) float32.

    >>> idx, d = pick_topk(np.array([0, 0, 0]), np.array([5, 2, 9]), np.array([1.0, 1.0, 0.5], "f4"), 1, 2)
    >>> idx.tolist(), d.tolist()
    ([[9, 2]], [[0.5, 1.0]])
    """
    order = np.lexsort((cols, values, rows))
    rows, cols, values = rows[order], cols[order], values[order]
    counts = np.bincount(rows, minlength=n_rows)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.arange(len(rows)) - np.repeat(first, counts)
    take = rank < k
    indices = np.full((n_rows, k), -1, dtype=np.int32)
    dists = np.full((n_rows, k), np.inf, dtype=np.float32)
    indices[rows[take], rank[take]] = cols[take]
    dists[rows[take], rank[take]] = values[take]
    return indices, dists


def warn_embedding_here(n_texts: int, file: Any) -> None:
    """Say that this process embeds the job's texts itself, having no file of them to read."""
    warnings.warn(
        f"embedding {n_texts:,} sentences in this process: {file} is not there (a Dask worker that cannot see "
        "the submitting machine's LABELDIST_CACHE: point it at a folder every worker sees)",
        stacklevel=3,
    )
