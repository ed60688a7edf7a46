"""How many threads one kernel call may start: the budget the engine gives each task it runs.

A kernel that starts threads of its own (FAISS's OpenMP search) reads :func:`thread_budget`: None outside a task
(the library's own default), else the threads its task may use, which the engine sets around every task it runs
on a Dask worker (:func:`labeldist.engine.runner.run_block_task`). The kernel never asks Dask itself.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextvars import ContextVar

_budget: ContextVar[int | None] = ContextVar("labeldist_thread_budget", default=None)


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity; the machine's count where that is not known)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def thread_budget() -> int | None:
    """The threads the running task may start, or None where no task set a budget.

    >>> thread_budget() is None
    True
    """
    return _budget.get()


@contextlib.contextmanager
def limited_threads(threads: int | None) -> Iterator[None]:
    """Run the ``with`` block under a budget of ``threads`` (None: no budget).

    >>> with limited_threads(2):
    ...     thread_budget()
    2
    """
    token = _budget.set(threads)
    try:
        yield
    finally:
        _budget.reset(token)
