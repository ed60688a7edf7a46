"""The bounded cache of distances a served store computed on demand. (Its row blocks, kNN and dense, are cached by
:mod:`labeldist.view.rowcache`, which the in-process source of :mod:`labeldist.client` uses too.)"""

from __future__ import annotations

import threading

import numpy as np

#: Fibonacci hashing multiplier (2^64 / golden ratio): spreads consecutive pair keys over the table
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


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
