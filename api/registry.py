"""The stores a service process serves: opened read-only at start-up, hot arrays held in memory.

Every subfolder of the stores folder that holds a labeldist manifest is a store, named after the folder. A
complete one is served (:class:`ServedStore`); an incomplete one (being written, or abandoned) is listed as
unavailable (:class:`UnavailableStore`) and answers 503 until it is complete: it is looked at again, at most
once every few seconds, when a client asks for it, so a finished precompute job appears without a restart.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from labeldist.api.caches import PairCache, RowBlockCache
from labeldist.api.compute import ClientGone, ComputeGuard, unguarded
from labeldist.api.errors import BadParameter, NeedsAPIKey, NotFound, Unavailable
from labeldist.api.settings import Settings

from labeldist.kinds import check_block, distance_class
from labeldist.knn import pruned_topk, topk_rows
from labeldist.labels.base import LabelError, LabelSet
from labeldist.pairs import (  # noqa: F401 - PairPlan, compute_pairs: re-exported, the service's own names
    CHUNK_SECONDS,
    PairPlan,
    checked_block,
    compute_pairs,
    compute_planned,
    plan_pairs,
)
from labeldist.store import StoreCorruptError, StoreError, StoreIncompleteError, StoreReader, read_manifest

log = logging.getLogger("labeldist.api")

#: an unavailable store is looked at again at most this often (seconds)
RECHECK_SECONDS = 2.0


@dataclass(frozen=True)
class SearchResult:
    """The nearest items of a label: indices (int32), distances (float32) nearest first, and how many exact
    distances were computed (fewer than the items where a lower bound ruled some out)."""

    indices: np.ndarray
    distances: np.ndarray
    computed: int


def searchable(labels_class: type) -> bool:
    """Whether a LabelSet class reads labels from JSON (overrides :meth:`LabelSet.from_json`): known from the class,
    before the budget is estimated or a label loaded. A subclass of one that does, and has no JSON form itself,
    declares LabelSet's own (as :class:`~labeldist.labels.sentences.Sentences` does); one that still refuses
    (NotImplementedError) is answered the same way, once its labels are loaded."""
    return getattr(labels_class.from_json, "__func__", None) is not LabelSet.from_json.__func__


def search_cost_s(distance_cls: Any, n_items: int) -> float:
    """Estimated seconds of one core for a label against ``n_items`` items: the whole row (what a search costs
    when no bound rules an item out), in chunks of :data:`~labeldist.api.compute.CHUNK_SECONDS`, plus one call
    for the bound's second round, plus the label and the items prepared."""
    chunks = math.ceil(n_items * distance_cls.cost_per_pair_s / CHUNK_SECONDS) or 1
    return ((chunks + 1) * distance_cls.cost_per_call_s + n_items * distance_cls.cost_per_pair_s
            + (n_items + 1) * distance_cls.cost_per_item_s)  # fmt: skip


def search_labels(
    query: Any, labels: Any, distance: Any, k: int, check: Callable[[], None] = lambda: None
) -> SearchResult:
    """The exact ``k`` nearest of ``labels`` to the one label of ``query`` (see :meth:`ServedStore.search`);
    ``check`` is called between chunks of about :data:`~labeldist.api.compute.CHUNK_SECONDS` of estimated work."""
    n = len(labels)
    per_chunk = max(1, int(CHUNK_SECONDS / max(type(distance).cost_per_pair_s * len(query), 1e-12)))

    def row(cols: np.ndarray) -> np.ndarray:  # exact distances of the query to items ``cols`` (sorted, distinct)
        out = np.empty(cols.size, dtype=np.float64)
        for start in range(0, cols.size, per_chunk):
            check()
            part = cols[start : start + per_chunk]
            items = labels if part.size == n else labels.subset(part)
            out[start : start + part.size] = checked_block(distance, query, items)[0]
        return out

    check()
    lower = distance.lower_bound_block(query, labels)
    if lower is None:
        values = row(np.arange(n)).astype(np.float32)[None]
        indices, dists = topk_rows(values, k)
        return SearchResult(indices[0], dists[0], n)
    check_block(distance.kind, lower, 1, n, row_ids=query.ids, col_ids=labels.ids)
    indices, dists, computed = pruned_topk(lower, lambda r, c: row(c), k, exclude=None)
    return SearchResult(indices[0], dists[0], computed)


class ServedStore:
    """A complete store, read-only: ids and kNN lists in memory, dense rows through a bounded LRU cache,
    labels loaded on first need (distances computed on demand, label views)."""

    available = True

    def __init__(self, name: str, path: Path, settings: Settings) -> None:
        self.name, self.path = name, path
        self.reader = StoreReader(str(path))
        self.manifest: dict[str, Any] = self.reader.manifest
        self.n_items, self.k = self.reader.n_items, self.reader.k
        self.ids = self.reader.ids
        indices, distances = self.reader.knn()
        self.knn_indices = np.ascontiguousarray(indices, dtype=np.int32)
        self.knn_distances = np.ascontiguousarray(distances, dtype=np.float32)
        #: valid (non-padding) neighbours of each item; padding (-1) sits at the end of a row
        self.knn_counts = (self.knn_indices >= 0).sum(axis=1)
        for arr in (self.ids, self.knn_indices, self.knn_distances, self.knn_counts):
            arr.flags.writeable = False
        self.dense: RowBlockCache | None = None
        if self.reader.has_dense:
            rows = self.reader.dense_block_rows
            self.dense = RowBlockCache(self._read_dense_rows, self.n_items, rows, settings.dense_cache_mb << 20)
        self.pair_cache = PairCache(settings.pair_cache_entries)
        self._labels_lock, self._arrays_lock = threading.Lock(), threading.Lock()
        self._labels: Any = None
        self._distance: Any = None
        self._label_arrays: dict[str, np.ndarray] | None = None

    def info(self) -> dict[str, Any]:
        return {**self.manifest, "name": self.name, "available": True, "has_dense": self.dense is not None}

    def _read_dense_rows(self, start: int, stop: int) -> np.ndarray:
        with self.refusing_damage():
            return self.reader.dense_rows(start, stop)

    @contextlib.contextmanager
    def refusing_damage(self) -> Iterator[None]:
        """Answer a read that finds a missing or damaged chunk with 503 naming the damage, every time it is asked:
        never a wrong number, an empty list or a fill value in its place."""
        try:
            yield
        except StoreCorruptError as e:
            log.error("%s", e)
            raise Unavailable(f"store {self.name!r} is damaged on disk and is refused until it is rebuilt: "
                              f"{_without_url(str(e), self.reader.url)}") from e  # fmt: skip

    # ------------------------------------------------------------ checks
    def check_index(self, index: int | np.ndarray, what: str = "item") -> None:
        """NotFound naming the first index that is not an item of the store."""
        if isinstance(index, int) and 0 <= index < self.n_items:
            return
        arr = np.asarray(index)
        bad = (arr < 0) | (arr >= self.n_items)
        if bad.any():
            value = int(arr.reshape(-1)[np.argmax(bad.reshape(-1))])
            raise NotFound(f"store {self.name!r} has no {what} {value} (items are 0..{self.n_items - 1})")

    # ------------------------------------------------------------ labels, loaded on first need
    def labels_and_distance(self) -> tuple[Any, Any]:
        """The stored labels as the kind's LabelSet and the store's distance (for computing pairs)."""
        with self._labels_lock:
            if self._labels is None:
                t = time.perf_counter()
                distance = self.reader.distance()
                with self.refusing_damage():
                    labels = self.reader.labels()
                # how the labels were made (tokenizer, word vectors, normalisation): what a label read from JSON
                # must be made with to be searched against them (LabelSet.from_json)
                recorded = self.manifest.get("params", {}).get("labels")
                labels.provenance = dict(recorded) if isinstance(recorded, dict) else {}
                distance.block(labels.subset(np.array([0])), labels.subset(np.array([0])))  # compile / warm up
                self._labels, self._distance = labels, distance
                log.info("%s: labels loaded in %.2f s", self.name, time.perf_counter() - t)
            return self._labels, self._distance

    def label_arrays(self) -> dict[str, np.ndarray]:
        """The raw label arrays of the store (``labels/<name>``), read once."""
        with self._arrays_lock:
            if self._label_arrays is None:
                with self.refusing_damage():
                    self._label_arrays = self.reader.label_arrays()
            return self._label_arrays

    # ------------------------------------------------------------ look-ups
    def in_memory(self, rows: np.ndarray) -> bool:
        """Whether the distances of pairs with these first items are answered from memory alone (dense rows
        cached), so a request may be answered on the event loop rather than in a worker thread."""
        return self.dense is not None and self.dense.holds(rows)

    def neighbors(self, index: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest of ``index`` (fewer when the store has fewer): indices and distances."""
        kk = min(k, int(self.knn_counts[index]))
        return self.knn_indices[index, :kk], self.knn_distances[index, :kk]

    def stored(self, i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distances of the pairs held by the store: ``(values, found)``; values are NaN where not found.

        From the dense matrix when there is one, else from either item's kNN list (the distance is symmetric).
        """
        if self.dense is not None:
            return self.dense.gather(i, j), np.ones(len(i), dtype=bool)
        from labeldist.knnlookup import knn_lookup  # numba: imported only where a store has no dense matrix

        return knn_lookup(self.knn_indices, self.knn_distances, i, j)

    def distances(
        self, i: np.ndarray, j: np.ndarray, allow_compute: bool, guard: ComputeGuard | None = None
    ) -> tuple[np.ndarray, int]:
        """Distances of the pairs ``(i[t], j[t])``, float32: stored, cached, or computed on demand (and then
        cached) within the bounds of ``guard`` (its budget, its pool, its client still there; none: unbounded).
        Returns the values and how many distinct pairs were computed."""
        i = np.asarray(i, dtype=np.int64)
        j = np.asarray(j, dtype=np.int64)
        values, found = self.stored(i, j)
        if found.all():
            return values, 0
        miss = np.flatnonzero(~found)
        keys = np.minimum(i[miss], j[miss]) * self.n_items + np.maximum(i[miss], j[miss])
        cached, hit = self.pair_cache.get(keys)
        values[miss[hit]] = cached[hit]
        todo = miss[~hit]
        if not todo.size:
            return values, 0
        if not allow_compute:
            raise NeedsAPIKey(
                f"{todo.size} distance(s) asked are not stored in {self.name!r} and must be computed on "
                "demand: send the API key in the X-API-Key header"
            )
        ukeys, inverse = np.unique(keys[~hit], return_inverse=True)
        guard = guard or unguarded()
        plan = plan_pairs(ukeys // self.n_items, ukeys % self.n_items)
        # estimated from the kind's class, before the labels are loaded: a refused request costs nothing
        guard.admit(plan.cost_s(distance_class(self.manifest["kind"])),
                    f"{ukeys.size} distance(s) not stored in {self.name!r}")  # fmt: skip
        with guard.slot():
            labels, distance = self.labels_and_distance()
            try:
                computed = compute_planned(labels, distance, plan, guard.check)
            except ClientGone:
                log.warning("%s: computing %d distance(s) stopped: the client has gone", self.name, ukeys.size)
                raise
        self.pair_cache.put(ukeys, computed)
        values[todo] = computed[inverse]
        return values, int(ukeys.size)

    def search(self, value: Any, k: int, allow_compute: bool, guard: ComputeGuard | None = None) -> SearchResult:
        """The exact ``k`` nearest items (at most ``n_items``) of a new label given in its kind's JSON form
        (:meth:`~labeldist.labels.base.LabelSet.from_json`), nearest first, ties broken by index, on float32
        values as stored: the same selection as the store's kNN lists, with the same pruning where the distance
        has a lower bound (:func:`labeldist.knn.pruned_topk`), else the label against every item.

        Bounded as every on-demand computation: refused without the right to compute (NeedsAPIKey), over the
        budget (estimated from the kind's unit costs before the labels are loaded), run in a slot of the pool,
        stopped between chunks once the client has gone. A label the kind cannot read is a
        :class:`~labeldist.api.errors.BadParameter` (422) naming what is wrong, before any distance is computed.
        """
        cls = distance_class(self.manifest["kind"])
        if not searchable(cls.labels_class):
            raise BadParameter(f"search by label is not available for kind {self.manifest['kind']!r}: its labels "
                               "have no JSON form", ("body", "label"))  # fmt: skip
        if not allow_compute:
            raise NeedsAPIKey(f"a search of {self.name!r} computes the label's distance to every item on demand: "
                              "send the API key in the X-API-Key header")  # fmt: skip
        guard = guard or unguarded()
        k = min(k, self.n_items)
        guard.admit(search_cost_s(cls, self.n_items), f"a search of the {self.n_items} items of {self.name!r}")
        with guard.slot():
            labels, distance = self.labels_and_distance()
            from labeldist.kinds import read_label

            try:  # the kind's parser, within the checks every kind gets (the JSON value, the distance's limits)
                query = read_label(value, labels, distance)
            except NotImplementedError:
                raise BadParameter(f"search by label is not available for kind {self.manifest['kind']!r}: its "
                                   "labels have no JSON form", ("body", "label")) from None  # fmt: skip
            except LabelError as e:
                raise BadParameter(str(e), ("body", "label")) from None
            try:
                return search_labels(query, labels, distance, k, guard.check)
            except ClientGone:
                log.warning("%s: a search stopped: the client has gone", self.name)
                raise

    def pairwise(
        self, members: np.ndarray, allow_compute: bool, guard: ComputeGuard | None = None
    ) -> tuple[np.ndarray, int]:
        """The (B, S, S) matrices of distances among each row of ``members`` (B, S): symmetric, zero diagonal."""
        b, s = members.shape
        if self.dense is not None:
            out = np.stack([self.dense.submatrix(row, row) for row in members])
            return out, 0
        iu, ju = np.triu_indices(s, 1)
        values, computed = self.distances(members[:, iu].ravel(), members[:, ju].ravel(), allow_compute, guard)
        out = np.zeros((b, s, s), dtype=np.float32)
        values = values.reshape(b, -1)
        out[:, iu, ju] = values
        out[:, ju, iu] = values
        return out, computed


class UnavailableStore:
    """A store folder that cannot be served now: incomplete, or failed to open. Answers 503."""

    available = False

    def __init__(self, name: str, path: Path, manifest: dict[str, Any], reason: str) -> None:
        self.name, self.path, self.manifest, self.reason = name, path, manifest, reason
        self.checked = time.monotonic()

    def info(self) -> dict[str, Any]:
        return {**self.manifest, "name": self.name, "available": False, "detail": self.reason}


def open_store(name: str, path: Path, settings: Settings) -> ServedStore | UnavailableStore | None:
    """The store at ``path`` opened for serving, or unavailable with the reason, or None if it is no store."""
    try:
        manifest = read_manifest(str(path))
    except StoreError as e:  # its metadata is damaged: listed, refused, and the other stores still served
        log.error("%s", e)
        return UnavailableStore(name, path, {}, f"store {name!r} is damaged on disk and is refused until it is "
                                f"rebuilt: {_without_url(str(e), str(path.absolute()))}")  # fmt: skip
    if manifest is None:
        return None
    if manifest.get("complete") is not True:
        return UnavailableStore(name, path, manifest, f"store {name!r} is not complete (still being written, "
                                "or abandoned); it is served once its precompute job finishes")  # fmt: skip
    try:
        return ServedStore(name, path, settings)
    except StoreIncompleteError as e:
        return UnavailableStore(name, path, manifest, f"store {name!r} is not complete: {e}")
    except StoreCorruptError as e:
        log.error("%s", e)
        return UnavailableStore(name, path, manifest, f"store {name!r} is damaged on disk and is refused until it "
                                f"is rebuilt: {_without_url(str(e), str(path.absolute()))}")  # fmt: skip
    except StoreError as e:
        return UnavailableStore(name, path, manifest, f"store {name!r} cannot be served: "
                                f"{_without_url(str(e), str(path.absolute()))}")  # fmt: skip
    except Exception as e:  # a broken store must not stop the others from being served
        log.exception("%s: cannot be opened", path)
        return UnavailableStore(name, path, manifest, f"store {name!r} cannot be opened: {type(e).__name__}: {e}")


def _without_url(message: str, url: str) -> str:
    """A store error's message without the server's path of the store (clients know it by name)."""
    return message.replace(f"{url}: ", "").replace(url, "<store>")


class StoreRegistry:
    """The stores of one folder, by name."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.folder = Path(settings.stores)
        self.stores: dict[str, ServedStore | UnavailableStore] = {}
        self._lock = threading.Lock()

    def open_all(self) -> None:
        if not self.folder.is_dir():
            log.warning("stores folder %s does not exist: serving no store", self.folder)
            return
        for path in sorted(p for p in self.folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
            store = open_store(path.name, path, self.settings)
            if store is not None:
                self.stores[path.name] = store
                log.info("%s: %s", path.name, "served" if store.available else "unavailable")

    def get(self, name: str) -> ServedStore:
        """The served store ``name``; NotFound for an unknown name, Unavailable for an incomplete store."""
        store = self.stores.get(name)
        if store is None:
            raise NotFound(f"unknown store {name!r}; known: {', '.join(sorted(self.stores)) or 'none'}")
        if isinstance(store, UnavailableStore):
            store = self._recheck(store)
            if isinstance(store, UnavailableStore):
                raise Unavailable(store.reason)
        return store

    def _recheck(self, store: UnavailableStore) -> ServedStore | UnavailableStore:
        if time.monotonic() - store.checked < RECHECK_SECONDS:
            return store
        with self._lock:
            current = self.stores[store.name]
            if current is not store:
                return current
            store.checked = time.monotonic()
            try:
                complete = (read_manifest(str(store.path)) or {}).get("complete") is True
            except StoreError:
                complete = False
            if not complete:
                return store
            fresh = open_store(store.name, store.path, self.settings) or store
            self.stores[store.name] = fresh
            return fresh
