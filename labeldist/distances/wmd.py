"""Word Mover's Distance between short texts, exact, and its two cheap lower bounds.

Kusner, Sun, Kolkin, Weinberger, "From Word Embeddings To Document Distances", ICML 2015.

A text is a normalised bag of words (nBOW): its distinct words :math:`x_1..x_m` (vectors, rows of
:math:`X \\in R^{m \\times k}`) with weights :math:`d_i = c_i / \\sum_l c_l` (:math:`c_i` the count of word
:math:`i`). The WMD between texts :math:`(X, d)` and :math:`(Y, d')` is the optimal-transport cost

.. math::  WMD = \\min_{T \\ge 0} \\sum_{i,j} T_{ij} \\|x_i - y_j\\|_2
           \\quad \\text{s.t.} \\quad T 1 = d,\\; T^\\top 1 = d'

— what gensim's ``KeyedVectors.wmdistance`` computes with POT's ``emd2``. Captions have about 5 distinct
words, so the exact solver here is a transportation simplex on the small m x n table (float64), compiled
with numba and batched over many caption pairs per call; POT's network simplex is the fallback and the
reference.

Batched functions take texts as flat arrays: ``tokens`` (T,) int ids into ``vectors`` (V, k) and
``offsets`` (n+1,), text ``t`` being ``tokens[offsets[t]:offsets[t+1]]``. The two sides may index different
vector tables: the ground distance is always computed from the vectors themselves.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numba
import numpy as np
from scipy.spatial.distance import cdist

# --------------------------------------------------------------------------------------------- helpers


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit Euclidean length, computed in float32 exactly as gensim's ``get_vector(norm=True)``.

    Matching gensim bit for bit keeps our WMD within rounding of ``wmdistance`` (whose default is
    ``norm=True``). A zero row stays zero.

    >>> unit_rows(np.array([[3.0, 4.0]])).tolist()
    [[0.6000000238418579, 0.800000011920929]]
    """
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1)
    norms[norms == 0] = 1
    return v / norms[:, None]


def nbow(tokens: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalised bag of words of each text: distinct ids (sorted) and weights ``count / length``.

    .. math::  d_i = c_i / \\sum_l c_l

    Parameters
    ----------
    tokens : (T,) int; offsets : (n+1,) int, every text non-empty.

    Returns
    -------
    ids (B,) int64, weights (B,) float64, bag_offsets (n+1,) int64 — text ``t`` has the bag
    ``ids[bag_offsets[t]:bag_offsets[t+1]]``.

    >>> ids, w, off = nbow(np.array([7, 3, 7, 7]), np.array([0, 4]))
    >>> ids.tolist(), w.tolist(), off.tolist()
    ([3, 7], [0.25, 0.75], [0, 2])
    """
    tokens = np.ascontiguousarray(tokens, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    if np.any(lengths <= 0):
        raise ValueError(f"text {int(np.flatnonzero(lengths <= 0)[0])} has no tokens; WMD needs at least one")
    ids, weights, bag_offsets = _nbow(tokens, offsets)
    return ids[: bag_offsets[-1]], weights[: bag_offsets[-1]], bag_offsets


@numba.njit(cache=True, nogil=True)
def _nbow(tokens, offsets):  # pragma: no cover - compiled
    # per text: insertion-sort its few tokens, then count runs (linear in T; np.lexsort was the bottleneck)
    n = len(offsets) - 1
    ids = np.empty(len(tokens), dtype=np.int64)
    weights = np.empty(len(tokens))
    bag_offsets = np.zeros(n + 1, dtype=np.int64)
    buf = np.empty(max(1, _max_len(offsets)), dtype=np.int64)
    b = 0
    for t in range(n):
        length = offsets[t + 1] - offsets[t]
        for r in range(length):
            x = tokens[offsets[t] + r]
            s = r - 1
            while s >= 0 and buf[s] > x:
                buf[s + 1] = buf[s]
                s -= 1
            buf[s + 1] = x
        r = 0
        while r < length:
            q = r
            while q < length and buf[q] == buf[r]:
                q += 1
            ids[b] = buf[r]
            weights[b] = (q - r) / length
            b += 1
            r = q
        bag_offsets[t + 1] = b
    return ids, weights, bag_offsets


def _used_rows(ids: np.ndarray, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Remap ``ids`` onto the rows they use, so per-text precomputation scales with words used, not V."""
    used, inverse = np.unique(ids, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), np.ascontiguousarray(vectors[used], dtype=np.float64)


def _float_table(vectors: np.ndarray) -> np.ndarray:
    """float32 tables stay float32 (no copy; the kernels widen each value to float64 as they read it)."""
    vectors = np.asarray(vectors)
    dtype = np.float32 if vectors.dtype == np.float32 else np.float64
    return np.ascontiguousarray(vectors, dtype=dtype)


def _check_weights(d: np.ndarray, name: str) -> np.ndarray:
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 1 or np.any(d < 0) or abs(d.sum() - 1.0) > 1e-9:
        raise ValueError(f"{name} must be non-negative weights summing to 1, got {d}")
    return d


# ------------------------------------------------------------------------------------ numba kernels


@numba.njit(cache=True, nogil=True)
def _emd_small(cost, m, n, a, b, ws):  # pragma: no cover - compiled
    """Exact transport cost for supplies a (m) and demands b (n), both summing to 1; NaN if not finished.

    Transportation simplex (Dantzig 1951; the MODI method; Rubner et al.'s EMD code uses the same): a basic
    solution is a spanning tree of m + n - 1 cells of the m x n table; potentials with u_i + v_j = c_ij on
    the tree price every other cell; while some reduced cost c_ij - u_i - v_j is negative, that cell enters,
    flow moves round the cycle it closes, and the first cell emptied leaves. No negative reduced cost left
    = optimal (LP duality). At caption size (about 5 x 5) this takes about 3 pivots from a least-cost start.
    """
    bi, bj, fl, isb, u, v, work, sa, sb, par, pcell, depth, deg, start, adj, queue, cyc = ws
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
def _word_dist(va, u, vb, v):  # pragma: no cover - compiled
    # the difference form, not |a|^2 + |b|^2 - 2ab: no cancellation for close words (same as scipy cdist)
    s = 0.0
    for k in range(va.shape[1]):
        t = np.float64(va[u, k]) - np.float64(vb[v, k])  # float32 tables: widen before subtracting
        s += t * t
    return np.sqrt(s)


@numba.njit(cache=True, nogil=True)
def _workspace(mmax, nmax):  # pragma: no cover - compiled
    """Scratch arrays of _emd_small for problems up to mmax x nmax, allocated once per batch."""
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
    )


@numba.njit(cache=True, nogil=True)
def _max_len(off):  # pragma: no cover - compiled
    m = 0
    for t in range(len(off) - 1):
        m = max(m, off[t + 1] - off[t])
    return m


@numba.njit(cache=True, nogil=True)
def _all_pairs(ids_a, w_a, off_a, va, ids_b, w_b, off_b, vb, relaxed):  # pragma: no cover - compiled
    """(na, nb) WMD (relaxed=False) or RWMD (relaxed=True) between every text of A and every text of B."""
    na, nb = len(off_a) - 1, len(off_b) - 1
    mmax, nmax = _max_len(off_a), _max_len(off_b)
    out = np.empty((na, nb))
    cost = np.empty((mmax, nmax))
    ws = _workspace(mmax, nmax)
    # distances from the words of one A text to every word B uses: computed once per A text, gathered per pair
    near = np.empty((mmax, vb.shape[0]))
    for p in range(na):
        a0 = off_a[p]
        m = off_a[p + 1] - a0
        for r in range(m):
            for v in range(vb.shape[0]):
                near[r, v] = _word_dist(va, ids_a[a0 + r], vb, v)
        for q in range(nb):
            b0 = off_b[q]
            n = off_b[q + 1] - b0
            for r in range(m):
                for s in range(n):
                    cost[r, s] = near[r, ids_b[b0 + s]]
            if relaxed:
                out[p, q] = _rwmd_cost(cost, m, n, w_a[a0 : a0 + m], w_b[b0 : b0 + n])
            else:
                out[p, q] = _emd_small(cost, m, n, w_a[a0 : a0 + m], w_b[b0 : b0 + n], ws)
    return out


@numba.njit(cache=True, nogil=True)
def _listed_pairs(ids_a, w_a, off_a, va, ids_b, w_b, off_b, vb, pa, pb):  # pragma: no cover - compiled
    """WMD between text pa[t] of A and text pb[t] of B, for each t."""
    mmax, nmax = _max_len(off_a), _max_len(off_b)
    cost = np.empty((mmax, nmax))
    ws = _workspace(mmax, nmax)
    out = np.empty(len(pa))
    for t in range(len(pa)):
        a0, b0 = off_a[pa[t]], off_b[pb[t]]
        m, n = off_a[pa[t] + 1] - a0, off_b[pb[t] + 1] - b0
        for r in range(m):
            for s in range(n):
                cost[r, s] = _word_dist(va, ids_a[a0 + r], vb, ids_b[b0 + s])
        out[t] = _emd_small(cost, m, n, w_a[a0 : a0 + m], w_b[b0 : b0 + n], ws)
    return out


@numba.njit(cache=True, nogil=True)
def _rwmd_cost(cost, m, n, a, b):  # pragma: no cover - compiled
    """max(sum_i a_i min_j c_ij, sum_j b_j min_i c_ij)."""
    l1 = 0.0
    for i in range(m):
        best = np.inf
        for j in range(n):
            best = min(best, cost[i, j])
        l1 += a[i] * best
    l2 = 0.0
    for j in range(n):
        best = np.inf
        for i in range(m):
            best = min(best, cost[i, j])
        l2 += b[j] * best
    return max(l1, l2)


# ----------------------------------------------------------------------------------- one pair of texts


def _pair_cost(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return cdist(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))


def wmd(x: np.ndarray, dx: np.ndarray, y: np.ndarray, dy: np.ndarray) -> float:
    """Word Mover's Distance between two weighted word sets (Kusner et al., ICML 2015, Eq. 1).

    .. math::  WMD = \\min_{T \\ge 0,\\; T 1 = d,\\; T^\\top 1 = d'} \\sum_{i,j} T_{ij} \\|x_i - y_j\\|_2

    Parameters
    ----------
    x : (m, k) vectors of the distinct words of the first text; dx : (m,) their nBOW weights, sum 1.
    y : (n, k) and dy : (n,) the same for the second text.

    >>> wmd(np.array([[0.0, 0.0]]), np.array([1.0]), np.array([[3.0, 4.0]]), np.array([1.0]))
    5.0
    """
    dx, dy = _check_weights(dx, "dx"), _check_weights(dy, "dy")
    cost = _pair_cost(x, y)
    m, n = cost.shape
    value = _emd_small(cost, m, n, dx, dy, _workspace(m, n))
    if np.isnan(value):
        _warn_fallback(1)
        value = _emd_pot(cost, dx, dy)
    return float(value)


def wcd(x: np.ndarray, dx: np.ndarray, y: np.ndarray, dy: np.ndarray) -> float:
    """Word centroid distance, a lower bound of WMD (Kusner et al., ICML 2015, §4).

    .. math::  WCD = \\|X d - Y d'\\|_2 \\le WMD

    (by the triangle inequality: :math:`\\|Xd - Yd'\\| = \\|\\sum_{ij} T_{ij}(x_i - y_j)\\|
    \\le \\sum_{ij} T_{ij} \\|x_i - y_j\\|` for any feasible :math:`T`). Symbols as in :func:`wmd`.

    >>> wcd(np.array([[-1.0], [1.0]]), np.array([0.5, 0.5]), np.array([[0.0]]), np.array([1.0]))
    0.0
    """
    dx, dy = _check_weights(dx, "dx"), _check_weights(dy, "dy")
    cx = np.asarray(x, dtype=np.float64).T @ dx
    cy = np.asarray(y, dtype=np.float64).T @ dy
    return float(np.linalg.norm(cx - cy))


def rwmd(x: np.ndarray, dx: np.ndarray, y: np.ndarray, dy: np.ndarray) -> float:
    """Relaxed WMD, a lower bound of WMD (Kusner et al., ICML 2015, §4).

    Dropping one of the two constraints of :func:`wmd` lets each word move all its mass to its nearest
    word on the other side:

    .. math::  \\ell_1 = \\sum_i d_i \\min_j c_{ij}, \\quad \\ell_2 = \\sum_j d'_j \\min_i c_{ij}, \\quad
               RWMD = \\max(\\ell_1, \\ell_2) \\le WMD, \\qquad c_{ij} = \\|x_i - y_j\\|_2

    RWMD is usually much tighter than :func:`wcd` but does not dominate it: for ``x = {0, 10}`` with weights
    (1/2, 1/2) and ``y = {0, 10}`` with weights (0.9, 0.1), RWMD = 0 while WCD = WMD = 4. Symbols as in
    :func:`wmd`.

    >>> rwmd(np.array([[-1.0], [1.0]]), np.array([0.5, 0.5]), np.array([[0.0]]), np.array([1.0]))
    1.0
    """
    dx, dy = _check_weights(dx, "dx"), _check_weights(dy, "dy")
    cost = _pair_cost(x, y)
    return float(_rwmd_cost(cost, cost.shape[0], cost.shape[1], dx, dy))


# ------------------------------------------------------------------------------ many pairs of texts


def _warn_fallback(count: int) -> None:
    warnings.warn(
        f"the exact small-problem WMD solver hit its iteration cap on {count} text pair(s); "
        "recomputed them with ot.emd2 (slower). Please report the texts.",
        RuntimeWarning,
        stacklevel=3,
    )


def _emd_pot(cost: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    import ot

    return float(ot.emd2(a, b, cost))


class _Bags(NamedTuple):
    """One side of a batched call as the kernels take it: the nBOW of each text (:func:`nbow`) and the vector
    table its ``ids`` index. A tuple, so that ``*bags`` passes the plain arrays numba needs."""

    ids: np.ndarray  # (B,) int64 row of ``vectors`` of each bag entry
    weights: np.ndarray  # (B,) float64 nBOW weight
    offsets: np.ndarray  # (n+1,) int64: text t owns entries offsets[t]:offsets[t+1]
    vectors: np.ndarray  # (V, k) word vectors


def _prepare(tokens: np.ndarray, offsets: np.ndarray, vectors: np.ndarray) -> _Bags:
    """Every text as a bag, ``ids`` remapped onto the rows of ``vectors`` they use (float64)."""
    ids, w, off = nbow(tokens, offsets)
    ids, v = _used_rows(ids, vectors)
    return _Bags(ids, w, off, v)


def _prepare_listed(
    tokens: np.ndarray, offsets: np.ndarray, vectors: np.ndarray, which: np.ndarray
) -> tuple[_Bags, np.ndarray]:
    """Only the texts ``which`` refers to as bags (the caller may pass a whole corpus), and ``which``
    renumbered into them. No remapping of the vector table here: each pair reads its few rows directly."""
    used, renumbered = np.unique(which, return_inverse=True)
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = offsets[used + 1] - offsets[used]
    new_offsets = np.zeros(len(used) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    flat = np.arange(new_offsets[-1]) + np.repeat(offsets[used] - new_offsets[:-1], lengths)
    bags = _Bags(*nbow(np.asarray(tokens)[flat], new_offsets), _float_table(vectors))
    return bags, renumbered.reshape(-1).astype(np.int64)


def _fix_nan(out: np.ndarray, a: _Bags, b: _Bags, i: np.ndarray | None = None, j: np.ndarray | None = None) -> None:
    """Recompute with POT the pairs the numba solver did not finish (a safety net; not seen on captions)."""
    flat = out.reshape(-1)  # a view: out is C-contiguous
    bad = np.flatnonzero(np.isnan(flat))
    if len(bad) == 0:
        return
    _warn_fallback(len(bad))
    (ia, wa, oa, va), (ib, wb, ob, vb) = a, b
    for f in bad:
        p, q = (i[f], j[f]) if i is not None else divmod(int(f), out.shape[1])
        ra, rb = slice(oa[p], oa[p + 1]), slice(ob[q], ob[q + 1])
        flat[f] = _emd_pot(_pair_cost(va[ia[ra]], vb[ib[rb]]), wa[ra], wb[rb])


def wmd_many(
    tokens_a: np.ndarray, offsets_a: np.ndarray, vectors_a: np.ndarray,
    tokens_b: np.ndarray, offsets_b: np.ndarray, vectors_b: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """WMD between every text of A and every text of B, in one compiled call.

    .. math::  D_{pq} = WMD\\big((X_p, d_p), (Y_q, d'_q)\\big)

    with nBOW weights :math:`d` (see :func:`nbow`) and Euclidean ground distance (Kusner et al., ICML 2015).

    Parameters
    ----------
    tokens_a : (T_a,) int ids into ``vectors_a`` (V_a, k); offsets_a : (n_a+1,) — the texts of A.
    tokens_b, offsets_b, vectors_b : the same for B (its own vector table).

    Returns
    -------
    (n_a, n_b) float64.

    >>> vec = np.array([[0.0, 0.0], [3.0, 4.0]])
    >>> wmd_many(np.array([0, 1]), np.array([0, 1, 2]), vec, np.array([1]), np.array([0, 1]), vec).tolist()
    [[5.0], [0.0]]
    """
    a, b = _prepare(tokens_a, offsets_a, vectors_a), _prepare(tokens_b, offsets_b, vectors_b)
    out = _all_pairs(*a, *b, False)
    _fix_nan(out, a, b)
    return out


def wmd_pairs(
    tokens_a: np.ndarray, offsets_a: np.ndarray, vectors_a: np.ndarray,
    tokens_b: np.ndarray, offsets_b: np.ndarray, vectors_b: np.ndarray,
    i: np.ndarray, j: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """WMD between text ``i[t]`` of A and text ``j[t]`` of B for each ``t``; arguments as in :func:`wmd_many`.

    .. math::  D_t = WMD\\big((X_{i_t}, d_{i_t}), (Y_{j_t}, d'_{j_t})\\big)

    >>> vec = np.array([[0.0, 0.0], [3.0, 4.0]])
    >>> tok, off = np.array([0, 1]), np.array([0, 1, 2])
    >>> wmd_pairs(tok, off, vec, tok, off, vec, np.array([0, 1]), np.array([1, 1])).tolist()
    [5.0, 0.0]
    """
    i = np.asarray(i, dtype=np.int64)
    j = np.asarray(j, dtype=np.int64)
    if i.shape != j.shape or i.ndim != 1:
        raise ValueError(f"i and j must be 1-d of equal length, got {i.shape} and {j.shape}")
    for name, idx, off in (("i", i, offsets_a), ("j", j, offsets_b)):
        if len(idx) and (idx.min() < 0 or idx.max() >= len(off) - 1):
            raise ValueError(f"{name} holds a text index outside [0, {len(off) - 1})")
    a, i = _prepare_listed(tokens_a, offsets_a, vectors_a, i)
    b, j = _prepare_listed(tokens_b, offsets_b, vectors_b, j)
    out = _listed_pairs(*a, *b, i, j)
    _fix_nan(out, a, b, i, j)
    return out


def rwmd_many(
    tokens_a: np.ndarray, offsets_a: np.ndarray, vectors_a: np.ndarray,
    tokens_b: np.ndarray, offsets_b: np.ndarray, vectors_b: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Relaxed WMD (see :func:`rwmd`) between every text of A and every text of B; a lower bound of
    :func:`wmd_many` entry by entry (Kusner et al., ICML 2015, §4). Arguments as in :func:`wmd_many`.

    .. math::  R_{pq} = \\max\\Big(\\sum_i d_{p,i} \\min_j c_{ij}, \\sum_j d'_{q,j} \\min_i c_{ij}\\Big)

    >>> vec = np.array([[-1.0], [1.0], [0.0]])
    >>> rwmd_many(np.array([0, 1]), np.array([0, 2]), vec, np.array([2]), np.array([0, 1]), vec).tolist()
    [[1.0]]
    """
    a, b = _prepare(tokens_a, offsets_a, vectors_a), _prepare(tokens_b, offsets_b, vectors_b)
    return _all_pairs(*a, *b, True)


def centroids(tokens: np.ndarray, offsets: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """nBOW-weighted mean vector :math:`X d` of each text, (n, k) float64.

    >>> centroids(np.array([0, 1, 1, 1]), np.array([0, 4]), np.array([[0.0], [4.0]])).tolist()
    [[3.0]]
    """
    ids, w, off = nbow(tokens, offsets)
    weighted = np.asarray(vectors, dtype=np.float64)[ids] * w[:, None]
    return np.add.reduceat(weighted, off[:-1], axis=0)


def wcd_many(
    tokens_a: np.ndarray, offsets_a: np.ndarray, vectors_a: np.ndarray,
    tokens_b: np.ndarray, offsets_b: np.ndarray, vectors_b: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Word centroid distance (see :func:`wcd`) between every text of A and every text of B; a lower bound
    of :func:`wmd_many` entry by entry (Kusner et al., ICML 2015, §4). Arguments as in :func:`wmd_many`.

    .. math::  C_{pq} = \\|X_p d_p - Y_q d'_q\\|_2

    >>> vec = np.array([[-1.0], [1.0], [0.0]])
    >>> wcd_many(np.array([0, 1]), np.array([0, 2]), vec, np.array([2]), np.array([0, 1]), vec).tolist()
    [[0.0]]
    """
    return cdist(centroids(tokens_a, offsets_a, vectors_a), centroids(tokens_b, offsets_b, vectors_b))


# ------------------------------------------------------------- linear-complexity relaxed WMD (Atasu et al.)


def euclidean_lower_bounds(x: np.ndarray, y: np.ndarray, dtype: type = np.float64) -> np.ndarray:
    """Lower bounds on the Euclidean distances :math:`\\|x_i - y_j\\|_2` of every row of ``x`` to every row of
    ``y``, from one matrix product (BLAS) instead of a difference per pair.

    .. math::  s_{ij} = \\|x_i\\|^2 + \\|y_j\\|^2 - 2\\, x_i \\cdot y_j, \\qquad
               L_{ij} = \\sqrt{\\max(0,\\; s_{ij} - \\delta_{ij})}, \\qquad
               \\delta_{ij} = 2 \\gamma_{k+2} (\\|x_i\\| + \\|y_j\\|)^2

    In float64 each dot product of length :math:`k` is off by at most :math:`\\gamma_k \\|x\\|\\|y\\|`,
    :math:`\\gamma_n = n u / (1 - n u)`, :math:`u = 2^{-53}`, whatever the summation order (Higham, *Accuracy
    and Stability of Numerical Algorithms*, 2nd ed., §3.1), so the computed :math:`s_{ij}` is off by at most
    :math:`\\gamma_{k+2} (\\|x_i\\| + \\|y_j\\|)^2`; :math:`\\delta` is twice that. The expansion loses
    accuracy for close pairs (cancellation), never the bound: :math:`L_{ij} \\le \\|x_i - y_j\\|` up to the
    half-ulp rounding of the square root. Equal rows get exactly 0.

    Parameters
    ----------
    x : (a, k), y : (b, k) float (widened to float64).
    dtype : ``np.float64``, or ``np.float32`` for half the memory: each value is then first scaled by
        :math:`1 - 2^{-23}`, so that rounding to float32 keeps it a lower bound.

    Returns
    -------
    (a, b) of ``dtype``.

    >>> euclidean_lower_bounds(np.array([[0.0, 0.0], [3.0, 4.0]]), np.array([[3.0, 4.0]])).round(12).tolist()
    [[5.0], [0.0]]
    """
    if dtype not in (np.float64, np.float32):
        raise ValueError(f"dtype must be float64 or float32, got {dtype}")
    x = np.ascontiguousarray(x, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    k = x.shape[1]
    u = np.finfo(np.float64).eps / 2
    gamma = (k + 2) * u / (1 - (k + 2) * u)
    nx, ny = np.einsum("ij,ij->i", x, x), np.einsum("ij,ij->i", y, y)
    out = np.empty((len(x), len(y)), dtype=dtype)
    # float32: scaling by 1 - 2^-23 before rounding to nearest keeps the result at or below the float64
    # value (the float32 half-ulp is at most 2^-24 relative)
    scale = 1.0 - 2.0**-23 if dtype == np.float32 else 1.0
    _expand_lower(x @ y.T, nx, ny, 2 * gamma, out, scale)
    return out


@numba.njit(cache=True, nogil=True)
def _expand_lower(g, nx, ny, c, out, scale):  # pragma: no cover - compiled
    """out = scale * sqrt(max(0, nx + ny - 2 g - c (|x| + |y|)^2)), in one branch-free pass."""
    rx, ry = np.sqrt(nx), np.sqrt(ny)
    for i in range(g.shape[0]):
        for j in range(g.shape[1]):
            t = rx[i] + ry[j]
            s = (nx[i] + ny[j]) - 2.0 * g[i, j] - c * t * t
            # below 1e-60 (distances under 1e-30) -> 0: keeps float32 results away from subnormals
            out[i, j] = scale * np.sqrt(s) if s > 1e-60 else 0.0


@numba.njit(cache=True, nogil=True)
def nearest_in_texts(dist_t, ids_a, off_a):  # pragma: no cover - compiled
    """``near[v, p] = min_{w in text p of A} dist_t[v, w]``: for each word ``v`` of B, its distance to the
    nearest word of each A text. ``dist_t`` (V_b, V_a); ``ids_a`` index its columns. (V_b, n_a), its dtype."""
    n_a = len(off_a) - 1
    near = np.empty((dist_t.shape[0], n_a), dtype=dist_t.dtype)
    for v in range(dist_t.shape[0]):
        row = dist_t[v]
        for p in range(n_a):
            best = np.inf
            for e in range(off_a[p], off_a[p + 1]):
                best = min(best, row[ids_a[e]])
            near[v, p] = best
    return near


@numba.njit(cache=True, nogil=True)
def rwmd_to_all(dist_t, near, ids_a, w_a, off_a, ids_b, w_b, b0, b1, z, acc, out):  # pragma: no cover - compiled
    """RWMD between every text of A and the one text of B whose bag is ``ids_b[b0:b1]``, into ``out`` (n_a,).

    ``dist_t`` (V_b, V_a) holds the word distances (or lower bounds on them), ``near`` comes from
    :func:`nearest_in_texts`; ``z`` (V_a,) and ``acc`` (n_a,) are scratch. Cost: (b1 - b0)(V_a + n_a) plus
    the bag entries of A — linear, with no word distance computed per pair of texts.
    """
    # l1: each word of an A text moves to its nearest word of the B text
    z[:] = np.inf
    for e in range(b0, b1):
        row = dist_t[ids_b[e]]
        for w in range(len(z)):
            if row[w] < z[w]:
                z[w] = row[w]
    n_a = len(off_a) - 1
    for p in range(n_a):
        s = 0.0
        for e in range(off_a[p], off_a[p + 1]):
            s += w_a[e] * z[ids_a[e]]
        out[p] = s
    # l2: each word of the B text moves to its nearest word of each A text; RWMD = max(l1, l2)
    acc[:] = 0.0
    for e in range(b0, b1):
        row = near[ids_b[e]]
        w = w_b[e]
        for p in range(n_a):
            acc[p] += w * row[p]
    for p in range(n_a):
        if acc[p] > out[p]:
            out[p] = acc[p]


@numba.njit(cache=True, nogil=True)
def _rwmd_linear(dist_t, ids_a, w_a, off_a, ids_b, w_b, off_b):  # pragma: no cover - compiled
    n_a, n_b = len(off_a) - 1, len(off_b) - 1
    near = nearest_in_texts(dist_t, ids_a, off_a)
    out = np.empty((n_b, n_a))
    z = np.empty(dist_t.shape[1])
    acc = np.empty(n_a)
    for q in range(n_b):
        rwmd_to_all(dist_t, near, ids_a, w_a, off_a, ids_b, w_b, off_b[q], off_b[q + 1], z, acc, out[q])
    return out.T


def rwmd_linear_many(
    tokens_a: np.ndarray, offsets_a: np.ndarray, vectors_a: np.ndarray,
    tokens_b: np.ndarray, offsets_b: np.ndarray, vectors_b: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Relaxed WMD between every text of A and every text of B with linear complexity, a lower bound of
    :func:`wmd_many` (Atasu, Parnell, Dünner, Sifalakis, Pozidis, Vasileiadis, Vlachos, Berrospi, Labbi,
    "Linear-Complexity Relaxed Word Mover's Distance with GPU Acceleration", IEEE Big Data 2017).

    .. math::  Z_{wq} = \\min_{v \\in q} c_{wv}, \\quad \\ell_1(p, q) = \\sum_{w \\in p} d_{p,w} Z_{wq};
               \\qquad Z'_{vp} = \\min_{w \\in p} c_{wv}, \\quad \\ell_2(p, q) = \\sum_{v \\in q} d'_{q,v} Z'_{vp}

    and :math:`R_{pq} = \\max(\\ell_1, \\ell_2)`, the :func:`rwmd_many` value. The word distances
    :math:`c_{wv}` are computed once per pair of *words* (vocabularies :math:`V_a \\times V_b`, one BLAS
    product, :func:`euclidean_lower_bounds`) instead of once per pair of texts, and the minima once per (word,
    text), so the cost is :math:`O(V_a V_b k + V_a T_b + V_b T_a + n_a n_b \\cdot \\text{bag size})`.
    Because the word distances are lower bounds, each entry may sit a rounding below :func:`rwmd_many`.
    Arguments as in :func:`wmd_many`; returns (n_a, n_b) float64.

    >>> vec = np.array([[-1.0], [1.0], [0.0]])
    >>> r = rwmd_linear_many(np.array([0, 1]), np.array([0, 2]), vec, np.array([2]), np.array([0, 1]), vec)
    >>> r.round(9).tolist()
    [[1.0]]
    """
    ids_a, w_a, off_a, va = _prepare(tokens_a, offsets_a, vectors_a)
    ids_b, w_b, off_b, vb = _prepare(tokens_b, offsets_b, vectors_b)
    return _rwmd_linear(euclidean_lower_bounds(vb, va), ids_a, w_a, off_a, ids_b, w_b, off_b)
