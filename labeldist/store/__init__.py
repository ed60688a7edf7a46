"""The Zarr v3 store layout of docs/design.md: manifest, arrays, atomic publish, readers.

The format itself (the manifest, every array, the checksums, how a store is written and grown) is described in
docs/store-format.md.

This package is the only one that knows the Zarr layout: the engine, ``verify``, ``info`` and the service read
and write through its functions and :class:`StoreReader`, all imported from here (``from labeldist.store import
StoreReader``). Its modules, each importing only modules listed before it:

- :mod:`labeldist.store.errors`: :class:`StoreError` and its kinds (incomplete, mismatched, corrupt, changed while
  read);
- :mod:`labeldist.store.layout`: the layout of one store (its arrays and their paths, chunking and codecs, the
  manifest's key, the format's constants), opening a store or one of its arrays, URLs and sibling folders
  (:func:`writable_url`: the store a writer works on, links resolved), row blocks (:func:`n_blocks`,
  :func:`block_range`, :func:`knn_chunk_rows`), :func:`store_arrays`;
- :mod:`labeldist.store.identity`: which store is at a local path now (:data:`StoreIdentity`,
  :func:`store_identity`, :func:`metadata_identity`), and whether one is being replaced there;
- :mod:`labeldist.store.damage`: damage detected, never served: checked reads (:func:`read_rows`,
  :func:`checked_read`, :func:`missing_chunks`), checksums present (:func:`has_checksums`), and every damaged
  chunk of a store (:func:`damaged_regions`);
- :mod:`labeldist.store.manifest`: the manifest built (:func:`build_manifest`), read (:func:`read_manifest`),
  compared (:func:`fingerprint_diff`), digested (:func:`manifest_digest`), its generations, and whether a
  folder holds a store at all (:func:`is_store`);
- :mod:`labeldist.store.writing`: atomic creation (:func:`create_store`), row blocks and their progress marks
  (:func:`write_block`, :func:`blocks_done`), the work arrays of a symmetric dense store, :func:`publish`;
- :mod:`labeldist.store.reading`: :class:`StoreReader`, checked read-only access to a complete store, pinned to the
  generation it opened, and :class:`ChunkFiles`, its direct reader of the kNN lists' chunk files.
"""

from labeldist.store.damage import (
    checked_read,
    damage_reason,
    damaged_regions,
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
    # manifest
    "build_manifest",
    "generation_entry",
    "store_generations",
    "fingerprint_diff",
    "read_manifest",
    "is_store",
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
