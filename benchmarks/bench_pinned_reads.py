"""What pinning a reader to one generation costs: a row block of a store read through ``StoreReader`` (its identity
checked once after the read, one ``stat``) against the same read by a reader with nothing to check (as a reader
of an fsspec URL has), in the same run. A dense pose store of MPII poses is written in a temporary folder first.

    .venv/bin/python benchmarks/bench_pinned_reads.py --repeats 400
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import timed  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=400)
    args = parser.parse_args()

    from labeldist.distances.pose import PoseDistance
    from labeldist.engine.blocks import compute_block
    from labeldist.labels.pose_files import read_mpii_csv
    from labeldist.store import StoreReader, build_manifest, create_store, n_blocks, publish

    labels = read_mpii_csv(REPO / "data" / "mpii" / "mpii_valid_2958.csv").subset(slice(0, 1000))
    with tempfile.TemporaryDirectory() as folder:
        url, rows, distance = str(Path(folder) / "poses"), 256, PoseDistance()
        manifest = build_manifest(
            dataset="mpii", kind="pose", params=distance.params(), labels=labels, k=30, dense=True, block_rows=rows
        )
        create_store(url, manifest, labels)
        for block in range(n_blocks(len(labels), rows)):
            compute_block(block, labels=labels, distance=distance, url=url, k=30, block_rows=rows, dense=True)
        publish(url)
        reader, unpinned = StoreReader(url), StoreReader(url)
        unpinned._metadata_path = None  # nothing to compare: changed() answers at once, no stat
        reads = {
            "kNN rows (2 arrays)": (reader.knn_rows, unpinned.knn_rows),
            "dense rows": (reader.dense_rows, unpinned.dense_rows),
        }
        print(f"{'read of rows 0:256':<22} {'pinned (us)':>12} {'unpinned (us)':>14} {'ratio':>6}")
        for name, (pinned, bare) in reads.items():
            t_pinned, _ = timed(lambda p=pinned: p(0, rows), args.repeats)
            t_bare, _ = timed(lambda b=bare: b(0, rows), args.repeats)
            print(f"{name:<22} {t_pinned * 1e6:>12.1f} {t_bare * 1e6:>14.1f} {t_pinned / t_bare:>6.2f}")


if __name__ == "__main__":
    main()
