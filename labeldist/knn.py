"""Exact top-k selection on rows of a distance matrix, ties broken by index."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def topk_rows(distances: np.ndarray, k: int, exclude: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
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


def pruned_topk(
    lower: np.ndarray,
    exact: Callable[[np.ndarray, np.ndarray], np.ndarray],
    k: int,
    exclude: np.ndarray | None,
    first_round: int = 2,
) -> tuple[np.ndarray, np.ndarray, int]:
    r"""Exact k nearest per row, computing the exact distance only where a lower bound cannot rule a column out.

    With :math:`L_{ij} \le D_{ij}` for every pair, row :math:`i` first gets exact distances for its
    ``first_round * k`` columns of smallest bound; let :math:`\tau_i` be the k-th smallest of them. A column with
    :math:`L_{ij} > \tau_i` cannot enter the top k (its exact distance is larger still), so the second and last
    round computes exactly the columns with :math:`L_{ij} \le \tau_i`; :math:`\tau_i` can only fall after it.
    (Kusner et al., ICML 2015, §4 "prefetch and prune", with the bounds given by the caller.)

    Selection is on float32 values with ties broken by index, as :func:`topk_rows`; so that a column whose exact
    value rounds to :math:`\tau_i` is not missed, :math:`\tau_i` is widened to the next float32 up.

    Parameters
    ----------
    lower : (n, N) lower bounds on the distances of the block's rows to all N columns.
    exact : ``exact(rows, cols)`` -> float64 exact distances for the index pairs ``(rows[t], cols[t])``;
        ``rows`` index the block's rows (0..n-1), ``cols`` the columns.
    k : neighbours per row.  exclude : (n,) column of each row's own item, or None when the rows are not items
        of the columns (a search by a new label).

    Returns
    -------
    indices (n, k) int32, distances (n, k) float32, and the number of exact distances computed.
    """
    n, m = lower.shape
    lb = np.array(lower, dtype=np.float64, copy=True)
    values = np.full((n, m), np.inf, dtype=np.float32)
    done = np.zeros((n, m), dtype=bool)
    avail = m
    if exclude is not None:
        lb[np.arange(n), exclude] = np.inf
        done[np.arange(n), exclude] = True
        avail = m - 1
    kk = min(k, avail)

    def compute(mask: np.ndarray) -> int:
        r, c = np.nonzero(mask & ~done)
        if r.size:
            values[r, c] = exact(r, c).astype(np.float32)
            done[r, c] = True
        return int(r.size)

    first = min(avail, max(kk, first_round * kk))
    cols = np.argpartition(lb, first - 1, axis=1)[:, :first] if first < m else np.tile(np.arange(m), (n, 1))
    mask = np.zeros((n, m), dtype=bool)
    np.put_along_axis(mask, cols, True, axis=1)
    count = compute(mask)
    tau = np.partition(np.where(done, values, np.inf), kk - 1, axis=1)[:, kk - 1].astype(np.float32)
    widened = np.nextafter(tau, np.float32(np.inf)).astype(np.float64)
    count += compute(lb <= widened[:, None] * (1 + 1e-9))
    indices, dists = topk_rows(values, k, exclude=exclude)
    return indices, dists, count


def round_down_f32(x: np.ndarray) -> np.ndarray:
    """The largest float32 at most ``x`` (float64), elementwise: a float64 lower bound made a float32 one.

    >>> float(round_down_f32(np.array([1 + 1e-12]))[0]) == 1.0, float(round_down_f32(np.array([1 - 1e-12]))[0]) < 1
    (True, True)
    """
    x = np.asarray(x, dtype=np.float64)
    f = x.astype(np.float32)
    return np.where(f.astype(np.float64) > x, np.nextafter(f, np.float32(-np.inf)), f)


def rerank_topk(
    candidates: np.ndarray, exact: np.ndarray, lower: np.ndarray, k: int, exclude: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""The k nearest of each row among its candidates, by exact distance, and whether they are its exact k nearest
    among all columns.

    A fast search (FAISS, in float32) proposes each row's candidates; their exact distances are computed; the
    rest of the row is known only by ``lower``, a bound :math:`L_i \le D_{ij}` for every column :math:`j` not
    among row :math:`i`'s candidates. Selection is on the float32 values a store keeps, ties broken by column
    index, as :func:`topk_rows`. A row is *certified* when no column outside its candidates can enter its top k:
    every such column's float32 value is at least :math:`\lfloor L_i \rfloor_{32}` (:func:`round_down_f32`), so
    it suffices that this is above the k-th value kept (strictly: an equal value with a lower index would win the
    tie). Rows not certified must be computed another way (the caller computes their whole row).

    Parameters
    ----------
    candidates : (n, c) column indices, distinct within a row; -1 for no candidate.
    exact : (n, c) float64 exact distances of those pairs (ignored where the candidate is -1).
    lower : (n,) float64 lower bound on the exact distance of every column that is not a candidate of the row.
    k : neighbours per row.  exclude : (n,) column of each row's own item (dropped from its candidates), or None.

    Returns
    -------
    indices (n, k) int32, distances (n, k) float32 (-1 / +inf padded), certified (n,) bool.

    >>> idx, dist, ok = rerank_topk(np.array([[4, 2, 7]]), np.array([[1.0, 1.0, 3.0]]), np.array([2.0]), 2, None)
    >>> idx.tolist(), ok.tolist()
    ([[2, 4]], [True])
    """
    cand = np.asarray(candidates, dtype=np.int64)
    if exclude is not None:
        cand = np.where(cand == np.asarray(exclude)[:, None], -1, cand)
    missing = cand < 0
    values = np.where(missing, np.inf, exact).astype(np.float32)
    order = np.lexsort((np.where(missing, np.iinfo(np.int64).max, cand), values), axis=1)[:, :k]
    indices = np.take_along_axis(cand, order, axis=1)
    dists = np.take_along_axis(values, order, axis=1)
    n, kk = indices.shape
    if kk < k:  # fewer candidates than k: padded, and never certified
        indices = np.concatenate([indices, np.full((n, k - kk), -1, dtype=np.int64)], axis=1)
        dists = np.concatenate([dists, np.full((n, k - kk), np.inf, dtype=np.float32)], axis=1)
    dists[indices < 0] = np.inf
    certified = (indices[:, -1] >= 0) & (round_down_f32(lower) > dists[:, -1])
    return indices.astype(np.int32), dists, certified


def merge_topk(
    indices: np.ndarray, distances: np.ndarray, extra: np.ndarray, offset: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k nearest among its current list and ``m`` more columns, ``offset .. offset + m - 1``, at float32
    distances ``extra`` (n, m) (+inf: ruled out), ties broken by index as :func:`topk_rows`.

    When the current list is the exact top k of the columns below ``offset`` (a store's kNN list before items are
    appended), the result is the exact top k of the whole row: a column left out of the list is behind its k-th
    entry, and stays behind it. The new columns' own top k is taken first (:func:`topk_rows`), so the merge sorts
    2k candidates a row, not k + m.

    Parameters
    ----------
    indices, distances : (n, k) the current lists, sorted, -1 / +inf padded.  extra : (n, m) float32.
    offset : index of the first new column, above every index of the current lists.  k : neighbours per row.

    Returns
    -------
    indices (n, k) int32, distances (n, k) float32, -1 / +inf padded.

    >>> idx, dist = merge_topk(np.array([[0, 2]]), np.array([[1.0, 3.0]]), np.array([[3.0, 0.5]]), 3, 2)
    >>> idx.tolist(), dist.tolist()
    ([[4, 0]], [[0.5, 1.0]])
    """
    new_idx, new_dist = topk_rows(np.asarray(extra, dtype=np.float32), k)
    new_idx = np.where(new_idx >= 0, new_idx + offset, -1)
    cand = np.concatenate([np.asarray(indices, dtype=np.int64), new_idx.astype(np.int64)], axis=1)
    missing = cand < 0
    values = np.where(missing, np.inf, np.concatenate([distances, new_dist], axis=1)).astype(np.float32)
    order = np.lexsort((np.where(missing, np.iinfo(np.int64).max, cand), values), axis=1)[:, :k]
    out_idx = np.take_along_axis(cand, order, axis=1)
    out_dist = np.take_along_axis(values, order, axis=1)
    out_idx[~np.isfinite(out_dist) & (out_idx < 0)] = -1
    return out_idx.astype(np.int32), out_dist
