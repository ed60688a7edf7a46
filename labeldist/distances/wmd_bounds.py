"""Lower bounds of the Word Mover's Distance, cheap enough to rule pairs out of an exact kNN search.

Kusner et al., "From Word Embeddings To Document Distances", ICML 2015, §4; Atasu et al., "Linear-Complexity
Relaxed Word Mover's Distance with GPU Acceleration", IEEE Big Data 2017. In the symbols of
:mod:`labeldist.distances.wmd`, for every pair of texts:

.. math::  WCD = \\|X d - Y d'\\|_2 \\le WMD, \\qquad
           RWMD = \\max\\Big(\\sum_i d_i \\min_j c_{ij},\\; \\sum_j d'_j \\min_i c_{ij}\\Big) \\le WMD

the word centroid distance (:func:`wcd`) and the relaxed WMD (:func:`rwmd`), neither dominating the other.
:func:`rwmd_linear_many` (Atasu et al.) computes the RWMD from word distances taken once per pair of words
(:func:`euclidean_lower_bounds`, one BLAS product, a lower bound still after rounding); :func:`nearest_in_texts` and
:func:`rwmd_to_all` are its kernels, which the caption-set bound (:mod:`labeldist.distances.caption_sets`) builds on.
"""

from __future__ import annotations

import numba
import numpy as np
from scipy.spatial.distance import cdist

from labeldist.distances.nbow import (
    check_weights,
    costs_to_all_words,
    gather_costs,
    longest_bag,
    nbow,
    pair_cost,
    prepare_bags,
)
from labeldist.distances.transport import emd_small, emd_workspace
from labeldist.errors import UsageError

# ----------------------------------------------------------------------------------- one pair of texts


def wcd(x: np.ndarray, dx: np.ndarray, y: np.ndarray, dy: np.ndarray) -> float:
    """Word centroid distance, a lower bound of WMD (Kusner et al., ICML 2015, §4).

    .. math::  WCD = \\|X d - Y d'\\|_2 \\le WMD

    (by the triangle inequality: :math:`\\|Xd - Yd'\\| = \\|\\sum_{ij} T_{ij}(x_i - y_j)\\|
    \\le \\sum_{ij} T_{ij} \\|x_i - y_j\\|` for any feasible :math:`T`). Symbols as in
    :func:`~labeldist.distances.wmd.wmd`.

    >>> wcd(np.array([[-1.0], [1.0]]), np.array([0.5, 0.5]), np.array([[0.0]]), np.array([1.0]))
    0.0
    """
    dx, dy = check_weights(dx, "dx"), check_weights(dy, "dy")
    cx = np.asarray(x, dtype=np.float64).T @ dx
    cy = np.asarray(y, dtype=np.float64).T @ dy
    return float(np.linalg.norm(cx - cy))


def rwmd(x: np.ndarray, dx: np.ndarray, y: np.ndarray, dy: np.ndarray) -> float:
    """Relaxed WMD, a lower bound of WMD (Kusner et al., ICML 2015, §4).

    Dropping one of the two constraints of :func:`~labeldist.distances.wmd.wmd` lets each word move all its mass to
    its nearest word on the other side:

    .. math::  \\ell_1 = \\sum_i d_i \\min_j c_{ij}, \\quad \\ell_2 = \\sum_j d'_j \\min_i c_{ij}, \\quad
               RWMD = \\max(\\ell_1, \\ell_2) \\le WMD, \\qquad c_{ij} = \\|x_i - y_j\\|_2

    RWMD is usually much tighter than :func:`wcd` but does not dominate it: for ``x = {0, 10}`` with weights
    (1/2, 1/2) and ``y = {0, 10}`` with weights (0.9, 0.1), RWMD = 0 while WCD = WMD = 4. Symbols as in
    :func:`~labeldist.distances.wmd.wmd`.

    >>> rwmd(np.array([[-1.0], [1.0]]), np.array([0.5, 0.5]), np.array([[0.0]]), np.array([1.0]))
    1.0
    """
    dx, dy = check_weights(dx, "dx"), check_weights(dy, "dy")
    cost = pair_cost(x, y)
    return float(rwmd_cost(cost, cost.shape[0], cost.shape[1], dx, dy))


@numba.njit(cache=True, nogil=True)
def rwmd_cost(cost, m, n, a, b):  # pragma: no cover - compiled
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


@numba.njit(cache=True, nogil=True)
def reduction_bound(cost, m, n, a, b, u, v):  # pragma: no cover - compiled
    """The first step of the Hungarian method as a lower bound of the transport cost: rows reduced, then columns,
    and the other order, the larger.

    .. math::  u_i = \\min_j c_{ij}, \\quad v_j = \\min_i (c_{ij} - u_i) \\ge 0, \\qquad
               \\sum_i a_i u_i + \\sum_j b_j v_j \\le \\min_{T \\in U(a, b)} \\langle T, c \\rangle

    :math:`(u, v)` is feasible for the dual of the transport problem (:math:`u_i + v_j \\le c_{ij}`), and every
    feasible dual's value is at most the optimum when :math:`\\sum a = \\sum b` (weak duality; Kuhn, "The
    Hungarian method for the assignment problem", 1955). With :math:`v = 0` it is the relaxed WMD's
    :math:`\\ell_1`, so the bound is never below :func:`rwmd_cost`; it is above it where words of one text
    share their nearest word of the other (the second must pay the way to another word): on COCO captions it
    halves the image pairs the relaxed WMD leaves to an exact caption-set kNN. ``u`` (m) and ``v`` (n) are
    scratch; ``a`` and ``b`` each sum to 1.
    """
    return max(0.0, _rows_then_columns(cost, m, n, a, b, u), _rows_then_columns(cost.T, n, m, b, a, v))


@numba.njit(cache=True, nogil=True)
def _rows_then_columns(cost, m, n, a, b, u):  # pragma: no cover - compiled
    """:func:`reduction_bound` in one order: :math:`\\sum_i a_i u_i + \\sum_j b_j \\min_i (c_{ij} - u_i)`,
    :math:`u_i = \\min_j c_{ij}` (``u`` scratch, m)."""
    total = 0.0
    for i in range(m):
        low = np.inf
        for j in range(n):
            low = min(low, cost[i, j])
        u[i] = low
        total += a[i] * low
    for j in range(n):
        low = np.inf
        for i in range(m):
            low = min(low, cost[i, j] - u[i])
        total += b[j] * low
    return total


# ------------------------------------------------------------------------------ many pairs of texts


#: what :func:`each_pair` computes for a pair of texts: the exact WMD (:func:`~labeldist.distances.transport.emd_small`)
#: or the relaxed WMD (:func:`rwmd_cost`)
WMD, RWMD = 0, 1


@numba.njit(cache=True, nogil=True)
def each_pair(value, ids_a, w_a, off_a, va, ids_b, w_b, off_b, vb):  # pragma: no cover - compiled
    """(na, nb) ``value`` (:data:`WMD` or :data:`RWMD`) for every text of A against every text of B: the loop
    :func:`~labeldist.distances.wmd.wmd_many` and :func:`rwmd_many` share. The distances from the words of one A text
    to every word B uses are computed once per A text (:func:`~labeldist.distances.nbow.costs_to_all_words`) and
    gathered per pair (:func:`~labeldist.distances.nbow.gather_costs`). The value is chosen by a plain integer, not
    passed as a function: numba caches a kernel taking a compiled function under that function's address, which
    differs in every process, so every process would compile it again (1.2 s)."""
    na, nb = len(off_a) - 1, len(off_b) - 1
    mmax, nmax = longest_bag(off_a), longest_bag(off_b)
    out = np.empty((na, nb))
    cost = np.empty((mmax, nmax))
    ws = emd_workspace(mmax if value == WMD else 1, nmax if value == WMD else 1)
    near = np.empty((mmax, vb.shape[0]))
    for p in range(na):
        a0 = off_a[p]
        m = off_a[p + 1] - a0
        costs_to_all_words(near, va, ids_a, a0, m, vb)
        for q in range(nb):
            b0 = off_b[q]
            n = off_b[q + 1] - b0
            gather_costs(cost, near, ids_b, b0, m, n)
            if value == WMD:
                out[p, q] = emd_small(cost, m, n, w_a[a0 : a0 + m], w_b[b0 : b0 + n], ws)
            else:
                out[p, q] = rwmd_cost(cost, m, n, w_a[a0 : a0 + m], w_b[b0 : b0 + n])
    return out


def rwmd_many(
    tokens_a: np.ndarray,
    offsets_a: np.ndarray,
    vectors_a: np.ndarray,
    tokens_b: np.ndarray,
    offsets_b: np.ndarray,
    vectors_b: np.ndarray,
) -> np.ndarray:
    """Relaxed WMD (see :func:`rwmd`) between every text of A and every text of B; a lower bound of
    :func:`~labeldist.distances.wmd.wmd_many` entry by entry (Kusner et al., ICML 2015, §4). Arguments as in
    :func:`~labeldist.distances.wmd.wmd_many`.

    .. math::  R_{pq} = \\max\\Big(\\sum_i d_{p,i} \\min_j c_{ij}, \\sum_j d'_{q,j} \\min_i c_{ij}\\Big)

    >>> vec = np.array([[-1.0], [1.0], [0.0]])
    >>> rwmd_many(np.array([0, 1]), np.array([0, 2]), vec, np.array([2]), np.array([0, 1]), vec).tolist()
    [[1.0]]
    """
    a, b = prepare_bags(tokens_a, offsets_a, vectors_a), prepare_bags(tokens_b, offsets_b, vectors_b)
    return each_pair(RWMD, *a, *b)


def centroids(tokens: np.ndarray, offsets: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """nBOW-weighted mean vector :math:`X d` of each text, (n, k) float64.

    >>> centroids(np.array([0, 1, 1, 1]), np.array([0, 4]), np.array([[0.0], [4.0]])).tolist()
    [[3.0]]
    """
    ids, w, off = nbow(tokens, offsets)
    weighted = np.asarray(vectors, dtype=np.float64)[ids] * w[:, None]
    return np.add.reduceat(weighted, off[:-1], axis=0)


def wcd_many(
    tokens_a: np.ndarray,
    offsets_a: np.ndarray,
    vectors_a: np.ndarray,
    tokens_b: np.ndarray,
    offsets_b: np.ndarray,
    vectors_b: np.ndarray,
) -> np.ndarray:
    """Word centroid distance (see :func:`wcd`) between every text of A and every text of B; a lower bound
    of :func:`~labeldist.distances.wmd.wmd_many` entry by entry (Kusner et al., ICML 2015, §4). Arguments as in
    :func:`~labeldist.distances.wmd.wmd_many`.

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
        raise UsageError(f"dtype must be float64 or float32, got {dtype}")
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
    tokens_a: np.ndarray,
    offsets_a: np.ndarray,
    vectors_a: np.ndarray,
    tokens_b: np.ndarray,
    offsets_b: np.ndarray,
    vectors_b: np.ndarray,
) -> np.ndarray:
    """Relaxed WMD between every text of A and every text of B with linear complexity, a lower bound of
    :func:`~labeldist.distances.wmd.wmd_many` (Atasu, Parnell, Dünner, Sifalakis, Pozidis, Vasileiadis, Vlachos,
    Berrospi, Labbi, "Linear-Complexity Relaxed Word Mover's Distance with GPU Acceleration", IEEE Big Data 2017).

    .. math::  Z_{wq} = \\min_{v \\in q} c_{wv}, \\quad \\ell_1(p, q) = \\sum_{w \\in p} d_{p,w} Z_{wq};
               \\qquad Z'_{vp} = \\min_{w \\in p} c_{wv}, \\quad \\ell_2(p, q) = \\sum_{v \\in q} d'_{q,v} Z'_{vp}

    and :math:`R_{pq} = \\max(\\ell_1, \\ell_2)`, the :func:`rwmd_many` value. The word distances
    :math:`c_{wv}` are computed once per pair of *words* (vocabularies :math:`V_a \\times V_b`, one BLAS
    product, :func:`euclidean_lower_bounds`) instead of once per pair of texts, and the minima once per (word,
    text), so the cost is :math:`O(V_a V_b k + V_a T_b + V_b T_a + n_a n_b \\cdot \\text{bag size})`.
    Because the word distances are lower bounds, each entry may sit a rounding below :func:`rwmd_many`.
    Arguments as in :func:`~labeldist.distances.wmd.wmd_many`; returns (n_a, n_b) float64.

    >>> vec = np.array([[-1.0], [1.0], [0.0]])
    >>> r = rwmd_linear_many(np.array([0, 1]), np.array([0, 2]), vec, np.array([2]), np.array([0, 1]), vec)
    >>> r.round(9).tolist()
    [[1.0]]
    """
    ids_a, w_a, off_a, va = prepare_bags(tokens_a, offsets_a, vectors_a)
    ids_b, w_b, off_b, vb = prepare_bags(tokens_b, offsets_b, vectors_b)
    return _rwmd_linear(euclidean_lower_bounds(vb, va), ids_a, w_a, off_a, ids_b, w_b, off_b)
