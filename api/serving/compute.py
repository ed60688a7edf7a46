"""Bounds on the distances a request makes the service compute on demand: a cost budget, a bounded pool, and
cancellation when the client has gone.

A kNN-only store computes every pair it does not hold from the labels, and one small request can ask for millions.
**Budget:** a request's cost is estimated from :func:`labeldist.view.pairs.plan_pairs` and the kind's unit costs
(:attr:`LabelDistance.cost_per_call_s`, :attr:`~LabelDistance.cost_per_pair_s`), and over
``LABELDIST_COMPUTE_BUDGET_S`` refused with 413 before any work. **Pool:** at most ``LABELDIST_COMPUTE_WORKERS``
computations at once; a request waits for its slot on the event loop, holding no worker thread (a computation with
no slot stops before any work, :class:`SlotWanted`, and runs again holding one), and gets 503 with ``Retry-After``
after ``LABELDIST_COMPUTE_QUEUE_S``; look-ups of stored values never take a slot. **Cancellation:** the computation
checks for the client's ``http.disconnect`` between chunks (:data:`~labeldist.view.pairs.CHUNK_SECONDS` of work each).
docs/http-api.md, "Where distances come from".
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive

from labeldist.api.errors import APIError, TooLarge, Unavailable
from labeldist.errors import LabeldistError

T = TypeVar("T")

#: what a 503 for a saturated pool tells the client to wait (seconds)
RETRY_AFTER_S = 1


class Busy(Unavailable):
    """Every computation slot is taken: 503 with ``Retry-After``."""

    headers = {"Retry-After": str(RETRY_AFTER_S)}


class ClientGone(APIError):
    """The client disconnected while its distances were being computed: the work was stopped. The answer goes to
    nobody; 499 is the status proxies log for "client closed request"."""

    status_code = 499

    def __init__(self) -> None:
        super().__init__("the client disconnected; its computation was stopped")


class SlotWanted(LabeldistError):
    """Raised by :meth:`ComputeGuard.slot` in a worker thread that has no slot yet: the computation stops before any
    work, so that :func:`run_cancellable` can wait for a slot on the event loop and run it again holding one.
    Never reaches a client."""


class ComputePool:
    """The slots on-demand computations run in: one per allowed concurrent computation, shared by every store.

    Slots are taken and given back on the event loop only (:meth:`acquire`, :meth:`release`): a waiting request
    holds no worker thread. The semaphore is made on first use, inside the running loop.
    """

    def __init__(self, workers: int, queue_s: float) -> None:
        self.workers, self.queue_s = workers, queue_s
        self._slots: anyio.Semaphore | None = None
        #: requests waiting for a slot now (a figure for tests and logs)
        self.waiting = 0

    @property
    def slots(self) -> anyio.Semaphore:
        if self._slots is None:
            self._slots = anyio.Semaphore(self.workers)
        return self._slots

    @property
    def busy(self) -> int:
        """Slots taken now."""
        return self.workers - self.slots.value

    async def acquire(self) -> None:
        """Take a slot, waiting at most ``queue_s``; :class:`Busy` (503, Retry-After) when none frees up in time."""
        try:
            self.slots.acquire_nowait()  # a free slot is taken even with a queue time of 0
            return
        except anyio.WouldBlock:
            pass
        self.waiting += 1
        try:
            with anyio.move_on_after(self.queue_s):
                await self.slots.acquire()
                return
        finally:
            self.waiting -= 1
        raise Busy(
            f"every one of the {self.workers} on-demand computation slots is busy "
            f"(LABELDIST_COMPUTE_WORKERS); retry in a moment"
        )

    def release(self) -> None:
        self.slots.release()


class ComputeGuard:
    """One request's bounds on computing: its budget, the shared pool, and whether its client has gone.

    Passed down to :meth:`labeldist.api.serving.registry.ServedStore.distances`, which calls :meth:`admit` with its
    estimate
    before computing, computes inside :meth:`slot` and calls :meth:`check` between chunks. ``pool`` None: no pool
    (code outside a request).
    """

    def __init__(self, budget_s: float, pool: ComputePool | None) -> None:
        self.budget_s, self.pool = budget_s, pool
        self.spent_s = 0.0
        self.cancelled = threading.Event()
        #: set by :func:`run_cancellable` while it holds a slot of ``pool`` for this request
        self.holds_slot = False

    def admit(self, cost_s: float, what: str) -> None:
        """Count ``cost_s`` of estimated work against the budget; TooLarge (413) when the request goes over it."""
        if self.spent_s + cost_s > self.budget_s:
            raise TooLarge(
                f"{what}: estimated {format_seconds(self.spent_s + cost_s)} of on-demand computation, over the "
                f"budget of {format_seconds(self.budget_s)} a request (LABELDIST_COMPUTE_BUDGET_S); ask for fewer "
                "pairs not stored (a smaller batch, no pairwise matrix, or a store with the dense matrix)"
            )
        self.spent_s += cost_s

    def slot(self) -> contextlib.AbstractContextManager[None]:
        """What a computation runs inside: nothing to take where the request already holds a slot (or there is no
        pool); otherwise :class:`SlotWanted`, before any work."""
        if self.pool is None or self.holds_slot:
            return contextlib.nullcontext()
        raise SlotWanted()

    def check(self) -> None:
        """ClientGone once the client has disconnected."""
        if self.cancelled.is_set():
            raise ClientGone()


def unguarded() -> ComputeGuard:
    """No budget, no pool, never cancelled: for code that calls the store outside a request (tests, tools)."""
    return ComputeGuard(math.inf, None)


def format_seconds(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds >= 0.01 else f"{seconds * 1e3:.3g} ms"


def guard_for(state: Any) -> ComputeGuard:
    """A fresh guard over the app's pool and the budget of its settings."""
    return ComputeGuard(state.settings.compute_budget_s, state.compute_pool)


async def run_cancellable(
    receive: Receive, guard: ComputeGuard, func: Callable[..., T], /, *args: Any, **kwargs: Any
) -> T:
    """``func(*args, **kwargs)`` in a worker thread, setting ``guard.cancelled`` if the client disconnects
    meanwhile (its body must already be read: the next message of ``receive`` is then the disconnect).

    When ``func`` needs a compute slot and has none (:class:`SlotWanted`), the slot is awaited here, on the event
    loop, and ``func`` runs again from the start holding it (its budget counted afresh): what it did before asking
    (looking up stored values, planning, estimating) is cheap next to computing.
    """

    waiting = anyio.CancelScope()  # the wait for a slot, which a disconnect ends at once

    async def watch() -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                guard.cancelled.set()
                waiting.cancel()
                return

    failure: Exception | None = None
    done, result = False, None
    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        try:
            while not done:
                try:
                    result, done = await run_in_threadpool(func, *args, **kwargs), True
                except SlotWanted:
                    if guard.pool is None or guard.holds_slot:
                        raise RuntimeError("a computation asked for a compute slot twice") from None
                    with waiting:
                        await guard.pool.acquire()
                        guard.holds_slot, guard.spent_s = True, 0.0
                    if not guard.holds_slot:  # the client went while it waited
                        raise ClientGone() from None
        except Exception as e:  # raised below, outside the task group, which would wrap it in an ExceptionGroup
            failure = e
        finally:
            if guard.holds_slot:
                guard.pool.release()
                guard.holds_slot = False
            group.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result  # type: ignore[return-value]
