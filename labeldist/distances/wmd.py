"""Word Mover's Distance between short texts, exact.

Kusner, Sun, Kolkin, Weinberger, "From Word Embeddings To Document Distances", ICML 2015.

Between texts :math:`(X, d)` and :math:`(Y, d')` (normalised bags of words, :mod:`labeldist.distances.nbow`), the
optimal-transport cost

.. math::  WMD = \\min_{T \\ge 0} \\sum_{i,j} T_{ij} \\|x_i - y_j\\|_2
           \\quad \\text{s.t.} \\quad T 1 = d,\\; T^\\top 1 = d'

as gensim's ``KeyedVectors.wmdistance`` computes it. Captions have about 5 distinct words, so the exact solver is a
transportation simplex compiled with numba (:mod:`labeldist.distances.transport`), batched over many pairs per call,
with POT's network simplex as fallback and reference. Texts are flat ``tokens`` and ``offsets`` arrays into
``vectors`` (:mod:`labeldist.distances.nbow`); the lower bounds are in :mod:`labeldist.distances.wmd_bounds`.
"""

from __future__ import annotations

import warnings

import numba
import numpy as np

from labeldist.distances.nbow import (
    Bags,
    check_weights,
    longest_bag,
    pair_cost,
    prepare_bags,
    prepare_listed_bags,
    unit_rows,
    word_costs,
)
from labeldist.distances.transport import emd_pot, emd_small, emd_workspace
from labeldist.distances.wmd_bounds import WMD, each_pair
from labeldist.errors import UsageError

#: unit_rows lives in labeldist.distances.nbow; importing it from here still works
__all__ = ["unit_rows", "wmd", "wmd_many", "wmd_pairs"]

# ------------------------------------------------------------------------------------ numba kernels


@numba.njit(cache=True, nogil=True)
def _listed_pairs(ids_a, w_a, off_a, va, ids_b, w_b, off_b, vb, pa, pb):  # pragma: no cover - compiled
    """WMD between text pa[t] of A and text pb[t] of B, for each t."""
    mmax, nmax = longest_bag(off_a), longest_bag(off_b)
    cost = np.empty((mmax, nmax))
    ws = emd_workspace(mmax, nmax)
    out = np.empty(len(pa))
    for t in range(len(pa)):
        a0, b0 = off_a[pa[t]], off_b[pb[t]]
        m, n = off_a[pa[t] + 1] - a0, off_b[pb[t] + 1] - b0
        for r in range(m):
            for s in range(n):
                cost[r, s] = word_costs(va, ids_a[a0 + r], vb, ids_b[b0 + s])
        out[t] = emd_small(cost, m, n, w_a[a0 : a0 + m], w_b[b0 : b0 + n], ws)
    return out


# ----------------------------------------------------------------------------------- one pair of texts


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
    dx, dy = check_weights(dx, "dx"), check_weights(dy, "dy")
    cost = pair_cost(x, y)
    m, n = cost.shape
    value = emd_small(cost, m, n, dx, dy, emd_workspace(m, n))
    if np.isnan(value):
        _warn_fallback(1)
        value = emd_pot(cost, dx, dy)
    return float(value)


# ------------------------------------------------------------------------------ many pairs of texts


def _warn_fallback(count: int) -> None:
    warnings.warn(
        f"the exact small-problem WMD solver hit its iteration cap on {count} text pair(s); "
        "recomputed them with ot.emd2 (slower). Please report the texts.",
        RuntimeWarning,
        stacklevel=3,
    )


def _fix_nan(out: np.ndarray, a: Bags, b: Bags, i: np.ndarray | None = None, j: np.ndarray | None = None) -> None:
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
        flat[f] = emd_pot(pair_cost(va[ia[ra]], vb[ib[rb]]), wa[ra], wb[rb])


def wmd_many(
    tokens_a: np.ndarray,
    offsets_a: np.ndarray,
    vectors_a: np.ndarray,
    tokens_b: np.ndarray,
    offsets_b: np.ndarray,
    vectors_b: np.ndarray,
) -> np.ndarray:
    """WMD between every text of A and every text of B, in one compiled call.

    .. math::  D_{pq} = WMD\\big((X_p, d_p), (Y_q, d'_q)\\big)

    with nBOW weights :math:`d` (see :func:`~labeldist.distances.nbow.nbow`) and Euclidean ground distance
    (Kusner et al., ICML 2015).

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
    a, b = prepare_bags(tokens_a, offsets_a, vectors_a), prepare_bags(tokens_b, offsets_b, vectors_b)
    out = each_pair(WMD, *a, *b)
    _fix_nan(out, a, b)
    return out


def wmd_pairs(
    tokens_a: np.ndarray,
    offsets_a: np.ndarray,
    vectors_a: np.ndarray,
    tokens_b: np.ndarray,
    offsets_b: np.ndarray,
    vectors_b: np.ndarray,
    i: np.ndarray,
    j: np.ndarray,
) -> np.ndarray:
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
        raise UsageError(f"i and j must be 1-d of equal length, got {i.shape} and {j.shape}")
    for name, idx, off in (("i", i, offsets_a), ("j", j, offsets_b)):
        if len(idx) and (idx.min() < 0 or idx.max() >= len(off) - 1):
            raise UsageError(f"{name} holds a text index outside [0, {len(off) - 1})")
    a, i = prepare_listed_bags(tokens_a, offsets_a, vectors_a, i)
    b, j = prepare_listed_bags(tokens_b, offsets_b, vectors_b, j)
    out = _listed_pairs(*a, *b, i, j)
    _fix_nan(out, a, b, i, j)
    return out
