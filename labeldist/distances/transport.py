"""Exact optimal transport between two small discrete distributions: the transportation simplex.

The transportation problem (Hitchcock 1941) between supplies :math:`a \\in R^m` and demands :math:`b \\in R^n`
summing to 1, with costs :math:`C \\in R^{m \\times n}`; its value is the Earth Mover's Distance (Rubner, Tomasi,
Guibas, IJCV 2000):

.. math::  \\min_{T \\ge 0} \\sum_{i,j} T_{ij} C_{ij} \\quad \\text{s.t.} \\quad T 1 = a,\\; T^\\top 1 = b

:func:`emd_small` solves it by the transportation simplex (Dantzig 1951; the MODI method: a feasible plan whose dual
potentials give :math:`C_{ij} - u_i - v_j \\ge 0` is optimal), in float64, compiled with numba and allocation-free
given a workspace (:func:`emd_workspace`). It returns NaN when it does not finish; the caller then uses
:func:`emd_pot`, POT's network simplex (Bonneel et al., SIGGRAPH Asia 2011; Flamary et al., JMLR 2021), also the
tests' reference. The callers fill the cost table (:mod:`labeldist.distances.wmd`, ``caption_sets``).

Both solve a problem or its transpose, whichever comes first in one fixed order (:func:`transpose_first`), so that
the cost from X to Y and from Y to X is the same float: a simplex on the transposed table pivots in another order
and can round the last bit differently (6 % of COCO caption pairs did), which would make a symmetric distance's
matrix differ from its transpose and its kNN search unable to take a pair's value from the reverse pair.
"""

from __future__ import annotations

import numba
import numpy as np

from labeldist.core.extras import needed


@numba.njit(cache=True, nogil=True)
def transpose_first(cost, m, n, a, b):  # pragma: no cover - compiled
    """Whether the transpose of the problem (``cost[:m, :n]``, ``a``, ``b``) comes before it in the fixed order
    that :func:`emd_small` solves in: the fewer supplies first, then the supplies' weights, then the costs read row
    by row (the transpose's rows being the columns), each compared in turn. Exactly one of a problem and its
    transpose comes first unless the two are the same problem.

    >>> transpose_first(np.array([[1.0, 2.0]]), 1, 2, np.array([1.0]), np.array([0.5, 0.5]))
    False
    """
    if m != n:
        return n < m
    for i in range(m):
        if a[i] != b[i]:
            return b[i] < a[i]
    for i in range(m):
        for j in range(n):
            if cost[i, j] != cost[j, i]:
                return cost[j, i] < cost[i, j]
    return False


@numba.njit(cache=True, nogil=True)
def emd_small(cost, m, n, a, b, ws):  # pragma: no cover - compiled
    """Exact transport cost for supplies a (m) and demands b (n), both summing to 1; NaN if not finished. The
    problem or its transpose, whichever :func:`transpose_first` puts first, is solved (:func:`_emd_oriented`): the
    cost of (cost.T, b, a) is the same float."""
    if transpose_first(cost, m, n, a, b):
        t = ws[-1]
        for i in range(m):
            for j in range(n):
                t[j, i] = cost[i, j]
        return _emd_oriented(t, n, m, b, a, ws)
    return _emd_oriented(cost, m, n, a, b, ws)


@numba.njit(cache=True, nogil=True)
def _emd_oriented(cost, m, n, a, b, ws):  # pragma: no cover - compiled
    """:func:`emd_small` on the problem as given.

    Transportation simplex (Dantzig 1951; the MODI method; Rubner et al.'s EMD code uses the same): a basic
    solution is a spanning tree of m + n - 1 cells of the m x n table; potentials with u_i + v_j = c_ij on
    the tree price every other cell; while some reduced cost c_ij - u_i - v_j is negative, that cell enters,
    flow moves round the cycle it closes, and the first cell emptied leaves. No negative reduced cost left
    = optimal (LP duality). At caption size (about 5 x 5) this takes about 3 pivots from a least-cost start.
    """
    bi, bj, fl, isb, u, v, work, sa, sb, par, pcell, depth, deg, start, adj, queue, cyc, _ = ws
    if m == 1:  # one word on a side: everything moves to (or from) it
        s = 0.0
        for j in range(n):
            s += b[j] * cost[0, j]
        return s
    if n == 1:
        s = 0.0
        for i in range(m):
            s += a[i] * cost[i, 0]
        return s
    # 1. least-cost start: repeatedly fill the cheapest cell of the open rows and columns. Each fill closes
    #    one row or column (a tie closes only the row, leaving a zero-flow cell to come), so the m + n - 1
    #    filled cells form a spanning tree. Closed lines are +inf in a work copy of the costs, so each step
    #    is a plain argmin; at this size that beats sorting the cells (branch mispredictions dominate).
    cmax = 0.0
    for i in range(m):
        sa[i] = a[i]
        for j in range(n):
            c = cost[i, j]
            cmax = max(cmax, c)
            work[i * n + j] = c
            isb[i, j] = False
    for j in range(n):
        sb[j] = b[j]
    nv = m + n
    need = nv - 1
    open_rows = m
    for k in range(need):
        best = np.inf
        kb = -1
        for q in range(m * n):
            if work[q] < best:
                best = work[q]
                kb = q
        if kb < 0:
            return np.nan
        i = kb // n
        j = kb - i * n
        f = min(sa[i], sb[j])
        bi[k] = i
        bj[k] = j
        fl[k] = f
        isb[i, j] = True
        sa[i] -= f
        sb[j] -= f
        if sa[i] <= 1e-14 and open_rows > 1:  # supply spent (up to rounding); the last row never closes
            open_rows -= 1
            for jj in range(n):
                work[i * n + jj] = np.inf
        else:
            for ii in range(m):
                work[ii * n + j] = np.inf
    tol = 1e-12 * max(1.0, cmax)
    # 2. pivots
    for _ in range(4 * m * n + 50):
        # the tree's adjacency (cells per node; rows are nodes 0..m-1, columns m..m+n-1) ...
        for x in range(nv):
            deg[x] = 0
        for k in range(need):
            deg[bi[k]] += 1
            deg[m + bj[k]] += 1
        start[0] = 0
        for x in range(nv):
            start[x + 1] = start[x] + deg[x]
            deg[x] = start[x]
        for k in range(need):
            adj[deg[bi[k]]] = k
            deg[bi[k]] += 1
            adj[deg[m + bj[k]]] = k
            deg[m + bj[k]] += 1
        # ... walked from row 0 to set the potentials, parents and depths
        par[0] = -1
        depth[0] = 0
        u[0] = 0.0
        queue[0] = 0
        head = 0
        tail = 1
        while head < tail:
            x = queue[head]
            head += 1
            for p in range(start[x], start[x + 1]):
                k = adj[p]
                y = m + bj[k] if x < m else bi[k]
                if y == par[x]:
                    continue
                par[y] = x
                pcell[y] = k
                depth[y] = depth[x] + 1
                if y >= m:
                    v[y - m] = cost[bi[k], bj[k]] - u[x]
                else:
                    u[y] = cost[bi[k], bj[k]] - v[x - m]
                queue[tail] = y
                tail += 1
        if tail != nv:  # not a spanning tree (cannot happen in exact arithmetic): let the caller fall back
            return np.nan
        # entering cell: the most negative reduced cost
        best = -tol
        ei = -1
        ej = -1
        for i in range(m):
            ui = u[i]
            for j in range(n):
                r = cost[i, j] - ui - v[j]
                if r < best and not isb[i, j]:
                    best = r
                    ei = i
                    ej = j
        if ei < 0:
            s = 0.0
            for k in range(need):
                s += fl[k] * cost[bi[k], bj[k]]
            return s
        # the cycle: entering cell (+) and the tree path between column ej and row ei, whose cells
        # alternate -, +, -, ... counted from either end; climb both ends to their common ancestor
        x = m + ej
        y = ei
        sx = 0
        sy = 0
        L = 0
        theta = np.inf
        leave = -1
        while x != y:
            if depth[x] >= depth[y]:
                k = pcell[x]
                neg = sx % 2 == 0
                sx += 1
                x = par[x]
            else:
                k = pcell[y]
                neg = sy % 2 == 0
                sy += 1
                y = par[y]
            cyc[L] = k if neg else -k - 1
            L += 1
            if neg and fl[k] < theta:
                theta = fl[k]
                leave = k
        for q in range(L):
            k = cyc[q]
            if k >= 0:
                fl[k] -= theta
            else:
                fl[-k - 1] += theta
        isb[bi[leave], bj[leave]] = False
        bi[leave] = ei
        bj[leave] = ej
        fl[leave] = theta
        isb[ei, ej] = True
    return np.nan  # iteration cap (degenerate cycling): the caller falls back to POT


@numba.njit(cache=True, nogil=True)
def emd_workspace(mmax, nmax):  # pragma: no cover - compiled
    """Scratch arrays of emd_small for problems up to mmax x nmax, allocated once per batch (square: the problem may
    be solved transposed)."""
    mmax = nmax = max(mmax, nmax)
    nv = mmax + nmax
    i8 = np.int64
    return (
        np.empty(nv, i8),  # bi: row of each basic cell
        np.empty(nv, i8),  # bj: column of each basic cell
        np.empty(nv),  # fl: flow of each basic cell
        np.empty((mmax, nmax), np.bool_),  # isb: is (i, j) basic
        np.empty(mmax),  # u
        np.empty(nmax),  # v
        np.empty(mmax * nmax),  # work: costs of the open cells
        np.empty(mmax),  # sa: supply left
        np.empty(nmax),  # sb: demand left
        np.empty(nv, i8),  # par: parent node in the tree
        np.empty(nv, i8),  # pcell: cell to the parent
        np.empty(nv, i8),  # depth
        np.empty(nv + 1, i8),  # deg
        np.empty(nv + 1, i8),  # start
        np.empty(2 * nv, i8),  # adj
        np.empty(nv, i8),  # queue
        np.empty(nv, i8),  # cyc
        np.empty((nmax, mmax)),  # the transposed costs
    )


def emd_pot(cost: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """The same transport cost by POT's network simplex (``ot.emd2``): the fallback and the reference, oriented as
    :func:`emd_small` orients it."""
    with needed("sts", "caption WMD"):
        import ot

    m, n = cost.shape
    if transpose_first(np.ascontiguousarray(cost, dtype=np.float64), m, n, a, b):
        return float(ot.emd2(b, a, np.ascontiguousarray(cost.T)))
    return float(ot.emd2(a, b, cost))
