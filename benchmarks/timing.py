"""Shared timing helper of the benchmark scripts (run as ``python benchmarks/<script>.py``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time of ``repeats`` calls and the last result."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out
