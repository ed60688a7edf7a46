"""Rows of a store read on demand, a block of rows at a time, and kept in memory within a bound.

A store keeps its (N, k) kNN lists and its (N, N) dense matrix in row blocks: one compressed, checksummed chunk
(or shard) per ``block_rows`` rows (:mod:`labeldist.store`). :class:`RowBlockCache` reads such a block whole, by
one call of the ``read(start, stop)`` it is given (a :class:`~labeldist.store.StoreReader` method, which checks
the block's CRC32C as it decodes it), and keeps it, least recently used out first, within ``max_bytes``: memory
bounded by the setting, not by N. :class:`KnnRows` is the kNN lists through one: a neighbour list, the rows of a
minibatch's anchors, the pairs a kNN-only store holds. The service (:mod:`labeldist.api.serving.registry`) and the
in-process source (:mod:`labeldist.client.local`) both read rows through these classes.

    >>> m = np.arange(20, dtype=np.float32).reshape(5, 4)
    >>> cache = RowBlockCache(lambda a, b: m[a:b], n_items=5, block_rows=2, max_bytes=1 << 20)
    >>> cache.gather(np.array([4, 0]), np.array([1, 3])).tolist(), cache.reads
    ([17.0, 3.0], 2)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from labeldist.errors import UsageError

#: what ``read(start, stop)`` returns: one array of rows ``start:stop``, or several arrays of those rows (the kNN
#: lists' indices and distances)
Block = np.ndarray | tuple[np.ndarray, ...]


def _arrays(block: Block) -> tuple[np.ndarray, ...]:
    return block if isinstance(block, tuple) else (block,)


class RowBlockCache:
    """Row blocks of an array of ``n_items`` rows, each read whole by ``read(start, stop)`` (one stored chunk or
    shard) and kept least recently used first out, within ``max_bytes`` (0: nothing kept; a block larger than the
    limit is answered but not kept). Thread-safe; a block is read once even when many threads miss it together,
    and blocks are handed out read-only.

    ``read`` returns rows ``start:stop`` as one array or a tuple of arrays (each with ``stop - start`` rows).
    :meth:`gather` and :meth:`submatrix` are for a cache of one 2-D array (a dense matrix).
    """

    def __init__(self, read: Callable[[int, int], Block], n_items: int, block_rows: int, max_bytes: int) -> None:
        if block_rows < 1:
            raise UsageError(f"block_rows must be at least 1, got {block_rows}")
        if max_bytes < 0:
            raise UsageError(f"max_bytes must be at least 0, got {max_bytes}")
        self._read = read
        self.n_items, self.block_rows, self.max_bytes = n_items, block_rows, max_bytes
        self.n_blocks = -(-n_items // block_rows)
        self._blocks: OrderedDict[int, Block] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        #: one lock per block being read now (not per block of the array: memory does not grow with N)
        self._loading: dict[int, threading.Lock] = {}
        self.reads = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks held now (at most ``max_bytes``)."""
        return self._bytes

    def __len__(self) -> int:
        """How many blocks are held now."""
        return len(self._blocks)

    def holds(self, rows: np.ndarray | int) -> bool:
        """Whether every row block of ``rows`` is in memory now (reading them would not touch the disk)."""
        blocks = self._blocks
        if isinstance(rows, (int, np.integer)):
            return int(rows) // self.block_rows in blocks
        return all(b in blocks for b in np.unique(np.asarray(rows) // self.block_rows).tolist())

    def block(self, b: int) -> Block:
        """Row block ``b`` (rows ``b * block_rows`` on), read-only."""
        if not 0 <= b < self.n_blocks:
            raise IndexError(f"row block {b} is outside 0..{self.n_blocks - 1}")
        with self._lock:
            value = self._blocks.get(b)
            if value is not None:
                self._blocks.move_to_end(b)
                return value
            loading = self._loading.setdefault(b, threading.Lock())
        with loading:  # one reader per block; the others wait for it and find it cached (or read it themselves)
            with self._lock:
                value = self._blocks.get(b)
                if value is not None:
                    self._blocks.move_to_end(b)
                    return value
            try:
                start = b * self.block_rows
                value = self._read(start, min(start + self.block_rows, self.n_items))
                for arr in _arrays(value):
                    arr.flags.writeable = False
                with self._lock:
                    self.reads += 1
                    self._keep(b, value)
                return value
            finally:
                with self._lock:
                    if self._loading.get(b) is loading:
                        del self._loading[b]

    def _keep(self, b: int, value: Block) -> None:  # under self._lock
        if b in self._blocks:
            return
        self._blocks[b] = value
        self._bytes += sum(arr.nbytes for arr in _arrays(value))
        while self._bytes > self.max_bytes and self._blocks:
            _, old = self._blocks.popitem(last=False)
            self._bytes -= sum(arr.nbytes for arr in _arrays(old))

    def by_block(self, rows: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """``(block, positions in rows)`` for every block that ``rows`` touch."""
        blocks = rows // self.block_rows
        if blocks.size and (blocks == blocks[0]).all():
            return [(int(blocks[0]), np.arange(rows.size))]
        return [(b, np.flatnonzero(blocks == b)) for b in np.unique(blocks).tolist()]

    def gather(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Entries ``(i[t], j[t])`` of the matrix, float32."""
        i, j = np.asarray(i), np.asarray(j)
        out = np.empty(len(i), dtype=np.float32)
        for b, sel in self.by_block(i):
            out[sel] = self.block(b)[i[sel] - b * self.block_rows, j[sel]]  # type: ignore[call-overload]
        return out

    def submatrix(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The (len(rows), len(cols)) submatrix, float32."""
        rows = np.asarray(rows)
        out = np.empty((len(rows), len(cols)), dtype=np.float32)
        for b, sel in self.by_block(rows):
            out[sel] = self.block(b)[np.ix_(rows[sel] - b * self.block_rows, cols)]  # type: ignore[call-overload]
        return out


class KnnRows:
    """The kNN lists of a store, (N, k) indices (int32, -1 padding at the end of a row) and distances (float32),
    read on demand a row block at a time through a :class:`RowBlockCache` of ``max_bytes``.

    ``read(start, stop)`` returns ``(indices, distances)`` of rows ``start:stop``
    (:meth:`labeldist.store.StoreReader.knn_rows`: checked as it is read).

    >>> ind = np.array([[1, 2], [0, -1], [1, 0]], dtype=np.int32)
    >>> dist = np.array([[1.0, 2.0], [1.0, np.inf], [3.0, 2.0]], dtype=np.float32)
    >>> knn = KnnRows(lambda a, b: (ind[a:b], dist[a:b]), n_items=3, k=2, block_rows=2, max_bytes=1 << 20)
    >>> [a.tolist() for a in knn.neighbors(1, 5)]
    [[0], [1.0]]
    >>> knn.rows(np.array([2, 0]))[0].tolist()
    [[1, 0], [1, 2]]
    """

    def __init__(
        self,
        read: Callable[[int, int], tuple[np.ndarray, np.ndarray]],
        n_items: int,
        k: int,
        block_rows: int,
        max_bytes: int,
    ) -> None:
        self.n_items, self.k = n_items, k
        self.cache = RowBlockCache(lambda a, b: self._checked(read, a, b), n_items, block_rows, max_bytes)
        self.block_rows = block_rows

    def _checked(
        self, read: Callable[[int, int], tuple[np.ndarray, np.ndarray]], start: int, stop: int
    ) -> tuple[np.ndarray, np.ndarray]:
        indices, distances = read(start, stop)
        indices = np.ascontiguousarray(indices, dtype=np.int32)
        distances = np.ascontiguousarray(distances, dtype=np.float32)
        for name, arr in (("indices", indices), ("distances", distances)):
            if arr.shape != (stop - start, self.k):
                raise UsageError(
                    f"kNN {name} rows {start}:{stop} have shape {arr.shape}, expected ({stop - start}, {self.k})"
                )
        return indices, distances

    def holds(self, rows: np.ndarray | int) -> bool:
        """Whether the lists of ``rows`` are in memory now (reading them would not touch the disk)."""
        return self.cache.holds(rows)

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Item ``i``'s whole list, padding included: indices and distances, read-only views."""
        b, r = divmod(int(i), self.block_rows)
        indices, distances = self.cache.block(b)
        return indices[r], distances[r]

    def neighbors(self, i: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Item ``i``'s ``k`` nearest (fewer where its list is padded): indices int32 and distances float32,
        read-only views."""
        indices, distances = self.row(i)
        kk = min(k, int(np.count_nonzero(indices >= 0)))
        return indices[:kk], distances[:kk]

    def rows(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The lists of ``items`` (any order, repeats allowed), padding included: ``(len(items), k)`` int32 indices
        and float32 distances, new arrays."""
        items = np.asarray(items, dtype=np.int64).reshape(-1)
        indices = np.empty((items.size, self.k), dtype=np.int32)
        distances = np.empty((items.size, self.k), dtype=np.float32)
        for b, sel in self.cache.by_block(items):
            ind, dist = self.cache.block(b)
            local = items[sel] - b * self.block_rows
            indices[sel], distances[sel] = ind[local], dist[local]
        return indices, distances

    def lookup(self, i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(values, found)`` for the pairs ``(i[t], j[t])``, as :func:`labeldist.view.knnlookup.knn_lookup` over the
        whole lists: the stored distance where ``j`` is in ``i``'s list or ``i`` in ``j``'s, NaN elsewhere; 0 for
        ``(i, i)``. Reads the lists of the ``i`` first, then those of the ``j`` only for pairs not found yet."""
        from labeldist.view.knnlookup import lookup_in_rows  # numba: imported only where a store has no dense matrix

        i = np.ascontiguousarray(i, dtype=np.int64).reshape(-1)
        j = np.ascontiguousarray(j, dtype=np.int64).reshape(-1)
        found = i == j
        values = np.where(found, np.float32(0), np.float32(np.nan)).astype(np.float32)
        for a, b in ((i, j), (j, i)):  # b in a's list, then a in b's, for the pairs not found yet
            todo = np.flatnonzero(~found)
            if not todo.size:
                break
            rows, at = np.unique(a[todo], return_inverse=True)
            indices, distances = self.rows(rows)
            more, hit = lookup_in_rows(indices, distances, at.reshape(-1), b[todo])
            values[todo[hit]] = more[hit]
            found[todo[hit]] = True
        return values, found
