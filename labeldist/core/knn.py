"""Exact top-k selection on rows of a distance matrix, ties broken by index."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numba
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


def bounded_candidates(
    chunks: Iterable[tuple[int, np.ndarray, np.ndarray | float]], n_rows: int, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r"""Each row's candidates for its k nearest from bounds computed chunk by chunk: every column whose exact
    distance can be at most the row's k-th smallest.

    Each chunk ``(start, center, radius)`` covers columns ``start .. start + c - 1`` with ``center`` (n, c) and
    ``radius`` (a number, or (n, c)): the exact distance lies in ``[center - radius, center + radius]`` (+inf
    where a column is not to be counted, e.g. the row's own item). Let :math:`\tau_i` be the k-th smallest upper
    bound of row :math:`i`; the row's k-th smallest exact distance is at most :math:`\tau_i`, so a column whose
    lower bound is above it cannot be among the k nearest, nor tie with the k-th. Only columns whose lower bound
    is at most the running :math:`\tau_i` are kept, which can only fall: a chunk costs one comparison per entry
    beyond the first, which is partitioned (the selection over rows x N that a full sort would cost is never made;
    Kusner et al., ICML 2015, §4, the same prune with the bounds of a fast float32 product).

    Returns the candidates as (rows, columns, lower bounds), every column with a lower bound at most the row's
    final :math:`\tau_i` (+inf when it has fewer than k finite upper bounds: then all its finite columns), and
    :math:`\tau` (n,).

    >>> rows, cols, _, _ = bounded_candidates([(0, np.array([[0.1, 0.5, 0.2, 0.9]]), 0.05)], 1, 2)
    >>> cols.tolist()
    [0, 2]
    """
    tau = np.full(n_rows, np.inf)
    kept_r, kept_c, kept_lo, kept_hi = [], [], [], []
    for start, center, radius in chunks:
        center = np.asarray(center)
        if not np.isfinite(tau).all():
            hi = center + radius
            if hi.shape[1] >= k:
                kth = np.partition(hi, k - 1, axis=1)[:, k - 1].astype(np.float64)
                tau = np.minimum(tau, kth)
        limit = tau[:, None] + radius if np.ndim(radius) == 0 else tau[:, None]
        lower = center if np.ndim(radius) == 0 else center - radius
        r, c = np.nonzero(lower <= limit)
        finite = np.isfinite(center[r, c])  # a row still without a finite tau passes its excluded columns
        r, c = r[finite], c[finite]
        if not r.size:
            continue
        lo = (center[r, c] - (radius if np.ndim(radius) == 0 else radius[r, c])).astype(np.float64)
        hi_rc = (center[r, c] + (radius if np.ndim(radius) == 0 else radius[r, c])).astype(np.float64)
        kept_r.append(r)
        kept_c.append(c + start)
        kept_lo.append(lo)
        kept_hi.append(hi_rc)
        rows, cols, lows, highs = (np.concatenate(x) for x in (kept_r, kept_c, kept_lo, kept_hi))
        tau = np.minimum(tau, kth_per_row(rows, highs, n_rows, k))
        keep = lows <= tau[rows]
        kept_r, kept_c, kept_lo, kept_hi = [rows[keep]], [cols[keep]], [lows[keep]], [highs[keep]]
    if not kept_r:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0), tau
    return kept_r[0].astype(np.int64), kept_c[0].astype(np.int64), kept_lo[0], tau


@numba.njit(cache=True, nogil=True)
def kth_per_row(rows: np.ndarray, values: np.ndarray, n_rows: int, k: int) -> np.ndarray:
    """The k-th smallest of ``values`` grouped by ``rows`` (0 .. n_rows - 1); +inf for a row with fewer than k.
    A counting sort into rows, then a partial sort of each: linear in the entries.

    >>> kth_per_row(np.array([0, 0, 1, 0]), np.array([3.0, 1.0, 5.0, 2.0]), 2, 2).tolist()
    [2.0, inf]
    """
    starts = np.zeros(n_rows + 1, dtype=np.int64)
    for r in rows:
        starts[r + 1] += 1
    starts = np.cumsum(starts)
    grouped = np.empty(len(values), dtype=np.float64)
    fill = starts[:-1].copy()
    for t in range(len(rows)):
        grouped[fill[rows[t]]] = values[t]
        fill[rows[t]] += 1
    out = np.full(n_rows, np.inf)
    for i in range(n_rows):
        if starts[i + 1] - starts[i] >= k:
            out[i] = np.partition(grouped[starts[i] : starts[i + 1]], k - 1)[k - 1]
    return out


@numba.njit(cache=True, nogil=True)
def entries_at_least(values: np.ndarray, floor: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The entries of each row of ``values`` (n, c) at or above the row's ``floor`` (n,): rows, columns and values,
    in row-major order. Two passes (count, then fill), no (n, c) temporary: the selection of a product chunk
    costs a read of it, where a mask and ``np.nonzero`` cost three."""
    n, c = values.shape
    count = 0
    for i in range(n):
        f = floor[i]
        for j in range(c):
            if values[i, j] >= f:
                count += 1
    rows = np.empty(count, dtype=np.int64)
    cols = np.empty(count, dtype=np.int64)
    vals = np.empty(count, dtype=values.dtype)
    t = 0
    for i in range(n):
        f = floor[i]
        for j in range(c):
            if values[i, j] >= f:
                rows[t], cols[t], vals[t] = i, j, values[i, j]
                t += 1
    return rows, cols, vals


def largest_candidates(
    rows_matrix: np.ndarray, columns: np.ndarray, k: int, radius: float, skip: np.ndarray, chunk: int = 8192
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r"""Each row's candidates for its k largest products with the rows of ``columns``, when every float32
    product :math:`\hat s` is within ``radius`` of the exact :math:`s`: the entries with
    :math:`\hat s_{ij} \ge \sigma_i - 2r`, :math:`\sigma_i` the row's k-th largest :math:`\hat s`, so that no
    column left out can reach (or tie with) the row's k-th largest exact product.

    ``rows_matrix`` (n, d) float32, ``columns`` (M, d) float32 (a memory map will do), ``skip`` (n,) a column
    left out of each row (-1: none). Products are made ``chunk`` columns at a time into one buffer, and
    :math:`\sigma_i` known so far (first from every other column of the first chunk) filters each chunk as it is made
    (:func:`entries_at_least`): no (n, M) array, no sort of one. Returns rows, columns, float32 products and
    :math:`\sigma` (n,) float64 (-inf for a row with fewer than k candidates).

    >>> x = np.eye(3, dtype=np.float32)
    >>> largest_candidates(x[:1], np.array([[1, 0, 0], [.9, .1, 0], [0, 1, 0]], np.float32), 1, 0.01, np.array([0]))[1]
    array([1])
    """
    n, m = len(rows_matrix), len(columns)
    buffer = np.empty((n, min(chunk, m)), dtype=np.float32)
    floor = np.full(n, -np.inf, dtype=np.float32)
    sigma = np.full(n, -np.inf)
    kept: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    local = np.arange(n)
    for start in range(0, m, chunk):
        stop = min(start + chunk, m)
        out = buffer[:, : stop - start]
        np.matmul(rows_matrix, columns[start:stop].T, out=out)
        own = (skip >= start) & (skip < stop)
        out[local[own], skip[own] - start] = -np.inf
        if start == 0:
            sample = out[:, :: max(1, (stop - start) // 4096)]
            if sample.shape[1] > k:
                sigma = np.maximum(sigma, -np.partition(-sample, k - 1, axis=1)[:, k - 1].astype(np.float64))
                floor = round_down_f32(sigma - 2 * radius)
        r, c, v = entries_at_least(out, floor)
        c += start
        if kept is not None:
            r, c, v = (np.concatenate([a, b]) for a, b in zip(kept, (r, c, v)))
        sigma = np.maximum(sigma, -kth_per_row(r, -v.astype(np.float64), n, k))
        floor = np.maximum(floor, round_down_f32(sigma - 2 * radius))
        keep = v >= floor[r]
        kept = (r[keep], c[keep], v[keep])
    assert kept is not None
    return kept[0], kept[1], kept[2], sigma


def widened(tau: np.ndarray) -> np.ndarray:
    """``tau`` (float64) made a threshold that float32 selection cannot misjudge: the next float32 up, plus a
    relative 1e-9 (a value above it rounds to a float32 above ``tau``'s). +inf stays +inf.

    >>> bool(widened(np.array([1.0]))[0] > np.nextafter(np.float32(1), np.float32(2)))
    True
    """
    return np.nextafter(tau.astype(np.float32), np.float32(np.inf)).astype(np.float64) * (1 + 1e-9)
