"""The exact pairs a job passes from finished row blocks to those not yet started (labeldist.engine.exchange)."""

import numpy as np

from labeldist.core.cascade import KnownPairs
from labeldist.engine.exchange import PairExchange


def pairs(rows, cols, values, exact=None):
    exact = np.ones(len(rows), bool) if exact is None else np.array(exact)
    return KnownPairs(np.array(rows), np.array(cols), np.array(values, dtype=np.float32), exact)


def test_pairs_go_reversed_to_the_blocks_not_yet_started_each_once():
    exchange = PairExchange(n_items=10, block_rows=4, todo=[0, 1, 2])  # rows 0-3, 4-7, 8-9
    assert len(exchange.take(0).rows) == 0
    # (2, 3): block 0 has started; (1, 9): a lower bound, where block 0's search stopped early
    exchange.add(pairs([0, 1, 2, 3], [5, 9, 3, 8], [0.5, 0.9, 0.3, 0.8], [True, False, True, True]))
    assert (exchange.held, exchange.peak) == (3, 3)
    got = exchange.take(1)
    assert (got.rows.tolist(), got.cols.tolist(), got.values.tolist(), got.exact.tolist()) == ([5], [0], [0.5], [True])
    assert got.values.dtype == np.float32 and exchange.held == 2
    exchange.add(pairs([4, 6], [8, 2], [0.25, 0.75]))  # (6, 2): block 0 started
    exchange.add(pairs([4], [8], [0.25]))  # block 1 run twice (a lost worker): sent twice
    got = exchange.take(2)
    assert sorted(zip(got.rows.tolist(), got.cols.tolist(), got.values.tolist(), got.exact.tolist())) == [
        (8, 3, 0.800000011920929, True),
        (8, 4, 0.25, True),
        (9, 1, 0.8999999761581421, False),
    ]
    exchange.add(pairs([8], [6], [0.5]))  # every block has started: nothing kept
    assert exchange.held == 0 and exchange.peak == 4 and not exchange.inbox


def test_blocks_outside_the_job_are_never_kept_for():
    """A resumed job's blocks already written are not in its todo: pairs for them are dropped."""
    exchange = PairExchange(n_items=9, block_rows=3, todo=[2])
    exchange.add(pairs([7, 8, 6], [0, 4, 8], [1.0, 2.0, 3.0]))  # the last: within block 2, which has not started
    got = exchange.take(2)
    assert (got.rows.tolist(), got.cols.tolist()) == ([8], [6]) and exchange.held == 0
