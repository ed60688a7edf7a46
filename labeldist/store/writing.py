"""Writing a store (docs/store-format.md, "Writing, resuming, publishing"): its skeleton laid out, its row blocks
written and marked done, the work arrays of a symmetric dense store, and the publish (``complete`` turns true last).

Creation is atomic: :func:`create_store` lays out the whole skeleton (every array, progress marks included,
the manifest last) in a hidden sibling folder and renames it into place, so a kill at any instant leaves either
no store or a whole skeleton that a rerun resumes (on an fsspec URL, where there is no rename, the manifest is
written last, so a half-made skeleton has none and is laid out again).
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Mapping
from typing import Any

import numpy as np
import zarr

from labeldist.labels.base import LabelSet
from labeldist.store.damage import missing_chunks
from labeldist.store.errors import StoreCorruptError, StoreError, StoreIncompleteError
from labeldist.store.layout import (
    DENSE_TILE,
    DIMENSION_NAMES,
    MANIFEST_KEY,
    WRITE_CONFIG,
    check_staging_folders,
    data_codecs,
    is_local,
    knn_chunk_rows,
    mark_codecs,
    n_blocks,
    open_array,
    open_group,
    sibling,
    store_arrays,
    store_url,
)
from labeldist.store.manifest import is_store, store_generations


def remove_old_store(path: str, url: str) -> None:
    """Remove ``path``, where labeldist set ``url``'s old store aside (``.NAME.previous``, ``.replaced``,
    ``.discarded``), if anything is there; StoreError, removing nothing, when it is not a labeldist store: someone's
    folder at a name labeldist uses, which it never deletes."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not is_store(path):
        raise StoreError(
            f"{path}: not a labeldist store, at the name where labeldist sets {url}'s old store aside; it holds "
            "something labeldist did not make and never deletes: move it elsewhere, then rerun"
        )
    shutil.rmtree(path)


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
    check_staging_folders(url)  # a link there would have the skeleton written at its target
    shutil.rmtree(building, ignore_errors=True)
    _lay_out(building, manifest, labels)
    if os.path.isdir(url) and os.listdir(url):  # an unfinished or mismatched store being replaced
        discarded = sibling(url, "discarded")
        remove_old_store(discarded, url)
        os.rename(url, discarded)
        os.rename(building, url)
        shutil.rmtree(discarded)
    else:
        if os.path.isdir(url):
            os.rmdir(url)  # an empty folder given as --out
        os.rename(building, url)


def _lay_out(url: str, manifest: Mapping[str, Any], labels: LabelSet) -> None:
    n, k, rows = manifest["n_items"], manifest["k"], manifest["block_rows"]
    group = open_group(url, mode="w")
    ids = group.create_array(
        "ids",
        shape=(n,),
        dtype=str,
        chunks=(max(n, 1),),
        compressors=data_codecs(),
        dimension_names=DIMENSION_NAMES["ids"],
        config=WRITE_CONFIG,
    )
    ids[:] = labels.ids
    for name, arr in labels.to_arrays().items():
        arr = np.asarray(arr)
        dtype = str if arr.dtype.kind in "UO" else arr.dtype
        out = group.create_array(
            f"labels/{name}",
            shape=arr.shape,
            dtype=dtype,
            chunks=arr.shape if arr.size else tuple(1 for _ in arr.shape),
            compressors=data_codecs(),
            dimension_names=labels.dimension_names(name, arr.ndim),
            config=WRITE_CONFIG,
        )
        if arr.size:
            out[...] = arr
    knn_rows = knn_chunk_rows(rows, k, n)
    group.create_array(
        "knn/indices",
        shape=(n, k),
        dtype="int32",
        chunks=(knn_rows, max(k, 1)),
        compressors=data_codecs(),
        fill_value=-1,
        dimension_names=DIMENSION_NAMES["knn/indices"],
        config=WRITE_CONFIG,
    )
    group.create_array(
        "knn/distances",
        shape=(n, k),
        dtype="float32",
        chunks=(knn_rows, max(k, 1)),
        compressors=data_codecs(),
        fill_value=np.inf,
        dimension_names=DIMENSION_NAMES["knn/distances"],
        config=WRITE_CONFIG,
    )
    if manifest["dense"]:
        _create_square(group, "dense/distances", n, rows)
    _create_marks(group, "progress/blocks", n_blocks(n, rows))
    group.create_array(
        "progress/exact_pairs",
        shape=(n_blocks(n, rows),),
        dtype="int64",
        chunks=(1,),
        fill_value=0,
        compressors=mark_codecs(),
        dimension_names=DIMENSION_NAMES["progress/exact_pairs"],
        config=WRITE_CONFIG,
    )
    if manifest.get("symmetric"):
        _create_square(group, "work/upper", n, rows)
        _create_marks(group, "progress/upper", n_blocks(n, rows))
    # The incomplete manifest goes last: a folder with a manifest always has every array (and its marks).
    group.attrs[MANIFEST_KEY] = dict(manifest, complete=False)


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
        compressors=data_codecs(),
        fill_value=np.nan,
        dimension_names=DIMENSION_NAMES[path],
        config=WRITE_CONFIG,
    )


def _create_marks(group: zarr.Group, path: str, blocks: int) -> None:
    # one chunk per block: tasks marking different blocks never rewrite each other's chunk
    group.create_array(
        path,
        shape=(blocks,),
        dtype="uint8",
        chunks=(1,),
        fill_value=0,
        compressors=mark_codecs(),
        dimension_names=DIMENSION_NAMES[path],
        config=WRITE_CONFIG,
    )


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
            raise StoreCorruptError(
                f"{url}: {path} lacks {len(lost)} chunk(s), e.g. {'/'.join(map(str, lost[0]))}, "
                "although every block is marked written: not publishing it"
            )
    manifest = dict(group.attrs[MANIFEST_KEY], complete=True)
    group.attrs[MANIFEST_KEY] = manifest
    return manifest
