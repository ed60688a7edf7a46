"""One complete store opened for answering questions about it: the view the service
(:class:`labeldist.api.serving.registry.ServedStore`) and the in-process :class:`~labeldist.client.LocalSource` share.

A :class:`StoreView` reads through one :class:`~labeldist.store.StoreReader`, pinned to the generation it opened
(a read that meets a newer one raises :class:`~labeldist.store.StoreChangedError`). Its kNN lists and dense rows
are read a row block at a time through bounded caches (:mod:`labeldist.view.rowcache`), its labels and distance loaded
on first need. A pair's distance is the stored one (the dense matrix, else either item's kNN list: the distance
is symmetric), and a pair a kNN-only store does not hold is computed from the labels by the store's own distance
(:mod:`labeldist.view.pairs`). The service adds what is the service's own (its pair cache, compute budget and API key,
errors as HTTP answers) through the hooks :meth:`StoreView.reading` and :meth:`StoreView.load_labels` and the
``compute`` argument of :meth:`StoreView.lookup`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from labeldist.kinds import distance_meaning
from labeldist.store import StoreIdentity, StoreReader, manifest_digest, root_metadata_path
from labeldist.view.pairs import compute_pairs
from labeldist.view.rowcache import KnnRows, RowBlockCache
from labeldist.view.search import searchable, warm_search
from labeldist.view.stored import stored_distance, stored_labels

log = logging.getLogger(__name__)

#: computes the distances of pairs given as keys ``min(i, j) * N + max(i, j)``: their values and how many distinct
#: pairs it computed
ComputePairs = Callable[[np.ndarray], tuple[np.ndarray, int]]


def pair_keys(i: np.ndarray, j: np.ndarray, n_items: int) -> np.ndarray:
    """One int64 key per unordered pair, ``min(i, j) * n_items + max(i, j)``: the same for ``(i, j)`` and ``(j, i)``.

    >>> pair_keys(np.array([3, 1]), np.array([1, 3]), 10).tolist()
    [13, 13]
    """
    return np.minimum(i, j) * n_items + np.maximum(i, j)


class StoreView:
    """A complete store, read-only: ids in memory, kNN lists and dense rows through bounded row-block caches
    (``knn_cache_bytes``, ``dense_cache_bytes``), labels and distance loaded on first need. Thread-safe.

    Opening checks every chunk of the kNN lists (each read once, its CRC32C checked, nothing kept), so that a store
    whose lists are damaged is refused whole; each block is checked again when it is read into the cache."""

    available = True

    def __init__(
        self,
        name: str,
        url: str,
        *,
        knn_cache_bytes: int,
        dense_cache_bytes: int,
        identity: StoreIdentity | None = None,
    ) -> None:
        self.name = name
        self.reader = StoreReader(url, identity)
        self.identity = self.reader.identity
        #: the root metadata whose identity tells whether the folder still holds this generation (one ``stat``)
        self.metadata_path = root_metadata_path(url)
        self.manifest: dict[str, Any] = self.reader.manifest
        #: names the generation this view reads (:func:`~labeldist.store.manifest_digest`): what a client records
        self.digest = manifest_digest(self.manifest)
        self.n_items, self.k = self.reader.n_items, self.reader.k
        self.ids = self.reader.ids
        self.ids.flags.writeable = False
        self.reader.check_knn()
        self.knn = KnnRows(self._read_knn_rows, self.n_items, self.k, self.reader.knn_block_rows, knn_cache_bytes)
        self.dense: RowBlockCache | None = None
        if self.reader.has_dense:
            rows = self.reader.dense_block_rows
            self.dense = RowBlockCache(self._read_dense_rows, self.n_items, rows, dense_cache_bytes)
        self._labels_lock = threading.Lock()
        self._labels: Any = None
        self._distance: Any = None
        self._warmed = False

    def info(self) -> dict[str, Any]:
        """The manifest with the store's ``name``, ``digest``, ``available``, ``has_dense``, ``searchable`` and
        ``distance`` (what its distances mean, in words)."""
        return {
            **self.manifest,
            "name": self.name,
            "digest": self.digest,
            "available": True,
            "has_dense": self.dense is not None,
            "searchable": searchable(self.manifest["kind"]),
            "distance": distance_meaning(self.manifest["kind"], self.manifest.get("params") or {}),
        }

    def changed(self) -> bool:
        """Whether the folder no longer holds the generation this view was opened from."""
        return self.reader.changed()

    def missing_item(self, index: int | np.ndarray, what: str = "item") -> str | None:
        """Which of ``index`` is no item of the store (the first negative or past the last), in the words both the
        service (404) and :class:`~labeldist.client.LocalSource` (StoreNotFound) answer it; None when all are."""
        arr = np.asarray(index).reshape(-1)
        bad = (arr < 0) | (arr >= self.n_items)
        if not bad.any():
            return None
        return f"store {self.name!r} has no {what} {int(arr[np.argmax(bad)])} (items are 0..{self.n_items - 1})"

    # ------------------------------------------------------------ reads from disk
    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Around every read of rows or labels from disk: the service turns the store's errors into answers here."""
        yield

    def _read_knn_rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        with self.reading():
            return self.reader.knn_rows(start, stop)

    def _read_dense_rows(self, start: int, stop: int) -> np.ndarray:
        with self.reading():
            return np.ascontiguousarray(self.reader.dense_rows(start, stop), dtype=np.float32)

    def load_labels(self) -> tuple[Any, Any]:
        """The stored labels (the kind's LabelSet, provenance restored) and the store's distance, read once by
        :meth:`labels_and_distance`."""
        distance = stored_distance(self.reader)
        with self.reading():
            return stored_labels(self.reader), distance

    def labels_and_distance(self) -> tuple[Any, Any]:
        """The labels and distance, loaded on first need (:meth:`load_labels`) and kept."""
        with self._labels_lock:
            if self._labels is None:
                self._labels, self._distance = self.load_labels()
            return self._labels, self._distance

    def warm(self) -> float:
        """Load now what the store's first search or computed distance would: its labels and distance, and for a
        searchable kind one search by an item's own label (:func:`~labeldist.view.search.warm_search`: a sentence
        store's model and embeddings). Returns the seconds it took (0 when already loaded); each step is logged."""
        if self._warmed:
            return 0.0
        t = time.perf_counter()
        log.info("%s: loading its labels and distance", self.name)
        labels, distance = self.labels_and_distance()
        if searchable(self.manifest["kind"]) and len(labels):
            log.info("%s: loading what a search needs (%s)", self.name, type(distance).__name__)
            warm_search(labels, distance)
        self._warmed = True
        seconds = time.perf_counter() - t
        log.info("%s: ready for search and computed distances in %.1f s", self.name, seconds)
        return seconds

    @property
    def warmed(self) -> bool:
        """Whether :meth:`warm` has run, or a search (:meth:`mark_warmed`): a first search or computed distance then
        loads nothing."""
        return self._warmed

    def mark_warmed(self) -> None:
        """A search of the store has run: what :meth:`warm` would load is loaded (it then does nothing)."""
        self._warmed = True

    # ------------------------------------------------------------ distances
    def stored(self, i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distances of the pairs ``(i[t], j[t])`` the store holds: ``(values, found)``, values NaN where not found.
        From the dense matrix when there is one, else from either item's kNN list (the distance is symmetric)."""
        if self.dense is not None:
            return self.dense.gather(i, j), np.ones(len(i), dtype=bool)
        return self.knn.lookup(i, j)

    def compute_keys(self, keys: np.ndarray) -> tuple[np.ndarray, int]:
        """The distances of the pairs ``keys`` (:func:`pair_keys`), computed from the labels by the store's
        distance, each distinct pair once: their values and how many were computed."""
        ukeys, inverse = np.unique(keys, return_inverse=True)
        labels, distance = self.labels_and_distance()
        computed = compute_pairs(labels, distance, ukeys // self.n_items, ukeys % self.n_items)
        return computed[inverse], int(ukeys.size)

    def lookup(self, i: np.ndarray, j: np.ndarray, compute: ComputePairs | None = None) -> tuple[np.ndarray, int]:
        """Distances of the pairs ``(i[t], j[t])``, float32: stored, else from ``compute`` (default
        :meth:`compute_keys`). Returns the values and how many distinct pairs were computed."""
        i = np.asarray(i, dtype=np.int64).reshape(-1)
        j = np.asarray(j, dtype=np.int64).reshape(-1)
        values, found = self.stored(i, j)
        if found.all():
            return values, 0
        miss = np.flatnonzero(~found)
        values[miss], computed = (compute or self.compute_keys)(pair_keys(i[miss], j[miss], self.n_items))
        return values, computed

    def matrices(self, members: np.ndarray, compute: ComputePairs | None = None) -> tuple[np.ndarray, int]:
        """The ``(B, S, S)`` matrices of distances among each row of ``members`` ``(B, S)``: symmetric (from the
        dense matrix as stored), zero diagonal; pairs not stored from ``compute`` as in :meth:`lookup`."""
        b, s = members.shape
        if self.dense is not None:
            return np.stack([self.dense.submatrix(row, row) for row in members]), 0
        iu, ju = np.triu_indices(s, 1)
        values, computed = self.lookup(members[:, iu].ravel(), members[:, ju].ravel(), compute)
        out = np.zeros((b, s, s), dtype=np.float32)
        values = values.reshape(b, -1)
        out[:, iu, ju] = values
        out[:, ju, iu] = values
        return out, computed
