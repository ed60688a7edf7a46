"""The one rule by which a dense-triplet minibatch is drawn from a store's kNN lists (Kim et al., CVPR 2019,
§3.2): the anchor, its nearest items, then random others. The service and the in-process
:class:`~labeldist.client.LocalSource` both draw with :func:`draw_anchors` then :func:`draw_batch_items`, through the
same assembly (:mod:`labeldist.view.minibatch`), so the same seed gives the same minibatches from either; a request
either refuses is refused by :class:`DrawRefused` with the same message.

A request may name a *pool* (or the items to *exclude*): then every member of its minibatches, anchor, nearest
and random others alike, is an item of the pool, so that held-out items never reach a training minibatch. The
nearest are the anchor's nearest *within the pool* (:func:`nearest_in_pool`), the others drawn from the pool
(:func:`draw_items_in_pool`). A request without one draws from every item (:func:`draw_items`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from labeldist.errors import LabeldistError, UsageError
from labeldist.view.rowcache import KnnRows


def sample_excluding(rng: np.random.Generator, n: int, count: int, exclude: np.ndarray) -> np.ndarray:
    """``count`` distinct integers of ``0..n-1`` drawn uniformly without replacement, none in ``exclude``.

    Draws from ``0..n-len(exclude)-1`` and maps each value past the excluded ones, so the cost does not
    grow with ``n``.

    >>> sorted(sample_excluding(np.random.default_rng(0), 5, 3, np.array([1, 3])).tolist())
    [0, 2, 4]
    """
    ex = np.unique(exclude)
    draw = rng.choice(n - ex.size, size=count, replace=False)
    return draw + np.searchsorted(ex - np.arange(ex.size), draw, side="right")


def draw_items(
    rng: np.random.Generator, n_items: int, anchors: np.ndarray, knn_rows: np.ndarray, size: int, neighbors: int
) -> np.ndarray:
    """``(B, size - 1)`` int64 items of one minibatch per anchor, in order: the anchor's ``neighbors`` nearest (the
    first of its kNN list ``knn_rows[t]``, the list of ``anchors[t]``, whose -1 padding does not count), then
    ``size - 1 - neighbors`` others drawn uniformly without replacement from the ``n_items`` items that are neither
    the anchor nor those nearest. ``knn_rows`` (B, k) holds the anchors' lists only (read on demand from a store:
    :class:`labeldist.view.rowcache.KnnRows`); with ``neighbors=0`` it may be (B, 0)."""
    m = size - 1
    items = np.empty((len(anchors), m), dtype=np.int64)
    for t, a in enumerate(np.asarray(anchors).tolist()):
        row = knn_rows[t]
        nearest = row[: min(neighbors, int(np.count_nonzero(row >= 0)))]
        items[t, : nearest.size] = nearest
        items[t, nearest.size :] = sample_excluding(rng, n_items, m - nearest.size, np.append(nearest, a))
    return items


class DrawRefused(LabeldistError, ValueError):
    """A minibatch request that cannot be drawn: the message says why, ``field`` names the request field at fault
    (``size``, ``neighbors``, ``count``, ``anchors``, ``pool`` or ``exclude``) and ``value`` what it held where that
    is one number; the service answers it 422, :class:`~labeldist.client.LocalSource` raises it as RequestRejected."""

    def __init__(self, message: str, field: str, value: Any = None) -> None:
        super().__init__(message)
        self.field, self.value = field, value


def check_batch_shape(n_items: int, k: int, size: int, neighbors: int) -> None:
    """:class:`DrawRefused` unless a minibatch of ``size`` members (the anchor and ``size - 1`` items, ``neighbors``
    of them its nearest) fits a store of ``n_items`` items whose kNN lists hold ``k``."""
    if size < 2:
        raise DrawRefused(f"size={size} must be at least 2 (the anchor and one item)", "size", size)
    if neighbors < 0:
        raise DrawRefused(f"neighbors={neighbors} must be at least 0", "neighbors", neighbors)
    if size > n_items:
        raise DrawRefused(f"size={size} is more than the store's {n_items} items", "size", size)
    if neighbors > size - 1:
        raise DrawRefused(
            f"neighbors={neighbors} does not fit in a batch of size={size} (at most size - 1)", "neighbors", neighbors
        )
    if neighbors > k:
        raise DrawRefused(f"neighbors={neighbors} is more than the store's k={k}", "neighbors", neighbors)


def draw_anchors(
    n_items: int,
    k: int,
    *,
    anchors: Any,
    count: int | None,
    size: int,
    neighbors: int,
    seed: int,
    pool: Any = None,
    exclude: Any = None,
    check_anchors: Callable[[np.ndarray], None] = lambda anchors: None,
) -> tuple[np.ndarray, np.ndarray | None, np.random.Generator]:
    """The anchors of the minibatches, the pool their members come from (None: every item) and the generator that
    then draws their items (:func:`draw_batch_items`), all from ``numpy.random.default_rng(seed)``.

    ``anchors`` as given (``check_anchors`` raises the caller's error for one that is no item of the store), or
    with ``anchors=None`` ``count`` drawn (without replacement when there are enough items), from the pool when
    there is one. :class:`DrawRefused` for a minibatch that does not fit the store (:func:`check_batch_shape`), a
    pool that cannot be used or that misses a given anchor. Reads nothing from disk."""
    check_batch_shape(n_items, k, size, neighbors)
    allowed = resolve_pool(n_items, pool=pool, exclude=exclude)
    field = "pool" if pool is not None else "exclude"
    rng = np.random.default_rng(seed)
    if anchors is None:
        if count is None or count < 1:
            raise DrawRefused(f"count={count} must be at least 1", "count", count)
        if allowed is None:
            return rng.choice(n_items, size=count, replace=count > n_items).astype(np.int64), None, rng
        check_pool(allowed, None, size, field)
        return draw_pool_anchors(rng, allowed, count), allowed, rng
    anchor_arr = np.asarray(anchors, dtype=np.int64).reshape(-1)
    if not anchor_arr.size:
        raise DrawRefused("anchors must name at least one item", "anchors")
    check_anchors(anchor_arr)
    if allowed is not None:
        check_pool(allowed, anchor_arr, size, field)
    return anchor_arr, allowed, rng


def draw_batch_items(
    rng: np.random.Generator,
    knn: KnnRows | np.ndarray,
    anchors: np.ndarray,
    *,
    size: int,
    neighbors: int,
    pool: np.ndarray | None = None,
    distances: Callable[[int, np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """``(B, size - 1)`` int64 items of one minibatch per anchor, drawn by ``rng`` after :func:`draw_anchors`: each
    anchor's ``neighbors`` nearest (the first of its kNN list, read from ``knn``, a store's
    :class:`~labeldist.view.rowcache.KnnRows` that reads the anchors' lists only, or its whole (N, k) ``indices``
    array), then random others (:func:`draw_items`). With a ``pool``, the nearest within it and the others from it
    (:func:`nearest_in_pool`, :func:`draw_items_in_pool`); where an anchor's list runs out within the pool, the
    rest is ranked by ``distances(anchor, items)``, which must then be given. Those are all found before ``rng``
    draws anything, so a draw stopped part way (for a compute slot) draws the same items when run again."""
    n_items = knn.n_items if isinstance(knn, KnnRows) else len(knn)
    if not neighbors:
        rows = np.empty((anchors.size, 0), dtype=np.int32)
    else:
        rows = knn.rows(anchors)[0] if isinstance(knn, KnnRows) else np.asarray(knn)[anchors]
    if pool is None:
        return draw_items(rng, n_items, anchors, rows, size, neighbors)

    def no_distances(anchor: int, items: np.ndarray) -> np.ndarray:
        raise UsageError(f"anchor {anchor}'s kNN list runs out within the pool: give distances= to rank the rest")

    nearest = nearest_in_pool(anchors, rows, pool, neighbors, distances or no_distances)
    return draw_items_in_pool(rng, pool, anchors, nearest, size)


# ---------------------------------------------------------------- minibatches drawn from a pool of items
def item_indices(given: Any, field: str) -> np.ndarray:
    """``given`` as item indices, int64 and flat. Only integers are taken: a boolean mask or floats raise
    :class:`DrawRefused` naming ``field``, as the service's schema refuses them, where NumPy's cast would read a mask
    as the items 0 and 1 and truncate 2.7 to 2.

    >>> item_indices([3, 1], "pool").tolist()
    [3, 1]
    >>> item_indices(np.array([True, False]), "exclude")
    Traceback (most recent call last):
    ...
    labeldist.view.drawing.DrawRefused: exclude is a boolean mask: give the items' indices (np.flatnonzero(mask))
    """
    arr = np.asarray(given)
    if arr.size == 0:
        return arr.astype(np.int64).reshape(-1)
    if arr.dtype == np.bool_:
        raise DrawRefused(f"{field} is a boolean mask: give the items' indices (np.flatnonzero(mask))", field)
    if arr.dtype.kind not in "iu":
        example = arr.reshape(-1)[0].item() if arr.dtype != object else arr.reshape(-1)[0]
        raise DrawRefused(f"{field} must be item indices (integers), got {arr.dtype} values such as {example!r}", field)
    return arr.astype(np.int64).reshape(-1)


def resolve_pool(n_items: int, *, pool: Any = None, exclude: Any = None) -> np.ndarray | None:
    """The items minibatch members may be drawn from, sorted and distinct (int64): ``pool`` itself (a set:
    order and repeats do not matter), or every item but those of ``exclude``; None when neither is given (the
    whole store). :class:`DrawRefused` for both given, or an index that is no item of the store.

    >>> resolve_pool(6, exclude=[4, 1, 4]).tolist(), resolve_pool(6, pool=[5, 0, 5]).tolist()
    ([0, 2, 3, 5], [0, 5])
    """
    if pool is not None and exclude is not None:
        raise DrawRefused(
            "give pool (the items minibatches are drawn from) or exclude (the items they never contain), not both",
            "exclude",
        )
    given, field = (pool, "pool") if pool is not None else (exclude, "exclude")
    if given is None:
        return None
    arr = item_indices(given, field)
    bad = (arr < 0) | (arr >= n_items)
    if bad.any():
        value = int(arr[np.argmax(bad)])
        raise DrawRefused(
            f"{field} names item {value}, which the store does not have (its items are 0..{n_items - 1})", field
        )
    if field == "pool":
        return np.unique(arr)
    keep = np.ones(n_items, dtype=bool)
    keep[arr] = False
    return np.flatnonzero(keep).astype(np.int64)


def check_pool(pool: np.ndarray, anchors: np.ndarray | None, size: int, field: str = "pool") -> None:
    """:class:`DrawRefused` when the pool (from :func:`resolve_pool`; ``field`` is the request field it came from)
    is too small for a minibatch of ``size`` distinct items, or misses one of ``anchors`` (None: anchors yet to
    be drawn from it)."""
    if pool.size < size:
        what = "the pool holds" if field == "pool" else "the items not excluded are"
        raise DrawRefused(
            f"{what} {pool.size} item(s), fewer than size={size}: a minibatch is size distinct items "
            "of the pool, anchor included",
            field,
        )
    if anchors is not None and anchors.size:
        outside = ~in_sorted(pool, anchors)
        if outside.any():
            a = int(anchors[np.argmax(outside)])
            where = "not in the pool" if field == "pool" else "excluded"
            raise DrawRefused(
                f"anchor {a} is {where}: every member of a minibatch, its anchor included, is an item of the pool",
                "anchors",
            )


def in_sorted(sorted_items: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Whether each of ``values`` is in ``sorted_items`` (sorted, distinct): a boolean array shaped like values."""
    values = np.asarray(values, dtype=np.int64)
    if not sorted_items.size:
        return np.zeros(values.shape, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_items, values), sorted_items.size - 1)
    return sorted_items[at] == values


def draw_pool_anchors(rng: np.random.Generator, pool: np.ndarray, count: int) -> np.ndarray:
    """``count`` anchors drawn from the pool (without replacement when it has enough items): with every item as
    the pool, the very anchors a request without a pool draws from the same generator."""
    return pool[rng.choice(pool.size, size=count, replace=count > pool.size)].astype(np.int64)


def nearest_in_pool(
    anchors: np.ndarray,
    knn_rows: np.ndarray,
    pool: np.ndarray,
    neighbors: int,
    distances: Callable[[int, np.ndarray], np.ndarray],
) -> list[np.ndarray]:
    """Each anchor's ``neighbors`` nearest items of the pool, nearest first (int64 arrays).

    Read from the anchor's kNN list (``knn_rows[t]``, the list of ``anchors[t]``) with the items outside the pool
    left out. Where the list runs out (fewer than ``neighbors`` of its items are in the pool), the rest comes from
    the pool's other items ranked by ``distances(anchor, items)`` (float32 as the store holds them: its dense row,
    or distances computed from the labels), ties broken by index as the lists are: a store's list is the exact
    top k of its row, so every item not on it comes after every item on it, and the result is the pool's exact
    nearest. A list padded with -1 holds every other item already and never runs out.
    """
    k = knn_rows.shape[1] if knn_rows.ndim == 2 else 0
    out = []
    for t, a in enumerate(np.asarray(anchors, dtype=np.int64).tolist()):
        row = np.asarray(knn_rows[t], dtype=np.int64)
        listed = row[row >= 0]
        near = listed[in_sorted(pool, listed)][:neighbors]
        if near.size < neighbors and listed.size == k:
            others = pool[~in_sorted(np.unique(np.append(listed, a)), pool)]
            d = np.asarray(distances(a, others), dtype=np.float32)
            order = np.lexsort((others, d))[: neighbors - near.size]
            near = np.concatenate([near, others[order]])
        out.append(near)
    return out


def draw_items_in_pool(
    rng: np.random.Generator, pool: np.ndarray, anchors: np.ndarray, nearest: list[np.ndarray], size: int
) -> np.ndarray:
    """``(B, size - 1)`` int64 items of one minibatch per anchor, every one an item of ``pool``: the anchor's
    ``nearest`` (:func:`nearest_in_pool`), then others drawn uniformly without replacement from the pool's items
    that are neither the anchor nor those nearest. With every item as the pool, the very items of
    :func:`draw_items` from the same generator."""
    m = size - 1
    items = np.empty((len(anchors), m), dtype=np.int64)
    for t, a in enumerate(np.asarray(anchors, dtype=np.int64).tolist()):
        near = nearest[t]
        items[t, : near.size] = near
        taken = np.searchsorted(pool, np.append(near, a))
        items[t, near.size :] = pool[sample_excluding(rng, pool.size, m - near.size, taken)]
    return items
