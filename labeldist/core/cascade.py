"""Exact k nearest per row through a cascade of lower bounds, computing exact distances for few pairs
(:func:`cascaded_topk`), and what is known of pairs' distances as it goes (:class:`KnownPairs`): exact values, and
lower bounds where a solver stopped early, which a symmetric distance's other rows can take
(:mod:`labeldist.engine.exchange`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import numba
import numpy as np

from labeldist.core.knn import kth_per_row, round_down_f32, widened


class KnownPairs(NamedTuple):
    """What is known of the distances of item pairs: ``values[t]`` between ``rows[t]`` and ``cols[t]``, exact where
    ``exact[t]`` (float32 as a store keeps them), else a lower bound (rounded down to float32). Which items the
    indices count depends on the holder (a block's rows from 0, or the whole set's)."""

    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray
    exact: np.ndarray

    @classmethod
    def empty(cls) -> KnownPairs:
        return cls(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32), np.empty(0, bool))

    @classmethod
    def joined(cls, parts: Iterable[KnownPairs]) -> KnownPairs:
        parts = list(parts)
        if not parts:
            return cls.empty()
        return cls(*(np.concatenate([np.asarray(p[f]) for p in parts]) for f in range(4)))

    def taken(self, which: np.ndarray) -> KnownPairs:
        """The pairs ``which`` selects (a mask or indices)."""
        return KnownPairs(self.rows[which], self.cols[which], self.values[which], self.exact[which])

    def moved(self, row_offset: int) -> KnownPairs:
        """The same pairs with ``row_offset`` added to every row index."""
        return KnownPairs(self.rows + row_offset, self.cols, self.values, self.exact)

    def reversed(self) -> KnownPairs:
        """The same pairs seen from the other item: rows and columns swapped, for a symmetric distance."""
        return KnownPairs(self.cols, self.rows, self.values, self.exact)


class Cascade(NamedTuple):
    """What :func:`cascaded_topk` found: the lists, the number of exact distances and of tight bounds it computed,
    and what it learned of the pairs it computed exactly (the exact value, or where a solver stopped early above a
    row's limit, the lower bound it returned)."""

    indices: np.ndarray
    distances: np.ndarray
    computed: int
    refined: int
    learned: KnownPairs


@numba.njit(cache=True, nogil=True)
def entries_at_most(values: np.ndarray, ceiling: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The finite entries of each row of ``values`` (n, c) at or below the row's ``ceiling`` (n,): their rows and
    columns, row-major. Two passes (count, then fill), no (n, c) mask.

    >>> entries_at_most(np.array([[1.0, 3.0, np.inf], [0.5, 2.0, 1.0]]), np.array([2.0, 1.0]))[1].tolist()
    [0, 0, 2]
    """
    n, c = values.shape
    count = 0
    for i in range(n):
        top = ceiling[i]
        for j in range(c):
            v = values[i, j]
            if v <= top and v < np.inf:
                count += 1
    rows = np.empty(count, dtype=np.int64)
    cols = np.empty(count, dtype=np.int64)
    t = 0
    for i in range(n):
        top = ceiling[i]
        for j in range(c):
            v = values[i, j]
            if v <= top and v < np.inf:
                rows[t], cols[t] = i, j
                t += 1
    return rows, cols


def smallest_entries(values: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """About ``count`` of the smallest finite entries of each row of ``values`` (n, m), at least ``count`` where
    the row has them: rows and columns. Each row's threshold is read from a strided sample of about 4 x ``count``
    columns, so no (n, m) sort or partition is made; a row the sample leaves short is partitioned whole.

    >>> smallest_entries(np.array([[5.0, 1.0, 4.0, 2.0]]), 2)[1].tolist()
    [1, 3]
    """
    n, m = values.shape
    if n == 0 or count <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    step = max(1, m // (4 * count))
    sample = values[:, ::step]
    rank = min(sample.shape[1], max(1, -(-count // step))) - 1
    ceiling = np.partition(sample, rank, axis=1)[:, rank].astype(np.float64)
    rows, cols = entries_at_most(values, ceiling)
    short = np.flatnonzero(np.bincount(rows, minlength=n) < min(count, m))
    if len(short):
        ceiling[short] = np.partition(values[short], min(count, m) - 1, axis=1)[:, min(count, m) - 1]
        rows, cols = entries_at_most(values, ceiling)
    return rows, cols


def smallest_per_row(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n_rows: int, k: int) -> np.ndarray:
    """Positions (into ``rows``/``cols``/``values``) of each row's k entries of smallest value, ties broken by
    column, sorted within a row; a row with fewer has all of them. Rows are ``0 .. n_rows - 1``.

    >>> smallest_per_row(np.array([0, 0, 1, 0]), np.array([4, 2, 0, 1]), np.array([1.0, 1.0, 3.0, 0.5]), 2, 2)
    array([3, 1, 2])
    """
    order = np.lexsort((cols, values, rows))
    starts = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=starts[1:])
    rank = np.arange(len(order)) - starts[rows[order]]
    return order[rank < k]


def cascaded_topk(
    cheap: np.ndarray,
    refine: Callable[[np.ndarray, np.ndarray], np.ndarray] | Sequence[Callable[[np.ndarray, np.ndarray], np.ndarray]],
    exact: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    k: int,
    exclude: np.ndarray | None,
    refine_first: int = 4,
    first_round: int = 2,
    step: int | None = None,
    known: KnownPairs | None = None,
) -> Cascade:
    r"""Exact k nearest per row through a cascade of lower bounds, a cheap one for every pair and tighter ones for
    fewer: :math:`B_{ij} \le L^{(1)}_{ij}, \dots, L^{(t)}_{ij} \le D_{ij}`.

    Row :math:`i` first gets the first tight bound of about ``refine_first * k`` columns of smallest :math:`B`, each
    further bound for the ``first_round * k`` of smallest bound so far, and exact distances for the k of smallest
    bound; :math:`\tau_i` is the k-th smallest of them, widened to the next float32 up (:func:`widened`). A column
    whose bound is above :math:`\tau_i` cannot enter (or tie with) the top k, so each bound is then computed where
    the bounds before it are at most :math:`\tau_i`, and exact distances where all of them are: ``step`` a row at a
    time (k / 8 by default), in increasing order of the tightest bound, :math:`\tau_i` lowered after each round and
    the columns it rules out dropped; first among the seed's columns (so that :math:`\tau_i` is close to the k-th
    distance), then among every column whose cheap bound is within it (Kusner et al., ICML 2015, §4 "prefetch and
    prune", with a cascade of bounds). The exact distances computed are then about those whose bound is below the
    row's k-th distance, and a round more. Selection is on float32 values, ties broken by index, as
    :func:`topk_rows`, from the computed pairs alone: no (n, N) array beyond ``cheap`` is made, none is sorted.

    ``known`` distances (another search computed them: the reverse pairs of a symmetric distance) are taken as
    computed: exact ones join the exact values from the start, lower :math:`\tau_i` before any is computed, and are
    not computed again; known lower bounds raise the pairs' bounds. The lists are the same with or without them; only
    the work differs.

    Parameters
    ----------
    cheap : (n, N) the cheap bounds; the row's own column is set to +inf here (``exclude``), in place.
    refine : ``refine(rows, cols)`` -> float64 tight bounds of the index pairs ``(rows[t], cols[t])``; ``rows``
        index the block's rows (0..n-1), ``cols`` the columns. Or a sequence of them, from cheaper to tighter.
    exact : ``exact(rows, cols, limits)`` -> float64 exact distances of those pairs, except where one is above
        ``limits[t]``: there a lower bound of it above ``limits[t]`` will do (a solver may stop early).
    k : neighbours per row.  exclude : (n,) column of each row's own item, or None.
    known : distances and lower bounds of pairs ``(rows, cols)`` of the block (rows 0..n-1); or None.

    Returns
    -------
    A :class:`Cascade`: indices (n, k) int32, distances (n, k) float32 (-1 / +inf padded), the number of exact
    distances computed (``known`` ones not counted), the number of tight bounds computed (all of the tiers), and
    what was learned of the pairs computed: exact where a value is at or below the limit it was computed under,
    else a lower bound (rounded down to float32).
    """
    refiners = [refine] if callable(refine) else list(refine)
    n, m = cheap.shape
    if exclude is not None and n:
        cheap[np.arange(n), exclude] = np.inf
    avail = m - (1 if exclude is not None else 0)
    kk = min(k, avail)
    indices = np.full((n, k), -1, dtype=np.int32)
    dists = np.full((n, k), np.inf, dtype=np.float32)
    if kk <= 0 or n == 0:
        return Cascade(indices, dists, 0, 0, KnownPairs.empty())
    known = KnownPairs.empty() if known is None else known
    sure = np.asarray(known.exact, dtype=bool)
    kr, kc = np.asarray(known.rows, np.int64)[sure], np.asarray(known.cols, np.int64)[sure]
    n_known = len(kr)
    raise_by_known = known_bounds(known.taken(~sure), m)
    step = max(1, kk // 8) if step is None else step
    # the seed: every tier for the columns of smallest bound so far, exact distances for k a row
    rows, cols = smallest_entries(cheap, min(avail, refine_first * kk))
    bound = raise_by_known(rows, cols, refiners[0](rows, cols))
    level = np.zeros(len(rows), dtype=np.int64)  # the tightest tier each bound has been through
    refined = len(rows)
    for tier, tighter in enumerate(refiners[1:], 1):
        sel = smallest_per_row(rows, cols, bound, n, first_round * kk)
        bound[sel] = np.maximum(bound[sel], tighter(rows[sel], cols[sel]))
        level[sel] = tier
        refined += len(sel)
    first = smallest_per_row(rows, cols, bound, n, kk)
    first = first[~np.isin(rows[first] * m + cols[first], kr * m + kc)]
    fr, fc = rows[first], cols[first]
    er, ec = np.concatenate([kr, fr]), np.concatenate([kc, fc])
    seed = exact(fr, fc, np.full(len(first), np.inf)).astype(np.float32)
    ev = np.concatenate([np.asarray(known.values, np.float32)[sure], seed])
    is_exact = np.ones(len(er), dtype=bool)
    lows = ev.copy()  # what is learned of each pair: its exact value, or a lower bound
    limit = widened(kth_per_row(er, ev.astype(np.float64), n, kk))

    def settle(limit: np.ndarray) -> np.ndarray:
        """Every tier for the pairs within the limit, then their exact distances by increasing bound, step a row a
        round, the limit lowered after each round. Returns the last limit."""
        nonlocal er, ec, ev, is_exact, lows, refined
        for tier, tighter in enumerate(refiners[1:], 1):
            todo = np.flatnonzero((level < tier) & (bound <= limit[rows]))
            bound[todo] = np.maximum(bound[todo], tighter(rows[todo], cols[todo]))
            level[todo] = tier
            refined += len(todo)
        pending = np.flatnonzero((bound <= limit[rows]) & ~np.isin(rows * m + cols, er * m + ec))
        while len(pending):
            take = pending[smallest_per_row(rows[pending], cols[pending], bound[pending], n, step)]
            tr, tc = rows[take], cols[take]
            er, ec = np.concatenate([er, tr]), np.concatenate([ec, tc])
            values = exact(tr, tc, limit[tr])
            ev = np.concatenate([ev, values.astype(np.float32)])
            within = values <= limit[tr]  # above it, a solver may have stopped early at a lower bound
            is_exact = np.concatenate([is_exact, within])
            lows = np.concatenate([lows, np.where(within, values.astype(np.float32), round_down_f32(values))])
            limit = widened(kth_per_row(er, ev.astype(np.float64), n, kk))
            pending = np.setdiff1d(pending, take, assume_unique=True)
            pending = pending[bound[pending] <= limit[rows[pending]]]
        return limit

    # the seed's columns first: the limit falls close to the row's k-th distance before the rest are looked at
    limit = settle(limit)
    r2, c2 = entries_at_most(cheap, limit)
    fresh = ~np.isin(r2 * m + c2, rows * m + cols)
    r2, c2 = r2[fresh], c2[fresh]
    rows, cols = np.concatenate([rows, r2]), np.concatenate([cols, c2])
    bound = np.concatenate([bound, raise_by_known(r2, c2, refiners[0](r2, c2))])
    level = np.concatenate([level, np.zeros(len(r2), dtype=np.int64)])
    refined += len(r2)
    settle(limit)
    best = smallest_per_row(er, ec, ev, n, kk)
    r, c, v = er[best], ec[best], ev[best]
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=n), out=starts[1:])
    slot = np.arange(len(r)) - starts[r]
    indices[r, slot], dists[r, slot] = c, v
    mine = slice(n_known, None)
    learned = KnownPairs(er[mine], ec[mine], lows[mine], is_exact[mine])
    return Cascade(indices, dists, len(er) - n_known, refined, learned)


def known_bounds(bounds: KnownPairs, n_cols: int) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """``raise_by_known(rows, cols, bound)``: ``bound`` (float64, in place) raised to the lower bounds ``bounds``
    holds for any of the pairs ``(rows[t], cols[t])`` (column indices below ``n_cols``); the largest of two lower
    bounds is one too."""
    keys = np.asarray(bounds.rows, np.int64) * n_cols + np.asarray(bounds.cols, np.int64)
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], np.asarray(bounds.values, np.float64)[order]

    def raise_by_known(rows: np.ndarray, cols: np.ndarray, bound: np.ndarray) -> np.ndarray:
        if len(keys) == 0 or len(rows) == 0:
            return bound
        want = rows.astype(np.int64) * n_cols + cols
        at = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
        hit = np.flatnonzero(keys[at] == want)
        bound[hit] = np.maximum(bound[hit], values[at[hit]])
        return bound

    return raise_by_known
