"""Exact top-k selection on rows of a distance matrix, ties broken by index."""

from __future__ import annotations

import numpy as np


def topk_rows(
    distances: np.ndarray, k: int, exclude: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` smallest entries of each row, sorted, ties broken by column index.

    Equivalent to ``np.argsort(row, kind="stable")[:k]`` per row (the oracle in the tests), but
    O(N + k log k) per row via ``argpartition``: the partition may cut through a run of tied values, so
    every column equal to the k-th value is gathered and the lowest indices among them kept.

    Parameters
    ----------
    distances : (n, N) array; NaN is treated as +inf.
    k : number of neighbours; when fewer than ``k`` columns remain, rows are padded with index -1 and
        distance +inf.
    exclude : (n,) column index to leave out of each row (the item itself), or None.

    Returns
    -------
    indices : (n, k) int32, distances : (n, k) in the input dtype.

    >>> topk_rows(np.array([[3.0, 1.0, 1.0, 0.0]]), 2, exclude=np.array([3]))[0].tolist()
    [[1, 2]]
    """
    d = np.where(np.isnan(distances), np.inf, distances)
    n, m = d.shape
    if exclude is not None:
        d[np.arange(n), exclude] = np.inf
        avail = m - 1
    else:
        avail = m
    kk = min(k, avail)
    idx = np.full((n, k), -1, dtype=np.int32)
    out = np.full((n, k), np.inf, dtype=distances.dtype)
    if kk == 0:
        return idx, out
    if kk < m:
        part = np.argpartition(d, kk - 1, axis=1)[:, :kk]
        kth = np.take_along_axis(d, part, axis=1).max(axis=1)
    for r in range(n):
        row = d[r]
        if kk < m:
            below = np.flatnonzero(row < kth[r])
            tied = np.flatnonzero(row == kth[r])
            if exclude is not None:
                below, tied = below[below != exclude[r]], tied[tied != exclude[r]]
            cand = np.concatenate([below, tied[: kk - len(below)]])
        else:
            cand = np.arange(m) if exclude is None else np.delete(np.arange(m), exclude[r])
        order = cand[np.lexsort((cand, row[cand]))]
        idx[r, :kk] = order
        out[r, :kk] = distances[r, order]
    return idx, out
