"""The layout of a store (docs/store-format.md, "The arrays"): where each array lives, how it is chunked and
encoded, the manifest's key, the format's constants, and how a store and its arrays are opened.

The arrays of one store (a Zarr v3 group, its manifest in ``attrs["labeldist"]``): ``ids``, ``knn/indices``,
``knn/distances``, optionally ``dense/distances``, ``labels/<name>``, ``progress/blocks`` and
``progress/exact_pairs``; while a symmetric dense store is written, also ``work/upper`` and ``progress/upper``.
Their shapes, types and chunking are in docs/store-format.md (:func:`knn_chunk_rows` for the kNN chunks).
"""

from __future__ import annotations

import math
import os
from typing import Any

import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from labeldist.store.errors import StoreError

FORMAT = 1
MANIFEST_KEY = "labeldist"
#: manifest keys that must agree for an existing store to be resumed or reused
FINGERPRINT_KEYS = (
    "format",
    "dataset",
    "kind",
    "params",
    "n_items",
    "k",
    "labels_sha256",
    "labels_type",
    "dense",
    "block_rows",
    "symmetric",
)
DENSE_TILE = 512
#: the kNN lists (both arrays) of a store up to this size are chunked by row block: a server holds them whole after
#: its first requests (the service's default LABELDIST_KNN_CACHE_MB), so how they are cut does not matter to it
KNN_WHOLE_BYTES = 128 << 20
#: bytes a chunk of bigger kNN lists (one array) is cut to at most, when a row block would make it larger: a server
#: reading their rows on demand (:mod:`labeldist.view.rowcache`) decodes a whole chunk to answer one row
KNN_CHUNK_BYTES = 16 << 10
#: the fewest rows a kNN chunk cut from a row block may have (smaller chunks: more files than the decoding saves)
KNN_MIN_CHUNK_ROWS = 16


def data_codecs() -> list[Any]:
    # zstd level 1: distances compress poorly, so spend little CPU; crc32c detects on-disk corruption.
    return [ZstdCodec(level=1), Crc32cCodec()]


def mark_codecs() -> list[Any]:
    # progress marks are one byte a chunk: nothing to compress, but a flipped mark must not pass for "done"
    return [Crc32cCodec()]


#: every chunk is written, even one equal to the fill value, so that a missing chunk file is always damage
WRITE_CONFIG = {"write_empty_chunks": True}

#: each array's axis names, its Zarr ``dimension_names``, so that readers that label axes (xarray) open every group;
#: a name is one length across a group: ``item`` is N, ``rank`` k, ``block`` the row blocks (the labels group's
#: arrays are named by their kind, ``LabelSet.array_dimensions``)
DIMENSION_NAMES: dict[str, tuple[str, ...]] = {
    "ids": ("item",),
    "knn/indices": ("item", "rank"),
    "knn/distances": ("item", "rank"),
    "dense/distances": ("item", "other_item"),
    "work/upper": ("item", "other_item"),
    "progress/blocks": ("block",),
    "progress/exact_pairs": ("block",),
    "progress/upper": ("block",),
}


def store_url(path_or_url: str | os.PathLike[str]) -> str:
    """An absolute local path, or an fsspec URL unchanged, so Dask workers resolve it the same way."""
    s = os.fspath(path_or_url)
    return s if "://" in s else os.path.abspath(s)


def _storage_options(url: str) -> dict[str, Any] | None:
    # fsspec's local filesystem does not create parent folders unless asked to; object stores have none.
    return {"auto_mkdir": True} if url.startswith("file://") else None


def zarr_store(url: str, mode: str) -> Any:
    """What Zarr opens for ``url``: a local folder through
    :class:`~labeldist.store.checkedfiles.CheckedLocalStore` (regular files only, bounded metadata), else the fsspec
    URL itself."""
    if not is_local(url):
        return url
    from labeldist.store.checkedfiles import CheckedLocalStore

    return CheckedLocalStore(url, read_only=mode == "r")


def open_group(url: str, mode: str) -> zarr.Group:
    url = store_url(url)
    if is_local(url):
        return zarr.open_group(zarr_store(url, mode), mode=mode)
    return zarr.open_group(url, mode=mode, storage_options=_storage_options(url))


def open_array(url: str, path: str, mode: str) -> zarr.Array:
    url = store_url(url)
    if is_local(url):
        array = zarr.open_array(zarr_store(url, mode), path=path, mode=mode)
    else:
        array = zarr.open_array(url, path=path, mode=mode, storage_options=_storage_options(url))
    # zarr 3.1 ignores open_array's config= for an array that exists: set it on the array, or a chunk equal to the
    # fill value (an exact_pairs of 0) would not be written, and publish would find it missing
    return array if mode == "r" else array.with_config(WRITE_CONFIG)


def is_local(url: str) -> bool:
    return "://" not in url


def sibling(url: str, what: str) -> str:
    """A hidden folder beside ``url`` (the service skips folders whose name starts with a dot)."""
    head, name = os.path.split(url.rstrip("/"))
    return os.path.join(head, f".{name}.{what}")


#: the hidden folders a writer keeps beside a store (:func:`sibling`): a skeleton being laid out, an unfinished store
#: being discarded, a store built by ``--overwrite`` or ``append`` and the one it replaces while they swap
STAGING_SIBLINGS = ("creating", "discarded", "overwrite", "replaced", "append", "previous")


def writable_url(path_or_url: str | os.PathLike[str]) -> str:
    """The store a writer (``precompute``, ``append``) works on: :func:`store_url`, with a local path's symbolic links
    resolved once, up front, so that a store reached through a link is built, grown and swapped at the link's target
    (its staging folders and lock beside the target), and the link keeps pointing at the store. Refuses (StoreError)
    a staging folder of that store that is a link or not a folder: labeldist never follows or replaces what it did
    not make."""
    url = store_url(path_or_url)
    if not is_local(url):
        return url
    url = os.path.realpath(url)
    check_staging_folders(url)
    return url


def check_staging_folders(url: str) -> None:
    """StoreError when a staging folder of the local store ``url`` (:data:`STAGING_SIBLINGS`) is a link or not a
    folder. Checked up front (:func:`writable_url`) and again once the job holds the store's lock, since a link can
    be planted between the two; labeldist never follows or replaces what it did not make."""
    for what in STAGING_SIBLINGS:
        planted = sibling(url, what)
        if os.path.islink(planted) or (os.path.lexists(planted) and not os.path.isdir(planted)):
            kind = "a symbolic link" if os.path.islink(planted) else "not a folder"
            raise StoreError(
                f"{planted}: {kind}, where labeldist keeps a staging folder of {url}; labeldist never follows or "
                "replaces what it did not make: remove it (if no labeldist job is running there) and run again"
            )


# ---------------------------------------------------------------- chunk files
def stored_chunk_shape(array: zarr.Array) -> tuple[int, ...]:
    """The shape of one stored object of ``array``: a shard when sharded, else a chunk."""
    return tuple(array.metadata.chunk_grid.chunk_shape)


def chunk_keys(array: zarr.Array, start: int = 0, stop: int | None = None) -> list[tuple[tuple[int, ...], str]]:
    """The stored objects (shards or chunks) holding rows ``start:stop`` of ``array``: (grid coordinates, key)."""
    if array.ndim == 0:
        return [((), array.metadata.encode_chunk_key(()))]
    shape = stored_chunk_shape(array)
    stop = array.shape[0] if stop is None else stop
    grid = [range(start // shape[0], math.ceil(stop / shape[0]))]
    grid += [range(math.ceil(extent / size)) for extent, size in zip(array.shape[1:], shape[1:])]
    coords: list[tuple[int, ...]] = [()]
    for axis in grid:
        coords = [c + (i,) for c in coords for i in axis]
    return [(c, array.metadata.encode_chunk_key(c)) for c in coords]


def store_arrays(url: str) -> list[tuple[str, zarr.Array]]:
    """Every array of the store at ``url``, by path (``"knn/indices"``, ...), sorted."""
    members = open_group(url, mode="r").members(max_depth=None)  # recursive: paths include the groups
    return sorted(((path, m) for path, m in members if isinstance(m, zarr.Array)), key=lambda pm: pm[0])


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
