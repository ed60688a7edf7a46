"""The prefetch queue: order, look-ahead bound, errors, closing."""

from __future__ import annotations

import random
import threading
import time

import pytest
from labeldist.trainer.prefetch import Prefetcher


def test_results_come_in_index_order_whatever_the_thread_timing() -> None:
    def produce(i: int) -> int:
        time.sleep(random.random() * 0.01)
        return i * i

    with Prefetcher(produce, depth=6, workers=4, start=3, stop=30) as queue:
        assert list(queue) == [i * i for i in range(3, 30)]


def test_never_more_than_depth_ahead_of_the_consumer() -> None:
    started: list[int] = []
    lock = threading.Lock()

    def produce(i: int) -> int:
        with lock:
            started.append(i)
        return i

    queue = Prefetcher(produce, depth=3, workers=2)
    time.sleep(0.2)
    assert sorted(started) == [0, 1, 2]  # three requested ahead, and no more
    assert next(queue) == 0
    time.sleep(0.2)
    assert sorted(started) == [0, 1, 2, 3]
    queue.close()


def test_runs_ahead_while_the_consumer_works() -> None:
    def produce(i: int) -> int:
        time.sleep(0.2)
        return i

    with Prefetcher(produce, depth=4, workers=1) as queue:
        next(queue)
        time.sleep(1.2)  # the consumer "trains" meanwhile (the producer needs 0.8 s for the next 4)
        assert queue.ready >= 3  # ... so the next results are already there
        t0 = time.perf_counter()
        assert [next(queue) for _ in range(3)] == [1, 2, 3]
        assert time.perf_counter() - t0 < 0.3  # fetching them one by one would take 0.6 s


def test_a_producer_error_is_raised_in_the_consumer_at_its_index() -> None:
    def produce(i: int) -> int:
        if i == 2:
            raise RuntimeError("fetch 2 failed")
        return i

    with Prefetcher(produce, depth=4, workers=2) as queue:
        assert next(queue) == 0 and next(queue) == 1
        with pytest.raises(RuntimeError, match="fetch 2 failed"):
            next(queue)


def test_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="depth"):
        Prefetcher(lambda i: i, depth=0)
