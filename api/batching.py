"""Minibatches: an anchor, its nearest neighbours, random others, and the distances among them.

With a pool (``pool`` or ``exclude`` in the request) every member is an item of the pool: the anchors (given,
and checked to be in it, or drawn from it), each anchor's nearest within the pool and random others of the pool
(:mod:`labeldist.batching`). Without one, the draws are exactly those of a service without pools."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labeldist.api.compute import ComputeGuard
from labeldist.api.errors import BadParameter
from labeldist.api.registry import ServedStore
from labeldist.batching import (
    PoolError,
    check_pool,
    draw_items,
    draw_items_in_pool,
    draw_pool_anchors,
    nearest_in_pool,
    resolve_pool,
)


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


def _pool_refused(e: PoolError, value: object) -> BadParameter:
    return BadParameter(str(e), ("body", e.field), value)


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
    """The anchors of the batches (given, or ``count`` drawn without replacement when there are enough items,
    from the pool when there is one) and the generator that then draws their items (:func:`draw_batch_items`),
    after the checks of the parameters (the pool's: 422 naming the field). Reads nothing from disk."""
    n = store.n_items
    if size > n:
        raise BadParameter(f"size={size} is more than the store's {n} items", ("body", "size"), size)
    if neighbors > size - 1:
        raise BadParameter(
            f"neighbors={neighbors} does not fit in a batch of size={size} (at most size - 1)",
            ("body", "neighbors"),
            neighbors,
        )
    if neighbors > store.k:
        raise BadParameter(
            f"neighbors={neighbors} is more than the store's k={store.k}", ("body", "neighbors"), neighbors
        )
    try:
        allowed = resolve_pool(n, pool=pool, exclude=exclude)
    except PoolError as e:
        raise _pool_refused(e, None) from None
    field = "pool" if pool is not None else "exclude"
    rng = np.random.default_rng(seed)
    if anchors is None:
        assert count is not None
        if allowed is None:
            anchor_arr = rng.choice(n, size=count, replace=count > n).astype(np.int64)
        else:
            try:
                check_pool(allowed, None, size, field)
            except PoolError as e:
                raise _pool_refused(e, None) from None
            anchor_arr = draw_pool_anchors(rng, allowed, count)
    else:
        anchor_arr = np.asarray(anchors, dtype=np.int64)
        store.check_index(anchor_arr, "anchor")
        if allowed is not None:
            try:
                check_pool(allowed, anchor_arr, size, field)
            except PoolError as e:
                raise _pool_refused(e, None) from None
    batches = BatchSet(anchor_arr, np.empty((len(anchor_arr), 0), dtype=np.int64), pool=allowed)
    return batches, rng


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
    """The items of each anchor's batch: its ``neighbors`` nearest (its kNN list's first, read from the store's
    row cache, from disk if not held), then ``size - 1 - neighbors`` others drawn without replacement from the
    rest. Draws once: a batch set that has its items is left as it is.

    With a pool, the nearest within the pool (:func:`labeldist.batching.nearest_in_pool`): where an anchor's list
    runs out, the pool's other items are ranked by their distances to the anchor, stored or computed on demand
    (``allow_compute``, within ``guard``'s bounds) as :func:`fill_distances` gets them. Those are all found before
    the generator draws anything, so a run stopped for a compute slot draws the same items when run again."""
    if batches.items.shape[1] == size - 1:
        return batches
    rows = store.knn.rows(batches.anchors)[0] if neighbors else np.empty((len(batches.anchors), 0), np.int32)
    if batches.pool is None:
        batches.items = draw_items(rng, store.n_items, batches.anchors, rows, size, neighbors)
        return batches
    computed = 0

    def anchor_row(anchor: int, items: np.ndarray) -> np.ndarray:
        nonlocal computed
        values, more = store.distances(np.full(items.size, anchor, dtype=np.int64), items, allow_compute, guard)
        computed += more
        return values

    nearest = nearest_in_pool(batches.anchors, rows, batches.pool, neighbors, anchor_row)
    batches.drawn_computed = computed
    batches.items = draw_items_in_pool(rng, batches.pool, batches.anchors, nearest, size)
    return batches


def draw_batches(
    store: ServedStore,
    *,
    anchors: list[int] | None,
    count: int | None,
    size: int,
    neighbors: int,
    seed: int,
    pool: list[int] | None = None,
    exclude: list[int] | None = None,
    allow_compute: bool = False,
) -> BatchSet:
    """The items of one batch per anchor (given, or ``count`` drawn without replacement when there are
    enough items): the anchor's ``neighbors`` nearest (its kNN list's first), then ``size - 1 - neighbors``
    others drawn without replacement from the rest; all from the pool when there is one. Reproducible: the same
    ``seed`` draws the same batches."""
    batches, rng = draw_anchors(
        store, anchors=anchors, count=count, size=size, neighbors=neighbors, seed=seed, pool=pool, exclude=exclude
    )
    return draw_batch_items(store, batches, rng, size=size, neighbors=neighbors, allow_compute=allow_compute)


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
