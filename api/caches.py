"""Bounded caches of a served store: dense-matrix row blocks (LRU by bytes) and distances computed on demand."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

#: Fibonacci hashing multiplier (2^64 / golden ratio): spreads consecutive pair keys over the table
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


class RowBlockCache:
    """Row blocks of a dense (N, N) matrix, each read whole (one shard read) and kept least recently used first
    out, within ``max_bytes``. Thread-safe; a block is read once even when many threads miss it together.

    ``read(start, stop)`` returns rows ``start:stop`` of the matrix.
    """

    def __init__(self, read: Callable[[int, int], np.ndarray], n_items: int, block_rows: int, max_bytes: int) -> None:
        if block_rows < 1:
            raise ValueError(f"block_rows must be at least 1, got {block_rows}")
        self._read = read
        self.n_items, self.block_rows, self.max_bytes = n_items, block_rows, max_bytes
        self._blocks: OrderedDict[int, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._block_locks = [threading.Lock() for _ in range(-(-n_items // block_rows))]
        self.reads = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def holds(self, rows: np.ndarray) -> bool:
        """Whether every row block of ``rows`` is in memory now (reading them would not touch the disk)."""
        blocks = self._blocks
        return all(b in blocks for b in np.unique(np.asarray(rows) // self.block_rows).tolist())

    def block(self, b: int) -> np.ndarray:
        """Row block ``b`` (rows ``b * block_rows`` on), read-only."""
        with self._lock:
            arr = self._blocks.get(b)
            if arr is not None:
                self._blocks.move_to_end(b)
                return arr
        with self._block_locks[b]:  # one reader per block; the others wait for it and find it cached
            with self._lock:
                arr = self._blocks.get(b)
                if arr is not None:
                    return arr
            start = b * self.block_rows
            arr = np.ascontiguousarray(self._read(start, min(start + self.block_rows, self.n_items)), np.float32)
            arr.flags.writeable = False
            self.reads += 1
            with self._lock:
                self._blocks[b] = arr
                self._bytes += arr.nbytes
                while self._bytes > self.max_bytes and self._blocks:
                    _, old = self._blocks.popitem(last=False)
                    self._bytes -= old.nbytes
            return arr

    def gather(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Entries ``(i[t], j[t])`` of the matrix, float32."""
        out = np.empty(len(i), dtype=np.float32)
        blocks = i // self.block_rows
        for b in np.unique(blocks).tolist():
            sel = np.flatnonzero(blocks == b)
            out[sel] = self.block(b)[i[sel] - b * self.block_rows, j[sel]]
        return out

    def submatrix(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The (len(rows), len(cols)) submatrix, float32."""
        out = np.empty((len(rows), len(cols)), dtype=np.float32)
        blocks = rows // self.block_rows
        for b in np.unique(blocks).tolist():
            sel = np.flatnonzero(blocks == b)
            out[sel] = self.block(b)[np.ix_(rows[sel] - b * self.block_rows, cols)]
        return out


class PairCache:
    """A bounded, direct-mapped table of float32 values keyed by non-negative int64 keys.

    Each key has one slot (Fibonacci hashing); a new key evicts whatever held its slot. Lookups and inserts
    are vectorised over arrays of keys and guarded by one lock, so readers never see a key with another
    key's value. ``entries`` is rounded up to a power of two; fewer than 2 disables the cache.
    """

    def __init__(self, entries: int) -> None:
        bits = max(int(entries) - 1, 0).bit_length()
        self.size = 1 << bits if entries >= 2 else 0
        self._shift = np.uint64(64 - bits)
        self._keys = np.full(self.size, -1, dtype=np.int64)
        self._values = np.zeros(self.size, dtype=np.float32)
        self._lock = threading.Lock()

    def _slots(self, keys: np.ndarray) -> np.ndarray:
        return ((keys.astype(np.uint64) * _GOLDEN) >> self._shift).astype(np.intp)

    def get(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(values, found)``: the cached value of each key, and whether it was there."""
        if not self.size:
            return np.zeros(len(keys), np.float32), np.zeros(len(keys), bool)
        slots = self._slots(keys)
        with self._lock:
            found = self._keys[slots] == keys
            values = self._values[slots]
        return values, found

    def put(self, keys: np.ndarray, values: np.ndarray) -> None:
        if not self.size:
            return
        slots = self._slots(keys)
        # keys sharing a slot: keep one of them, so that each slot's key and value come from the same pair
        slots, first = np.unique(slots, return_index=True)
        with self._lock:
            self._keys[slots] = keys[first]
            self._values[slots] = values[first]
