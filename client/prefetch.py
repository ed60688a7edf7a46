"""A background prefetch queue: results of ``produce(0), produce(1), ...`` computed ahead by worker threads.

    with Prefetcher(lambda i: client.batches(store, count=4, size=150, seed=i), depth=8) as queue:
        for batches in queue:         # in order 0, 1, 2, ... however many threads fetch them
            ...

Up to ``depth`` results are requested ahead of the consumer, so the training loop finds its next minibatch
ready as long as the service delivers faster than a step consumes (the trainer logs the time it waited).
Results come in index order, so a seeded run is reproducible whatever the thread timing. An exception in
``produce`` is raised in the consumer when its result is reached.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from labeldist.errors import UsageError

T = TypeVar("T")


class Prefetcher(Generic[T]):
    """Iterate over ``produce(start), produce(start + 1), ...`` up to ``stop`` (exclusive; None: forever).

    Parameters
    ----------
    produce : called with the index of the result, in a worker thread (must be thread-safe).
    depth : results requested ahead of the consumer (memory: ``depth`` results).
    workers : threads calling ``produce`` concurrently (I/O-bound producers gain from 2-4).
    """

    def __init__(
        self, produce: Callable[[int], T], *, depth: int = 4, workers: int = 2, start: int = 0, stop: int | None = None
    ) -> None:
        if depth < 1 or workers < 1:
            raise UsageError(f"depth and workers must be >= 1, got depth={depth}, workers={workers}")
        self._produce, self._depth = produce, depth
        self._next, self._stop = start, stop
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prefetch")
        self._pending: deque[Future[T]] = deque()
        self._closed = False
        self._fill()

    def _fill(self) -> None:
        while not self._closed and len(self._pending) < self._depth and (self._stop is None or self._next < self._stop):
            self._pending.append(self._pool.submit(self._produce, self._next))
            self._next += 1

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        if not self._pending:
            raise StopIteration
        result = self._pending.popleft().result()  # re-raises the producer's exception
        self._fill()
        return result

    def close(self) -> None:
        """Stop requesting; drop results not yet consumed (running calls finish in the background)."""
        self._closed = True
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Prefetcher[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
