"""Texts as the Word Mover's Distance family takes them: normalised bags of words over a table of word vectors,
and the Euclidean ground distance between words.

Kusner, Sun, Kolkin, Weinberger, "From Word Embeddings To Document Distances", ICML 2015, §4.

A text is its distinct words :math:`x_1..x_m` (rows of :math:`X \\in R^{m \\times k}`) with weights
:math:`d_i = c_i / \\sum_l c_l` (:math:`c_i` the count of word :math:`i`); moving word :math:`i` of one text to word
:math:`j` of another costs :math:`c_{ij} = \\|x_i - y_j\\|_2`. Batched functions take texts as flat arrays:
``tokens`` (T,) int ids into ``vectors`` (V, k) and ``offsets`` (n+1,), text ``t`` being
``tokens[offsets[t]:offsets[t+1]]``; the two sides may index different vector tables. The exact distance
(:mod:`labeldist.distances.wmd`), its bounds (:mod:`labeldist.distances.wmd_bounds`) and the caption-set distance
(:mod:`labeldist.distances.caption_sets`) start from here.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
from scipy.spatial.distance import cdist

from labeldist.errors import UsageError

# --------------------------------------------------------------------------------------- bags of words


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit Euclidean length, computed in float32 exactly as gensim's ``get_vector(norm=True)``.

    Matching gensim bit for bit keeps our WMD within rounding of ``wmdistance`` (whose default is
    ``norm=True``). A zero row stays zero.

    >>> unit_rows(np.array([[3.0, 4.0]])).tolist()
    [[0.6000000238418579, 0.800000011920929]]
    """
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1)
    norms[norms == 0] = 1
    return v / norms[:, None]


def nbow(tokens: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalised bag of words of each text: distinct ids (sorted) and weights ``count / length``.

    .. math::  d_i = c_i / \\sum_l c_l

    Parameters
    ----------
    tokens : (T,) int; offsets : (n+1,) int, every text non-empty.

    Returns
    -------
    ids (B,) int64, weights (B,) float64, bag_offsets (n+1,) int64 — text ``t`` has the bag
    ``ids[bag_offsets[t]:bag_offsets[t+1]]``.

    >>> ids, w, off = nbow(np.array([7, 3, 7, 7]), np.array([0, 4]))
    >>> ids.tolist(), w.tolist(), off.tolist()
    ([3, 7], [0.25, 0.75], [0, 2])
    """
    tokens = np.ascontiguousarray(tokens, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    if np.any(lengths <= 0):
        raise UsageError(f"text {int(np.flatnonzero(lengths <= 0)[0])} has no tokens; WMD needs at least one")
    ids, weights, bag_offsets = _nbow(tokens, offsets)
    return ids[: bag_offsets[-1]], weights[: bag_offsets[-1]], bag_offsets


@numba.njit(cache=True, nogil=True)
def _nbow(tokens, offsets):  # pragma: no cover - compiled
    # per text: insertion-sort its few tokens, then count runs (linear in T; np.lexsort was the bottleneck)
    n = len(offsets) - 1
    ids = np.empty(len(tokens), dtype=np.int64)
    weights = np.empty(len(tokens))
    bag_offsets = np.zeros(n + 1, dtype=np.int64)
    buf = np.empty(max(1, longest_bag(offsets)), dtype=np.int64)
    b = 0
    for t in range(n):
        length = offsets[t + 1] - offsets[t]
        for r in range(length):
            x = tokens[offsets[t] + r]
            s = r - 1
            while s >= 0 and buf[s] > x:
                buf[s + 1] = buf[s]
                s -= 1
            buf[s + 1] = x
        r = 0
        while r < length:
            q = r
            while q < length and buf[q] == buf[r]:
                q += 1
            ids[b] = buf[r]
            weights[b] = (q - r) / length
            b += 1
            r = q
        bag_offsets[t + 1] = b
    return ids, weights, bag_offsets


@numba.njit(cache=True, nogil=True)
def longest_bag(off):  # pragma: no cover - compiled
    m = 0
    for t in range(len(off) - 1):
        m = max(m, off[t + 1] - off[t])
    return m


def _used_rows(ids: np.ndarray, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Remap ``ids`` onto the rows they use, so per-text precomputation scales with words used, not V."""
    used, inverse = np.unique(ids, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), np.ascontiguousarray(vectors[used], dtype=np.float64)


def _float_table(vectors: np.ndarray) -> np.ndarray:
    """float32 tables stay float32 (no copy; the kernels widen each value to float64 as they read it)."""
    vectors = np.asarray(vectors)
    dtype = np.float32 if vectors.dtype == np.float32 else np.float64
    return np.ascontiguousarray(vectors, dtype=dtype)


def check_weights(d: np.ndarray, name: str) -> np.ndarray:
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 1 or np.any(d < 0) or abs(d.sum() - 1.0) > 1e-9:
        raise UsageError(f"{name} must be non-negative weights summing to 1, got {d}")
    return d


# -------------------------------------------------------------------------- one side of a batched call


class Bags(NamedTuple):
    """One side of a batched call as the kernels take it: the nBOW of each text (:func:`nbow`) and the vector
    table its ``ids`` index. A tuple, so that ``*bags`` passes the plain arrays numba needs."""

    ids: np.ndarray  # (B,) int64 row of ``vectors`` of each bag entry
    weights: np.ndarray  # (B,) float64 nBOW weight
    offsets: np.ndarray  # (n+1,) int64: text t owns entries offsets[t]:offsets[t+1]
    vectors: np.ndarray  # (V, k) word vectors


def prepare_bags(tokens: np.ndarray, offsets: np.ndarray, vectors: np.ndarray) -> Bags:
    """Every text as a bag, ``ids`` remapped onto the rows of ``vectors`` they use (float64)."""
    ids, w, off = nbow(tokens, offsets)
    ids, v = _used_rows(ids, vectors)
    return Bags(ids, w, off, v)


def prepare_listed_bags(
    tokens: np.ndarray, offsets: np.ndarray, vectors: np.ndarray, which: np.ndarray
) -> tuple[Bags, np.ndarray]:
    """Only the texts ``which`` refers to as bags (the caller may pass a whole corpus), and ``which``
    renumbered into them. No remapping of the vector table here: each pair reads its few rows directly."""
    used, renumbered = np.unique(which, return_inverse=True)
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = offsets[used + 1] - offsets[used]
    new_offsets = np.zeros(len(used) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    flat = np.arange(new_offsets[-1]) + np.repeat(offsets[used] - new_offsets[:-1], lengths)
    bags = Bags(*nbow(np.asarray(tokens)[flat], new_offsets), _float_table(vectors))
    return bags, renumbered.reshape(-1).astype(np.int64)


# ------------------------------------------------------------------------------------- ground distance


@numba.njit(cache=True, nogil=True)
def word_costs(va, u, vb, v):  # pragma: no cover - compiled
    """:math:`\\|va_u - vb_v\\|_2` in float64: row ``u`` of table ``va`` to row ``v`` of table ``vb``."""
    # the difference form, not |a|^2 + |b|^2 - 2ab: no cancellation for close words (same as scipy cdist)
    s = 0.0
    for k in range(va.shape[1]):
        t = np.float64(va[u, k]) - np.float64(vb[v, k])  # float32 tables: widen before subtracting
        s += t * t
    return np.sqrt(s)


@numba.njit(cache=True, nogil=True)
def costs_to_all_words(near, va, ids_a, a0, m, vb):  # pragma: no cover - compiled
    """``near[r, v]`` = :func:`word_costs` from word ``r`` of the text of ``m`` words starting at ``a0`` of
    ``ids_a`` to every word ``v`` of table ``vb``: computed once per text of A, then gathered for each text of B
    (:func:`gather_costs`) by the kernels that compare every text of A with every text of B (WMD and RWMD)."""
    for r in range(m):
        for v in range(vb.shape[0]):
            near[r, v] = word_costs(va, ids_a[a0 + r], vb, v)


@numba.njit(cache=True, nogil=True)
def gather_costs(cost, near, ids_b, b0, m, n):  # pragma: no cover - compiled
    """``cost[r, s] = near[r, ids_b[b0 + s]]``: the (m, n) ground distances of one pair of texts, gathered from the
    rows :func:`costs_to_all_words` made for its first text (the text of B of ``n`` words starting at ``b0``)."""
    for r in range(m):
        for s in range(n):
            cost[r, s] = near[r, ids_b[b0 + s]]


def pair_cost(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(m, n) float64 ground distances :math:`c_{ij} = \\|x_i - y_j\\|_2` between the rows of x and y."""
    return cdist(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
