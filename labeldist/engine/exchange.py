"""Exact distances passed from the row blocks that have finished to those not yet started, for a distance that shares
them (:attr:`~labeldist.distances.base.LabelDistance.shares_exact_pairs`: caption sets).

A kNN search computes the exact distance of every pair whose lower bound is below its row's k-th distance. For
caption sets that is 1.6-1.8 k pairs an item, and about 60 % of them are needed from both sides: image i's search
computes W(i, j), image j's W(j, i), the same float (the transport is solved in one orientation). The job keeps, in
the process that submits its tasks, the pairs each finished block computed, reversed and sorted by the block of their
column; a block submitted later is given the pairs kept for it (``known``) and computes only the rest. A pair its
first side gave up above that row's limit passes on as the lower bound the solver stopped at, which may rule it out
for the other side. The lists do not change, only the work: which pairs a block is given depends on which blocks
finished before it started, so ``progress/exact_pairs`` may differ from one run to the next (and a resumed job
starts with nothing kept).

Blocks are submitted a few per worker thread at a time (:meth:`~labeldist.engine.runner.BlockJob.run`), so that
later blocks start after most of those before them have finished.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from labeldist.core.cascade import KnownPairs


class PairExchange:
    """The exact pairs kept for the row blocks of ``todo`` (``block_rows`` rows each, of ``n_items``) that have not
    started: :meth:`add` what a block computed, :meth:`take` what is kept for a block as it starts."""

    def __init__(self, n_items: int, block_rows: int, todo: Iterable[int]) -> None:
        self.block_rows = block_rows
        self.waiting = np.zeros(-(-n_items // block_rows), dtype=bool)
        self.waiting[list(todo)] = True
        self.inbox: dict[int, list[KnownPairs]] = {}
        #: pairs held now, and at most so far (a job's memory)
        self.held = self.peak = 0

    def add(self, pairs: KnownPairs) -> None:
        """Keep what a block learned of the pairs ``(rows[t], cols[t])`` it computed (exact values, and lower bounds
        where its search stopped early), as ``(cols[t], rows[t])``, for the blocks of their columns that have not
        started; the rest is dropped."""
        cols = np.asarray(pairs.cols, dtype=np.int64)
        target = cols // self.block_rows
        keep = np.flatnonzero(self.waiting[target])
        if len(keep) == 0:
            return
        keep = keep[np.argsort(target[keep], kind="stable")]
        blocks, starts = np.unique(target[keep], return_index=True)
        for block, part in zip(blocks.tolist(), np.split(keep, starts[1:])):
            mine = KnownPairs(
                cols[part].astype(np.int32),
                np.asarray(pairs.rows)[part].astype(np.int32),
                np.asarray(pairs.values)[part].astype(np.float32),
                np.asarray(pairs.exact)[part],
            )
            self.inbox.setdefault(block, []).append(mine)
        self.held += len(keep)
        self.peak = max(self.peak, self.held)

    def take(self, block: int) -> KnownPairs:
        """The pairs kept for row block ``block`` (rows in the block, each pair once), which starts now: nothing more
        is kept for it."""
        self.waiting[block] = False
        pairs = KnownPairs.joined(self.inbox.pop(block, []))
        self.held -= len(pairs.rows)
        rows, cols = pairs.rows.astype(np.int64), pairs.cols.astype(np.int64)
        # a block run twice (a lost worker) may have sent its pairs twice: each pair once, its exact value first
        keys = rows * (int(cols.max(initial=0)) + 1) + cols
        order = np.lexsort((~pairs.exact, keys))
        _, first = np.unique(keys[order], return_index=True)
        return KnownPairs(rows, cols, pairs.values.astype(np.float32), pairs.exact).taken(order[first])
