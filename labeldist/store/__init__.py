"""The Zarr v3 store layout of docs/design.md: manifest, arrays, atomic publish, readers.

The format itself (the manifest, every array, the checksums, how a store is written and grown) is described in
docs/store-format.md. This package is the only one that knows the Zarr layout: everything else reads and writes
through the functions and :class:`StoreReader` imported from here. Its modules, each importing only those before
it: :mod:`~labeldist.store.errors` (:class:`StoreError` and its kinds), :mod:`~labeldist.store.layout` (arrays,
paths, chunking, codecs, opening a store), :mod:`~labeldist.store.identity` (which store is at a path now),
:mod:`~labeldist.store.damage` (checked reads, damaged chunks), :mod:`~labeldist.store.manifest` (built, read,
compared, digested), :mod:`~labeldist.store.writing` (atomic creation, row blocks, :func:`publish`) and
:mod:`~labeldist.store.reading` (:class:`StoreReader`, pinned to the generation it opened, and :class:`ChunkFiles`).
"""

from labeldist.store.damage import (
    check_store_folders,
    checked_read,
    damage_reason,
    damaged_regions,
    foreign_entries,
    foreign_entry_error,
    has_checksums,
    is_checksum_error,
    missing_chunks,
    read_rows,
    store_has_checksums,
)
from labeldist.store.errors import (
    StoreChangedError,
    StoreCorruptError,
    StoreError,
    StoreIncompleteError,
    StoreMismatchError,
)
from labeldist.store.identity import (
    StoreIdentity,
    metadata_identity,
    replacement_under_way,
    root_metadata_path,
    store_identity,
)
from labeldist.store.layout import (
    DENSE_TILE,
    FINGERPRINT_KEYS,
    FORMAT,
    KNN_CHUNK_BYTES,
    KNN_MIN_CHUNK_ROWS,
    KNN_WHOLE_BYTES,
    MANIFEST_KEY,
    STAGING_SIBLINGS,
    block_range,
    check_staging_folders,
    chunk_keys,
    is_local,
    knn_chunk_rows,
    n_blocks,
    open_array,
    open_group,
    sibling,
    store_arrays,
    store_url,
    writable_url,
)
from labeldist.store.manifest import (
    build_manifest,
    check_not_nested,
    fingerprint_diff,
    generation_entry,
    is_store,
    manifest_digest,
    read_manifest,
    store_generations,
)
from labeldist.store.reading import ChunkFiles, StoreReader
from labeldist.store.writing import (
    blocks_done,
    create_store,
    drop_work,
    exact_pairs_total,
    publish,
    read_upper,
    record_generation_pairs,
    remove_old_store,
    skeleton_whole,
    upper_done,
    write_block,
    write_upper,
)

__all__ = [
    # errors
    "StoreError",
    "StoreIncompleteError",
    "StoreMismatchError",
    "StoreCorruptError",
    "StoreChangedError",
    # layout
    "FORMAT",
    "MANIFEST_KEY",
    "FINGERPRINT_KEYS",
    "DENSE_TILE",
    "KNN_WHOLE_BYTES",
    "KNN_CHUNK_BYTES",
    "KNN_MIN_CHUNK_ROWS",
    "store_url",
    "writable_url",
    "check_staging_folders",
    "open_group",
    "open_array",
    "is_local",
    "sibling",
    "STAGING_SIBLINGS",
    "chunk_keys",
    "store_arrays",
    "n_blocks",
    "block_range",
    "knn_chunk_rows",
    # identity
    "StoreIdentity",
    "root_metadata_path",
    "store_identity",
    "metadata_identity",
    "replacement_under_way",
    # damage
    "is_checksum_error",
    "damage_reason",
    "checked_read",
    "missing_chunks",
    "read_rows",
    "has_checksums",
    "store_has_checksums",
    "damaged_regions",
    "foreign_entries",
    "foreign_entry_error",
    "check_store_folders",
    # manifest
    "build_manifest",
    "generation_entry",
    "store_generations",
    "fingerprint_diff",
    "read_manifest",
    "is_store",
    "remove_old_store",
    "check_not_nested",
    "manifest_digest",
    # writing
    "create_store",
    "skeleton_whole",
    "blocks_done",
    "write_block",
    "exact_pairs_total",
    "record_generation_pairs",
    "upper_done",
    "write_upper",
    "read_upper",
    "drop_work",
    "publish",
    # reading
    "ChunkFiles",
    "StoreReader",
]
