"""Finding pairs in a store's kNN lists: a small compiled scan, no index built, no memory beyond the lists."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _scan(indices, distances, a, b, values, found):  # pragma: no cover - compiled; tested via knn_lookup
    k = indices.shape[1]
    for t in range(a.size):
        if found[t]:
            continue
        row, item = a[t], b[t]
        for r in range(k):
            c = indices[row, r]
            if c < 0:  # padding: the rest of the row is empty
                break
            if c == item:
                values[t] = distances[row, r]
                found[t] = True
                break


def knn_lookup(
    indices: np.ndarray, distances: np.ndarray, i: np.ndarray, j: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(values, found)`` for the pairs ``(i[t], j[t])``: the stored distance where ``j`` is in the kNN list
    of ``i`` or ``i`` in that of ``j`` (the distance is symmetric), NaN elsewhere; a pair ``(i, i)`` is 0.

    >>> idx = np.array([[1, 2], [0, -1], [1, 0]], dtype=np.int32)
    >>> dist = np.array([[1.0, 2.0], [1.0, np.inf], [3.0, 2.0]], dtype=np.float32)
    >>> values, found = knn_lookup(idx, dist, np.array([0, 1, 2, 1]), np.array([2, 2, 2, 1]))
    >>> values.tolist(), found.tolist()
    ([2.0, 3.0, 0.0, 0.0], [True, True, True, True])
    """
    i = np.ascontiguousarray(i, dtype=np.int64)
    j = np.ascontiguousarray(j, dtype=np.int64)
    found = i == j
    values = np.where(found, np.float32(0), np.float32(np.nan)).astype(np.float32)
    _scan(indices, distances, i, j, values, found)
    _scan(indices, distances, j, i, values, found)
    return values, found


def lookup_in_rows(
    indices: np.ndarray, distances: np.ndarray, rows: np.ndarray, items: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(values, found)``: the stored distance where ``items[t]`` is in the kNN list ``indices[rows[t]]``, NaN
    elsewhere; one direction only, for lists read a few rows at a time (:class:`labeldist.view.rowcache.KnnRows`).

    >>> idx = np.array([[1, 2], [0, -1]], dtype=np.int32)
    >>> dist = np.array([[1.0, 2.0], [1.0, np.inf]], dtype=np.float32)
    >>> values, found = lookup_in_rows(idx, dist, np.array([0, 1, 1]), np.array([2, 0, 2]))
    >>> values.tolist(), found.tolist()
    ([2.0, 1.0, nan], [True, True, False])
    """
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    items = np.ascontiguousarray(items, dtype=np.int64)
    found = np.zeros(rows.size, dtype=bool)
    values = np.full(rows.size, np.nan, dtype=np.float32)
    _scan(indices, distances, rows, items, values, found)
    return values, found
