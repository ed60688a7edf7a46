"""The Zarr v3 store layout of DESIGN.md: manifest, arrays, atomic publish, readers.

Layout of one store (a Zarr v3 group)::

    attrs["labeldist"]      manifest; ``complete`` turns true last, only when every array is whole
    ids                     (N,) string item ids
    knn/indices             (N, k) int32, nearest first, the item itself excluded, -1 padding at the end; chunks
                            of a row block, or of a divisor of it in big stores (:func:`knn_chunk_rows`)
    knn/distances           (N, k) float32, +inf where the index is -1; chunked as knn/indices
    dense/distances         (N, N) float32, optional; one shard per row block, so a row block is one read
    labels/<name>           the label arrays (``LabelSet.to_arrays``) from which any entry can be recomputed
    progress/blocks         (n_blocks,) uint8, one chunk per block: 1 once that row block is written
    progress/exact_pairs    (n_blocks,) int64: exact distances each block computed (all N per row unless pruned;
                            N - start per row of a symmetric dense store, which computes the upper triangle)

While a symmetric dense store (manifest ``symmetric: true``, see :mod:`labeldist.engine`) is being written, it
also holds two work arrays, deleted before ``complete`` turns true, so that a finished store has the layout
above::

    work/upper              (N, N) float32, laid out as dense/distances; row block b holds its upper strip,
                            rows start:stop, columns start:N
    progress/upper          (n_blocks,) uint8, one chunk per block: 1 once that block's upper strip is written

Every chunk of every array (ids, labels, kNN, dense, progress) carries a CRC32C checksum, and every chunk is
written even where it holds only the fill value (``write_empty_chunks``), so that a complete store has every
chunk file of every array. Reads of a complete store go through :class:`StoreReader`, which checks both: a
chunk that is missing (Zarr would silently answer the fill value: -1, NaN, "") or fails to decode (its
checksum, its compression, its UTF-8) raises :class:`StoreCorruptError` naming the array and the rows, so
damage is refused, never served as data. Zarr's LocalStore writes each chunk file aside and renames it into
place, so a chunk is either old or new, never half-written; the manifest flag is the store-level publish.

This module is the only one that knows the Zarr layout: the engine, ``verify``, ``info`` and the service read
and write through its functions and :class:`StoreReader`.

Creation is atomic: :func:`create_store` lays out the whole skeleton (every array, progress marks included,
the manifest last) in a hidden sibling folder and renames it into place, so a kill at any instant leaves either
no store or a whole skeleton that a rerun resumes (on an fsspec URL, where there is no rename, the manifest is
written last, so a half-made skeleton has none and is laid out again).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import math
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec
from zarr.core.sync import sync

from labeldist import __version__
from labeldist.labels.base import LabelError, LabelSet, as_str_array

FORMAT = 1
MANIFEST_KEY = "labeldist"
#: manifest keys that must agree for an existing store to be resumed or reused
FINGERPRINT_KEYS = (
    "format", "dataset", "kind", "params", "n_items", "k", "labels_sha256", "labels_type", "dense",
    "block_rows", "symmetric",
)  # fmt: skip
DENSE_TILE = 512
#: the kNN lists (both arrays) of a store up to this size are chunked by row block: a server holds them whole after
#: its first requests (the service's default LABELDIST_KNN_CACHE_MB), so how they are cut does not matter to it
KNN_WHOLE_BYTES = 128 << 20
#: bytes a chunk of bigger kNN lists (one array) is cut to at most, when a row block would make it larger: a server
#: reading their rows on demand (:mod:`labeldist.rowcache`) decodes a whole chunk to answer one row
KNN_CHUNK_BYTES = 16 << 10
#: the fewest rows a kNN chunk cut from a row block may have (smaller chunks: more files than the decoding saves)
KNN_MIN_CHUNK_ROWS = 16


class StoreError(RuntimeError):
    """A store cannot be used as asked; the message names the store."""


class StoreIncompleteError(StoreError):
    """The store is still being written (or was abandoned half-way): it must not be served."""


class StoreMismatchError(StoreError):
    """A store already at the output path was made from other labels or parameters."""


class StoreCorruptError(StoreError):
    """A chunk of the store is missing, or failed its CRC32C checksum or its decoding: the bytes on disk are not
    the ones written. ``array`` names the damaged array, where one is known."""

    def __init__(self, message: str, array: str | None = None) -> None:
        super().__init__(message)
        self.array = array


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
        raise StoreCorruptError(f"{url}: {path} {region} {reason} (damaged on disk): refusing to read it; "
                                f"`labeldist verify {url}` lists every damaged chunk", array=path) from e  # fmt: skip


def _codecs() -> list[Any]:
    # zstd level 1: distances compress poorly, so spend little CPU; crc32c detects on-disk corruption.
    return [ZstdCodec(level=1), Crc32cCodec()]


def _mark_codecs() -> list[Any]:
    # progress marks are one byte a chunk: nothing to compress, but a flipped mark must not pass for "done"
    return [Crc32cCodec()]


#: every chunk is written, even one equal to the fill value, so that a missing chunk file is always damage
_WRITE_CONFIG = {"write_empty_chunks": True}


def store_url(path_or_url: str | os.PathLike[str]) -> str:
    """An absolute local path, or an fsspec URL unchanged, so Dask workers resolve it the same way."""
    s = os.fspath(path_or_url)
    return s if "://" in s else os.path.abspath(s)


def _storage_options(url: str) -> dict[str, Any] | None:
    # fsspec's local filesystem does not create parent folders unless asked to; object stores have none.
    return {"auto_mkdir": True} if url.startswith("file://") else None


def open_group(url: str, mode: str) -> zarr.Group:
    url = store_url(url)
    return zarr.open_group(url, mode=mode, storage_options=_storage_options(url))


def open_array(url: str, path: str, mode: str) -> zarr.Array:
    url = store_url(url)
    array = zarr.open_array(url, path=path, mode=mode, storage_options=_storage_options(url))
    # zarr 3.1 ignores open_array's config= for an array that exists: set it on the array, or a chunk equal to the
    # fill value (an exact_pairs of 0) would not be written, and publish would find it missing
    return array if mode == "r" else array.with_config(_WRITE_CONFIG)


# ---------------------------------------------------------------- chunk files
def _stored_chunk_shape(array: zarr.Array) -> tuple[int, ...]:
    """The shape of one stored object of ``array``: a shard when sharded, else a chunk."""
    return tuple(array.metadata.chunk_grid.chunk_shape)


def chunk_keys(array: zarr.Array, start: int = 0, stop: int | None = None) -> list[tuple[tuple[int, ...], str]]:
    """The stored objects (shards or chunks) holding rows ``start:stop`` of ``array``: (grid coordinates, key)."""
    if array.ndim == 0:
        return [((), array.metadata.encode_chunk_key(()))]
    shape = _stored_chunk_shape(array)
    stop = array.shape[0] if stop is None else stop
    grid = [range(start // shape[0], math.ceil(stop / shape[0]))]
    grid += [range(math.ceil(extent / size)) for extent, size in zip(array.shape[1:], shape[1:])]
    coords: list[tuple[int, ...]] = [()]
    for axis in grid:
        coords = [c + (i,) for c in coords for i in axis]
    return [(c, array.metadata.encode_chunk_key(c)) for c in coords]


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
    rows = _stored_chunk_shape(array)[0]
    return coords[0] * rows, min((coords[0] + 1) * rows, array.shape[0])


def read_rows(url: str, path: str, array: zarr.Array, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Rows ``start:stop`` of ``array`` (the whole of a 0-d array), refused with StoreCorruptError naming
    the array and the rows when a chunk holding them is absent or fails to decode."""
    stop = array.shape[0] if stop is None and array.ndim else stop
    missing = missing_chunks(array, start, stop)
    if missing:
        raise _missing_error(url, path, array, missing[0], len(missing), start, stop)
    with checked_read(url, path, f"rows {start}:{stop}"):
        return array[...] if array.ndim == 0 else array[start:stop]


def _missing_error(
    url: str, path: str, array: zarr.Array, coords: tuple[int, ...], count: int, start: int, stop: int
) -> StoreCorruptError:
    a, b = _rows_of(array, coords)
    return StoreCorruptError(f"{url}: {path} rows {a}:{b}: chunk {'/'.join(map(str, coords))} is missing ({count} "
                             f"missing in rows {start}:{stop}): refusing to read fill values as data; `labeldist "
                             f"verify {url}` lists every damaged chunk", array=path)  # fmt: skip


class ChunkFiles:
    """Rows of a 2-D array read straight from its chunk files, for the arrays whose rows a server reads one block at
    a time (the kNN lists): each chunk's file read, its CRC32C checked, its Zstandard frame decoded, as Zarr's own
    codecs do, for about a tenth of the CPU of a read through zarr-python (0.1 against 1 ms a 67 kB chunk).

    Only for what this module writes there: a local folder, chunks spanning every column, no sharding, and the
    codecs bytes (little-endian), zstd, crc32c; :meth:`of` answers None for any other array, which is then read
    through Zarr (:func:`read_rows`). Damage is refused as :func:`read_rows` refuses it: a missing chunk file and a
    chunk failing its checksum or its decoding raise StoreCorruptError with the same messages.
    """

    def __init__(self, url: str, path: str, array: zarr.Array) -> None:
        import google_crc32c  # Zarr's own CRC32C (its Crc32cCodec's)
        from numcodecs.zstd import Zstd

        self.url, self.path, self.array = url, path, array
        self.folder = os.path.join(url, *array.store_path.path.split("/"))
        self.shape = tuple(int(x) for x in array.shape)
        self.chunk = _stored_chunk_shape(array)
        self.dtype = np.dtype(array.dtype).newbyteorder("<")  # the array's dtype: a NumPy dtype
        self._zstd, self._crc32c = Zstd(), google_crc32c.value
        # the file of chunk row c is prefix + c + suffix, as Zarr's chunk key encoding names it ("c/<c>/0" by default)
        probe = self._path_of(987654321)
        at = probe.rfind("987654321")
        self._prefix, self._suffix = probe[:at], probe[at + 9 :]
        if any(self._prefix + str(c) + self._suffix != self._path_of(c) for c in (0, 12)):
            self._prefix = self._suffix = None  # another encoding: ask Zarr for each key

    def _path_of(self, c: int) -> str:
        return os.path.join(self.folder, *self.array.metadata.encode_chunk_key((c, 0)).split("/"))

    @classmethod
    def of(cls, url: str, path: str, array: zarr.Array) -> ChunkFiles | None:
        """A direct reader of ``array``, or None when it is not laid out as this module writes the kNN lists."""
        from zarr.codecs import BytesCodec

        codecs = array.metadata.codecs if array.metadata.zarr_format == 3 else ()
        if not (is_local(url) and array.ndim == 2 and len(codecs) == 3):
            return None
        first, zstd, crc = codecs
        if not (isinstance(first, BytesCodec) and isinstance(zstd, ZstdCodec) and isinstance(crc, Crc32cCodec)):
            return None
        if first.endian is not None and first.endian.value != "little":
            return None
        if _stored_chunk_shape(array)[1] < array.shape[1] or np.dtype(array.dtype).kind not in "iuf":
            return None
        return cls(url, path, array)

    def _chunk(self, c: int, start: int, stop: int) -> np.ndarray:
        """Chunk row ``c``, whole (edge chunks are stored at the full chunk shape), read-only."""
        try:
            with open(self._path_of(c) if self._prefix is None else f"{self._prefix}{c}{self._suffix}", "rb") as f:
                data = f.read()
        except (FileNotFoundError, NotADirectoryError):
            raise _missing_error(self.url, self.path, self.array, (c, 0), 1, start, stop) from None
        try:
            body = data[:-4]
            if len(data) < 4 or self._crc32c(body) != int.from_bytes(data[-4:], "little"):
                raise ValueError("Stored and computed checksum do not match")
            return np.frombuffer(self._zstd.decode(body), dtype=self.dtype).reshape(self.chunk)
        except Exception as e:  # named as read_rows names it: damage, or a read that failed for another reason
            a, b = c * self.chunk[0], min((c + 1) * self.chunk[0], self.shape[0])
            with checked_read(self.url, self.path, f"rows {a}:{b}"):
                raise e from None
            raise  # pragma: no cover - checked_read always raises

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` (a read-only view where they lie in one chunk)."""
        r = self.chunk[0]
        first, last = start // r, max(start, stop - 1) // r
        if first == last:
            return self._chunk(first, start, stop)[start - first * r : stop - first * r, : self.shape[1]]
        out = np.empty((stop - start, self.shape[1]), dtype=self.dtype)
        for c in range(first, last + 1):
            a, b = max(start, c * r), min(stop, (c + 1) * r)
            out[a - start : b - start] = self._chunk(c, start, stop)[a - c * r : b - c * r, : self.shape[1]]
        return out


def has_checksums(array: zarr.Array) -> bool:
    """Whether every chunk of ``array`` carries a CRC32C checksum (all arrays of stores made since 0.2 do)."""
    return any(isinstance(c, Crc32cCodec) for c in array.compressors)


def n_blocks(n_items: int, block_rows: int) -> int:
    return math.ceil(n_items / block_rows)


def block_range(block: int, n_items: int, block_rows: int) -> tuple[int, int]:
    start = block * block_rows
    if not 0 <= start < n_items:
        raise IndexError(f"block {block} is outside 0..{n_blocks(n_items, block_rows) - 1}")
    return start, min(start + block_rows, n_items)


def knn_chunk_rows(block_rows: int, k: int, n_items: int) -> int:
    """Rows of one chunk of ``knn/indices`` and ``knn/distances``: the row block, unless the lists are bigger than
    :data:`KNN_WHOLE_BYTES` (8 N k bytes) and a block's chunk bigger than :data:`KNN_CHUNK_BYTES`; then the largest
    divisor of ``block_rows`` whose chunk fits (a divisor, so that every chunk lies in one row block, written by one
    task), when it has at least :data:`KNN_MIN_CHUNK_ROWS` rows. A server reading rows of a 1,000,000-item store
    on demand decodes 12.8 kB for a row of 32-row chunks, 800 kB for one of 2,048-row chunks (0.12 against 3.9 ms
    of CPU); writing 64 chunks rather than one costs about 0.1 s a 2,048-row block (1 % of a 1,000,000-item build),
    which smaller stores, held whole by a server, do not pay.

    >>> [knn_chunk_rows(rows, 100, 1_000_000) for rows in (16, 167, 256, 2048)], knn_chunk_rows(2048, 100, 100_000)
    ([16, 167, 32, 32], 2048)
    """
    row_bytes = 4 * max(k, 1)
    if 2 * n_items * row_bytes <= KNN_WHOLE_BYTES or block_rows * row_bytes <= KNN_CHUNK_BYTES:
        return block_rows
    for rows in range(min(KNN_CHUNK_BYTES // row_bytes, block_rows), KNN_MIN_CHUNK_ROWS - 1, -1):
        if block_rows % rows == 0:
            return rows
    return block_rows


def build_manifest(
    *,
    dataset: str,
    kind: str,
    params: Mapping[str, Any],
    labels: LabelSet,
    k: int,
    dense: bool,
    block_rows: int,
    symmetric: bool = False,
    generations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The manifest of a store about to be written (``complete`` false), as JSON types (tuples become lists,
    as they will when read back), so that it compares equal to the stored one.

    ``symmetric`` (dense stores only) records ``"symmetric": true``: the matrix is computed as its upper
    triangle and mirrored. The key is left out otherwise, so that other manifests stay as they were; it is a
    fingerprint key, because a store half-written one way must not be finished the other way.

    ``generations`` lists the store's generations (:func:`store_generations`), the last one being written; by
    default the store's first: all its items. ``generation`` names the last.
    """
    if symmetric and not dense:
        raise ValueError("symmetric applies to dense stores only")
    manifest = {
        "format": FORMAT,
        "dataset": dataset,
        "kind": kind,
        # reader/generator settings change numbers too: recorded beside the distance's own parameters
        "params": {**params, "labels": labels.provenance} if labels.provenance else dict(params),
        "n_items": len(labels),
        "k": int(k),
        "labels_sha256": labels.sha256(),
        "labels_type": labels.label_type,
        "dense": bool(dense),
        "block_rows": int(block_rows),
        "engine_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "complete": False,
    }
    if symmetric:
        manifest["symmetric"] = True
    if generations is None:
        generations = [generation_entry(1, 0, labels)]
    manifest["generation"] = int(generations[-1]["generation"])
    manifest["generations"] = generations
    return json.loads(json.dumps(manifest))


def generation_entry(generation: int, start: int, labels: LabelSet) -> dict[str, Any]:
    """The manifest's record of one generation: its number, the items it brought (rows ``start:start + len``)
    and the digest of their labels (:meth:`LabelSet.sha256` of those items alone: the file they were read from,
    as precompute of that file alone would record it)."""
    return {"generation": int(generation), "items": [int(start), int(start + len(labels))],
            "labels_sha256": labels.sha256()}  # fmt: skip


def store_generations(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The generations a store's manifest records; one, every item, for a store made before generations were
    recorded."""
    recorded = manifest.get("generations")
    if isinstance(recorded, list) and recorded:
        return [dict(g) for g in recorded]
    return [{"generation": 1, "items": [0, int(manifest["n_items"])], "labels_sha256": manifest["labels_sha256"]}]


def fingerprint_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Names of the fingerprint keys on which two manifests differ."""
    return [key for key in FINGERPRINT_KEYS if a.get(key) != b.get(key)]


def read_manifest(url: str) -> dict[str, Any] | None:
    """The manifest at ``url``, or None when there is no labeldist store there; StoreCorruptError when the
    group's metadata cannot be parsed (a store damaged on disk is not "no store": it must not be written over)."""
    try:
        group = open_group(url, mode="r")
    except (FileNotFoundError, NotADirectoryError, zarr.errors.GroupNotFoundError,
            zarr.errors.NodeTypeValidationError):  # fmt: skip
        return None
    except ValueError as e:  # zarr.json that is not JSON, or not Zarr metadata
        raise StoreCorruptError(f"{store_url(url)}: its metadata (zarr.json) cannot be read ({e}): the store is "
                                "damaged; rebuild it") from e  # fmt: skip
    man = group.attrs.get(MANIFEST_KEY)
    return dict(man) if isinstance(man, Mapping) else None


#: which store is at a local path now (:func:`store_identity`): inode, device, change and modification times in ns,
#: and size of its root ``zarr.json``
StoreIdentity = tuple[int, int, int, int, int]


def root_metadata_path(path: str | os.PathLike[str]) -> str:
    """The root ``zarr.json`` of the store folder ``path``: where the manifest lives."""
    return os.path.join(os.fspath(path), "zarr.json")


def store_identity(path: str | os.PathLike[str]) -> StoreIdentity | None:
    """Which store is at the local folder ``path`` now, or None when there is none (no folder, no root metadata,
    or between the two renames of a replacement). See :func:`metadata_identity`."""
    return metadata_identity(root_metadata_path(path))


def metadata_identity(metadata_path: str) -> StoreIdentity | None:
    """The identity of a store by its root ``zarr.json`` (``metadata_path``): one ``stat``, cheap enough for a server
    to compare on every request (:mod:`labeldist.api.registry`).

    Every way a store changes changes it: ``--overwrite`` and creation rename a whole new folder into place, whose
    ``zarr.json`` is another file (another inode, and another change time should the number be reused), and
    publishing, the one write to a store in place, rewrites ``zarr.json`` (where the manifest lives). Nothing
    writes into a complete store in place, so the same identity means the same store."""
    try:
        st = os.stat(metadata_path)
    except (FileNotFoundError, NotADirectoryError, ValueError):  # ValueError: a NUL in the path
        return None
    return (st.st_ino, st.st_dev, st.st_ctime_ns, st.st_mtime_ns, st.st_size)


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """SHA-256 of the manifest as canonical JSON (sorted keys): names what a store holds, so that a client can
    tell which store answered it; two stores with different parameters, labels or creation times differ."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def replacement_under_way(path: str | os.PathLike[str]) -> bool:
    """Whether a store at ``path`` is being replaced right now: the old one renamed aside and the new one not yet
    renamed in (``--overwrite``'s swap, an appended generation's, or a store created over an unfinished one)."""
    return any(os.path.exists(sibling(str(path), what)) for what in ("replaced", "previous", "discarded"))


def create_store(url: str, manifest: Mapping[str, Any], labels: LabelSet) -> None:
    """Lay out an empty store (``complete`` false) with ids and labels written; replaces what is at ``url``.

    Atomic on a local path: the skeleton is built whole in a hidden sibling and renamed into place, so that a kill
    at any instant leaves at ``url`` either what was there or a whole skeleton. A half-built sibling from an
    earlier kill is removed first. On an fsspec URL the manifest is written last, after every array.
    """
    url = store_url(url)
    if not is_local(url):
        _lay_out(url, manifest, labels)
        return
    building = sibling(url, "creating")
    shutil.rmtree(building, ignore_errors=True)
    _lay_out(building, manifest, labels)
    if os.path.isdir(url) and os.listdir(url):  # an unfinished or mismatched store being replaced
        discarded = sibling(url, "discarded")
        shutil.rmtree(discarded, ignore_errors=True)
        os.rename(url, discarded)
        os.rename(building, url)
        shutil.rmtree(discarded)
    else:
        if os.path.isdir(url):
            os.rmdir(url)  # an empty folder given as --out
        os.rename(building, url)


def is_local(url: str) -> bool:
    return "://" not in url


def sibling(url: str, what: str) -> str:
    """A hidden folder beside ``url`` (the service skips folders whose name starts with a dot)."""
    head, name = os.path.split(url.rstrip("/"))
    return os.path.join(head, f".{name}.{what}")


def _lay_out(url: str, manifest: Mapping[str, Any], labels: LabelSet) -> None:
    n, k, rows = manifest["n_items"], manifest["k"], manifest["block_rows"]
    group = open_group(url, mode="w")
    ids = group.create_array("ids", shape=(n,), dtype=str, chunks=(max(n, 1),), compressors=_codecs(),
                             config=_WRITE_CONFIG)  # fmt: skip
    ids[:] = labels.ids
    for name, arr in labels.to_arrays().items():
        arr = np.asarray(arr)
        dtype = str if arr.dtype.kind in "UO" else arr.dtype
        out = group.create_array(
            f"labels/{name}",
            shape=arr.shape,
            dtype=dtype,
            chunks=arr.shape if arr.size else tuple(1 for _ in arr.shape),
            compressors=_codecs(),
            config=_WRITE_CONFIG,
        )
        if arr.size:
            out[...] = arr
    knn_rows = knn_chunk_rows(rows, k, n)
    group.create_array(
        "knn/indices", shape=(n, k), dtype="int32", chunks=(knn_rows, max(k, 1)), compressors=_codecs(),
        fill_value=-1, config=_WRITE_CONFIG,
    )  # fmt: skip
    group.create_array(
        "knn/distances", shape=(n, k), dtype="float32", chunks=(knn_rows, max(k, 1)), compressors=_codecs(),
        fill_value=np.inf, config=_WRITE_CONFIG,
    )  # fmt: skip
    if manifest["dense"]:
        _create_square(group, "dense/distances", n, rows)
    _create_marks(group, "progress/blocks", n_blocks(n, rows))
    group.create_array(
        "progress/exact_pairs", shape=(n_blocks(n, rows),), dtype="int64", chunks=(1,), fill_value=0,
        compressors=_mark_codecs(), config=_WRITE_CONFIG,
    )  # fmt: skip
    if manifest.get("symmetric"):
        _create_square(group, "work/upper", n, rows)
        _create_marks(group, "progress/upper", n_blocks(n, rows))
    # The incomplete manifest goes last: a folder with a manifest always has every array (and its marks).
    group.attrs[MANIFEST_KEY] = dict(manifest, complete=False)


def store_has_checksums(url: str) -> bool:
    """Whether the store at ``url`` was laid out with a checksum on every array (its ids tell: since 0.2)."""
    group = open_group(url, mode="r")
    return "ids" in group and has_checksums(group["ids"])


def skeleton_whole(url: str) -> bool:
    """Whether the store at ``url`` has the progress arrays a resume needs (stores laid out before creation was
    atomic could be killed between their manifest and their marks)."""
    group = open_group(url, mode="r")
    return "progress" in group and "blocks" in group["progress"] and "exact_pairs" in group["progress"]


def _create_square(group: zarr.Group, path: str, n: int, rows: int) -> None:
    """An (n, n) float32 array, one shard per row block (a row block is one read), NaN where never written."""
    tile = min(DENSE_TILE, n)
    group.create_array(
        path,
        shape=(n, n),
        dtype="float32",
        chunks=(rows, tile),
        shards=(rows, math.ceil(n / tile) * tile),
        compressors=_codecs(),
        fill_value=np.nan,
        config=_WRITE_CONFIG,
    )


def _create_marks(group: zarr.Group, path: str, blocks: int) -> None:
    # one chunk per block: tasks marking different blocks never rewrite each other's chunk
    group.create_array(path, shape=(blocks,), dtype="uint8", chunks=(1,), fill_value=0, compressors=_mark_codecs(),
                       config=_WRITE_CONFIG)  # fmt: skip


def blocks_done(url: str) -> np.ndarray:
    """Boolean mask of the row blocks already written."""
    return open_array(url, "progress/blocks", "r")[:].astype(bool)


def write_block(
    url: str,
    start: int,
    indices: np.ndarray,
    distances: np.ndarray,
    dense_rows: np.ndarray | None,
    block: int,
    exact_pairs: int,
) -> None:
    """Write one row block's arrays, then mark it done (the mark last, so a kill re-does the block)."""
    url = store_url(url)
    stop = start + len(indices)
    open_array(url, "knn/indices", "r+")[start:stop] = indices
    open_array(url, "knn/distances", "r+")[start:stop] = distances
    if dense_rows is not None:
        open_array(url, "dense/distances", "r+")[start:stop] = dense_rows
    open_array(url, "progress/exact_pairs", "r+")[block] = exact_pairs
    open_array(url, "progress/blocks", "r+")[block] = 1


def exact_pairs_total(url: str) -> int:
    """Distances the job that wrote the store's current generation computed: the sum of ``progress/exact_pairs``."""
    return int(open_array(url, "progress/exact_pairs", "r")[:].sum())


def record_generation_pairs(url: str) -> int:
    """Write into the manifest's last generation the distances it computed (:func:`exact_pairs_total`), once every
    block is written and before the store is published; returns them. A rerun writes the same number."""
    group = open_group(url, mode="r+")
    manifest = dict(group.attrs[MANIFEST_KEY])
    pairs = exact_pairs_total(url)
    generations = store_generations(manifest)
    generations[-1]["exact_pairs"] = pairs
    group.attrs[MANIFEST_KEY] = dict(manifest, generations=generations)
    return pairs


def upper_done(url: str) -> np.ndarray:
    """Boolean mask of the row blocks whose upper strip is in ``work/upper`` (symmetric dense stores)."""
    try:
        return open_array(url, "progress/upper", "r")[:].astype(bool)
    except (FileNotFoundError, zarr.errors.ArrayNotFoundError) as e:
        raise StoreError(f"{url}: a symmetric store with unfinished row blocks has no work arrays") from e


def write_upper(url: str, start: int, strip: np.ndarray, block: int) -> None:
    """Write row block ``block``'s upper strip (rows ``start:start + len(strip)``, columns ``start:N``) into
    ``work/upper``, then mark it (the mark last, so a kill re-does the strip)."""
    url = store_url(url)
    open_array(url, "work/upper", "r+")[start : start + len(strip), start:] = strip
    open_array(url, "progress/upper", "r+")[block] = 1


def read_upper(url: str, rows: slice, cols: slice) -> np.ndarray:
    """A rectangle of ``work/upper``; only entries on or above the diagonal were ever written."""
    return open_array(url, "work/upper", "r")[rows, cols]


def drop_work(url: str) -> None:
    """Delete the work arrays of a symmetric dense store; does nothing where they are already gone (a rerun
    after a kill half-way through the deletion)."""
    group = open_group(url, mode="r+")
    # the strips first, their marks last: marks without strips are never read once every block is final
    for path in ("work", "progress/upper"):
        del group[path]


def publish(url: str) -> dict[str, Any]:
    """Flip ``complete`` to true, after checking every block is written; returns the final manifest."""
    group = open_group(url, mode="r+")
    missing = np.flatnonzero(~blocks_done(url))
    if missing.size:
        raise StoreIncompleteError(f"{url}: row blocks {missing[:10].tolist()} are not written yet")
    # every chunk of every array must be on disk before the store says it is whole (one stat a chunk)
    for path, array in store_arrays(url):
        lost = missing_chunks(array)
        if lost:
            raise StoreCorruptError(f"{url}: {path} lacks {len(lost)} chunk(s), e.g. {'/'.join(map(str, lost[0]))}, "
                                    "although every block is marked written: not publishing it")  # fmt: skip
    manifest = dict(group.attrs[MANIFEST_KEY], complete=True)
    group.attrs[MANIFEST_KEY] = manifest
    return manifest


def _as_numpy(arr: np.ndarray) -> np.ndarray:
    # Zarr returns strings as NumPy's variable-width StringDType; label classes expect plain unicode arrays.
    return as_str_array(arr) if arr.dtype.kind == "T" else np.asarray(arr)


def store_arrays(url: str) -> list[tuple[str, zarr.Array]]:
    """Every array of the store at ``url``, by path (``"knn/indices"``, ...), sorted."""
    members = open_group(url, mode="r").members(max_depth=None)  # recursive: paths include the groups
    return sorted(((path, m) for path, m in members if isinstance(m, zarr.Array)), key=lambda pm: pm[0])


def damaged_regions(url: str) -> list[dict[str, Any]]:
    """Every stored object (shard or chunk) of every array of the store at ``url`` that is missing, fails its
    checksum or cannot be decoded, each read once, so that Zarr's CRC32C codec checks every byte.

    Returns ``[{"array": "dense/distances", "rows": [256, 512], "error": "..."}, ...]``; empty when all is whole.
    Arrays written without checksums (stores made before 0.2) are named too: their damage cannot be detected.
    """
    damaged = []
    for path, array in store_arrays(url):
        if not has_checksums(array):
            damaged.append({"array": path, "rows": [0, int(array.shape[0]) if array.ndim else 0],
                            "error": "carries no CRC32C checksum (made before labeldist 0.2): damage to it "
                                     "cannot be detected; rebuild the store"})  # fmt: skip
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


@dataclass
class StoreReader:
    """Read-only access to a complete store: every read checked (a chunk missing or damaged raises
    StoreCorruptError naming the array and rows). Opening an incomplete store raises StoreIncompleteError."""

    url: str

    def __post_init__(self) -> None:
        self.url = store_url(self.url)
        try:
            self._group = open_group(self.url, mode="r")
        except (FileNotFoundError, NotADirectoryError, zarr.errors.GroupNotFoundError,
                zarr.errors.NodeTypeValidationError) as e:  # fmt: skip
            raise StoreError(f"{self.url}: no store there") from e
        except ValueError as e:  # zarr.json that is not JSON, or not Zarr metadata
            raise StoreCorruptError(f"{self.url}: its metadata (zarr.json) cannot be read ({e}): the store is "
                                    "damaged; rebuild it", array="zarr.json") from e  # fmt: skip
        man = self._group.attrs.get(MANIFEST_KEY)
        if not isinstance(man, Mapping):
            raise StoreError(f"{self.url}: not a labeldist store (no '{MANIFEST_KEY}' manifest)")
        if man.get("complete") is not True:
            raise StoreIncompleteError(f"{self.url}: store is not complete (still being written or abandoned)")
        self.manifest: dict[str, Any] = dict(man)
        for path in ("ids", "knn/indices", "knn/distances"):
            if path not in self._group:
                raise StoreCorruptError(f"{self.url}: array {path} is missing: the store is damaged; rebuild it",
                                        array=path)  # fmt: skip
        if not has_checksums(self._array("ids")):
            raise StoreError(
                f"{self.url}: made by labeldist before 0.2, whose ids and labels carry no checksum, so damage to "
                "them could be served undetected; rebuild it (precompute ... --overwrite)"
            )

    def _array(self, path: str) -> zarr.Array:
        try:
            return self._group[path]
        except KeyError:
            raise StoreCorruptError(
                f"{self.url}: array {path} is missing: the store is damaged; rebuild it", array=path
            ) from None

    def _read(self, path: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        return read_rows(self.url, path, self._array(path), start, stop)

    @property
    def n_items(self) -> int:
        return int(self.manifest["n_items"])

    @property
    def k(self) -> int:
        return int(self.manifest["k"])

    @property
    def has_dense(self) -> bool:
        return "dense" in self._group and "distances" in self._group["dense"]

    @property
    def dense_block_rows(self) -> int:
        """Rows of the dense matrix stored together (one shard): the unit a reader should fetch."""
        if not self.has_dense:
            raise StoreError(f"{self.url}: store has no dense matrix")
        return _stored_chunk_shape(self._array("dense/distances"))[0]

    @cached_property
    def ids(self) -> np.ndarray:
        ids = as_str_array(self._read("ids"))
        if ids.shape != (self.n_items,):
            raise StoreCorruptError(f"{self.url}: ids has shape {ids.shape}, the manifest says {self.n_items} items")
        return ids

    def knn(self) -> tuple[np.ndarray, np.ndarray]:
        """All neighbour lists: indices (N, k) int32 and distances (N, k) float32 (8 N k bytes: a server reads them
        a block at a time instead, :meth:`knn_rows`)."""
        indices, distances = self._read("knn/indices"), self._read("knn/distances")
        for path, arr in (("knn/indices", indices), ("knn/distances", distances)):
            if arr.shape != (self.n_items, self.k):
                raise StoreCorruptError(f"{self.url}: {path} has shape {arr.shape}, the manifest says "
                                        f"({self.n_items}, {self.k})")  # fmt: skip
        return indices, distances

    @property
    def knn_block_rows(self) -> int:
        """Rows of the neighbour lists stored together (one chunk, one checksum): the unit a reader should fetch."""
        return _stored_chunk_shape(self._array("knn/indices"))[0]

    def knn_rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Neighbour lists of rows ``start:stop``: indices (stop - start, k) int32 and distances float32. Each chunk
        read is checked as it is decoded: one missing or failing its CRC32C raises StoreCorruptError naming the
        array and the rows."""
        if not 0 <= start <= stop <= self.n_items:
            raise IndexError(f"{self.url}: rows {start}:{stop} are outside the store's {self.n_items} items")
        indices, distances = (self._read_knn(path, start, stop) for path in ("knn/indices", "knn/distances"))
        for path, arr in (("knn/indices", indices), ("knn/distances", distances)):
            if arr.shape != (stop - start, self.k):
                raise StoreCorruptError(f"{self.url}: {path} rows {start}:{stop} have shape {arr.shape}, the "
                                        f"manifest says k={self.k}", array=path)  # fmt: skip
        return indices, distances

    @cached_property
    def _knn_files(self) -> dict[str, ChunkFiles | None]:
        return {path: ChunkFiles.of(self.url, path, self._array(path)) for path in ("knn/indices", "knn/distances")}

    def _read_knn(self, path: str, start: int, stop: int) -> np.ndarray:
        files = self._knn_files[path]
        return self._read(path, start, stop) if files is None else files.rows(start, stop)

    def check_knn(self) -> None:
        """Check the neighbour lists without keeping them: both arrays have the manifest's shape (N, k), and every
        chunk is there and passes its CRC32C (each read once, a row block at a time: the memory of one block, the
        time of reading them all). What a server runs when it opens a store, so that a store with damaged lists
        is refused whole, as when it held them in memory; each block is checked again whenever it is read."""
        for path in ("knn/indices", "knn/distances"):
            shape = tuple(self._array(path).shape)
            if shape != (self.n_items, self.k):
                raise StoreCorruptError(f"{self.url}: {path} has shape {shape}, the manifest says "
                                        f"({self.n_items}, {self.k})", array=path)  # fmt: skip
        rows = self.knn_block_rows
        for start in range(0, self.n_items, rows):
            self.knn_rows(start, min(start + rows, self.n_items))

    def dense_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of the dense matrix. A NaN (the fill value: never written) is refused as damage."""
        if not self.has_dense:
            raise StoreError(f"{self.url}: store has no dense matrix")
        rows = self._read("dense/distances", start, stop)
        if np.isnan(rows).any():
            bad = start + int(np.flatnonzero(np.isnan(rows).any(axis=1))[0])
            raise StoreCorruptError(f"{self.url}: dense/distances row {bad} holds NaN, a value never written: "
                                    "refusing to serve it; rebuild the store")  # fmt: skip
        return rows

    def dense_value(self, i: int, j: int) -> float:
        """One entry of the dense matrix (reads its row's shard)."""
        return float(self.dense_rows(i, i + 1)[0, j])

    def label_arrays(self) -> dict[str, np.ndarray]:
        """The raw label arrays (``labels/<name>``), each read whole and checked."""
        if "labels" not in self._group:
            return {}
        names = sorted(name for name, _ in self._group["labels"].arrays())
        return {name: _as_numpy(self._read(f"labels/{name}")) for name in names}

    def labels(self) -> LabelSet:
        """The stored labels, rebuilt as the LabelSet class of the store's kind."""
        from labeldist.kinds import distance_class

        cls = distance_class(self.manifest["kind"]).labels_class
        arrays = self.label_arrays()
        try:
            return cls.from_arrays(self.ids, arrays)
        except LabelError as e:  # an array of the labels lost (its metadata deleted), or arrays that disagree
            found = ", ".join(sorted(arrays)) or "no arrays"
            message = f"{self.url}: the labels cannot be rebuilt from labels/ ({found}): {e}"
            raise StoreCorruptError(message, array="labels") from e

    def distance(self):  # -> LabelDistance (imported lazily: the kinds pull in heavy modules)
        from labeldist.kinds import distance_class

        params = {key: value for key, value in self.manifest["params"].items() if key != "labels"}
        return distance_class(self.manifest["kind"])(**params)

    def damaged(self) -> list[dict[str, Any]]:
        """:func:`damaged_regions` of this store."""
        return damaged_regions(self.url)
