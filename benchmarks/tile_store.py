"""A big kNN-only vectors store for serving benchmarks, in minutes: a real store's lists tiled.

    .venv/bin/labeldist precompute vectors vec100k.npy --knn-only --k 100 --out stores/vec100k
    .venv/bin/python benchmarks/tile_store.py stores/vec100k --items 1000000 --out stores/vec1m-tiled

An exact 1,000,000-item store takes hours to compute on a 2-core machine; what a server does with one (open it,
check every chunk, read row blocks on demand) does not depend on what its lists say. This writes a complete store of
``--items`` items whose copy ``r`` of source item ``i`` is item ``r * n + i`` (n: the source's items), with the
source's list of ``i`` shifted to the same copy, and as labels the source's vectors shifted by ``1000 r`` along
their first axis (so that copies lie far apart and each copy's lists are, up to float32 rounding of the shifted
coordinates, its own exact lists). Its chunks hold real lists (as compressible as real ones), laid out by the
store's own code for ``--block-rows`` rows a block (default: what ``precompute`` chooses for that many items). The
manifest's dataset says ``tiled``: a store for benchmarks of the serving path, not for training. With ``--items``
equal to the source's, it is one copy: the source's lists, ids and vectors in the current layout (a store laid
out before its big kNN chunks were cut, re-chunked).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from labeldist.engine import default_block_rows
from labeldist.labels.vectors import Vectors
from labeldist.store import StoreReader, build_manifest, create_store, n_blocks, open_array, publish, store_url
from labeldist.view.stored import stored_labels

#: rows written per Zarr call (many chunks at once: Zarr writes them concurrently)
WRITE_ROWS = 1 << 15


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", help="a complete kNN-only vectors store")
    parser.add_argument("--items", type=int, default=1_000_000, help="items of the new store (default: %(default)s)")
    parser.add_argument("--out", required=True, help="where to write it (replaced if there)")
    parser.add_argument("--block-rows", type=int, help="rows per chunk (default: precompute's choice for --items)")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    src = StoreReader(args.source)
    if src.manifest["kind"] != "vectors":
        raise SystemExit(f"{args.source}: a vectors store is needed, this one is {src.manifest['kind']!r}")
    n0, k, n = src.n_items, src.k, args.items
    ind0, dist0 = src.knn()
    values0 = stored_labels(src).values
    copies = math.ceil(n / n0)
    shift = np.repeat(1000.0 * np.arange(copies), n0)[:n]
    values = np.tile(values0, (copies, 1))[:n]
    values[:, 0] += shift
    labels = Vectors(np.arange(n).astype(str), values, [f"x{c}" for c in range(values.shape[1])])
    rows = args.block_rows or default_block_rows(n)
    params = {"metric": src.manifest["params"]["metric"]}
    manifest = build_manifest(
        dataset=f"tiled-{src.manifest['dataset']}-x{copies}",
        kind="vectors",
        params=params,
        labels=labels,
        k=k,
        dense=False,
        block_rows=rows,
    )
    url = store_url(args.out)
    create_store(url, manifest, labels)
    indices, distances = open_array(url, "knn/indices", "r+"), open_array(url, "knn/distances", "r+")
    for start in range(0, n, WRITE_ROWS):
        stop = min(start + WRITE_ROWS, n)
        item = np.arange(start, stop)
        copy, base = item // n0, item % n0
        lists = ind0[base].astype(np.int64)
        lists = np.where(lists >= 0, lists + (copy * n0)[:, None], -1)
        lists[lists >= n] = -1  # a last, partial copy: neighbours past the end are cut (padding)
        d = np.where(lists >= 0, dist0[base], np.inf).astype(np.float32)
        order = np.argsort(lists < 0, axis=1, kind="stable")  # padding at the end of each row
        indices[start:stop] = np.take_along_axis(lists, order, axis=1).astype(np.int32)
        distances[start:stop] = np.take_along_axis(d, order, axis=1)
        print(f"\rrows {stop:,} of {n:,}", end="", file=sys.stderr, flush=True)
    blocks = n_blocks(n, rows)
    sizes = np.minimum(rows, n - rows * np.arange(blocks))  # what an exact build computes: each row against all
    open_array(url, "progress/exact_pairs", "r+")[:] = sizes * n
    open_array(url, "progress/blocks", "r+")[:] = np.ones(blocks, dtype=np.uint8)
    publish(url)
    print(
        f"\n{url}: {n:,} items, k={k}, {blocks:,} blocks of {rows} rows, {time.perf_counter() - t0:.0f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
