"""Minibatches from stores read in this process: what the service answers, with no server.

    source = LocalSource()                                  # store names are paths (relative to ".")
    batches = source.batches("stores/mpii-pose", anchors=[0, 7], size=150, neighbors=5, seed=0)
    batches.items.shape                                     # (2, 149): each anchor's 5 nearest first

:class:`LocalSource` has the methods of :class:`~labeldist.client.http.LabelDistClient` a training loop uses and
answers the same :class:`~labeldist.client.minibatch.Minibatch` and :class:`~labeldist.client.http.Hits`, so
:class:`~labeldist.client.data.MinibatchStream` takes either. Every read goes through
:class:`labeldist.store.StoreReader`, each call answered from one generation; a store replaced during a call is
opened again and the call asked again (:class:`labeldist.view.folder.StoreFolder`, as the service keeps its stores).
Minibatches are drawn and assembled as the service does (:mod:`labeldist.view.minibatch`), so the same seed draws the
same items. No request limits, compute budget or API key: the caller's own process does the work.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from labeldist.client.answers import Hits, Neighbors, RequestRejected, StoreNotFound
from labeldist.client.minibatch import Minibatch
from labeldist.store import StoreChangedError, StoreError, StoreIdentity
from labeldist.view.drawing import DrawRefused
from labeldist.view.folder import StoreFolder, Unavailable
from labeldist.view.minibatch import BatchRequest, assemble, batch_request
from labeldist.view.storeview import StoreView

if TYPE_CHECKING:
    from labeldist.client.store import Store

log = logging.getLogger("labeldist.client")

Answer = TypeVar("Answer")


class StoreMovedOn(StoreChangedError):
    """A pinned :class:`LocalSource`'s store was rebuilt, appended to or removed after the source first opened it: a
    training run stops rather than mix two generations' items and distances (:func:`moved_on` says which)."""

    def __init__(self, message: str) -> None:
        StoreError.__init__(self, message)  # the message alone: a loader's worker passes it on by type and text


def moved_on(name: str, path: str | os.PathLike[str]) -> StoreMovedOn:
    """The error of a pinned source whose store ``name`` at ``path`` is no longer the generation it opened."""
    return StoreMovedOn(
        f"store {name!r} ({path}) changed on disk (rebuilt, appended to or removed) after this run opened it: "
        "stopped rather than train on two different stores"
    )


class _Store(StoreView):
    """A store opened in this process: the service's view, with the client's errors for items it does not have."""

    def check_index(self, index: np.ndarray, what: str = "item") -> None:
        """RequestRejected (422, as the service's schema) for a negative index, StoreNotFound (404) for one past
        the store's items."""
        arr = np.asarray(index).reshape(-1)
        if (arr < 0).any():
            message = f"{what} indices must be >= 0, got {int(arr[np.argmax(arr < 0)])}"
            raise RequestRejected(message, 422, message)
        missing = self.missing_item(arr, what)
        if missing is not None:
            raise StoreNotFound(missing, 404, missing)

    def pair_values(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Distances of the pairs ``(i[t], j[t])``, float32: stored, or computed from the labels."""
        return self.lookup(i, j)[0]


class LocalSource:
    """Stores read in this process, with the methods of :class:`~labeldist.client.http.LabelDistClient` that a
    training loop uses: no server, same answers (see the module's docstring).

    Thread-safe (the prefetch threads share it).

    Parameters
    ----------
    root : str or os.PathLike
        The folder store names are relative to (default the working directory): ``LocalSource("stores")``
        names a store by its folder, as ``labeldist serve --stores stores`` does; a name may also be a path
        (absolute, or relative to ``root``).
    dense_cache_mb : int
        Memory for the row blocks of dense matrices kept in memory (per store).
    knn_cache_mb : int
        Memory for the row blocks of kNN lists kept in memory (per store): the lists are read a block at a time,
        so that memory does not grow with a store's items.
    pinned : bool
        Keep each store to the generation first opened, as a training run must: a store rebuilt or appended to
        afterwards raises :class:`StoreMovedOn` (one line) instead of being opened again. Sources made by
        :meth:`fresh` (a loader's worker processes) keep the same pins.
    pins : dict or None
        The generation to keep each store to, by name (what :meth:`fresh` passes on); implies ``pinned``.

    Raises
    ------
    StoreNotFound
        From the methods, for an unknown store or item, as from the service
        (:class:`~labeldist.client.http.StoreNotFound`).
    RequestRejected
        From the methods, for refused parameters, as from the service
        (:class:`~labeldist.client.http.RequestRejected`).
    StoreError
        From the methods, for an incomplete or damaged store: the one :class:`~labeldist.store.StoreReader`
        raises.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] = ".",
        *,
        dense_cache_mb: int = 1024,
        knn_cache_mb: int = 256,
        pinned: bool = False,
        pins: dict[str, StoreIdentity] | None = None,
    ) -> None:
        self.root = Path(root)
        self.dense_cache_mb, self.knn_cache_mb = dense_cache_mb, knn_cache_mb
        self.pinned = pinned or pins is not None
        #: the generation each store was first opened at (pinned sources only): name -> identity
        self.pins: dict[str, StoreIdentity] = dict(pins or {})
        #: the stores opened, reopened when they change (as the service's: :class:`~labeldist.view.folder.StoreFolder`)
        self.folder: StoreFolder[_Store] = StoreFolder(self.root, self._open_view, paths=True, log=log)

    def __repr__(self) -> str:
        return f"LocalSource({str(self.root)!r})"

    # a DataLoader that spawns its workers pickles the stream: the stores are opened again there
    def __getstate__(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "dense_cache_mb": self.dense_cache_mb,
            "knn_cache_mb": self.knn_cache_mb,
            "pins": dict(self.pins) if self.pinned else None,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(
            state["root"],
            dense_cache_mb=state["dense_cache_mb"],  # type: ignore[misc]
            knn_cache_mb=state.get("knn_cache_mb", 256),
            pins=state.get("pins"),
        )

    def fresh(self) -> LocalSource:
        """A new source over the same root, opening its stores again (at the same generations, when pinned): what a
        forked worker process uses."""
        return LocalSource(
            self.root,
            dense_cache_mb=self.dense_cache_mb,
            knn_cache_mb=self.knn_cache_mb,
            pins=dict(self.pins) if self.pinned else None,
        )

    def __enter__(self) -> LocalSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Forget the opened stores (their memory goes with them)."""
        self.folder.forget()

    def path(self, name: str) -> Path:
        """Where store ``name`` lies."""
        return self.root / name

    def _open_view(self, name: str, path: Path, identity: StoreIdentity | None) -> _Store:
        """Store ``name`` opened at the generation ``identity`` (its folder's, before it was read); a pinned source
        refuses any other than the one it first opened."""
        pin = self.pins.get(name)
        if pin is not None and identity != pin:
            raise moved_on(name, path)
        store = _Store(
            name,
            str(path),
            knn_cache_bytes=self.knn_cache_mb << 20,
            dense_cache_bytes=self.dense_cache_mb << 20,
            identity=identity,
        )
        if self.pinned and store.identity is not None:
            self.pins.setdefault(name, store.identity)
        return store

    def _usable(self, name: str, entry: _Store | Unavailable | None) -> _Store:
        """The opened store, or the error for a name that is no store (StoreNotFound) or a store that cannot be
        read now (the store layer's own error: incomplete, damaged, replaced)."""
        if isinstance(entry, Unavailable):
            raise entry.error
        if entry is None:
            if self.pinned and name in self.pins:
                raise moved_on(name, self.path(name))
            known = ", ".join(s["name"] for s in self.stores()) or "none"
            message = (
                f"unknown store {name!r}: no labeldist store at {self.path(name)} (stores under {self.root}: {known})"
            )
            raise StoreNotFound(message, 404, message)
        return entry

    def _open(self, name: str) -> _Store:
        """Store ``name`` as it is on disk now: the one already opened, unless it changed since (then opened again)."""
        return self._usable(name, self.folder.current(name))

    def _answer(self, name: str, work: Callable[[_Store], Answer]) -> Answer:
        """``work(store)`` answered wholly from one generation of store ``name``: a store replaced on disk while it
        answered is opened again and asked again (:meth:`labeldist.view.folder.StoreFolder.answer`); a pinned
        source stops instead (:class:`StoreMovedOn`)."""
        try:
            return self.folder.answer(name, work, self._usable)
        except StoreMovedOn:
            raise
        except StoreChangedError:
            if self.pinned:
                raise moved_on(name, self.path(name)) from None
            raise

    def stores(self) -> list[dict[str, Any]]:
        """Every store folder under ``root``: manifest + ``name`` + ``available`` (false, with ``detail``, for
        one that is incomplete or damaged), as the service lists them; read from the manifests, nothing opened."""
        return self.folder.manifests()

    def warm(self, store: str | None = None) -> dict[str, float]:
        """Load now what the first search or computed distance of ``store`` (None: every available store) would
        load: its labels and distance, and for a searchable kind a sentence model, its tokenizer and the items'
        embeddings (seconds for a sentence store). Says on stderr what it loads and how long it took; returns the
        seconds per store. A search of a store not warmed does this first, saying so."""
        names = [store] if store is not None else [e["name"] for e in self.stores() if e["available"]]
        return {name: self._answer(name, lambda s: self._warm_saying(s, "warming")) for name in names}

    @classmethod
    def _warm_saying(cls, s: _Store, why: str) -> float:
        if s.warmed:
            return 0.0
        cls._say_loading(s, why)
        seconds = s.warm()
        cls._say_loaded(s, seconds)
        return seconds

    @staticmethod
    def _say_loading(s: _Store, why: str) -> None:
        """Say on stderr what ``why`` (a first search, a warm-up) loads for ``s``."""
        sentences = s.manifest["kind"] == "sentence_relevance"
        what = "its labels, sentence model and embeddings" if sentences else "its labels"
        print(f"labeldist: store {s.name!r}: {why}: loading {what} (once) ...", file=sys.stderr, flush=True)

    @staticmethod
    def _say_loaded(s: _Store, seconds: float) -> None:
        print(f"labeldist: store {s.name!r}: loaded in {seconds:.1f} s", file=sys.stderr, flush=True)

    def open(self, name: str) -> Store:
        """Store ``name`` as one object (:class:`~labeldist.client.store.Store`), read through this source.

        Parameters
        ----------
        name : str
            The store's folder under ``root`` (or a path).

        Returns
        -------
        Store
        """
        from labeldist.client.store import Store

        return Store(self, name)

    def labels(self, name: str) -> Any:
        """Every item's label of store ``name``, as its kind's label set (loaded once and kept, as a search does)."""
        return self._answer(name, lambda s: s.labels_and_distance()[0])

    def store(self, name: str) -> dict[str, Any]:
        """One store's manifest + ``name`` (+ ``available``, ``has_dense``)."""
        return self._open(name).info()

    def ids(self, name: str) -> list[str]:
        """The id of every item of a store, in index order."""
        return [str(i) for i in self._open(name).reader.ids]

    def neighbors(self, store: str, index: int, k: int | None = None) -> Neighbors:
        """The item's ``k`` nearest (all the store has when None): :class:`~labeldist.client.http.Neighbors`,
        ``indices`` int64 and ``distances`` float32 (unpacks as that pair), as the service's client answers."""

        def answer(s: _Store) -> Neighbors:
            s.check_index(np.array([index]))
            if k is not None and not 1 <= k <= s.k:
                message = f"k={k} must lie in 1..{s.k} (the store's k, the length of its neighbour lists)"
                raise RequestRejected(message, 422, message)
            indices, distances = s.knn.neighbors(index, s.k if k is None else k)
            return Neighbors(indices.astype(np.int64), distances.copy())

        return self._answer(store, answer)

    def distances(self, store: str, anchor: int, items: np.ndarray | list[int]) -> np.ndarray:
        """Label distances from ``anchor`` to each of ``items``, in that order (float32)."""
        items = np.asarray(items, dtype=np.int64).reshape(-1)

        def answer(s: _Store) -> np.ndarray:
            s.check_index(np.array([anchor]), "anchor")
            s.check_index(items)
            return s.pair_values(np.full(items.size, int(anchor), dtype=np.int64), items)

        return self._answer(store, answer)

    def pair_distances(self, store: str, pairs: np.ndarray | list[list[int]]) -> np.ndarray:
        """Label distances of index pairs ``(P, 2)``, in that order (float32)."""
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)

        def answer(s: _Store) -> np.ndarray:
            s.check_index(pairs)
            return s.pair_values(pairs[:, 0], pairs[:, 1])

        return self._answer(store, answer)

    def search(self, store: str, label: Any, k: int = 10, *, include_labels: bool = False) -> Hits:
        """The exact ``k`` nearest items of ``store`` to a new ``label`` in its kind's JSON form, as
        ``POST /v1/stores/{store}/search`` answers (:meth:`LabelDistClient.search`): the same search
        (:func:`labeldist.view.search.search_labels`) over the same labels, made as the service makes them, in this
        process and with no budget. A label the kind cannot read raises RequestRejected (422) naming what is
        wrong."""
        if not 1 <= int(k):
            raise RequestRejected(f"k={k} must be at least 1", 422, f"k={k} must be at least 1")

        def answer(s: _Store) -> Hits:
            from labeldist.view.search import LabelRefused, read_query, search_labels

            first = not s.warmed  # the first search of a store loads its labels (and a sentence store's model)
            started = time.perf_counter()

            def load() -> tuple[Any, Any]:
                if first:
                    self._say_loading(s, "first search")
                return s.labels_and_distance()

            try:
                query, labels, distance = read_query(s.manifest["kind"], label, load)
            except LabelRefused as e:
                raise RequestRejected(f"store {store!r}: {e}", 422, str(e)) from None
            found = search_labels(query, labels, distance, min(int(k), s.n_items))
            if first:  # what it loaded is kept: a search after it, or warm(), loads nothing
                s.mark_warmed()
                self._say_loaded(s, time.perf_counter() - started)
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
    ) -> Minibatch:
        """One minibatch per anchor (given, or ``count`` drawn), as ``POST /v1/stores/{store}/batches`` answers:
        each anchor's ``neighbors`` nearest, then random others, assembled by the service's steps
        (:mod:`labeldist.view.minibatch`); the label distances from the anchor to each item and, with ``pairwise``,
        each minibatch's matrix, anchor first. A missing ``seed`` is drawn at random; the answer says which was used.

        ``pool`` (the items every member is drawn from) or ``exclude`` (the items no minibatch contains) as the
        service takes them: anchors, nearest (within the pool) and random others all from the pool."""
        try:
            asked = batch_request(
                anchors=anchors,
                count=count,
                size=size,
                neighbors=neighbors,
                pairwise=pairwise,
                seed=seed,
                pool=pool,
                exclude=exclude,
            )
        except DrawRefused as e:
            raise RequestRejected(str(e), 422, str(e)) from None
        return self._answer(store, lambda s: self._assembled(s, asked))

    @staticmethod
    def _assembled(s: _Store, asked: BatchRequest) -> Minibatch:
        """:meth:`batches` from one opened store."""
        try:
            made = assemble(s, asked)
        except DrawRefused as e:
            raise RequestRejected(f"store {s.name!r}: {e}", 422, str(e)) from None
        return Minibatch.from_parts(made.anchors, made.items, made.distances, made.pairwise, asked.seed)
