"""The interface every label distance implements, and the registry of distances by name.

A distance is a small pure kernel on blocks of labels: ``block(rows, cols)`` returns the
``(len(rows), len(cols))`` matrix of distances (smaller is closer). The engine only arranges blocks; it never
looks inside a label. ``reference`` is the slow, obviously-correct oracle the tests and ``labeldist verify``
compare against.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from labeldist.labels.base import LabelSet


class LabelDistance(ABC):
    """A distance between labels of one type.

    Subclasses set ``kind`` (the manifest's ``kind``) and ``labels_class``, take every number-changing
    choice as a constructor argument, and report those arguments in :meth:`params`.
    """

    kind: ClassVar[str]
    labels_class: ClassVar[type[LabelSet]]
    symmetric: ClassVar[bool] = False
    """True when d(a, b) == d(b, a) mathematically, so that the engine may compute each unordered pair once.

    A dense store of a symmetric distance is computed as its upper triangle and mirrored (see
    :mod:`labeldist.engine`): the stored matrix is then exactly symmetric, even where the kernel's float64
    values for (a, b) and (b, a) differ in their last bits. Leave False when the kernel is not symmetric by
    construction; its stores are then computed row by row over all N columns.
    """

    cost_per_call_s: ClassVar[float] = 1e-3
    cost_per_pair_s: ClassVar[float] = 1e-4
    cost_per_item_s: ClassVar[float] = 0.0
    """Seconds of one core a ``block`` call costs beyond its pairs, each pair it computes, and each distinct item
    it prepares (a sentence it embeds): the service's estimate of an on-demand request's cost, checked against its
    budget before any work (:mod:`labeldist.api.compute`). Kinds set what ``benchmarks/bench_pair_cost.py`` measures
    (rounded up); the defaults are for a kind that has not been measured."""

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Every parameter that changes a number, JSON-serialisable; ``type(self)(**params())`` rebuilds it."""

    def prepare(self, labels: LabelSet) -> None:
        """Work done once per job in the process that submits it, before the engine's tasks run (the sentence
        distance embeds every sentence once here). Called only when some block is left to compute, never for a
        store that is reused; it must not change any number. A no-op by default."""
        return None

    @abstractmethod
    def block(self, rows: LabelSet, cols: LabelSet) -> np.ndarray:
        """Distances between every row label and every column label, float64 of shape (len(rows), len(cols))."""

    @abstractmethod
    def reference(self, a: LabelSet, i: int, b: LabelSet, j: int) -> float:
        """The distance between label ``i`` of ``a`` and label ``j`` of ``b``, computed the slow, plain way."""

    def lower_bound_block(self, rows: LabelSet, cols: LabelSet) -> np.ndarray | None:
        """Lower bounds on ``block(rows, cols)``, much cheaper to compute, or None when the distance has none.

        When a distance has one, kNN-only stores compute exact distances only where the bound cannot rule a
        pair out (:func:`labeldist.knn.pruned_topk`).
        """
        return None

    def pairs(self, labels: LabelSet, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Distances for index pairs ``(i[t], j[t])``; the default computes one small block per pair."""
        out = np.empty(len(i), dtype=np.float64)
        for t, (a, b) in enumerate(zip(np.asarray(i), np.asarray(j))):
            out[t] = self.block(labels.subset(np.array([a])), labels.subset(np.array([b])))[0, 0]
        return out
