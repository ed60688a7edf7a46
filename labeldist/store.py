"""The Zarr v3 store layout of DESIGN.md: manifest, arrays, atomic publish, readers.

Layout of one store (a Zarr v3 group)::

    attrs["labeldist"]      manifest; ``complete`` turns true last, only when every array is whole
    ids                     (N,) string item ids
    knn/indices             (N, k) int32, nearest first, the item itself excluded, -1 padding at the end
    knn/distances           (N, k) float32, +inf where the index is -1
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

Every chunk carries a CRC32C checksum, so a chunk corrupted on disk fails loudly on read instead of
returning wrong numbers. Zarr's LocalStore already writes each chunk file aside and renames it into place,
so a chunk is either old or new, never half-written; the manifest flag is the store-level publish.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from labeldist import __version__
from labeldist.labels.base import LabelSet, as_str_array

FORMAT = 1
MANIFEST_KEY = "labeldist"
#: manifest keys that must agree for an existing store to be resumed or reused
FINGERPRINT_KEYS = (
    "format", "dataset", "kind", "params", "n_items", "k", "labels_sha256", "labels_type", "dense",
    "block_rows", "symmetric",
)  # fmt: skip
DENSE_TILE = 512


class StoreError(RuntimeError):
    """A store cannot be used as asked; the message names the store."""


class StoreIncompleteError(StoreError):
    """The store is still being written (or was abandoned half-way): it must not be served."""


class StoreMismatchError(StoreError):
    """A store already at the output path was made from other labels or parameters."""


class StoreCorruptError(StoreError):
    """A chunk of the store failed its CRC32C checksum: the bytes on disk are not the ones written."""


def is_checksum_error(error: BaseException) -> bool:
    """Whether ``error`` is Zarr's CRC32C mismatch (zarr-python raises a plain ValueError for it, no subclass)."""
    return isinstance(error, ValueError) and "checksum" in str(error).lower()


@contextlib.contextmanager
def checked_read(url: str, what: str) -> Iterator[None]:
    """Turn a checksum failure while reading ``what`` into a StoreCorruptError naming the store and the region."""
    try:
        yield
    except ValueError as e:
        if not is_checksum_error(e):
            raise
        raise StoreCorruptError(f"{url}: {what} failed its CRC32C checksum (corrupted on disk): refusing to "
                                f"read it; `labeldist verify {url}` lists every damaged chunk") from e  # fmt: skip


def _codecs() -> list[Any]:
    # zstd level 1: distances compress poorly, so spend little CPU; crc32c detects on-disk corruption.
    return [ZstdCodec(level=1), Crc32cCodec()]


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
    return zarr.open_array(url, path=path, mode=mode, storage_options=_storage_options(url))


def n_blocks(n_items: int, block_rows: int) -> int:
    return math.ceil(n_items / block_rows)


def block_range(block: int, n_items: int, block_rows: int) -> tuple[int, int]:
    start = block * block_rows
    if not 0 <= start < n_items:
        raise IndexError(f"block {block} is outside 0..{n_blocks(n_items, block_rows) - 1}")
    return start, min(start + block_rows, n_items)


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
) -> dict[str, Any]:
    """The manifest of a store about to be written (``complete`` false), as JSON types (tuples become lists,
    as they will when read back), so that it compares equal to the stored one.

    ``symmetric`` (dense stores only) records ``"symmetric": true``: the matrix is computed as its upper
    triangle and mirrored. The key is left out otherwise, so that other manifests stay as they were; it is a
    fingerprint key, because a store half-written one way must not be finished the other way.
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
    return json.loads(json.dumps(manifest))


def fingerprint_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Names of the fingerprint keys on which two manifests differ."""
    return [key for key in FINGERPRINT_KEYS if a.get(key) != b.get(key)]


def read_manifest(url: str) -> dict[str, Any] | None:
    """The manifest at ``url``, or None when there is no labeldist store there."""
    try:
        group = open_group(url, mode="r")
    except (FileNotFoundError, zarr.errors.GroupNotFoundError, zarr.errors.NodeTypeValidationError):
        return None
    man = group.attrs.get(MANIFEST_KEY)
    return dict(man) if isinstance(man, Mapping) else None


def create_store(url: str, manifest: Mapping[str, Any], labels: LabelSet) -> zarr.Group:
    """Lay out an empty store (``complete`` false) with ids and labels written; overwrites what is there."""
    n, k, rows = manifest["n_items"], manifest["k"], manifest["block_rows"]
    group = open_group(url, mode="w")
    # The incomplete manifest goes first: from here on any reader sees a store that says it is unfinished.
    group.attrs[MANIFEST_KEY] = dict(manifest, complete=False)
    ids = group.create_array("ids", shape=(n,), dtype=str, chunks=(max(n, 1),))
    ids[:] = labels.ids
    for name, arr in labels.to_arrays().items():
        arr = np.asarray(arr)
        dtype = str if arr.dtype.kind in "UO" else arr.dtype
        out = group.create_array(
            f"labels/{name}",
            shape=arr.shape,
            dtype=dtype,
            chunks=arr.shape if arr.size else tuple(1 for _ in arr.shape),
            compressors=_codecs() if dtype is not str else None,
        )
        if arr.size:
            out[...] = arr
    group.create_array(
        "knn/indices", shape=(n, k), dtype="int32", chunks=(rows, max(k, 1)), compressors=_codecs(),
        fill_value=-1,
    )  # fmt: skip
    group.create_array(
        "knn/distances", shape=(n, k), dtype="float32", chunks=(rows, max(k, 1)), compressors=_codecs(),
        fill_value=np.inf,
    )  # fmt: skip
    if manifest["dense"]:
        _create_square(group, "dense/distances", n, rows)
    _create_marks(group, "progress/blocks", n_blocks(n, rows))
    group.create_array(
        "progress/exact_pairs", shape=(n_blocks(n, rows),), dtype="int64", chunks=(1,), fill_value=0,
        compressors=None,
    )  # fmt: skip
    if manifest.get("symmetric"):
        _create_square(group, "work/upper", n, rows)
        _create_marks(group, "progress/upper", n_blocks(n, rows))
    return group


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
    )


def _create_marks(group: zarr.Group, path: str, blocks: int) -> None:
    # one chunk per block: tasks marking different blocks never rewrite each other's chunk
    group.create_array(path, shape=(blocks,), dtype="uint8", chunks=(1,), fill_value=0, compressors=None)


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
    manifest = dict(group.attrs[MANIFEST_KEY], complete=True)
    group.attrs[MANIFEST_KEY] = manifest
    return manifest


def _as_numpy(arr: np.ndarray) -> np.ndarray:
    # Zarr returns strings as NumPy's variable-width StringDType; label classes expect plain unicode arrays.
    return as_str_array(arr) if arr.dtype.kind == "T" else np.asarray(arr)


@dataclass
class StoreReader:
    """Read-only access to a complete store. Opening an incomplete store raises StoreIncompleteError."""

    url: str

    def __post_init__(self) -> None:
        self.url = store_url(self.url)
        try:
            self.group = open_group(self.url, mode="r")
        except (FileNotFoundError, zarr.errors.GroupNotFoundError) as e:
            raise StoreError(f"{self.url}: no store there") from e
        man = self.group.attrs.get(MANIFEST_KEY)
        if not isinstance(man, Mapping):
            raise StoreError(f"{self.url}: not a labeldist store (no '{MANIFEST_KEY}' manifest)")
        if man.get("complete") is not True:
            raise StoreIncompleteError(f"{self.url}: store is not complete (still being written or abandoned)")
        self.manifest: dict[str, Any] = dict(man)

    @property
    def n_items(self) -> int:
        return int(self.manifest["n_items"])

    @property
    def k(self) -> int:
        return int(self.manifest["k"])

    @property
    def has_dense(self) -> bool:
        return "dense" in self.group and "distances" in self.group["dense"]

    @cached_property
    def ids(self) -> np.ndarray:
        with checked_read(self.url, "ids"):
            return as_str_array(self.group["ids"][:])

    def knn(self) -> tuple[np.ndarray, np.ndarray]:
        """All neighbour lists: indices (N, k) int32 and distances (N, k) float32."""
        with checked_read(self.url, "knn/indices"):
            indices = self.group["knn/indices"][:]
        with checked_read(self.url, "knn/distances"):
            distances = self.group["knn/distances"][:]
        return indices, distances

    def dense_rows(self, start: int, stop: int) -> np.ndarray:
        if not self.has_dense:
            raise StoreError(f"{self.url}: store has no dense matrix")
        with checked_read(self.url, f"dense/distances rows {start}:{stop}"):
            return self.group["dense/distances"][start:stop]

    def labels(self) -> LabelSet:
        """The stored labels, rebuilt as the LabelSet class of the store's kind."""
        from labeldist.kinds import distance_class

        cls = distance_class(self.manifest["kind"]).labels_class
        with checked_read(self.url, "labels"):
            arrays = {name: _as_numpy(arr[...]) for name, arr in self.group["labels"].arrays()}
        return cls.from_arrays(self.ids, arrays)

    def distance(self):  # -> LabelDistance (imported lazily: the kinds pull in heavy modules)
        from labeldist.kinds import distance_class

        params = {key: value for key, value in self.manifest["params"].items() if key != "labels"}
        return distance_class(self.manifest["kind"])(**params)
