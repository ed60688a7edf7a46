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

from labeldist.distances.base import LabelDistance
from labeldist.labels.vectors import Vectors

METRICS = ("euclidean", "sqeuclidean", "cosine", "cityblock", "chebyshev")
#: the product form's error on a squared distance is about D * eps64 * (|a|^2 + |b|^2); recompute where that
#: error could exceed float32's relative resolution of the value: d^2 < GUARD * D * (|a|^2 + |b|^2)
GUARD = 16 * np.finfo(np.float64).eps / np.finfo(np.float32).eps


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
