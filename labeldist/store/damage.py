"""Damage refused, never served: reads checked against what was written (docs/store-format.md, "Integrity: every
byte checked"), and the list of every damaged chunk of a store (``labeldist verify``).

Every chunk of every array (ids, labels, kNN, dense, progress) carries a CRC32C checksum, and every chunk is
written even where it holds only the fill value (``write_empty_chunks``), so that a complete store has every
chunk file of every array. Reads of a complete store go through :class:`StoreReader`, which checks both: a
chunk that is missing (Zarr would silently answer the fill value: -1, NaN, "") or fails to decode (its
checksum, its compression, its UTF-8) raises :class:`StoreCorruptError` naming the array and the rows, so
damage is refused, never served as data. Zarr's LocalStore writes each chunk file aside and renames it into
place, so a chunk is either old or new, never half-written; the manifest flag is the store-level publish.

A store is also its own folders, all the way down: :func:`foreign_entries` is the one walk of a store's folders
that finds a link, a FIFO or a device anywhere inside it (a link to another store's ``knn/`` would pass every
checksum), and :func:`check_store_folders` refuses such a store when it is opened (:class:`StoreReader`) or
resumed (a precompute or append job).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from typing import Any

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec
from zarr.core.sync import sync
from zarr.storage import LocalStore

from labeldist.core.options import file_kind
from labeldist.store.errors import StoreCorruptError, StoreError
from labeldist.store.layout import chunk_keys, open_group, store_arrays, stored_chunk_shape

#: stores walked whole and found clean in this process, by path: the identity they had (:func:`check_store_folders`)
_walked_clean: dict[str, object] = {}
#: the most stores remembered as walked clean (the cache is emptied when full)
WALKED_CLEAN_MAX = 256


def foreign_entries(root: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """Everything inside the local store folder ``root`` that is neither a plain folder nor a regular file, sorted,
    each with what it is ("a symbolic link", "a FIFO (named pipe), not a regular file", ...): the one walk of a
    store's folders, none of them followed through a link. labeldist writes every folder and file of a store itself,
    so anything else there (a link to another store's ``knn/``, a FIFO or a device at a chunk) is damage: reading
    through it would serve or merge another store's numbers, or block. ``root`` itself may be a link (a store
    linked into a stores folder); a root that cannot be listed answers nothing (its opener says why).

    One ``scandir`` per folder and no ``stat`` per entry (the kind comes with the listing): about 30 folders for a
    small store, one per chunk row of each array for a big one.
    """
    found: list[tuple[str, str]] = []
    top = os.fspath(root)
    todo = [top]
    while todo:
        folder = todo.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as e:
            if folder != top:
                found.append((folder, f"a folder that cannot be listed ({os.strerror(e.errno or 0)})"))
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)
                    continue
                if entry.is_file(follow_symlinks=False):
                    continue
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:  # removed while listed
                continue
            what = "a symbolic link" if stat.S_ISLNK(mode) else f"{file_kind(mode)}, not a regular file"
            found.append((entry.path, what))
    return sorted(found)


def foreign_entry_error(url: str, path: str, what: str, more: int = 0) -> StoreCorruptError:
    """The error of a store holding ``path`` (:func:`foreign_entries`), named by its path and what it is."""
    others = f" (and {more} more such: `labeldist verify {url}` lists them)" if more else ""
    return StoreCorruptError(
        f"{path}: {what}, inside the store {url}{others}, whose folders and files labeldist makes itself: the "
        "store is damaged and refused (never read, appended to or written over); remove it and rebuild the store",
        array=os.path.relpath(path, url),
    )


def check_store_folders(url: str, identity: object | None = None) -> None:
    """StoreCorruptError naming the first of :func:`foreign_entries` of the local store ``url``, if any. Given
    ``identity`` (the store's :data:`~labeldist.store.StoreIdentity`), a store already walked clean with that
    identity in this process is not walked again: a reader opened once per row block (an append's tasks) walks a
    big store once."""
    if identity is not None and _walked_clean.get(url) == identity:
        return
    found = foreign_entries(url)
    if found:
        raise foreign_entry_error(url, *found[0], more=len(found) - 1)
    if identity is not None:
        if len(_walked_clean) >= WALKED_CLEAN_MAX:
            _walked_clean.clear()
        _walked_clean[url] = identity


def is_checksum_error(error: BaseException) -> bool:
    """Whether ``error`` is Zarr's CRC32C mismatch (zarr-python raises a plain ValueError for it, no subclass)."""
    return isinstance(error, ValueError) and "checksum" in str(error).lower()


def damage_reason(error: BaseException) -> str | None:
    """What a read error says about the bytes on disk, or None when it is not about them (memory, permissions).

    A chunk whose bytes changed fails its CRC32C (a ValueError); one that was replaced whole by other bytes can
    also fail in the codecs before or after it (Zstd's frame check, UTF-8 decoding of a string chunk, a shard
    index that does not parse), with whatever exception the codec raises.
    """
    if isinstance(error, (OSError, MemoryError)):
        return None
    if is_checksum_error(error):
        return "failed its CRC32C checksum"
    return f"cannot be decoded ({type(error).__name__}: {error})"


@contextlib.contextmanager
def checked_read(url: str, path: str, region: str) -> Iterator[None]:
    """Turn damage found while reading ``region`` of array ``path`` into a StoreCorruptError naming the store,
    the array and the region."""
    try:
        yield
    except StoreError:
        raise
    except Exception as e:
        reason = damage_reason(e)
        if reason is None:
            raise StoreError(f"{url}: {path} {region} cannot be read: {e}") from e
        raise StoreCorruptError(
            f"{url}: {path} {region} {reason} (damaged on disk): refusing to read it; "
            f"`labeldist verify {url}` lists every damaged chunk",
            array=path,
        ) from e


def missing_chunks(array: zarr.Array, start: int = 0, stop: int | None = None) -> list[tuple[int, ...]]:
    """Grid coordinates of the stored objects of rows ``start:stop`` that are absent from the store.

    Zarr reads an absent chunk as the fill value, which would pass for data (-1 neighbours, NaN or 0 distances,
    empty ids); a complete store has every chunk written (``write_empty_chunks``), so absent means lost.
    """
    store, prefix = array.store_path.store, array.store_path.path
    return [c for c, key in chunk_keys(array, start, stop) if not sync(store.exists(f"{prefix}/{key}"))]


def _rows_of(array: zarr.Array, coords: tuple[int, ...]) -> tuple[int, int]:
    if array.ndim == 0:
        return 0, 0
    rows = stored_chunk_shape(array)[0]
    return coords[0] * rows, min((coords[0] + 1) * rows, array.shape[0])


def read_rows(url: str, path: str, array: zarr.Array, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Rows ``start:stop`` of ``array`` (the whole of a 0-d array), refused with StoreCorruptError naming
    the array and the rows when a chunk holding them is absent or fails to decode."""
    stop = array.shape[0] if stop is None and array.ndim else stop
    missing = missing_chunks(array, start, stop)
    if missing:
        raise missing_chunk_error(url, path, array, missing[0], len(missing), start, stop)
    with checked_read(url, path, f"rows {start}:{stop}"):
        return array[...] if array.ndim == 0 else array[start:stop]


def _chunk_file_kind(array: zarr.Array, coords: tuple[int, ...]) -> str | None:
    """What is at the file of chunk ``coords`` of a local ``array`` when something that is not a regular file is
    there ("a symbolic link", "a FIFO (named pipe)", ...), else None (absent, or not a local store)."""
    store = array.store_path.store
    if not isinstance(store, LocalStore):
        return None
    path = os.path.join(store.root, array.store_path.path, array.metadata.encode_chunk_key(coords))
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    return "a symbolic link" if stat.S_ISLNK(mode) else None if stat.S_ISREG(mode) else file_kind(mode)


def missing_chunk_error(
    url: str, path: str, array: zarr.Array, coords: tuple[int, ...], count: int, start: int, stop: int
) -> StoreCorruptError:
    a, b = _rows_of(array, coords)
    there = _chunk_file_kind(array, coords)
    state = "is missing" if there is None else f"is {there}, not a chunk file (damaged on disk)"
    lost = "missing" if there is None else "missing or not chunk files"
    return StoreCorruptError(
        f"{url}: {path} rows {a}:{b}: chunk {'/'.join(map(str, coords))} {state} ({count} "
        f"{lost} in rows {start}:{stop}): refusing to read fill values as data; `labeldist "
        f"verify {url}` lists every damaged chunk",
        array=path,
    )


def has_checksums(array: zarr.Array) -> bool:
    """Whether every chunk of ``array`` carries a CRC32C checksum (all arrays of stores made since 0.2 do)."""
    return any(isinstance(c, Crc32cCodec) for c in array.compressors)


def store_has_checksums(url: str) -> bool:
    """Whether the store at ``url`` was laid out with a checksum on every array (its ids tell: since 0.2)."""
    group = open_group(url, mode="r")
    return "ids" in group and has_checksums(group["ids"])


def damaged_regions(url: str) -> list[dict[str, Any]]:
    """Every stored object (shard or chunk) of every array of the store at ``url`` that is missing, fails its
    checksum or cannot be decoded, each read once, so that Zarr's CRC32C codec checks every byte.

    Returns ``[{"array": "dense/distances", "rows": [256, 512], "error": "..."}, ...]``; empty when all is whole.
    Arrays written without checksums (stores made before 0.2) are named too: their damage cannot be detected.
    """
    damaged = []
    for path, array in store_arrays(url):
        if not has_checksums(array):
            damaged.append(
                {
                    "array": path,
                    "rows": [0, int(array.shape[0]) if array.ndim else 0],
                    "error": "carries no CRC32C checksum (made before labeldist 0.2): damage to it "
                    "cannot be detected; rebuild the store",
                }
            )
        seen: set[tuple[int, int]] = set()
        for coords, _key in chunk_keys(array):
            start, stop = _rows_of(array, coords)
            if (start, stop) in seen:
                continue
            seen.add((start, stop))
            try:
                read_rows(url, path, array, start, stop)
            except StoreCorruptError as e:
                damaged.append({"array": path, "rows": [start, stop], "error": str(e)})
    return damaged
