"""Damage refused, never served: reads checked against what was written (docs/store-format.md, "Integrity: every
byte checked"), and the list of every damaged chunk of a store (``labeldist verify``).

Every chunk of every array (ids, labels, kNN, dense, progress) carries a CRC32C checksum, and every chunk is
written even where it holds only the fill value (``write_empty_chunks``), so that a complete store has every
chunk file of every array. Reads of a complete store go through :class:`StoreReader`, which checks both: a
chunk that is missing (Zarr would silently answer the fill value: -1, NaN, "") or fails to decode (its
checksum, its compression, its UTF-8) raises :class:`StoreCorruptError` naming the array and the rows, so
damage is refused, never served as data. Zarr's LocalStore writes each chunk file aside and renames it into
place, so a chunk is either old or new, never half-written; the manifest flag is the store-level publish.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec
from zarr.core.sync import sync

from labeldist.store.errors import StoreCorruptError, StoreError
from labeldist.store.layout import chunk_keys, open_group, store_arrays, stored_chunk_shape


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


def missing_chunk_error(
    url: str, path: str, array: zarr.Array, coords: tuple[int, ...], count: int, start: int, stop: int
) -> StoreCorruptError:
    a, b = _rows_of(array, coords)
    return StoreCorruptError(
        f"{url}: {path} rows {a}:{b}: chunk {'/'.join(map(str, coords))} is missing ({count} "
        f"missing in rows {start}:{stop}): refusing to read fill values as data; `labeldist "
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
