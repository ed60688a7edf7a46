r"""Distances between numeric labels (:mod:`labeldist.labels.vectors`): the metrics of ``scipy.spatial.distance``.

.. math::

    \text{euclidean } \lVert a - b \rVert_2, \quad \text{sqeuclidean } \lVert a - b \rVert_2^2, \quad
    \text{cosine } 1 - \frac{a \cdot b}{\lVert a \rVert \lVert b \rVert}, \quad
    \text{cityblock } \lVert a - b \rVert_1, \quad \text{chebyshev } \lVert a - b \rVert_\infty

Euclidean, squared Euclidean and cosine blocks are one matrix product (BLAS), as :math:`\lVert a \rVert^2 +
\lVert b \rVert^2 - 2\, a \cdot b`; a pair whose value that cancellation could put off by more than float32's
resolution is recomputed by ``cdist``, so a block equals ``cdist`` to float32. Their exact kNN lists come from FAISS
(:func:`faiss_knn_block`: a flat index, a few more candidates than k re-ranked in float64, a row kept only where
FAISS's error bound proves it exact, :func:`labeldist.core.knn.rerank_topk`; the other rows computed whole). City-block
and Chebyshev are ``cdist``. The reference is the formula, one pair at a time, in plain Python.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any, ClassVar

import numba
import numpy as np
from scipy.spatial.distance import cdist

from labeldist.core.knn import rerank_topk, topk_rows
from labeldist.core.threads import thread_budget
from labeldist.distances.base import STORED_MAX, LabelDistance, past_stored
from labeldist.errors import UsageError
from labeldist.labels.base import LabelError, LabelSet
from labeldist.labels.vectors import Vectors

METRICS = ("euclidean", "sqeuclidean", "cosine", "cityblock", "chebyshev")
#: the product form's error on a squared distance is about D * eps64 * (|a|^2 + |b|^2); recompute where that
#: error could exceed float32's relative resolution of the value: d^2 < GUARD * D * (|a|^2 + |b|^2)
GUARD = 16 * np.finfo(np.float64).eps / np.finfo(np.float32).eps


#: the metrics computed as one matrix product (:func:`product_block`), which squares each vector's norm
PRODUCT = ("euclidean", "sqeuclidean", "cosine")
#: the product form adds two squared norms and twice their product: each must stay under a quarter of float64's
SQUARED_NORM_MAX = float(np.finfo(np.float64).max) / 4
#: cosine divides by the product of two norms: each squared norm must be a normal float64, not an underflow
SQUARED_NORM_MIN = float(np.finfo(np.float64).tiny)


def _recompute(out: np.ndarray, suspect: np.ndarray, a: np.ndarray, b: np.ndarray, metric: str) -> None:
    rows, cols = np.nonzero(suspect)
    if len(rows):  # few: close pairs only
        out[rows, cols] = [cdist(a[i : i + 1], b[j : j + 1], metric)[0, 0] for i, j in zip(rows, cols)]


def product_block(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    """``cdist(a, b, metric)`` for euclidean, sqeuclidean and cosine, by one matrix product (module docstring)."""
    if metric == "cosine":
        na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = 1.0 - (a @ b.T) / np.outer(na, nb)
        # a zero vector's cosine distance is undefined (scipy: nan), and 1 - cos loses digits near 0
        suspect = ~np.isfinite(out) | (out < GUARD * a.shape[1])
        _recompute(out, suspect, a, b, metric)
        return out
    sa, sb = np.einsum("ij,ij->i", a, a), np.einsum("ij,ij->i", b, b)
    scale = sa[:, None] + sb[None, :]
    sq = np.maximum(scale - 2.0 * (a @ b.T), 0.0)
    suspect = sq <= GUARD * a.shape[1] * scale
    out = sq if metric == "sqeuclidean" else np.sqrt(sq)
    _recompute(out, suspect, a, b, metric)
    return out


# ---------------------------------------------------------------- exact kNN by FAISS, re-ranked in float64
#: the metrics whose kNN lists FAISS searches (:func:`faiss_knn_block`); the others keep the blocks above
FAISS_METRICS = ("euclidean", "sqeuclidean", "cosine")
#: float32's unit roundoff (half its machine epsilon)
UNIT32 = float(np.finfo(np.float32).eps) / 2
#: least rows of a FAISS block: below ``faiss.cvar.distance_compute_blas_threshold`` query numbers (rows x D,
#: 128,000 in faiss-cpu 1.15) FAISS scans pair by pair instead of one BLAS product, 3-5x slower at k = 100
#: (measured at D = 8, 32, 64); a block of rows is one search, so blocks are made large enough for BLAS
FAISS_MIN_BLOCK_ROWS = 2048
#: rows of the labels centred (or normalised) and copied into the index at a time
INDEX_CHUNK = 65536
#: at least this many candidates beyond k (and the item itself) are re-ranked exactly, so that FAISS's float32
#: rounding near the k-th neighbour seldom leaves a row uncertified
MARGIN = 8


def error_bound(d: int) -> float:
    r"""A bound on FAISS's float32 error, as a multiple of the squared norms: :math:`|\tilde s - s| \le
    \epsilon(D) (\lVert a \rVert^2 + \lVert b \rVert^2)` for FAISS's squared L2 distance :math:`\tilde s` of two
    vectors rounded to float32 (:math:`s` exact), and :math:`|\tilde c - c| \le \epsilon(D)` for its inner product
    of two unit vectors. Rounding the inputs moves :math:`s` by at most :math:`4u(\lVert a \rVert^2 + \lVert b
    \rVert^2)` (:math:`u` float32's unit roundoff); the norms and the product, sums of D terms, by :math:`\gamma_D
    = Du/(1 - Du)` each of their size, the final sums by :math:`4u`: about :math:`(2D + 9)u`. Doubled for safety.

    >>> error_bound(64) < 2e-5
    True
    """
    return 2 * (2 * d + 9) * UNIT32 / (1 - d * UNIT32)


@numba.njit(cache=True, nogil=True)
def _pair_sums(x, rows, cand, inner):  # pragma: no cover - compiled; tested through faiss_knn_block
    """``sum((x[rows[i]] - x[cand[i, j]]) ** 2)`` (or ``x[rows[i]] . x[cand[i, j]]`` if ``inner``) in float64,
    summed in order as ``cdist`` does; NaN where ``cand`` is -1. A loop rather than NumPy: the NumPy form gathers
    every candidate's vector into a (rows, candidates, D) array first, 4 s a 100,000 rows at k = 100, D = 64."""
    n, c = cand.shape
    d = x.shape[1]
    out = np.empty((n, c))
    for i in range(n):
        r = rows[i]
        for j in range(c):
            t = cand[i, j]
            if t < 0:
                out[i, j] = np.nan
                continue
            s = 0.0
            if inner:
                for m in range(d):
                    s += x[r, m] * x[t, m]
            else:
                for m in range(d):
                    diff = x[r, m] - x[t, m]
                    s += diff * diff
            out[i, j] = s
    return out


@dataclass
class FaissIndex:
    """A flat FAISS index of N labels, as one Dask worker keeps it for all its blocks (:func:`faiss_index`)."""

    index: Any
    #: the metric's squared norms of the vectors FAISS holds (centred ones for L2, unit ones for cosine), float64
    squared_norms: np.ndarray
    #: the norms of the labels themselves (cosine: the exact distance divides by them), else None
    norms: np.ndarray | None

    @property
    def max_squared_norm(self) -> float:
        return float(self.squared_norms.max())


#: one index per (labels, metric) in this process: a Dask worker holds one scattered copy of the labels, and every
#: block it computes searches the same index (building it is a copy of the N x D values)
_INDEXES: weakref.WeakKeyDictionary[LabelSet, dict[str, FaissIndex]] = weakref.WeakKeyDictionary()


def faiss_index(labels: LabelSet, metric: str) -> FaissIndex:
    """The flat FAISS index of ``labels.values`` for ``metric``: ``IndexFlatL2`` over the vectors centred on their
    mean (Euclidean distances do not change, and float32 keeps more of their digits where the vectors share a
    large offset), ``IndexFlatIP`` over the unit vectors for cosine. Built once per labels and metric."""
    import faiss

    cached = _INDEXES.setdefault(labels, {})
    if metric in cached:
        return cached[metric]
    x = labels.values
    norms = np.linalg.norm(x, axis=1) if metric == "cosine" else None  # check_labels refused zero norms
    mean = x.mean(axis=0)
    index = faiss.IndexFlatIP(x.shape[1]) if metric == "cosine" else faiss.IndexFlatL2(x.shape[1])
    squared = np.empty(len(x))
    for start in range(0, len(x), INDEX_CHUNK):  # in chunks: no whole float64 copy beside the labels and the index
        part = slice(start, start + INDEX_CHUNK)
        y = x[part] / norms[part, None] if norms is not None else x[part] - mean
        squared[part] = np.einsum("ij,ij->i", y, y)
        index.add(np.ascontiguousarray(y, dtype=np.float32))  # the index keeps its own float32 copy
    cached[metric] = FaissIndex(index, squared, norms)
    return cached[metric]


def faiss_block_rows(n_items: int, dim: int) -> int:
    """Rows per task of a FAISS search: enough that FAISS takes its BLAS path (:data:`FAISS_MIN_BLOCK_ROWS`)."""
    import faiss

    threshold = int(faiss.cvar.distance_compute_blas_threshold)
    return max(1, min(n_items, max(FAISS_MIN_BLOCK_ROWS, -(-threshold // max(dim, 1)))))


def faiss_knn_block(labels: LabelSet, start: int, stop: int, k: int, metric: str) -> tuple[np.ndarray, np.ndarray, int]:
    """The exact k nearest of rows ``start:stop`` of ``labels`` (Vectors) among all of them, the item itself
    excluded, under ``metric`` (one of :data:`FAISS_METRICS`): the lists :func:`product_block` and
    :func:`labeldist.core.knn.topk_rows` give, found by FAISS (module docstring).

    FAISS returns the k + 1 + margin nearest by its float32 distance; their exact distances are computed in
    float64 (as ``cdist``; a cosine distance under :data:`GUARD` recomputed by ``cdist`` itself, as in
    :func:`product_block`); every other item is at least FAISS's last value less :func:`error_bound` away. Rows
    where that bound does not rule every other item out (ties across the margin, duplicates) are computed whole.

    Returns indices (n, k) int32, distances (n, k) float32, and the number of exact distances computed.
    """
    import faiss

    x = labels.values
    n_items, d = x.shape
    rows = np.arange(start, stop)
    found = faiss_index(labels, metric)
    threads = thread_budget()  # the engine's budget for this task (labeldist.core.threads); None outside one
    if threads is not None:
        faiss.omp_set_num_threads(threads)  # this thread's OpenMP setting only: each Dask thread sets its own
    wanted = min(n_items, k + 1 + max(MARGIN, k // 10))
    approx, cand = found.index.search(found.index.reconstruct_n(start, stop - start), wanted)
    inner = metric == "cosine"
    sums = _pair_sums(x, rows, cand, inner)
    eps = error_bound(d)
    if inner:
        norms = found.norms
        with np.errstate(invalid="ignore"):
            exact = 1.0 - sums / (norms[rows, None] * norms[np.maximum(cand, 0)])
        r, c = np.nonzero(exact < GUARD * d)  # 1 - cos loses digits near 0: what cdist gives, pair by pair
        if len(r):
            exact[r, c] = [
                cdist(x[rows[i] : rows[i] + 1], x[cand[i, j] : cand[i, j] + 1], metric)[0, 0] for i, j in zip(r, c)
            ]
        # any other item's cosine is at most FAISS's last one plus its error: its distance at least 1 minus that
        lower = 1.0 - (approx[:, -1].astype(np.float64) + eps)
    else:
        exact = sums if metric == "sqeuclidean" else np.sqrt(sums)
        spread = eps * (found.squared_norms[rows] + found.max_squared_norm)
        squared = np.maximum(approx[:, -1].astype(np.float64) - spread, 0.0)
        lower = squared if metric == "sqeuclidean" else np.sqrt(squared)
    lower = lower * (1 - 4 * d * np.finfo(np.float64).eps)  # the float64 sums' own rounding
    if wanted == n_items:  # every item is a candidate: nothing else can come in
        lower = np.full(len(rows), np.inf)
    indices, dists, certified = rerank_topk(cand, exact, lower, k, exclude=rows)
    n_exact = int((cand >= 0).sum())
    redo = np.flatnonzero(~certified)
    if redo.size:
        whole = product_block(x[rows[redo]], x, metric)
        indices[redo], dists[redo] = topk_rows(whole.astype(np.float32), k, exclude=rows[redo])
        n_exact += int(redo.size) * n_items
    return indices, dists, n_exact


class VectorDistance(LabelDistance):
    """A ``scipy.spatial.distance`` metric between numeric labels (``metric``, one of :data:`METRICS`)."""

    kind = "vectors"
    labels_class = Vectors
    symmetric = True
    # bench_pair_cost.py-style figures for 64-d vectors on this machine's cores, rounded up
    cost_per_call_s: ClassVar[float] = 2e-5
    cost_per_pair_s: ClassVar[float] = 5e-8

    def __init__(self, metric: str = "euclidean") -> None:
        if metric not in METRICS:
            raise UsageError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
        self.metric = metric

    def params(self) -> dict[str, Any]:
        return {"metric": self.metric}

    @classmethod
    def meaning(cls, params: dict[str, Any]) -> str:
        return f"the {params.get('metric', 'euclidean')} distance between the label vectors (scipy.spatial.distance)"

    def check_labels(self, labels: Vectors, others: Vectors | None = None) -> None:
        """Refuse vectors this metric cannot compare (:meth:`LabelDistance.check_labels`), naming the row (the
        label, with ``others``), the value and the cause: under euclidean, sqeuclidean and cosine, a squared norm
        that overflows float64 in the matrix-product form; under cosine, a zero vector (no direction) or a norm
        whose square underflows float64; under every other metric, values so far apart that a distance would
        overflow the float32 a store holds. No distance is computed: the spread of each column over ``labels``
        and ``others`` bounds every distance (so large values close together are kept)."""
        x = labels.values
        if self.metric in PRODUCT:
            squared = np.einsum("ij,ij->i", x, x)
            big = np.flatnonzero(~(squared <= SQUARED_NORM_MAX))
            if big.size:
                row = int(big[0])
                col = int(np.argmax(np.abs(x[row])))
                raise LabelError(
                    f"{_whose(labels, row, others)} values are too large for the {self.metric} "
                    f"distance: {_value(labels, row, col, others)} makes its squared norm overflow "
                    f"float64{_more(big.size)}"
                )
        if self.metric == "cosine":
            small = np.flatnonzero(squared < SQUARED_NORM_MIN)
            if small.size:
                row = int(small[0])
                norm = _norm(x[row])
                why = (
                    "a zero vector has no direction: its cosine distance is undefined"
                    if norm == 0
                    else f"its norm, {norm:.3g}, is too small for the cosine distance (its square underflows "
                    f"float64; at least {SQUARED_NORM_MIN**0.5:.3g})"
                )
                raise LabelError(f"{_who(labels, row, others)}: {why}{_more(small.size)}")
            return  # a cosine distance lies in [0, 2]
        self._check_spread(labels, others)

    def _check_spread(self, labels: Vectors, others: Vectors | None) -> None:
        """LabelError where the spread of the columns lets a distance overflow float32 (:data:`STORED_MAX`)."""
        every = labels.values if others is None else np.concatenate([labels.values, others.values])
        with np.errstate(over="ignore", invalid="ignore"):
            spread = every.max(axis=0) - every.min(axis=0)  # per column; inf where it overflows float64
            if self.metric == "chebyshev":
                bound = float(spread.max())
            elif self.metric == "cityblock":
                bound = float(spread.sum())
            else:
                bound = _norm(spread) ** (2 if self.metric == "sqeuclidean" else 1)
        if bound <= STORED_MAX:
            return
        col = int(np.argmax(spread))
        low, high = int(np.argmin(every[:, col])), int(np.argmax(every[:, col]))
        n = len(labels)
        row = max([r for r in (high, low) if r < n] or [0], key=lambda r: abs(every[r, col]))  # the farther end
        span = (
            f"column {labels.columns[col]!r} spans {every[low, col]:.6g} ({_place(labels, low, others)}) to "
            f"{every[high, col]:.6g} ({_place(labels, high, others)})"
        )
        raise LabelError(
            f"{_whose(labels, row, others)} values are too large for the {self.metric} distance: "
            f"{span}, so that {past_stored(bound)}"
        )

    def block(self, rows: Vectors, cols: Vectors) -> np.ndarray:
        if rows.dim != cols.dim:
            raise UsageError(f"vectors of {rows.dim} and {cols.dim} numbers cannot be compared")
        if self.metric in ("euclidean", "sqeuclidean", "cosine"):
            return product_block(rows.values, cols.values, self.metric)
        return cdist(rows.values, cols.values, self.metric)

    def knn_block(self, labels: Vectors, start: int, stop: int, k: int) -> tuple[np.ndarray, np.ndarray, int] | None:
        """FAISS's exact search (:func:`faiss_knn_block`) under euclidean, sqeuclidean and cosine; None under
        the other metrics, whose kNN lists come from their blocks."""
        if self.metric not in FAISS_METRICS:
            return None
        return faiss_knn_block(labels, start, stop, k, self.metric)

    def knn_block_rows(self, labels: Vectors) -> int | None:
        return faiss_block_rows(len(labels), labels.dim) if self.metric in FAISS_METRICS else None

    def pairs(self, labels: Vectors, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        a, b = labels.values[np.asarray(i)], labels.values[np.asarray(j)]
        if self.metric in ("euclidean", "sqeuclidean"):
            sq = np.einsum("ij,ij->i", a - b, a - b)
            return sq if self.metric == "sqeuclidean" else np.sqrt(sq)
        if self.metric == "cityblock":
            return np.abs(a - b).sum(axis=1)
        if self.metric == "chebyshev":
            return np.abs(a - b).max(axis=1)
        return np.array([cdist(x[None], y[None], "cosine")[0, 0] for x, y in zip(a, b)])

    def reference(self, a: Vectors, i: int, b: Vectors, j: int) -> float:
        x, y = a.values[i].tolist(), b.values[j].tolist()
        diff = [p - q for p, q in zip(x, y)]
        if self.metric == "euclidean":
            return math.sqrt(sum(d * d for d in diff))
        if self.metric == "sqeuclidean":
            return sum(d * d for d in diff)
        if self.metric == "cityblock":
            return sum(abs(d) for d in diff)
        if self.metric == "chebyshev":
            return max(abs(d) for d in diff)
        dot = sum(p * q for p, q in zip(x, y))
        return 1.0 - dot / (math.sqrt(sum(p * p for p in x)) * math.sqrt(sum(q * q for q in y)))


def _norm(v: np.ndarray) -> float:
    """The Euclidean norm of ``v``, scaled so that neither squaring overflows nor underflows; inf if it does."""
    with np.errstate(over="ignore", invalid="ignore"):
        top = float(np.abs(v).max())
        if top == 0 or not np.isfinite(top):
            return top
        return top * float(np.sqrt(np.sum((v / top) ** 2)))


def _more(count: int) -> str:
    return f" ({count} such rows)" if count > 1 else ""


def _who(labels: Vectors, row: int, others: Vectors | None) -> str:
    """Who is blamed: ``the label`` (one new label, checked against ``others``), or ``row 3 (id 'x')``."""
    if others is not None and len(labels) == 1:
        return "the label"
    return f"row {row} (id {str(labels.ids[row])!r})"


def _whose(labels: Vectors, row: int, others: Vectors | None) -> str:
    """``the label's`` or ``row 3 (id 'x'): its``."""
    who = _who(labels, row, others)
    return f"{who}'s" if who == "the label" else f"{who}: its"


def _place(labels: Vectors, row: int, others: Vectors | None) -> str:
    """Row ``row`` of ``labels`` followed by ``others``: ``the label``, ``row 3, id 'x'`` or ``the store's item
    'y'``."""
    n = len(labels)
    if row >= n and others is not None:
        return f"the store's item {str(others.ids[row - n])!r}"
    return "the label" if others is not None and n == 1 else f"row {row}, id {str(labels.ids[row])!r}"


def _value(labels: Vectors, row: int, col: int, others: Vectors | None) -> str:
    """The value at ``row``, ``col``, named: ``number 1 (b), 3e+200,`` for a new label, else ``1e+300 (column
    'v')``."""
    value = f"{labels.values[row, col]:.6g}"
    if others is not None and len(labels) == 1:
        return f"number {col} ({labels.columns[col]}), {value},"
    return f"{value} (column {labels.columns[col]!r})"
