"""The stores of one folder, by name: what the service (:class:`labeldist.api.serving.registry.StoreRegistry`) and the
in-process :class:`~labeldist.client.LocalSource` both keep.

Every subfolder that holds a labeldist manifest is a store, named after the folder. :class:`StoreFolder` opens each
on first need and keeps it; every look-up compares the folder's :data:`~labeldist.store.StoreIdentity` (one
``stat`` of its root metadata) with that of the store opened from it and, on a change (rebuilt, grown, removed),
opens it again under one lock and replaces the entry whole, so that a caller keeps the object it got for as long as
it needs it. What is opened is one store: a folder that changed while it was opened is opened again
(:data:`OPEN_TRIES`). A folder that holds a store that cannot be used now (incomplete, damaged, being replaced) is
kept as an :class:`Unavailable` entry with the reason and the error; a folder that holds no store is remembered as
such until it changes. :meth:`StoreFolder.answer` asks a call again of a store replaced while it answered
(:data:`REOPEN_TRIES`). docs/http-api.md, "Stores that change while served".
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from labeldist.store import (
    StoreChangedError,
    StoreCorruptError,
    StoreError,
    StoreIdentity,
    StoreIncompleteError,
    metadata_identity,
    read_manifest,
    replacement_under_way,
    root_metadata_path,
    store_identity,
)

#: tries at opening a store that keeps changing while it is opened, before it is listed as unavailable
OPEN_TRIES = 3
#: times a call is asked again of a store that was replaced on disk while it answered, before giving up
REOPEN_TRIES = 3
#: what :meth:`StoreFolder.peek` answers for a store whose folder changed since it was opened
STALE = object()


class Opened(Protocol):
    """What an opened store must carry for its folder to tell whether it is still the store on disk."""

    name: str
    identity: StoreIdentity | None
    metadata_path: str
    available: bool
    manifest: dict[str, Any]


View = TypeVar("View", bound=Opened)
Answer = TypeVar("Answer")


class Unavailable:
    """A store folder that cannot be used now: incomplete, damaged, failed to open or being replaced. ``reason`` is
    what a client is told (without the server's path), ``error`` what raised it (a
    :class:`~labeldist.store.StoreError` for what the store layer refuses)."""

    available = False

    def __init__(
        self,
        name: str,
        path: Path,
        manifest: dict[str, Any],
        reason: str,
        error: BaseException,
        identity: StoreIdentity | None = None,
    ) -> None:
        self.name, self.path, self.manifest, self.reason, self.error = name, path, manifest, reason, error
        self.metadata_path = root_metadata_path(path)
        self.identity = identity

    def info(self) -> dict[str, Any]:
        return {**self.manifest, "name": self.name, "available": False, "detail": self.reason}


def without_path(message: str, path: Path | str) -> str:
    """A store error's message without the store's path on this machine (clients know it by name)."""
    for url in sorted({str(Path(path).absolute()), os.path.abspath(path)}, key=len, reverse=True):
        message = message.replace(f"{url}: ", "").replace(url, "<store>")
    return message


def damaged_reason(name: str, error: BaseException, path: Path) -> str:
    return f"store {name!r} is damaged on disk and is refused until it is rebuilt: {without_path(str(error), path)}"


def incomplete_reason(name: str) -> str:
    return (
        f"store {name!r} is not complete (still being written, or abandoned); it is served once its precompute job "
        "finishes"
    )


class StoreFolder(Generic[View]):
    """The stores of the folder ``root``, by name (see the module's docstring).

    ``open_view(name, path, identity)`` opens a complete store (a :class:`~labeldist.view.storeview.StoreView` of
    the caller's kind) pinned to ``identity``, the folder's identity measured before it was read. With
    ``paths=True`` a name may also be a path (absolute, or relative to ``root``), as
    :class:`~labeldist.client.LocalSource` takes them; else a name is one folder's. ``log`` says what was opened,
    reopened or dropped.

    Look-ups: :meth:`current` (opens what changed), :meth:`peek` (never opens anything: for the event loop),
    :meth:`refresh_all` (every store of the folder, opened), :meth:`manifests` (the listing from manifests alone).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        open_view: Callable[[str, Path, StoreIdentity | None], View],
        *,
        paths: bool = False,
        log: logging.Logger | None = None,
    ) -> None:
        self.root = Path(root)
        self.open_view = open_view
        self.paths = paths
        self.log = log or logging.getLogger(__name__)
        self.entries: dict[str, View | Unavailable] = {}
        #: folders that hold no store, by their identity when looked at (not looked at again until they change)
        self._not_stores: dict[str, StoreIdentity | None] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ names
    def folder_names(self) -> list[str]:
        """The names of the store folders now: every subfolder whose name does not start with a dot."""
        try:
            return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def path_of(self, name: str) -> Path | None:
        """The folder of store ``name``, or None for a name that cannot be a store folder's (empty; without
        ``paths``, also hidden or a path)."""
        if not name or "\0" in name:
            return None
        if not self.paths and (name.startswith(".") or "/" in name or "\\" in name):
            return None
        return self.root / name

    # ------------------------------------------------------------ look-ups
    def peek(self, name: str) -> View | Unavailable | None | object:
        """The entry of ``name`` if its folder has not changed since it was opened (None for a folder that holds no
        store, or none at all), else :data:`STALE`. Never opens a store: one ``stat`` for a known store, on the
        path kept with it (about 2 us; the service runs this on every request)."""
        entry = self.entries.get(name)
        if entry is not None:
            if metadata_identity(entry.metadata_path) == entry.identity:
                return entry
            return STALE
        path = self.path_of(name)
        if path is None:
            return None
        identity = store_identity(path)
        if identity is None or (name in self._not_stores and self._not_stores[name] == identity):
            return None
        return STALE

    def current(self, name: str) -> View | Unavailable | None:
        """The entry of ``name`` as the folder is now, opening it first when it changed (under the lock, which
        also serialises concurrent look-ups of the same change); None when no store is there."""
        entry = self.peek(name)
        if entry is not STALE:
            return entry  # type: ignore[return-value]
        with self._lock:
            entry = self.peek(name)  # another thread may have opened it meanwhile
            if entry is not STALE:
                return entry  # type: ignore[return-value]
            return self._reopen(name)

    def refresh_all(self) -> list[View | Unavailable]:
        """Every store of the folder as it is now (new folders opened, changed ones reopened, removed ones
        dropped), by name. Opens stores: the service calls it off the event loop."""
        names = self.folder_names()
        for gone in set(self.entries) - set(names):
            self.current(gone)  # drops it, unless a replacement is under way
        found = (self.current(name) for name in names)
        return [entry for entry in found if entry is not None]

    def manifests(self) -> list[dict[str, Any]]:
        """Every store folder's manifest with ``name`` and ``available`` (false, with ``detail``, for one that is
        incomplete or whose manifest is damaged), read without opening the stores."""
        out = []
        for name in self.folder_names():
            path = self.root / name
            try:
                manifest = read_manifest(str(path))
            except StoreError as e:
                out.append({"name": name, "available": False, "detail": damaged_reason(name, e, path)})
                continue
            if manifest is None:
                continue
            complete = manifest.get("complete") is True
            out.append({**manifest, "name": name, "available": complete})
            if not complete:
                out[-1]["detail"] = incomplete_reason(name)
        return out

    def forget(self) -> None:
        """Drop every opened store (their memory goes with them); each is opened again on its next look-up."""
        with self._lock:
            self.entries.clear()
            self._not_stores.clear()

    def answer(
        self, name: str, work: Callable[[View], Answer], usable: Callable[[str, View | Unavailable | None], View]
    ) -> Answer:
        """``work(view)`` answered wholly from one generation of store ``name``: a store replaced on disk while it
        answered (:class:`~labeldist.store.StoreChangedError`) is opened again and asked again, up to
        :data:`REOPEN_TRIES` times. ``usable(name, entry)`` gives the view of the entry or raises the caller's
        error for an unknown or unavailable store."""
        for attempt in range(REOPEN_TRIES):
            try:
                return work(usable(name, self.current(name)))
            except StoreChangedError:
                if attempt == REOPEN_TRIES - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------ opening
    def _reopen(self, name: str) -> View | Unavailable | None:
        path = self.path_of(name)
        assert path is not None
        old = self.entries.get(name)
        identity = store_identity(path)
        if identity is None:  # removed, or between the two renames of a replacement
            if old is not None and replacement_under_way(path):
                reason = f"store {name!r} is being replaced by a new one right now; retry in a moment"
                return Unavailable(name, path, old.manifest, reason, StoreChangedError(str(path)))
            if old is not None:
                self.log.warning("%s: its folder was removed: no longer served", name)
            self.entries.pop(name, None)
            self._not_stores.pop(name, None)
            return None
        fresh = self.open(name, path)
        if fresh is None:
            self.entries.pop(name, None)
            self._not_stores[name] = identity
            return None
        self.entries[name] = fresh
        self._not_stores.pop(name, None)
        self._say_opened(name, old, fresh)
        return fresh

    def _say_opened(self, name: str, old: View | Unavailable | None, fresh: View | Unavailable) -> None:
        state = "served" if fresh.available else "unavailable"
        if old is None:
            self.log.info("%s: %s", name, state)
        elif fresh.available and old.available and getattr(fresh, "digest", None) != getattr(old, "digest", None):
            self.log.warning(
                "%s: changed on disk (rebuilt or replaced): the new store is %s from now on (%d items, "
                "digest %s, was %s)",
                name,
                state,
                fresh.n_items,  # type: ignore[union-attr]
                fresh.digest[:12],  # type: ignore[union-attr]
                old.digest[:12],  # type: ignore[union-attr]
            )
        else:
            self.log.warning("%s: changed on disk: reopened, %s", name, state)

    def open(self, name: str, path: Path) -> View | Unavailable | None:
        """The store at ``path`` opened, or unavailable with the reason, or None if it is no store. The result
        carries the folder's identity from before its first read; a folder that changed while it was read is
        opened again (:data:`OPEN_TRIES` times), so what is kept is one store."""
        for _ in range(OPEN_TRIES):
            identity = store_identity(path)
            opened = self._open_once(name, path, identity)
            if store_identity(path) == identity:
                return opened
        reason = f"store {name!r} kept changing on disk while it was opened; retry once the job writing it has finished"
        return Unavailable(name, path, {}, reason, StoreChangedError(str(path)))

    def _open_once(self, name: str, path: Path, identity: StoreIdentity | None) -> View | Unavailable | None:
        def unavailable(manifest: dict[str, Any], reason: str, error: BaseException) -> Unavailable:
            return Unavailable(name, path, manifest, reason, error, identity)

        try:
            manifest = read_manifest(str(path))
        except StoreError as e:  # its metadata is damaged: listed, refused, and the other stores still served
            self.log.error("%s", e)
            return unavailable({}, damaged_reason(name, e, path), e)
        if manifest is None:
            return None
        if manifest.get("complete") is not True:
            reason = incomplete_reason(name)
            return unavailable(manifest, reason, StoreIncompleteError(f"{path}: {reason}"))
        try:
            return self.open_view(name, path, identity)
        except StoreChangedError as e:  # a pinned caller's store moved on: its own error, said as it is
            return unavailable(manifest, str(e), e)
        except StoreIncompleteError as e:
            return unavailable(manifest, f"store {name!r} is not complete: {without_path(str(e), path)}", e)
        except StoreCorruptError as e:
            self.log.error("%s", e)
            return unavailable(manifest, damaged_reason(name, e, path), e)
        except StoreError as e:
            return unavailable(manifest, f"store {name!r} cannot be served: {without_path(str(e), path)}", e)
        except Exception as e:  # a broken store must not stop the others from being served
            self.log.exception("%s: cannot be opened", path)
            return unavailable(manifest, f"store {name!r} cannot be opened: {type(e).__name__}: {e}", e)
