"""Checksums of a whole store: read every chunk once, so that Zarr's CRC32C codec checks each one.

Every array of a store is written with a CRC32C codec (see :mod:`labeldist.store`), and a sharded array's index
carries one too, so a flipped bit anywhere fails on read. :func:`damaged_regions` reads each array slab by slab
(one shard, or one chunk, of rows at a time) and names the row ranges that fail, so that ``labeldist verify`` can
say exactly what is damaged instead of stopping at the first bad chunk.
"""

from __future__ import annotations

from typing import Any

import zarr

from labeldist.store import is_checksum_error, open_group


def store_arrays(url: str) -> list[tuple[str, zarr.Array]]:
    """Every array of the store at ``url``, by path (``"knn/indices"``, ...), sorted."""
    members = open_group(url, mode="r").members(max_depth=None)  # recursive: paths include the groups
    return sorted(((path, m) for path, m in members if isinstance(m, zarr.Array)), key=lambda pm: pm[0])


def damaged_regions(url: str) -> list[dict[str, Any]]:
    """Every slab of rows of every array of the store at ``url`` that fails its checksum.

    Returns ``[{"array": "dense/distances", "rows": [256, 512], "error": "..."}, ...]``; empty when all is whole.
    """
    damaged = []
    for path, array in store_arrays(url):
        if array.ndim == 0:
            slabs = [(0, 0)]
        else:
            step = max(1, (array.shards or array.chunks)[0])
            slabs = [(start, min(start + step, array.shape[0])) for start in range(0, array.shape[0], step)]
        for start, stop in slabs:
            try:
                array[...] if array.ndim == 0 else array[start:stop]
            except ValueError as e:
                if not is_checksum_error(e):
                    raise
                damaged.append({"array": path, "rows": [start, stop], "error": str(e)})
    return damaged
