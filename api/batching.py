"""Minibatches: an anchor, its nearest neighbours, random others, and the distances among them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from labeldist.api.compute import ComputeGuard
from labeldist.api.errors import BadParameter
from labeldist.api.registry import ServedStore

from labeldist.batching import draw_items


@dataclass
class BatchSet:
    anchors: np.ndarray  # (B,) int64
    items: np.ndarray  # (B, size - 1) int64: nearest first, then random others ((B, 0) until drawn)
    distances: np.ndarray | None = None  # (B, size - 1) float32, anchor to item
    pairwise: np.ndarray | None = None  # (B, size, size) float32, anchor first
    computed: int = 0

    @property
    def members(self) -> np.ndarray:
        """(B, size): each batch's anchor, then its items."""
        return np.concatenate([self.anchors[:, None], self.items], axis=1)


def draw_anchors(
    store: ServedStore, *, anchors: list[int] | None, count: int | None, size: int, neighbors: int, seed: int
) -> tuple[BatchSet, np.random.Generator]:
    """The anchors of the batches (given, or ``count`` drawn without replacement when there are enough items) and
    the generator that then draws their items (:func:`draw_batch_items`), after the checks of the parameters.
    Reads nothing from disk."""
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
    rng = np.random.default_rng(seed)
    if anchors is None:
        assert count is not None
        anchor_arr = rng.choice(n, size=count, replace=count > n).astype(np.int64)
    else:
        anchor_arr = np.asarray(anchors, dtype=np.int64)
        store.check_index(anchor_arr, "anchor")
    return BatchSet(anchor_arr, np.empty((len(anchor_arr), 0), dtype=np.int64)), rng


def draw_batch_items(
    store: ServedStore, batches: BatchSet, rng: np.random.Generator, *, size: int, neighbors: int
) -> BatchSet:
    """The items of each anchor's batch: its ``neighbors`` nearest (its kNN list's first, read from the store's
    row cache, from disk if not held), then ``size - 1 - neighbors`` others drawn without replacement from the
    rest. Draws once: a batch set that has its items is left as it is."""
    if batches.items.shape[1] != size - 1:
        rows = store.knn.rows(batches.anchors)[0] if neighbors else np.empty((len(batches.anchors), 0), np.int32)
        batches.items = draw_items(rng, store.n_items, batches.anchors, rows, size, neighbors)
    return batches


def draw_batches(
    store: ServedStore, *, anchors: list[int] | None, count: int | None, size: int, neighbors: int, seed: int
) -> BatchSet:
    """The items of one batch per anchor (given, or ``count`` drawn without replacement when there are
    enough items): the anchor's ``neighbors`` nearest (its kNN list's first), then ``size - 1 - neighbors``
    others drawn without replacement from the rest. Reproducible: the same ``seed`` draws the same batches."""
    batches, rng = draw_anchors(store, anchors=anchors, count=count, size=size, neighbors=neighbors, seed=seed)
    return draw_batch_items(store, batches, rng, size=size, neighbors=neighbors)


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
    batches.computed = computed
    return batches


def make_batches(
    store: ServedStore,
    *,
    anchors: list[int] | None,
    count: int | None,
    size: int,
    neighbors: int,
    pairwise: bool,
    seed: int,
    allow_compute: bool,
) -> BatchSet:
    """:func:`draw_batches` then :func:`fill_distances`."""
    drawn = draw_batches(store, anchors=anchors, count=count, size=size, neighbors=neighbors, seed=seed)
    return fill_distances(store, drawn, pairwise=pairwise, allow_compute=allow_compute)


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
    be read from disk. Safe to run again from the start (as :func:`~labeldist.api.compute.run_cancellable` does
    once a compute slot is free): the items are drawn once."""
    draw_batch_items(store, batches, rng, size=size, neighbors=neighbors)
    return fill_distances(store, batches, pairwise=pairwise, allow_compute=allow_compute, guard=guard)
