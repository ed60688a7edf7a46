"""The compiled kernels of the caption-set distance (:mod:`labeldist.distances.caption_sets`): Eq. 13 of Kim et al.
(CVPR 2019) over a table of caption-pair values (:func:`eq13`, the one reduction every path goes through, so that
they agree to the last bit), over caption-pair relaxed WMDs (:func:`set_rwmd`), and over exact caption WMDs solved
only where they can lower a minimum (:func:`pruned_w`), for listed image pairs (:func:`pairs_w`) and whole blocks
(:func:`block_w`)."""

from __future__ import annotations

import numba
import numpy as np

from labeldist.distances.nbow import longest_bag, word_costs
from labeldist.distances.transport import emd_small, emd_workspace
from labeldist.distances.wmd_bounds import reduction_bound, rwmd_to_all


def caption_set_distance(m: np.ndarray, row_offsets: np.ndarray, col_offsets: np.ndarray) -> np.ndarray:
    """Set distances from the matrix of caption-pair distances (Kim et al., CVPR 2019, Eq. 13).

    .. math::  W(X, Y) = \\sum_{x \\in X} \\min_{y \\in Y} d(x, y) + \\sum_{y \\in Y} \\min_{x \\in X} d(x, y)

    :math:`X` the captions of a row image, :math:`Y` those of a column image, :math:`d` the caption distance
    (WMD). The same reduction applied to a lower bound of :math:`d` gives a lower bound of :math:`W`
    (min and sum are monotone).

    Parameters
    ----------
    m : (K_r, K_c) distances between every row caption and every column caption.
    row_offsets : (N_r+1,) row image ``i`` owns rows ``row_offsets[i]:row_offsets[i+1]`` (none empty).
    col_offsets : (N_c+1,) the same for columns.

    Returns
    -------
    (N_r, N_c) float64.

    >>> caption_set_distance(np.array([[0.0, 3.0], [1.0, 5.0]]), np.array([0, 2]), np.array([0, 1, 2])).tolist()
    [[1.0, 11.0]]
    """
    m = np.ascontiguousarray(m, dtype=np.float64)
    row_offsets = np.ascontiguousarray(row_offsets, dtype=np.int64)
    col_offsets = np.ascontiguousarray(col_offsets, dtype=np.int64)
    return set_distances(m, row_offsets, col_offsets)


@numba.njit(cache=True, nogil=True)
def eq13(m, r0, r1, c0, c1):  # pragma: no cover - compiled
    """Eq. 13 on the sub-matrix ``m[r0:r1, c0:c1]``; both sums run in caption order, one addition at a time.

    Every path (``block``, ``pairs``, the bounds) reduces through this one function, so that ``pairs`` and
    ``block`` agree to the last bit: NumPy's ``add.reduce`` may sum pairwise or sequentially by layout.
    """
    x_to_y = 0.0
    for r in range(r0, r1):
        best = np.inf
        for c in range(c0, c1):
            best = min(best, m[r, c])
        x_to_y += best
    y_to_x = 0.0
    for c in range(c0, c1):
        best = np.inf
        for r in range(r0, r1):
            best = min(best, m[r, c])
        y_to_x += best
    return x_to_y + y_to_x


@numba.njit(cache=True, nogil=True)
def set_distances(m, row_offsets, col_offsets):  # pragma: no cover - compiled
    n_r, n_c = len(row_offsets) - 1, len(col_offsets) - 1
    out = np.empty((n_r, n_c))
    for i in range(n_r):
        for j in range(n_c):
            out[i, j] = eq13(m, row_offsets[i], row_offsets[i + 1], col_offsets[j], col_offsets[j + 1])
    return out


@numba.njit(cache=True, nogil=True)
def ragged_set_distances(values, starts, n_rows, n_cols):  # pragma: no cover - compiled
    """Eq. 13 for each image pair ``t`` from its caption-pair values ``values[starts[t]:starts[t+1]]``, an
    ``n_rows[t] x n_cols[t]`` block in row-major order."""
    out = np.empty(len(n_rows))
    for t in range(len(n_rows)):
        block = values[starts[t] : starts[t + 1]].reshape((n_rows[t], n_cols[t]))
        out[t] = eq13(block, 0, n_rows[t], 0, n_cols[t])
    return out


@numba.njit(cache=True, nogil=True)
def set_rwmd(dist_t, near, ids_a, w_a, off_a, cap_a, ids_b, w_b, off_b, cap_b):  # pragma: no cover - compiled
    """Eq. 13 over caption-pair RWMDs, one column image at a time: (n_a, n_b) float64.

    For each caption of column image ``j``, :func:`~labeldist.distances.wmd_bounds.rwmd_to_all` gives its RWMD to
    every row caption (linear in the bag sizes); the few columns of ``j`` are then reduced per row image. No
    (captions x captions) matrix is ever held.
    """
    n_a, n_b, k_a = len(cap_a) - 1, len(cap_b) - 1, len(off_a) - 1
    qmax = 1
    for j in range(n_b):
        qmax = max(qmax, cap_b[j + 1] - cap_b[j])
    m = np.empty((qmax, k_a))
    z = np.empty(dist_t.shape[1], dtype=dist_t.dtype)
    acc = np.empty(k_a)
    out = np.empty((n_a, n_b))
    for j in range(n_b):
        q0, q1 = cap_b[j], cap_b[j + 1]
        for q in range(q0, q1):
            rwmd_to_all(dist_t, near, ids_a, w_a, off_a, ids_b, w_b, off_b[q], off_b[q + 1], z, acc, m[q - q0])
        mt = m[: q1 - q0].T
        for i in range(n_a):
            out[i, j] = eq13(mt, cap_a[i], cap_a[i + 1], 0, q1 - q0)
    return out


@numba.njit(cache=True, nogil=True)
def pruned_w(  # pragma: no cover - compiled
    table,
    row_word,
    w_a,
    off_a,
    x0,
    x1,
    col_word,
    w_b,
    off_b,
    y0,
    y1,
    ws,
    cost,
    bound,
    order,
    rmin,
    cmin,
    pending,
    limit,
    du,
    dv,
):
    """Eq. 13 for one image pair, solving only the caption WMDs that can still lower a minimum.

    Row captions ``x0:x1`` and column captions ``y0:y1`` are bags (``off_a``/``off_b``) whose entries name
    rows (``row_word``) and columns (``col_word``) of ``table``, the word distances. Every caption pair first
    gets its cost matrix (gathered from ``table``) and its Hungarian reduction bound :math:`R \\le WMD`
    (:func:`~labeldist.distances.wmd_bounds.reduction_bound`, at least the relaxed WMD of Kusner et al., §4), shrunk
    by a relative 1e-9 against rounding. Pairs are then visited by increasing bound; the exact
    WMD of :math:`(x, y)` is solved unless :math:`R(x, y)` already reaches both the smallest WMD found so far
    in row :math:`x` and in column :math:`y` — then :math:`WMD(x, y)` can lower neither minimum. The minima,
    hence W, are exactly those of the full table; both sums run in caption order as in :func:`eq13`.

    With a finite ``limit`` (a kNN search's threshold), the pair is given up once W is known to exceed it: a row's
    minimum is at least the smaller of its minimum so far and the bounds of its pairs not yet visited, and so for a
    column; when the sum of those is above ``limit`` it is returned instead of W (a lower bound of W, above it).

    Returns (W, number of WMDs solved); W is NaN when the small solver gave up on a pair (the caller
    recomputes such pairs the plain way).
    """
    nr, nc = x1 - x0, y1 - y0
    for x in range(nr):
        a0, a1 = off_a[x0 + x], off_a[x0 + x + 1]
        for y in range(nc):
            b0, b1 = off_b[y0 + y], off_b[y0 + y + 1]
            for r in range(a1 - a0):
                for s in range(b1 - b0):
                    cost[r, s] = table[row_word[a0 + r], col_word[b0 + s]]
            bound[x * nc + y] = reduction_bound(cost, a1 - a0, b1 - b0, w_a[a0:a1], w_b[b0:b1], du, dv) * (1.0 - 1e-9)
    # visiting order: by increasing bound (insertion sort of at most a few dozen entries, no allocation)
    for q in range(nr * nc):
        p = q - 1
        while p >= 0 and bound[order[p]] > bound[q]:
            order[p + 1] = order[p]
            p -= 1
        order[p + 1] = q
    rmin[:nr] = np.inf
    cmin[:nc] = np.inf
    pending[: nr * nc] = bound[: nr * nc]  # the bounds of the pairs not visited yet; +inf once visited
    solved = 0
    for k in range(nr * nc):
        q = order[k]
        x, y = q // nc, q % nc
        if bound[q] >= rmin[x] and bound[q] >= cmin[y]:
            pending[q] = np.inf
            continue
        if limit < np.inf:
            below = 0.0
            for r in range(nr):
                low = rmin[r]
                for c in range(nc):
                    low = min(low, pending[r * nc + c])
                below += low
            for c in range(nc):
                low = cmin[c]
                for r in range(nr):
                    low = min(low, pending[r * nc + c])
                below += low
            if below > limit:
                return below, solved
        pending[q] = np.inf
        a0, a1 = off_a[x0 + x], off_a[x0 + x + 1]
        b0, b1 = off_b[y0 + y], off_b[y0 + y + 1]
        for r in range(a1 - a0):
            for s in range(b1 - b0):
                cost[r, s] = table[row_word[a0 + r], col_word[b0 + s]]
        v = emd_small(cost, a1 - a0, b1 - b0, w_a[a0:a1], w_b[b0:b1], ws)
        solved += 1
        if np.isnan(v):
            return np.nan, solved
        rmin[x] = min(rmin[x], v)
        cmin[y] = min(cmin[y], v)
    x_to_y = 0.0
    for x in range(nr):
        x_to_y += rmin[x]
    y_to_x = 0.0
    for y in range(nc):
        y_to_x += cmin[y]
    return x_to_y + y_to_x, solved


@numba.njit(cache=True, nogil=True)
def pruned_w_scratch(mmax, cmax):  # pragma: no cover - compiled
    """Scratch arrays of :func:`pruned_w` for bags of up to ``mmax`` words and up to ``cmax`` captions."""
    pairs = cmax * cmax
    return (
        emd_workspace(mmax, mmax),
        np.empty((mmax, mmax)),
        np.empty(pairs),
        np.empty(pairs, np.int64),
        np.empty(cmax),
        np.empty(cmax),
        np.empty(pairs),
        np.empty(mmax),
        np.empty(mmax),
    )


@numba.njit(cache=True, nogil=True)
def pairs_w(vectors, ids, w, off, cap, img_words, img_off, local, pi, pj, limits):  # pragma: no cover - compiled
    """W for the image pairs (pi[t], pj[t]) of one caption set, or a bound above ``limits[t]`` where W is (see
    :func:`pruned_w`). Over each run of pairs with the same row image, the distances from its distinct words to
    the words of its partners are computed once (a column of the vocabulary-wide table at first use). Returns W
    (n,) and the number of WMDs solved."""
    ws, cost, bound, order, rmin, cmin, pending, du, dv = pruned_w_scratch(longest_bag(off), longest_bag(cap))
    n_words = vectors.shape[0]
    table = np.empty((longest_bag(img_off), n_words))
    filled = np.full(n_words, -1, dtype=np.int64)  # the run whose row words column v holds
    out = np.empty(len(pi))
    solved = 0
    for t in range(len(pi)):
        i, j = pi[t], pj[t]
        if t == 0 or i != pi[t - 1]:
            run = t
        for e in range(img_off[j], img_off[j + 1]):
            v = img_words[e]
            if filled[v] != run:
                filled[v] = run
                for a in range(img_off[i + 1] - img_off[i]):
                    table[a, v] = word_costs(vectors, img_words[img_off[i] + a], vectors, v)
        out[t], n = pruned_w(
            table,
            local,
            w,
            off,
            cap[i],
            cap[i + 1],
            ids,
            w,
            off,
            cap[j],
            cap[j + 1],
            ws,
            cost,
            bound,
            order,
            rmin,
            cmin,
            pending,
            limits[t],
            du,
            dv,
        )
        solved += n
    return out, solved


@numba.njit(cache=True, nogil=True)
def block_w(  # pragma: no cover - compiled
    va, w_a, off_a, cap_a, words_a, img_off_a, local_a, vb, ids_b, w_b, off_b, cap_b
):
    """W for every row image and column image; each row image's words get their distances to the whole
    column vocabulary once. Returns W (n_a, n_b) and the WMDs solved."""
    n_a, n_b = len(cap_a) - 1, len(cap_b) - 1
    mmax, cmax = max(longest_bag(off_a), longest_bag(off_b)), max(longest_bag(cap_a), longest_bag(cap_b))
    ws, cost, bound, order, rmin, cmin, pending, du, dv = pruned_w_scratch(mmax, cmax)
    table = np.empty((longest_bag(img_off_a), vb.shape[0]))
    out = np.empty((n_a, n_b))
    solved = 0
    for i in range(n_a):
        for a in range(img_off_a[i + 1] - img_off_a[i]):
            for v in range(vb.shape[0]):
                table[a, v] = word_costs(va, words_a[img_off_a[i] + a], vb, v)
        for j in range(n_b):
            out[i, j], n = pruned_w(
                table,
                local_a,
                w_a,
                off_a,
                cap_a[i],
                cap_a[i + 1],
                ids_b,
                w_b,
                off_b,
                cap_b[j],
                cap_b[j + 1],
                ws,
                cost,
                bound,
                order,
                rmin,
                cmin,
                pending,
                np.inf,
                du,
                dv,
            )
            solved += n
    return out, solved
