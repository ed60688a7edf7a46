"""Minibatches from stores read in this process: what the service answers, with no server.

    source = LocalSource()                                  # store names are paths (relative to ".")
    batches = source.batches("stores/mpii-pose", anchors=[0, 7], size=150, neighbors=5, seed=0)
    batches.items.shape                                     # (2, 149): each anchor's 5 nearest first

:class:`LocalSource` has the methods of :class:`~labeldist.client.http.LabelDistClient` that a training loop
uses (``stores``, ``store``, ``ids``, ``neighbors``, ``distances``, ``pair_distances``, ``search``, ``batches``,
``fresh``) and answers the same :class:`~labeldist.client.http.Batches` and
:class:`~labeldist.client.http.Hits`, so :class:`~labeldist.client.data.MinibatchStream`
takes either. ``LocalSource("stores")`` names stores by their folder under ``stores``, as ``labeldist serve
--stores stores`` does; a name may also be any path to a store.

Every read goes through :class:`labeldist.store.StoreReader` (checksums checked; an incomplete or damaged store is
refused with its :class:`~labeldist.store.StoreError`), pinned to the generation it opened: each call is answered
wholly from one generation of a store. A store rebuilt or appended to between two calls is opened again on the next
(as the service reopens it); one replaced during a call is opened again and the call asked again
(:data:`REOPEN_TRIES` times, then its :class:`~labeldist.store.StoreChangedError` is raised).

The minibatches are drawn by the service's rule
(:func:`draw_batch_items`: the same seed draws the same items as ``POST /v1/stores/{store}/batches``), and their
label distances are the service's too: stored ones from the dense matrix when the store has one, else from either
item's kNN list, and the pairs a kNN-only store does not hold computed from the stored labels with the store's
own distance (:meth:`labeldist.store.StoreReader.distance`), planned and computed by the service's own code
(:mod:`labeldist.pairs`). Unlike the service there are no request limits, no compute budget and no API key: the
caller's own process does the work.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from labeldist.batching import (
    PoolError,
    check_pool,
    draw_items,
    draw_items_in_pool,
    draw_pool_anchors,
    item_indices,
    nearest_in_pool,
    resolve_pool,
)
from labeldist.client.http import Batches, Hits, RequestRejected, StoreNotFound
from labeldist.pairs import compute_pairs
from labeldist.rowcache import KnnRows, RowBlockCache
from labeldist.store import (
    StoreChangedError,
    StoreError,
    StoreReader,
    read_manifest,
    replacement_under_way,
    store_identity,
)

log = logging.getLogger("labeldist.client")

#: the largest seed the service takes (JSON-safe); a missing seed is drawn below it
MAX_SEED = 2**53 - 1

#: times a call is asked again of a store that was replaced on disk while it answered, before giving up
REOPEN_TRIES = 3

Answer = TypeVar("Answer")


def draw_batch_items(
    knn: KnnRows | np.ndarray,
    *,
    anchors: np.ndarray | list[int] | None,
    count: int | None,
    size: int,
    neighbors: int,
    seed: int,
    pool: np.ndarray | list[int] | None = None,
    exclude: np.ndarray | list[int] | None = None,
    distances: Callable[[int, np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The anchors and items of one minibatch per anchor, drawn as the service draws them (both call
    :func:`labeldist.batching.draw_items`: the same seed gives the same minibatches).

    With ``anchors=None``, ``count`` anchors are drawn first (without replacement when the store has enough items).
    Then, for each anchor in order, its items: the anchor's ``neighbors`` nearest (the first of its kNN list, -1
    padding left out: ``knn`` is a store's :class:`~labeldist.rowcache.KnnRows`, which reads the anchors' lists
    only, or its whole (N, k) ``indices`` array), then ``size - 1 - neighbors`` others drawn uniformly without
    replacement from the items that are neither the anchor nor those nearest
    (:func:`sample_excluding`), all from one ``numpy.random.default_rng(seed)``. Returns anchors ``(B,)`` and
    items ``(B, size - 1)``, both int64. ValueError, with the service's message, for a request it refuses as
    a bad parameter (422); anchors must already be checked to be items of the store.

    With ``pool`` (or ``exclude``: the pool is every other item) every member is an item of the pool, as the
    service draws them: ``count`` anchors drawn from it, given anchors refused unless in it, each anchor's
    nearest *within the pool* (:func:`labeldist.batching.nearest_in_pool`: its list without the items outside
    the pool, and where the list runs out the pool's other items ranked by ``distances(anchor, items)``, which
    must then be given), the others drawn from it. A pool the service refuses raises
    :class:`~labeldist.batching.PoolError`, a ValueError with the service's message and the ``field`` at fault.
    """
    n, k = (knn.n_items, knn.k) if isinstance(knn, KnnRows) else knn.shape
    if size < 2:
        raise ValueError(f"size={size} must be at least 2 (the anchor and one item)")
    if neighbors < 0:
        raise ValueError(f"neighbors={neighbors} must be at least 0")
    if size > n:
        raise ValueError(f"size={size} is more than the store's {n} items")
    if neighbors > size - 1:
        raise ValueError(f"neighbors={neighbors} does not fit in a batch of size={size} (at most size - 1)")
    if neighbors > k:
        raise ValueError(f"neighbors={neighbors} is more than the store's k={k}")
    allowed = resolve_pool(n, pool=pool, exclude=exclude)
    field = "pool" if pool is not None else "exclude"
    rng = np.random.default_rng(seed)
    if anchors is None:
        if count is None or count < 1:
            raise ValueError(f"count={count} must be at least 1")
        if allowed is None:
            anchor_arr = rng.choice(n, size=count, replace=count > n).astype(np.int64)
        else:
            check_pool(allowed, None, size, field)
            anchor_arr = draw_pool_anchors(rng, allowed, count)
    else:
        anchor_arr = np.asarray(anchors, dtype=np.int64).reshape(-1)
        if not anchor_arr.size:
            raise ValueError("anchors must name at least one item")
        if allowed is not None:
            check_pool(allowed, anchor_arr, size, field)
    if not neighbors:
        rows = np.empty((anchor_arr.size, 0), dtype=np.int32)
    else:
        rows = knn.rows(anchor_arr)[0] if isinstance(knn, KnnRows) else np.asarray(knn)[anchor_arr]
    if allowed is None:
        return anchor_arr, draw_items(rng, n, anchor_arr, rows, size, neighbors)

    def no_distances(anchor: int, items: np.ndarray) -> np.ndarray:
        raise ValueError(f"anchor {anchor}'s kNN list runs out within the pool: give distances= to rank the rest")

    nearest = nearest_in_pool(anchor_arr, rows, allowed, neighbors, distances or no_distances)
    return anchor_arr, draw_items_in_pool(rng, allowed, anchor_arr, nearest, size)


class _Store:
    """One opened store: kNN lists and dense rows read a row block at a time through bounded caches
    (:mod:`labeldist.rowcache`, as the service reads them), labels and distance loaded on first need."""

    def __init__(self, name: str, url: str, dense_cache_bytes: int, knn_cache_bytes: int) -> None:
        self.name = name
        self.reader = StoreReader(url)
        self.n_items, self.k = self.reader.n_items, self.reader.k
        self.reader.check_knn()  # every chunk of the lists checked once, as the service does: damage refused now
        self.knn = KnnRows(self.reader.knn_rows, self.n_items, self.k, self.reader.knn_block_rows, knn_cache_bytes)
        self.dense: RowBlockCache | None = None
        if self.reader.has_dense:
            self.dense = RowBlockCache(self._dense_rows, self.n_items, self.reader.dense_block_rows, dense_cache_bytes)
        self._lock = threading.Lock()
        self._labels: Any = None
        self._distance: Any = None

    def info(self) -> dict[str, Any]:
        from labeldist.search import searchable

        return {
            **self.reader.manifest,
            "name": self.name,
            "available": True,
            "has_dense": self.dense is not None,
            "searchable": searchable(self.reader.manifest["kind"]),
        }

    def check_index(self, index: np.ndarray, what: str = "item") -> None:
        """RequestRejected (422, as the service's schema) for a negative index, StoreNotFound (404) for one past
        the store's items."""
        arr = np.asarray(index).reshape(-1)
        if (arr < 0).any():
            message = f"{what} indices must be >= 0, got {int(arr[np.argmax(arr < 0)])}"
            raise RequestRejected(message, 422, message)
        bad = arr >= self.n_items
        if bad.any():
            value = int(arr[np.argmax(bad)])
            message = f"store {self.name!r} has no {what} {value} (items are 0..{self.n_items - 1})"
            raise StoreNotFound(message, 404, message)

    def _dense_rows(self, start: int, stop: int) -> np.ndarray:
        return np.ascontiguousarray(self.reader.dense_rows(start, stop), dtype=np.float32)

    def labels_and_distance(self) -> tuple[Any, Any]:
        with self._lock:
            if self._labels is None:
                self._distance = self.reader.distance()
                self._labels = self.reader.labels()
            return self._labels, self._distance

    def distances(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Distances of the pairs ``(i[t], j[t])``, float32: stored, or computed from the labels."""
        i = np.asarray(i, dtype=np.int64).reshape(-1)
        j = np.asarray(j, dtype=np.int64).reshape(-1)
        if self.dense is not None:
            return self.dense.gather(i, j)
        values, found = self.knn.lookup(i, j)
        if found.all():
            return values
        miss = np.flatnonzero(~found)
        keys = np.minimum(i[miss], j[miss]) * self.n_items + np.maximum(i[miss], j[miss])
        ukeys, inverse = np.unique(keys, return_inverse=True)
        labels, distance = self.labels_and_distance()
        computed = compute_pairs(labels, distance, ukeys // self.n_items, ukeys % self.n_items)
        values[miss] = computed[inverse]
        return values

    def pairwise(self, members: np.ndarray) -> np.ndarray:
        """The ``(B, S, S)`` matrices of distances among each row of ``members`` ``(B, S)``: symmetric (from the
        dense matrix as stored), zero diagonal."""
        b, s = members.shape
        if self.dense is not None:
            rows = np.repeat(members, s, axis=1).reshape(-1)
            cols = np.tile(members, (1, s)).reshape(-1)
            return self.dense.gather(rows, cols).reshape(b, s, s)
        iu, ju = np.triu_indices(s, 1)
        values = self.distances(members[:, iu].ravel(), members[:, ju].ravel()).reshape(b, -1)
        out = np.zeros((b, s, s), dtype=np.float32)
        out[:, iu, ju] = values
        out[:, ju, iu] = values
        return out


class LocalSource:
    """Stores read in this process, with the methods of :class:`~labeldist.client.http.LabelDistClient` that a
    training loop uses: no server, same answers (see the module's docstring).

    Parameters
    ----------
    root : the folder store names are relative to (default the working directory): ``LocalSource("stores")``
        names a store by its folder, as ``labeldist serve --stores stores`` does; a name may also be a path
        (absolute, or relative to ``root``).
    dense_cache_mb : memory for the row blocks of dense matrices kept in memory (per store).
    knn_cache_mb : memory for the row blocks of kNN lists kept in memory (per store): the lists are read a block at
        a time, so that memory does not grow with a store's items.

    Thread-safe (the prefetch threads share it). Unknown stores and items raise
    :class:`~labeldist.client.http.StoreNotFound` and refused parameters
    :class:`~labeldist.client.http.RequestRejected`, as from the service; an incomplete or damaged store raises the
    :class:`~labeldist.store.StoreError` that :class:`~labeldist.store.StoreReader` raises.
    """

    def __init__(
        self, root: str | os.PathLike[str] = ".", *, dense_cache_mb: int = 1024, knn_cache_mb: int = 256
    ) -> None:
        self.root = Path(root)
        self.dense_cache_mb, self.knn_cache_mb = dense_cache_mb, knn_cache_mb
        self._stores: dict[str, _Store] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LocalSource({str(self.root)!r})"

    # a DataLoader that spawns its workers pickles the stream: the stores are opened again there
    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root, "dense_cache_mb": self.dense_cache_mb, "knn_cache_mb": self.knn_cache_mb}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(
            state["root"],
            dense_cache_mb=state["dense_cache_mb"],  # type: ignore[misc]
            knn_cache_mb=state.get("knn_cache_mb", 256),
        )

    def fresh(self) -> LocalSource:
        """A new source over the same root, opening its stores again: what a forked worker process uses."""
        return LocalSource(self.root, dense_cache_mb=self.dense_cache_mb, knn_cache_mb=self.knn_cache_mb)

    def __enter__(self) -> LocalSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Forget the opened stores (their memory goes with them)."""
        with self._lock:
            self._stores.clear()

    def path(self, name: str) -> Path:
        """Where store ``name`` lies."""
        return self.root / name

    def _open(self, name: str) -> _Store:
        """Store ``name`` as it is on disk now: the one already opened, unless it changed since (then opened again)."""
        with self._lock:
            store = self._stores.get(name)
            if store is not None and not store.reader.changed():
                return store
            if store is not None:
                log.info("%s: changed on disk (rebuilt or appended to); opening it again", name)
                del self._stores[name]
            path = self.path(name)
            if replacement_under_way(path) and store_identity(path) is None:  # between the two renames of a swap
                raise StoreChangedError(str(path))
            if not path.is_dir() or read_manifest(str(path)) is None:
                known = ", ".join(s["name"] for s in self.stores()) or "none"
                message = f"unknown store {name!r}: no labeldist store at {path} (stores under {self.root}: {known})"
                raise StoreNotFound(message, 404, message)
            store = self._stores[name] = _Store(name, str(path), self.dense_cache_mb << 20, self.knn_cache_mb << 20)
            return store

    def _answer(self, name: str, work: Callable[[_Store], Answer]) -> Answer:
        """``work(store)`` answered wholly from one generation of store ``name``: a store replaced on disk while it
        answered is opened again and asked again, up to :data:`REOPEN_TRIES` times."""
        for attempt in range(REOPEN_TRIES):
            try:
                return work(self._open(name))
            except StoreChangedError:
                if attempt == REOPEN_TRIES - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def stores(self) -> list[dict[str, Any]]:
        """Every store folder under ``root``: manifest + ``name`` + ``available`` (false, with ``detail``, for
        one that is incomplete or damaged), as the service lists them."""
        out = []
        if not self.root.is_dir():
            return out
        for path in sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            try:
                manifest = read_manifest(str(path))
            except StoreError as e:
                out.append({"name": path.name, "available": False, "detail": str(e)})
                continue
            if manifest is None:
                continue
            complete = manifest.get("complete") is True
            entry = {**manifest, "name": path.name, "available": complete}
            if not complete:
                entry["detail"] = f"store {path.name!r} is not complete (still being written, or abandoned)"
            out.append(entry)
        return out

    def store(self, name: str) -> dict[str, Any]:
        """One store's manifest + ``name`` (+ ``available``, ``has_dense``)."""
        return self._open(name).info()

    def ids(self, name: str) -> list[str]:
        """The id of every item of a store, in index order."""
        return [str(i) for i in self._open(name).reader.ids]

    def neighbors(self, store: str, index: int, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The item's ``k`` nearest (all the store has when None): indices int64 and distances float32."""

        def answer(s: _Store) -> tuple[np.ndarray, np.ndarray]:
            s.check_index(np.array([index]))
            if k is not None and not 1 <= k <= s.k:
                message = f"k={k} must lie in 1..{s.k} (the store's k, the length of its neighbour lists)"
                raise RequestRejected(message, 422, message)
            indices, distances = s.knn.neighbors(index, s.k if k is None else k)
            return indices.astype(np.int64), distances.copy()

        return self._answer(store, answer)

    def distances(self, store: str, anchor: int, items: np.ndarray | list[int]) -> np.ndarray:
        """Label distances from ``anchor`` to each of ``items``, in that order (float32)."""
        items = np.asarray(items, dtype=np.int64).reshape(-1)

        def answer(s: _Store) -> np.ndarray:
            s.check_index(np.array([anchor]), "anchor")
            s.check_index(items)
            return s.distances(np.full(items.size, int(anchor), dtype=np.int64), items)

        return self._answer(store, answer)

    def pair_distances(self, store: str, pairs: np.ndarray | list[list[int]]) -> np.ndarray:
        """Label distances of index pairs ``(P, 2)``, in that order (float32)."""
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)

        def answer(s: _Store) -> np.ndarray:
            s.check_index(pairs)
            return s.distances(pairs[:, 0], pairs[:, 1])

        return self._answer(store, answer)

    def search(self, store: str, label: Any, k: int = 10, *, include_labels: bool = False) -> Hits:
        """The exact ``k`` nearest items of ``store`` to a new ``label`` in its kind's JSON form, as
        ``POST /v1/stores/{store}/search`` answers (:meth:`LabelDistClient.search`): the same search
        (:func:`labeldist.search.search_labels`) over the same labels, made as the service makes them, in this
        process and with no budget. A label the kind cannot read raises RequestRejected (422) naming what is
        wrong."""
        if not 1 <= int(k):
            raise RequestRejected(f"k={k} must be at least 1", 422, f"k={k} must be at least 1")

        def answer(s: _Store) -> Hits:
            from labeldist.kinds import read_label
            from labeldist.labels.base import LabelError
            from labeldist.search import not_searchable, search_labels, searchable

            kind = s.reader.manifest["kind"]
            if not searchable(kind):
                raise RequestRejected(not_searchable(kind), 422, not_searchable(kind))
            labels, distance = s.labels_and_distance()
            try:
                query = read_label(label, labels, distance)
            except (LabelError, NotImplementedError) as e:
                message = str(e) or not_searchable(kind)
                raise RequestRejected(f"store {store!r}: {message}", 422, message) from None
            found = search_labels(query, labels, distance, min(int(k), s.n_items))
            indices = found.indices.astype(np.int64)
            return Hits(
                indices,
                [str(i) for i in s.reader.ids[indices]],
                found.distances.astype(np.float32),
                int(found.computed),
                [labels.to_json(int(i)) for i in indices] if include_labels else None,
            )

        return self._answer(store, answer)

    def batches(
        self,
        store: str,
        *,
        anchors: np.ndarray | list[int] | None = None,
        count: int | None = None,
        size: int = 32,
        neighbors: int = 0,
        pairwise: bool = False,
        seed: int | None = None,
        pool: np.ndarray | list[int] | None = None,
        exclude: np.ndarray | list[int] | None = None,
    ) -> Batches:
        """One minibatch per anchor (given, or ``count`` drawn), as ``POST /v1/stores/{store}/batches`` answers:
        each anchor's ``neighbors`` nearest, then random others (:func:`draw_batch_items`); the label distances
        from the anchor to each item and, with ``pairwise``, each minibatch's matrix, anchor first. A missing
        ``seed`` is drawn at random; the answer says which was used.

        ``pool`` (the items every member is drawn from) or ``exclude`` (the items no minibatch contains) as the
        service takes them: anchors, nearest (within the pool) and random others all from the pool."""
        if (anchors is None) == (count is None):
            raise ValueError("give exactly one of anchors= and count=")
        if seed is not None and not 0 <= int(seed) <= MAX_SEED:
            raise RequestRejected(f"seed={seed} must lie in 0..{MAX_SEED}", 422, f"seed={seed} out of range")
        try:  # integers only, as the service's schema takes them
            anchors, pool, exclude = (
                None if given is None else item_indices(given, name)
                for name, given in (("anchors", anchors), ("pool", pool), ("exclude", exclude))
            )
        except PoolError as e:
            raise RequestRejected(str(e), 422, str(e)) from None
        seed = secrets.randbits(53) if seed is None else int(seed)
        for name, given in (("pool", pool), ("exclude", exclude)):
            if given is not None and (given < 0).any():  # the service's schema refuses these (422)
                message = f"{name} indices must be >= 0, got {int(np.min(given))}"
                raise RequestRejected(message, 422, message)
        return self._answer(
            store,
            lambda s: self._draw(
                s,
                anchors=anchors,
                count=count,
                size=size,
                neighbors=neighbors,
                pairwise=pairwise,
                seed=seed,
                pool=pool,
                exclude=exclude,
            ),
        )

    def _draw(
        self,
        s: _Store,
        *,
        anchors: np.ndarray | None,
        count: int | None,
        size: int,
        neighbors: int,
        pairwise: bool,
        seed: int,
        pool: np.ndarray | None,
        exclude: np.ndarray | None,
    ) -> Batches:
        """:meth:`batches` from one opened store (its arguments already checked and converted)."""
        store = s.name
        if anchors is not None:
            s.check_index(anchors, "anchor")

        def anchor_row(anchor: int, items: np.ndarray) -> np.ndarray:
            return s.distances(np.full(items.size, anchor, dtype=np.int64), items)

        try:
            drawn, items = draw_batch_items(
                s.knn,
                anchors=anchors,
                count=count,
                size=size,
                neighbors=neighbors,
                seed=seed,
                pool=pool,
                exclude=exclude,
                distances=anchor_row,
            )
        except ValueError as e:  # a PoolError too
            raise RequestRejected(f"store {store!r}: {e}", 422, str(e)) from None
        b, m = items.shape
        distances = s.distances(np.repeat(drawn, m), items.reshape(-1)).reshape(b, m)
        members = np.concatenate([drawn[:, None], items], axis=1)
        return Batches(
            anchors=drawn,
            items=items,
            distances=distances,
            pairwise=s.pairwise(members) if pairwise else None,
            seed=seed,
        )
