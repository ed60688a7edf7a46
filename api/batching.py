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
    items: np.ndarray  # (B, size - 1) int64: nearest first, then random others
    distances: np.ndarray | None = None  # (B, size - 1) float32, anchor to item
    pairwise: np.ndarray | None = None  # (B, size, size) float32, anchor first
    computed: int = 0

    @property
    def members(self) -> np.ndarray:
        """(B, size): each batch's anchor, then its items."""
        return np.concatenate([self.anchors[:, None], self.items], axis=1)


def draw_batches(
    store: ServedStore, *, anchors: list[int] | None, count: int | None, size: int, neighbors: int, seed: int
) -> BatchSet:
    """The items of one batch per anchor (given, or ``count`` drawn without replacement when there are
    enough items): the anchor's ``neighbors`` nearest (its kNN list's first), then ``size - 1 - neighbors``
    others drawn without replacement from the rest. Reproducible: the same ``seed`` draws the same batches."""
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
    return BatchSet(anchor_arr, draw_items(rng, store.knn_indices, store.knn_counts, anchor_arr, size, neighbors))


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
