"""The interface every label distance implements (the registry of kinds, which names each kind's distance, is
:mod:`labeldist.kinds`).

A distance is a small pure kernel on blocks of labels: ``block(rows, cols)`` returns the
``(len(rows), len(cols))`` matrix of distances (smaller is closer). The engine only arranges blocks; it never
looks inside a label. ``reference`` is the slow, obviously-correct oracle the tests and ``labeldist verify``
compare against.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from labeldist.core.cascade import KnownPairs
from labeldist.labels.base import LabelSet

#: the largest distance a store holds (it keeps float32); a larger one would be stored as infinity
STORED_MAX = float(np.finfo(np.float32).max)


def past_stored(bound: float) -> str:
    """Why a bound on a kind's distances is refused: ``distances reach 2e+300, past the float32 a store holds (at
    most 3.4e+38)`` (``distances overflow float64, ...`` where the bound does)."""
    reach = f"distances reach {bound:.3g}" if np.isfinite(bound) else "distances overflow float64"
    return f"{reach}, past the float32 a store holds (at most {STORED_MAX:.3g})"


@dataclass
class Preparation:
    """Work a distance needs done once per job, cut into pure tasks the engine runs on its Dask workers.

    The engine calls ``function(item, **kwargs)`` for every item of ``items`` on the workers (under the thread
    budget of one task), shows progress in ``unit`` (``sizes``: how many of them each item counts), hands the
    results, in the order of ``items``, to ``finish`` in the submitting process, and then asks every worker
    ``visible()``: a worker answering False is named on the console with ``unseen``, what it will do instead.
    """

    what: str
    function: Callable[..., Any]
    items: Sequence[Any]
    finish: Callable[[list[Any]], None]
    kwargs: dict[str, Any] = field(default_factory=dict)
    sizes: Sequence[int] = ()
    unit: str = "item"
    visible: Callable[[], bool] | None = None
    unseen: str = ""


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
    budget before any work (:mod:`labeldist.api.serving.compute`). Kinds set what ``benchmarks/bench_pair_cost.py``
    measures
    (rounded up); the defaults are for a kind that has not been measured."""
    cost_per_label_byte_s: ClassVar[float] = 0.0
    """Seconds of one core a searched label costs per byte of its JSON form, beyond ``cost_per_item_s``: where the
    work of reading a label grows with its length (a sentence is tokenized and looked up word by word whatever
    the model truncates)."""

    @classmethod
    def meaning(cls, params: dict[str, Any]) -> str:
        """What a distance of a store of this kind made with ``params`` (its manifest's) means, in words for a
        person (the service's store info, the /ui): a kind says what its numbers measure; the default names it."""
        return f"the {cls.kind} distance"

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> LabelDistance:
        """The distance a store's manifest records (its ``params``, less the labels' reading record): by default
        ``cls(**params)``; a kind whose parameters grew says here what a store made before meant."""
        return cls(**params)

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Every parameter that changes a number, JSON-serialisable; ``type(self)(**params())`` rebuilds it."""

    def prepare(self, labels: LabelSet) -> None:
        """Work done once per job in the process that submits it, before the engine's tasks run (the sentence
        distance embeds every sentence once here). Called only when some block is left to compute, never for a
        store that is reused; it must not change any number. A no-op by default."""
        return None

    def preparation(self, labels: LabelSet) -> Preparation | None:
        """The part of :meth:`prepare` that can run as tasks on the job's workers (the sentence distance's
        embedding), or None (the default): the engine runs it first, then :meth:`prepare`, which then finds its
        work done. Called, like :meth:`prepare`, only when some block is left to compute."""
        return None

    def check_labels(self, labels: LabelSet, others: LabelSet | None = None) -> None:
        """Refuse labels this distance cannot compare: a LabelError naming the item, its value and the cause where
        some distance among ``labels`` (and between them and ``others``) would not be a number a store holds,
        e.g. a value so large that the formula overflows (a store keeps float32: at most :data:`STORED_MAX`), or a
        vector whose cosine is undefined. ``others`` are labels already checked (a store's, when a new label is
        searched): only ``labels`` are blamed. Cheap (no distance computed), and called before anything is
        written (:func:`labeldist.kinds.probe`) or searched (:func:`labeldist.kinds.read_label`). The default
        accepts every label; a NaN that a kind's ``block`` still returns is refused, naming the items, by
        :func:`labeldist.kinds.check_block`."""
        return None

    def search_cost_s(self, labels: LabelSet) -> float | None:
        """Estimated seconds of one core to search ``labels`` by one new label, where this distance knows better
        than its unit costs (what it already holds of ``labels``: a model's embeddings, say); None (the default):
        the estimate from the unit costs (:func:`labeldist.view.search.search_cost_s`), made before any label is
        loaded. The service loads a store's labels before asking, so a distance that answers must be cheap to make
        and to ask."""
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
        pair out (:func:`labeldist.core.knn.pruned_topk`).
        """
        return None

    def knn_block(self, labels: LabelSet, start: int, stop: int, k: int) -> tuple[np.ndarray, np.ndarray, int] | None:
        """The exact k nearest of rows ``start:stop`` among all ``labels`` (the item itself excluded), found by a
        search faster than the whole rows, or None when the distance has none (the default).

        It must give what :func:`labeldist.core.knn.topk_rows` picks from the float32 rows of :meth:`block`: the same
        lists, ties broken by index. Returns indices (n, k) int32, distances (n, k) float32 and the number of exact
        distances computed. A kNN-only store uses it before :meth:`lower_bound_block`.
        """
        return None

    #: whether :meth:`knn_block_shared` takes the exact distances other row blocks computed and returns its own: a
    #: symmetric distance whose exact values are the cost of its search and the same float from either side (caption
    #: sets), so that a job computes each unordered pair about once (:mod:`labeldist.engine.exchange`)
    shares_exact_pairs: ClassVar[bool] = False

    def knn_block_shared(
        self, labels: LabelSet, start: int, stop: int, k: int, known: KnownPairs
    ) -> tuple[np.ndarray, np.ndarray, int, KnownPairs]:
        """:meth:`knn_block` given ``known``: exact distances of pairs whose row lies in ``start:stop``, which it does
        not compute again (rows and columns counted over all of ``labels``). Returns the same lists, the number of
        exact distances it computed, and the pairs whose exact distance it computed (counted the same way). Only
        where :attr:`shares_exact_pairs`."""
        raise NotImplementedError(f"{type(self).__name__} does not share exact pairs")

    def knn_block_rows(self, labels: LabelSet) -> int | None:
        """Rows per task that :meth:`knn_block` works best with, or None for the engine's default (which bounds a
        task's float64 block of whole rows)."""
        return None

    def pairs(self, labels: LabelSet, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Distances for index pairs ``(i[t], j[t])``; the default computes one small block per pair."""
        out = np.empty(len(i), dtype=np.float64)
        for t, (a, b) in enumerate(zip(np.asarray(i), np.asarray(j))):
            out[t] = self.block(labels.subset(np.array([a])), labels.subset(np.array([b])))[0, 0]
        return out
