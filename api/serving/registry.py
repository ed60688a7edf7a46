"""The stores a service process serves: opened read-only, rows read on demand through bounded caches, and
reloaded when the store on disk changes.

Every subfolder of the stores folder that holds a labeldist manifest is a store, named after the folder: a complete
one is served (:class:`ServedStore`), an incomplete one listed as unavailable (:class:`UnavailableStore`, 503).
**One store per answer:** each request compares the folder's :data:`~labeldist.store.StoreIdentity` (one ``stat``)
with that of the store opened from it; on a change (rebuilt, grown, removed) the registry opens the new one in a
worker thread and serves it from then on. A request that already holds the old store answers from it alone: its
reads are checked against its identity (:class:`~labeldist.store.StoreReader`), and one that met the new store's
files is refused with 503 "the store changed; retry" (:class:`StoreChanged`). docs/http-api.md, "Stores that change
while served".
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.api.errors import NeedsAPIKey, NotFound, Unavailable
from labeldist.api.serving.caches import PairCache
from labeldist.api.serving.compute import ClientGone, ComputeGuard, unguarded
from labeldist.api.settings import Settings
from labeldist.kinds import distance_class
from labeldist.store import StoreChangedError, StoreCorruptError, StoreIdentity
from labeldist.view.folder import STALE, StoreFolder, damaged_reason
from labeldist.view.folder import Unavailable as UnavailableStore
from labeldist.view.pairs import compute_planned, plan_pairs
from labeldist.view.stored import stored_distance, stored_labels
from labeldist.view.storeview import ComputePairs, StoreView

log = logging.getLogger("labeldist.api")

__all__ = ["STALE", "ServedStore", "StoreChanged", "StoreRegistry", "UnavailableStore"]


class StoreChanged(Unavailable):
    """The store changed on disk while a request was reading it: 503, retry (the next request gets the new one)."""

    headers = {"Retry-After": "1"}

    def __init__(self, name: str) -> None:
        super().__init__(
            f"store {name!r} changed on disk (rebuilt, replaced or removed) while this request read it; "
            "retry: the next request is answered by the store now on disk"
        )


class ServedStore(StoreView):
    """A complete store, served: the shared :class:`~labeldist.view.storeview.StoreView` (``LABELDIST_KNN_CACHE_MB``,
    ``LABELDIST_DENSE_CACHE_MB`` bound its row caches) with what is the service's own: its folder's identity checked
    on every request (:class:`StoreRegistry`), its reads' errors answered 503 (:meth:`reading`), a cache of the
    pairs computed on demand, and the API key and compute budget those need (:meth:`distances`)."""

    available = True

    def __init__(self, name: str, path: Path, settings: Settings, identity: StoreIdentity | None = None) -> None:
        self.path = path
        super().__init__(
            name,
            str(path),
            knn_cache_bytes=settings.knn_cache_mb << 20,
            dense_cache_bytes=settings.dense_cache_mb << 20,
            identity=identity,
        )
        self.pair_cache = PairCache(settings.pair_cache_entries)
        self._arrays_lock = threading.Lock()
        self._label_arrays: dict[str, np.ndarray] | None = None

    def unchanged(self) -> bool:
        """Whether the folder still holds the store this object was opened from."""
        return not self.changed()

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Every read from disk goes through here. A read of a store that changed on disk meanwhile is refused
        (:class:`StoreChanged`, 503 retry), whether it failed or not: what it read may be the new store's (the
        reader's own check after each read, :func:`labeldist.store.reading.pinned`, or this one after a failure). A
        read that finds a missing or damaged chunk of an unchanged store is answered 503 naming the damage, every
        time it is asked: never a wrong number, an empty list or a fill value in its place."""
        try:
            yield
        except StoreChangedError as e:  # the reader's own check (StoreReader is pinned to the opened generation)
            raise StoreChanged(self.name) from e
        except StoreCorruptError as e:
            if not self.unchanged():
                raise StoreChanged(self.name) from e
            log.error("%s", e)
            raise Unavailable(damaged_reason(self.name, e, self.path)) from e
        except Exception as e:
            if not self.unchanged():
                raise StoreChanged(self.name) from e
            raise

    # ------------------------------------------------------------ checks
    def check_index(self, index: int | np.ndarray, what: str = "item") -> None:
        """NotFound naming the first index that is not an item of the store."""
        if isinstance(index, int) and 0 <= index < self.n_items:
            return
        missing = self.missing_item(index, what)
        if missing is not None:
            raise NotFound(missing)

    # ------------------------------------------------------------ labels, loaded on first need
    def load_labels(self) -> tuple[Any, Any]:
        """The labels and distance (:meth:`StoreView.load_labels`), the distance compiled on one pair; 503 naming
        the store when what its manifest names (a model, a file) cannot be used on this server."""
        t = time.perf_counter()
        try:
            distance = stored_distance(self.reader)
        except (OSError, ValueError) as e:
            log.error("%s: its distance cannot be made: %s", self.name, e)
            raise Unavailable(
                f"store {self.name!r} cannot compute distances on this server: what its manifest names "
                f"cannot be loaded here ({type(e).__name__}); the server's log says what"
            ) from e
        with self.reading():
            labels = stored_labels(self.reader)
        distance.block(labels.subset(np.array([0])), labels.subset(np.array([0])))  # compile / warm up
        log.info("%s: labels loaded in %.2f s", self.name, time.perf_counter() - t)
        return labels, distance

    def label_arrays(self) -> dict[str, np.ndarray]:
        """The raw label arrays of the store (``labels/<name>``), read once."""
        with self._arrays_lock:
            if self._label_arrays is None:
                with self.reading():
                    self._label_arrays = self.reader.label_arrays()
            return self._label_arrays

    # ------------------------------------------------------------ look-ups
    def in_memory(self, rows: np.ndarray) -> bool:
        """Whether the distances of pairs with these first items are answered from memory alone (dense rows
        cached), so a request may be answered on the event loop rather than in a worker thread."""
        return self.dense is not None and self.dense.holds(rows)

    def neighbors(self, index: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest of ``index`` (fewer when the store has fewer): indices and distances (its row block read
        from disk if ``self.knn`` does not hold it)."""
        return self.knn.neighbors(index, k)

    def distances(
        self, i: np.ndarray, j: np.ndarray, allow_compute: bool, guard: ComputeGuard | None = None
    ) -> tuple[np.ndarray, int]:
        """Distances of the pairs ``(i[t], j[t])``, float32: stored, cached, or computed on demand (and then
        cached) within the bounds of ``guard`` (its budget, its pool, its client still there; none: unbounded).
        Returns the values and how many distinct pairs were computed."""
        return self.lookup(i, j, self.compute_for(allow_compute, guard))

    def compute_for(self, allow_compute: bool, guard: ComputeGuard | None = None) -> ComputePairs:
        """How a request computes the pairs the store does not hold (:meth:`StoreView.lookup
        <labeldist.view.storeview.StoreView.lookup>`'s ``compute``): from the pair cache, else computed when it may
        (``allow_compute``: the API key) within ``guard``'s bounds (none: unbounded)."""
        return lambda keys: self._computed(keys, allow_compute, guard or unguarded())

    def _computed(self, keys: np.ndarray, allow_compute: bool, guard: ComputeGuard) -> tuple[np.ndarray, int]:
        """The distances of the pairs ``keys`` a request needs and the store does not hold: from the pair cache, or
        computed (then cached) when the request may (``allow_compute``: the API key) and ``guard`` admits the cost;
        the values and how many distinct pairs were computed."""
        values, hit = self.pair_cache.get(keys)
        todo = np.flatnonzero(~hit)
        if not todo.size:
            return values, 0
        if not allow_compute:
            raise NeedsAPIKey(
                f"{todo.size} distance(s) asked are not stored in {self.name!r} and must be computed on "
                "demand: send the API key in the X-API-Key header"
            )
        ukeys, inverse = np.unique(keys[todo], return_inverse=True)
        plan = plan_pairs(ukeys // self.n_items, ukeys % self.n_items)
        # estimated from the kind's class, before the labels are loaded: a refused request costs nothing
        guard.admit(
            plan.cost_s(distance_class(self.manifest["kind"])), f"{ukeys.size} distance(s) not stored in {self.name!r}"
        )
        with guard.slot():
            labels, distance = self.labels_and_distance()
            # the event a client (and tests/api/test_api_compute.py) can wait for: the work has begun
            log.info("%s: computing %d distance(s) on demand", self.name, ukeys.size)
            try:
                computed = compute_planned(labels, distance, plan, guard.check)
            except ClientGone:
                log.warning("%s: computing %d distance(s) stopped: the client has gone", self.name, ukeys.size)
                raise
        self.pair_cache.put(ukeys, computed)
        values[todo] = computed[inverse]
        return values, int(ukeys.size)


class StoreRegistry(StoreFolder[ServedStore]):
    """The stores of ``settings.stores``, by name, each reloaded when its folder changes: the shared
    :class:`~labeldist.view.folder.StoreFolder` (see the module's docstring) with the service's answers.

    Requests look a store up with :meth:`get` (or :meth:`peek`, which never opens anything: for the event loop).
    """

    def __init__(self, settings: Settings) -> None:
        super().__init__(
            settings.stores, lambda name, path, identity: ServedStore(name, path, settings, identity), log=log
        )
        self.settings = settings

    def open_all(self) -> None:
        if not self.root.is_dir():
            log.warning("stores folder %s does not exist: serving no store", self.root)
            return
        self.refresh_all()

    def get(self, name: str) -> ServedStore:
        """The served store ``name``; NotFound for an unknown name, Unavailable for an incomplete store."""
        return self.served(name, self.current(name))

    def served(self, name: str, store: ServedStore | UnavailableStore | None) -> ServedStore:
        """``store``, the entry :meth:`current` gave for ``name``, if it is served; else NotFound or Unavailable."""
        if store is None:
            known = ", ".join(sorted(self.entries)) or "none"
            raise NotFound(f"unknown store {name!r}; known: {known}")
        if isinstance(store, UnavailableStore):
            raise Unavailable(store.reason)
        return store
