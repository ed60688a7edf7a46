"""The prefetch queue: order, look-ahead bound, errors, closing."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import labeldist.client.prefetch
from labeldist.client.prefetch import Prefetcher

#: how long a test waits for a producer thread: long, the machine may be a busy 2-core one
WAIT = 60.0


def test_results_come_in_index_order_whatever_the_thread_timing() -> None:
    def produce(i: int) -> int:
        time.sleep(random.random() * 0.01)
        return i * i

    with Prefetcher(produce, depth=6, workers=4, start=3, stop=30) as queue:
        assert list(queue) == [i * i for i in range(3, 30)]


def test_never_more_than_depth_ahead_of_the_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted where results are requested (submitted to the pool), which happens in the consumer's own calls:
    no waiting for threads to have started, and nothing a slow machine can change."""
    requested: list[int] = []

    class Counting(ThreadPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):
            requested.append(args[0])
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(labeldist.client.prefetch, "ThreadPoolExecutor", Counting)
    queue = Prefetcher(lambda i: i, depth=3, workers=2)
    assert requested == [0, 1, 2]  # three requested ahead, and no more
    assert next(queue) == 0
    assert requested == [0, 1, 2, 3]
    queue.close()


def test_runs_ahead_while_the_consumer_works() -> None:
    """While the consumer holds result 0 and asks for nothing, the producers compute 1 to 4: each announces its
    result, and the test waits for those events (not for a time it hopes is long enough)."""
    produced = {i: threading.Event() for i in range(8)}

    def produce(i: int) -> int:
        produced[i].set()
        return i

    with Prefetcher(produce, depth=4, workers=1) as queue:
        assert next(queue) == 0
        for i in (1, 2, 3, 4):  # the consumer "trains" meanwhile, calling nothing
            assert produced[i].wait(WAIT), f"result {i} was not produced ahead of the consumer"
        assert not produced[5].is_set(), "no more than depth ahead"
        assert [next(queue) for _ in range(3)] == [1, 2, 3]


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
