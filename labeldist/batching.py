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
    rng: np.random.Generator, knn_indices: np.ndarray, knn_counts: np.ndarray, anchors: np.ndarray, size: int,
    neighbors: int,
) -> np.ndarray:  # fmt: skip
    """``(B, size - 1)`` int64 items of one minibatch per anchor, in order: the anchor's ``neighbors`` nearest (the
    first of its kNN list, of which ``knn_counts[a]`` are valid), then ``size - 1 - neighbors`` others drawn
    uniformly without replacement from the items that are neither the anchor nor those nearest."""
    n, m = knn_indices.shape[0], size - 1
    items = np.empty((len(anchors), m), dtype=np.int64)
    for t, a in enumerate(np.asarray(anchors).tolist()):
        nearest = knn_indices[a, : min(neighbors, int(knn_counts[a]))]
        items[t, : nearest.size] = nearest
        items[t, nearest.size :] = sample_excluding(rng, n, m - nearest.size, np.append(nearest, a))
    return items
