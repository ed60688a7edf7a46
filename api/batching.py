"""Minibatches: an anchor, its nearest neighbours, random others, and the distances among them.

With a pool (``pool`` or ``exclude`` in the request) every member is an item of the pool: the anchors (given,
and checked to be in it, or drawn from it), each anchor's nearest within the pool and random others of the pool
(:mod:`labeldist.view.batching`, the one drawing rule, which the in-process client follows too). Without one,
from every item of the store."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import labeldist.view.batching as rule
from labeldist.api.compute import ComputeGuard
from labeldist.api.errors import BadParameter
from labeldist.api.registry import ServedStore


@dataclass
class BatchSet:
    anchors: np.ndarray  # (B,) int64
    items: np.ndarray  # (B, size - 1) int64: nearest first, then random others ((B, 0) until drawn)
    distances: np.ndarray | None = None  # (B, size - 1) float32, anchor to item
    pairwise: np.ndarray | None = None  # (B, size, size) float32, anchor first
    computed: int = 0
    pool: np.ndarray | None = None  # sorted distinct items every member is drawn from; None: the whole store
    drawn_computed: int = 0  # distinct pairs computed to rank a pool's items where an anchor's kNN list ran out

    @property
    def members(self) -> np.ndarray:
        """(B, size): each batch's anchor, then its items."""
        return np.concatenate([self.anchors[:, None], self.items], axis=1)


def draw_anchors(
    store: ServedStore,
    *,
    anchors: list[int] | None,
    count: int | None,
    size: int,
    neighbors: int,
    seed: int,
    pool: list[int] | None = None,
    exclude: list[int] | None = None,
) -> tuple[BatchSet, np.random.Generator]:
    """The anchors of the batches and the generator that then draws their items (:func:`draw_batch_items`), by
    the shared rule (:func:`labeldist.view.batching.draw_anchors`); what it refuses is a 422 naming the field, an anchor
    that is no item of the store a 404. Reads nothing from disk."""
    try:
        drawn, allowed, rng = rule.draw_anchors(
            store.n_items,
            store.k,
            anchors=anchors,
            count=count,
            size=size,
            neighbors=neighbors,
            seed=seed,
            pool=pool,
            exclude=exclude,
            check_anchors=lambda given: store.check_index(given, "anchor"),
        )
    except rule.DrawRefused as e:
        raise BadParameter(str(e), ("body", e.field), e.value) from None
    return BatchSet(drawn, np.empty((len(drawn), 0), dtype=np.int64), pool=allowed), rng


def draw_batch_items(
    store: ServedStore,
    batches: BatchSet,
    rng: np.random.Generator,
    *,
    size: int,
    neighbors: int,
    allow_compute: bool = False,
    guard: ComputeGuard | None = None,
) -> BatchSet:
    """The items of each anchor's batch by the shared rule (:func:`labeldist.view.batching.draw_batch_items`), the kNN
    lists read through the store's row cache. With a pool, where an anchor's list runs out the pool's other items
    are ranked by their distances to the anchor, stored or computed on demand (``allow_compute``, within
    ``guard``'s bounds). Draws once: a batch set that has its items is left as it is."""
    if batches.items.shape[1] == size - 1:
        return batches
    computed = 0

    def anchor_row(anchor: int, items: np.ndarray) -> np.ndarray:
        nonlocal computed
        values, more = store.distances(np.full(items.size, anchor, dtype=np.int64), items, allow_compute, guard)
        computed += more
        return values

    batches.items = rule.draw_batch_items(
        rng, store.knn, batches.anchors, size=size, neighbors=neighbors, pool=batches.pool, distances=anchor_row
    )
    batches.drawn_computed = computed
    return batches


def fill_distances(
    store: ServedStore, batches: BatchSet, *, pairwise: bool, allow_compute: bool, guard: ComputeGuard | None = None
) -> BatchSet:
    """The anchor-to-item distances of drawn batches, and with ``pairwise`` each batch's matrix; what must be
    computed on demand is computed within ``guard``'s bounds (one budget for both)."""
    b, m = batches.items.shape
    dist, computed = store.distances(np.repeat(batches.anchors, m), batches.items.ravel(), allow_compute, guard)
    batches.distances = dist.reshape(b, m)
    if pairwise:
        batches.pairwise, more = store.pairwise(batches.members, allow_compute, guard)
        computed += more
    batches.computed = batches.drawn_computed + computed
    return batches


def draw_and_fill(
    store: ServedStore,
    batches: BatchSet,
    rng: np.random.Generator,
    *,
    size: int,
    neighbors: int,
    pairwise: bool,
    allow_compute: bool,
    guard: ComputeGuard | None = None,
) -> BatchSet:
    """:func:`draw_batch_items` then :func:`fill_distances`, in one worker thread where the anchors' kNN lists must
    be read from disk (or a pool's items ranked). Safe to run again from the start (as
    :func:`~labeldist.api.compute.run_cancellable` does once a compute slot is free): the items are drawn once."""
    draw_batch_items(store, batches, rng, size=size, neighbors=neighbors, allow_compute=allow_compute, guard=guard)
    return fill_distances(store, batches, pairwise=pairwise, allow_compute=allow_compute, guard=guard)
