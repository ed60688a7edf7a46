"""How a dense-triplet minibatch is drawn from a store's kNN lists (Kim et al., CVPR 2019, §3.2): the anchor's
nearest items, then random others. The service (:mod:`labeldist.api.batching`) and the in-process source of
:mod:`labeldist.client` both draw with these functions, so the same seed gives the same minibatches from either."""

from __future__ import annotations

import numpy as np


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
    :class:`labeldist.rowcache.KnnRows`); with ``neighbors=0`` it may be (B, 0)."""
    m = size - 1
    items = np.empty((len(anchors), m), dtype=np.int64)
    for t, a in enumerate(np.asarray(anchors).tolist()):
        row = knn_rows[t]
        nearest = row[: min(neighbors, int(np.count_nonzero(row >= 0)))]
        items[t, : nearest.size] = nearest
        items[t, nearest.size :] = sample_excluding(rng, n_items, m - nearest.size, np.append(nearest, a))
    return items
