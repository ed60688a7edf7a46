r"""Distances between numeric labels (:mod:`labeldist.labels.vectors`): the metrics of ``scipy.spatial.distance``.

.. math::

    \text{euclidean } \lVert a - b \rVert_2, \quad \text{sqeuclidean } \lVert a - b \rVert_2^2, \quad
    \text{cosine } 1 - \frac{a \cdot b}{\lVert a \rVert \lVert b \rVert}, \quad
    \text{cityblock } \lVert a - b \rVert_1, \quad \text{chebyshev } \lVert a - b \rVert_\infty

Euclidean, squared Euclidean and cosine blocks are one matrix product (BLAS), as
:math:`\lVert a \rVert^2 + \lVert b \rVert^2 - 2\, a \cdot b`: for 64-d vectors about 20x faster than
``scipy.spatial.distance.cdist``. That form loses digits where two vectors are close compared with their norms
(cancellation), so every pair whose product-form value could be off by more than float32's resolution (what
a store keeps) is recomputed by ``cdist`` itself: the block then equals ``cdist`` to float32. City-block and
Chebyshev distances are ``cdist``. The reference is the formula, one pair at a time, in plain Python.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from scipy.spatial.distance import cdist

from labeldist.distances.base import STORED_MAX, LabelDistance, past_stored
from labeldist.labels.base import LabelError
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
            raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
        self.metric = metric

    def params(self) -> dict[str, Any]:
        return {"metric": self.metric}

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
                raise LabelError(f"{_whose(labels, row, others)} values are too large for the {self.metric} "
                                 f"distance: {_value(labels, row, col, others)} makes its squared norm overflow "
                                 f"float64{_more(big.size)}")  # fmt: skip
        if self.metric == "cosine":
            small = np.flatnonzero(squared < SQUARED_NORM_MIN)
            if small.size:
                row = int(small[0])
                norm = _norm(x[row])
                why = ("a zero vector has no direction: its cosine distance is undefined" if norm == 0 else
                       f"its norm, {norm:.3g}, is too small for the cosine distance (its square underflows "
                       f"float64; at least {SQUARED_NORM_MIN ** 0.5:.3g})")  # fmt: skip
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
        span = (f"column {labels.columns[col]!r} spans {every[low, col]:.6g} ({_place(labels, low, others)}) to "
                f"{every[high, col]:.6g} ({_place(labels, high, others)})")  # fmt: skip
        raise LabelError(
            f"{_whose(labels, row, others)} values are too large for the {self.metric} distance: "
            f"{span}, so that {past_stored(bound)}"
        )

    def block(self, rows: Vectors, cols: Vectors) -> np.ndarray:
        if rows.dim != cols.dim:
            raise ValueError(f"vectors of {rows.dim} and {cols.dim} numbers cannot be compared")
        if self.metric in ("euclidean", "sqeuclidean", "cosine"):
            return product_block(rows.values, cols.values, self.metric)
        return cdist(rows.values, cols.values, self.metric)

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
