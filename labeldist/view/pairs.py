"""Distances of arbitrary item pairs computed from a store's labels: how pairs are grouped into ``block`` calls,
and the calls themselves. The service computes on-demand distances with it (:mod:`labeldist.api.serving.registry`), and
so does the in-process source of :mod:`labeldist.client`, so a computed distance has the same float32 value from
either."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from labeldist.kinds import check_block

#: estimated seconds of work between two calls of a computation's ``check`` (the service's cancellation flag)
CHUNK_SECONDS = 0.2


@dataclass(frozen=True)
class PairPlan:
    """How the distances of pairs ``(a[t], b[t])`` are computed from the labels.

    The distance is symmetric, so each pair is turned to have as its row the item that occurs in more pairs (an
    anchor against many items becomes one row). Then one ``distance.block`` call over the rectangle of distinct
    rows and columns when it holds at most 2.5 times the pairs asked (a minibatch's pairwise matrix: its upper
    triangle is about half the rectangle), else one call per distinct row against its columns (scattered
    pairs), so that an expensive distance (caption-set WMD) never computes many pairs nobody asked for.
    """

    rows: np.ndarray  # (P,) the row item of each pair
    cols: np.ndarray  # (P,) its column item
    ur: np.ndarray  # distinct rows, and each pair's position among them
    ir: np.ndarray
    uc: np.ndarray  # distinct columns, and each pair's position among them
    ic: np.ndarray
    rectangle: bool

    @property
    def calls(self) -> int:
        """``distance.block`` calls, unchunked."""
        return 1 if self.rectangle else int(self.ur.size)

    @property
    def kernel_pairs(self) -> int:
        """Distances the kernel computes (the whole rectangle, or each row's own columns)."""
        return int(self.ur.size * self.uc.size) if self.rectangle else int(self.rows.size)

    @property
    def items(self) -> int:
        """Distinct items the pairs name (what a kind that embeds its labels, the sentence kind, prepares)."""
        return int(np.union1d(self.ur, self.uc).size)

    def cost_s(self, distance_cls: Any) -> float:
        """Estimated seconds of one core: calls x the kind's cost a call + kernel pairs x its cost a pair + distinct
        items x its cost an item."""
        return (
            self.calls * distance_cls.cost_per_call_s
            + self.kernel_pairs * distance_cls.cost_per_pair_s
            + self.items * distance_cls.cost_per_item_s
        )


def plan_pairs(a: np.ndarray, b: np.ndarray) -> PairPlan:
    """The :class:`PairPlan` of the pairs ``(a[t], b[t])``."""
    items, counts = np.unique(np.concatenate([a, b]), return_counts=True)
    ca, cb = counts[np.searchsorted(items, a)], counts[np.searchsorted(items, b)]
    swap = (cb > ca) | ((cb == ca) & (b < a))
    rows, cols = np.where(swap, b, a), np.where(swap, a, b)
    ur, ir = np.unique(rows, return_inverse=True)
    uc, ic = np.unique(cols, return_inverse=True)
    return PairPlan(rows, cols, ur, ir, uc, ic, rectangle=ur.size * uc.size <= 2.5 * rows.size)


def checked_block(distance: Any, rows: Any, cols: Any) -> np.ndarray:
    """``distance.block``, refused unless a float array of the right shape with no NaN (a plugin's mistake must
    not be served as distances; a NaN is named by its items)."""
    block = distance.block(rows, cols)
    check_block(distance.kind, block, len(rows), len(cols), row_ids=rows.ids, col_ids=cols.ids)
    return block


def compute_planned(labels: Any, distance: Any, plan: PairPlan, check: Callable[[], None] = lambda: None) -> np.ndarray:
    """The distances of a plan's pairs, rounded to float32 like stored values. ``check`` is called between
    chunks of about :data:`CHUNK_SECONDS` of estimated work (it raises to stop: the client has
    gone);
    a rectangle estimated under one chunk is one ``block`` call."""
    per_chunk = max(1, int(CHUNK_SECONDS / max(plan.uc.size * type(distance).cost_per_pair_s, 1e-12)))
    if plan.rectangle:
        cols = labels.subset(plan.uc)
        parts = []
        for start in range(0, plan.ur.size, per_chunk):
            check()
            rows = labels.subset(plan.ur[start : start + per_chunk])
            parts.append(checked_block(distance, rows, cols).astype(np.float32))
        return np.concatenate(parts)[plan.ir, plan.ic]
    out = np.empty(plan.rows.size, dtype=np.float32)
    order = np.argsort(plan.ir, kind="stable")
    bounds = np.searchsorted(plan.ir[order], np.arange(plan.ur.size + 1))
    for t, row in enumerate(plan.ur.tolist()):
        check()
        sel = order[bounds[t] : bounds[t + 1]]
        partners, back = np.unique(plan.cols[sel], return_inverse=True)  # a label set holds each item once
        out[sel] = checked_block(distance, labels.subset(np.array([row])), labels.subset(partners))[0, back]
    return out


def compute_pairs(labels: Any, distance: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distances of the pairs ``(a[t], b[t])`` from the labels, rounded to float32 like stored values
    (:func:`plan_pairs`, then :func:`compute_planned`)."""
    return compute_planned(labels, distance, plan_pairs(a, b))
