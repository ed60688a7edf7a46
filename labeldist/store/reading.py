"""Reading a complete store: :class:`StoreReader`, every read checked (:mod:`labeldist.store.damage`), and
:class:`ChunkFiles`, the direct reader of the kNN lists' chunk files, for a server reading them a row block at a time
(docs/store-format.md, "Reading rows on demand")."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from labeldist.errors import UsageError
from labeldist.labels.base import as_str_array
from labeldist.store.checkedfiles import read_regular
from labeldist.store.damage import (
    check_store_folders,
    checked_read,
    damaged_regions,
    has_checksums,
    missing_chunk_error,
    read_rows,
)
from labeldist.store.errors import StoreChangedError, StoreCorruptError, StoreError, StoreIncompleteError
from labeldist.store.identity import StoreIdentity, metadata_identity, root_metadata_path, store_identity
from labeldist.store.layout import MANIFEST_KEY, is_local, open_group, store_url, stored_chunk_shape

Result = TypeVar("Result")


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
        self.chunk = stored_chunk_shape(array)
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
        if stored_chunk_shape(array)[1] < array.shape[1] or np.dtype(array.dtype).kind not in "iuf":
            return None
        return cls(url, path, array)

    def _chunk(self, c: int, start: int, stop: int) -> np.ndarray:
        """Chunk row ``c``, whole (edge chunks are stored at the full chunk shape), read-only."""
        try:
            data = read_regular(Path(self._path_of(c) if self._prefix is None else f"{self._prefix}{c}{self._suffix}"))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise missing_chunk_error(self.url, self.path, self.array, (c, 0), 1, start, stop) from None
        try:
            body = data[:-4]
            if len(data) < 4 or self._crc32c(body) != int.from_bytes(data[-4:], "little"):
                raise UsageError("Stored and computed checksum do not match")
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


def _as_numpy(arr: np.ndarray) -> np.ndarray:
    # Zarr returns strings as NumPy's variable-width StringDType; label classes expect plain unicode arrays.
    return as_str_array(arr) if arr.dtype.kind == "T" else np.asarray(arr)


#: how deep this thread is in pinned reads: only the outermost one checks (once, after every read it made)
_pinned_depth = threading.local()


def pinned(read: Callable[..., Result]) -> Callable[..., Result]:
    """A read of :class:`StoreReader` that answers only from the generation the reader opened: after it (whether it
    returned or failed) the store's identity is compared with the one taken before opening, and a change raises
    :class:`StoreChangedError`, since what was read may be the new generation's. A check is one ``stat`` (2 to 6 us),
    made by the outermost pinned read of a call alone: a kNN block read (two arrays) checks once."""

    @functools.wraps(read)
    def checked(self: StoreReader, *args: Any, **kwargs: Any) -> Result:
        depth = getattr(_pinned_depth, "n", 0)
        _pinned_depth.n = depth + 1
        try:
            result = read(self, *args, **kwargs)
        except StoreChangedError:
            raise
        except Exception as e:
            if depth == 0:
                self.check_unchanged(e)
            raise
        finally:
            _pinned_depth.n = depth
        if depth == 0:
            self.check_unchanged()
        return result

    return checked


@dataclass
class StoreReader:
    """Read-only access to a complete store: every read checked (a chunk missing or damaged raises
    StoreCorruptError naming the array and rows). Opening an incomplete store raises StoreIncompleteError.

    Pinned to one generation: the identity of a local store (:func:`~labeldist.store.identity.store_identity`) is
    taken before it is opened (or given, as ``identity``, by a caller that took it earlier), and every read is
    checked against it afterwards (:func:`pinned`). A store rebuilt, appended to or removed while it is read raises
    :class:`StoreChangedError` instead of mixing two generations; whoever reads opens it again, or refuses. Every
    reader of the project (``export``, ``verify``, ``info``, :class:`~labeldist.client.local.LocalSource`, the
    service's stores, the trainer's) reads through this class. A store behind an fsspec URL is not pinned (there is
    no cheap identity to compare); docs/store-format.md says so."""

    url: str
    identity: StoreIdentity | None = None

    def __post_init__(self) -> None:
        self.url = store_url(self.url)
        local = is_local(self.url)
        if self.identity is None and local:
            self.identity = store_identity(self.url)
        self._metadata_path = root_metadata_path(self.url) if local and self.identity is not None else None
        self._open()

    def changed(self) -> bool:
        """Whether the store at the reader's path is no longer the generation it opened (never, unpinned)."""
        return self._metadata_path is not None and metadata_identity(self._metadata_path) != self.identity

    def check_unchanged(self, cause: BaseException | None = None) -> None:
        """Raise :class:`StoreChangedError` when the store changed since the reader opened it (from ``cause``: a read
        that failed meanwhile)."""
        if self.changed():
            raise StoreChangedError(self.url) from cause

    @pinned
    def _open(self) -> None:
        try:
            self._group = open_group(self.url, mode="r")
        except (
            FileNotFoundError,
            NotADirectoryError,
            zarr.errors.GroupNotFoundError,
            zarr.errors.NodeTypeValidationError,
        ) as e:
            raise StoreError(f"{self.url}: no store there") from e
        except zarr.errors.ContainsArrayError as e:  # an array's folder, such as a store's ids/
            raise StoreError(
                f"{self.url}: a Zarr array's folder (one array of a store), not a labeldist store: give the store's "
                "own folder"
            ) from e
        except ValueError as e:  # zarr.json that is not JSON, or not Zarr metadata
            raise StoreCorruptError(
                f"{self.url}: its metadata (zarr.json) cannot be read ({e}): the store is damaged; rebuild it",
                array="zarr.json",
            ) from e
        man = self._group.attrs.get(MANIFEST_KEY)
        if not isinstance(man, Mapping):
            raise StoreError(f"{self.url}: not a labeldist store (no '{MANIFEST_KEY}' manifest)")
        if man.get("complete") is not True:
            raise StoreIncompleteError(f"{self.url}: store is not complete (still being written or abandoned)")
        if is_local(self.url):  # a link or a device anywhere inside: another store's numbers, or a read that blocks
            check_store_folders(self.url, self.identity)
        self.manifest: dict[str, Any] = dict(man)
        for path in ("ids", "knn/indices", "knn/distances"):
            self._array(path)  # missing, or its metadata damaged: StoreCorruptError
        if not has_checksums(self._array("ids")):
            raise StoreError(
                f"{self.url}: made by labeldist before 0.2, whose ids and labels carry no checksum, so damage to "
                "them could be served undetected; rebuild it (precompute ... --overwrite)"
            )

    @pinned
    def _array(self, path: str) -> zarr.Array:
        try:
            return self._group[path]
        except KeyError:
            raise StoreCorruptError(
                f"{self.url}: array {path} is missing: the store is damaged; rebuild it", array=path
            ) from None
        except ValueError as e:  # its zarr.json is not JSON, or not Zarr metadata
            raise self._damaged_metadata(path, e) from None

    def _damaged_metadata(self, path: str, error: Exception) -> StoreCorruptError:
        return StoreCorruptError(
            f"{self.url}: the metadata of {path} (a zarr.json) cannot be read ({type(error).__name__}): the store "
            "is damaged; rebuild it",
            array=path,
        )

    @pinned
    def _read(self, path: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        return read_rows(self.url, path, self._array(path), start, stop)

    @property
    def n_items(self) -> int:
        return int(self.manifest["n_items"])

    @property
    def k(self) -> int:
        return int(self.manifest["k"])

    @property
    @pinned
    def has_dense(self) -> bool:
        try:
            return "dense" in self._group and "distances" in self._group["dense"]
        except ValueError as e:  # a zarr.json of dense/ that is not JSON
            raise self._damaged_metadata("dense", e) from None

    @property
    @pinned
    def dense_block_rows(self) -> int:
        """Rows of the dense matrix stored together (one shard): the unit a reader should fetch."""
        if not self.has_dense:
            raise StoreError(f"{self.url}: store has no dense matrix")
        return stored_chunk_shape(self._array("dense/distances"))[0]

    @cached_property
    @pinned
    def ids(self) -> np.ndarray:
        ids = as_str_array(self._read("ids"))
        if ids.shape != (self.n_items,):
            raise StoreCorruptError(f"{self.url}: ids has shape {ids.shape}, the manifest says {self.n_items} items")
        return ids

    @pinned
    def knn(self) -> tuple[np.ndarray, np.ndarray]:
        """All neighbour lists: indices (N, k) int32 and distances (N, k) float32 (8 N k bytes: a server reads them
        a block at a time instead, :meth:`knn_rows`)."""
        indices, distances = self._read("knn/indices"), self._read("knn/distances")
        for path, arr in (("knn/indices", indices), ("knn/distances", distances)):
            if arr.shape != (self.n_items, self.k):
                raise StoreCorruptError(
                    f"{self.url}: {path} has shape {arr.shape}, the manifest says ({self.n_items}, {self.k})"
                )
        return indices, distances

    @property
    @pinned
    def knn_block_rows(self) -> int:
        """Rows of the neighbour lists stored together (one chunk, one checksum): the unit a reader should fetch."""
        return stored_chunk_shape(self._array("knn/indices"))[0]

    @pinned
    def knn_rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Neighbour lists of rows ``start:stop``: indices (stop - start, k) int32 and distances float32. Each chunk
        read is checked as it is decoded: one missing or failing its CRC32C raises StoreCorruptError naming the
        array and the rows."""
        if not 0 <= start <= stop <= self.n_items:
            raise IndexError(f"{self.url}: rows {start}:{stop} are outside the store's {self.n_items} items")
        indices, distances = (self._read_knn(path, start, stop) for path in ("knn/indices", "knn/distances"))
        for path, arr in (("knn/indices", indices), ("knn/distances", distances)):
            if arr.shape != (stop - start, self.k):
                raise StoreCorruptError(
                    f"{self.url}: {path} rows {start}:{stop} have shape {arr.shape}, the manifest says k={self.k}",
                    array=path,
                )
        return indices, distances

    @cached_property
    def _knn_files(self) -> dict[str, ChunkFiles | None]:
        return {path: ChunkFiles.of(self.url, path, self._array(path)) for path in ("knn/indices", "knn/distances")}

    @pinned
    def _read_knn(self, path: str, start: int, stop: int) -> np.ndarray:
        files = self._knn_files[path]
        return self._read(path, start, stop) if files is None else files.rows(start, stop)

    @pinned
    def check_knn(self) -> None:
        """Check the neighbour lists without keeping them: both arrays have the manifest's shape (N, k), and every
        chunk is there and passes its CRC32C (each read once, a row block at a time: the memory of one block, the
        time of reading them all). What a server runs when it opens a store, so that a store with damaged lists
        is refused whole, as when it held them in memory; each block is checked again whenever it is read."""
        for path in ("knn/indices", "knn/distances"):
            shape = tuple(self._array(path).shape)
            if shape != (self.n_items, self.k):
                raise StoreCorruptError(
                    f"{self.url}: {path} has shape {shape}, the manifest says ({self.n_items}, {self.k})", array=path
                )
        rows = self.knn_block_rows
        for start in range(0, self.n_items, rows):
            self.knn_rows(start, min(start + rows, self.n_items))

    @pinned
    def dense_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of the dense matrix. A NaN (the fill value: never written) is refused as damage."""
        if not self.has_dense:
            raise StoreError(f"{self.url}: store has no dense matrix")
        rows = self._read("dense/distances", start, stop)
        if np.isnan(rows).any():
            bad = start + int(np.flatnonzero(np.isnan(rows).any(axis=1))[0])
            raise StoreCorruptError(
                f"{self.url}: dense/distances row {bad} holds NaN, a value never written: "
                "refusing to serve it; rebuild the store"
            )
        return rows

    def dense_value(self, i: int, j: int) -> float:
        """One entry of the dense matrix (reads its row's shard)."""
        return float(self.dense_rows(i, i + 1)[0, j])

    @pinned
    def label_arrays(self) -> dict[str, np.ndarray]:
        """The raw label arrays (``labels/<name>``), each read whole and checked."""
        try:
            if "labels" not in self._group:
                return {}
            names = sorted(name for name, _ in self._group["labels"].arrays())
        except ValueError as e:  # a zarr.json under labels/ that is not JSON
            raise self._damaged_metadata("labels", e) from None
        return {name: _as_numpy(self._read(f"labels/{name}")) for name in names}

    @pinned
    def damaged(self) -> list[dict[str, Any]]:
        """:func:`damaged_regions` of this store."""
        return damaged_regions(self.url)
