"""How large a dense matrix may be: the limit every kind's precompute (and append) checks before writing.

A store's dense matrix is N x N float32, 4 N^2 bytes. Above :data:`DENSE_LIMIT` (or the ``--dense-limit`` given)
the command refuses before anything is read into the engine or written, naming the size and ``--knn-only``.
"""

from __future__ import annotations

import math

from labeldist.errors import UsageError

#: the largest dense matrix (N x N float32: 4 N^2 bytes) a store gets unless told otherwise: 1 GiB, 16,384 items.
#: Above it precompute refuses before writing anything (``dense_limit=``, ``--dense-limit`` raise it; ``--knn-only``
#: stores the kNN lists alone): at 50,000 items a dense matrix is 10 GB
DENSE_LIMIT = 2**30


def dense_bytes(n_items: int) -> int:
    """Bytes of the dense N x N float32 matrix of ``n_items`` items."""
    return 4 * n_items * n_items


def check_dense_size(n_items: int, limit: int | None, what: str = "items") -> None:
    """ValueError naming the size, the limit and ``--knn-only`` when a dense matrix of ``n_items`` would exceed
    ``limit`` bytes (None: no limit)."""
    from dask.utils import format_bytes

    size = dense_bytes(n_items)
    if limit is not None and size > limit:
        most = math.isqrt(limit // 4)
        raise UsageError(
            f"a dense matrix of {n_items:,} {what} (N x N float32) takes {format_bytes(size)}, over "
            f"the dense limit of {format_bytes(limit)} ({most:,} {what} at most); nothing was written. "
            f"Pass --knn-only to store the kNN lists alone (dense=False), or --dense-limit "
            f"{_limit_needed(size)} to build it anyway (dense_limit=)"
        )


def _limit_needed(size: int) -> str:
    """A ``--dense-limit`` value at least ``size``, in whole GiB (or MiB)."""
    unit, name = (2**30, "GiB") if size >= 2**30 else (2**20, "MiB")
    return f"{-(-size // unit)}{name}"
