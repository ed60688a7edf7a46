"""The walk of a store's folders on opening (``labeldist.store.foreign_entries``) against its floor, a bare
``os.walk`` of the same tree that looks at nothing, measured side by side in one run, at N, 2N and 4N chunk-row
folders (a kNN-only store has one folder per chunk row of each of its two arrays).

    .venv/bin/python benchmarks/bench_store_walk.py --rows 4000 8000 16000

Each tree is a synthetic one laid out as a store's ``knn/indices/c/ROW/0`` and ``knn/distances/c/ROW/0``, each chunk
an empty file; the times are the best of ``--repeats`` warm walks (the tree in the page cache).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from labeldist.store.damage import foreign_entries


def lay_out(root: Path, rows: int) -> int:
    """A store-shaped tree of ``rows`` chunk-row folders per kNN array; returns the folders made."""
    folders = 0
    for array in ("indices", "distances"):
        for row in range(rows):
            chunk = root / "knn" / array / "c" / str(row)
            chunk.mkdir(parents=True)
            (chunk / "0").touch()
            folders += 1
    return folders


def timed(fn, root: Path, repeats: int) -> float:
    """The best of ``repeats`` runs of ``fn(root)``, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(root)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[4000, 8000, 16000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'folders':>9} {'os.walk (floor)':>16} {'foreign_entries':>16} {'ratio':>6} {'us/folder':>10}")
    for rows in args.rows:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            folders = lay_out(root, rows)
            floor = timed(lambda r: sum(1 for _ in os.walk(r)), root, args.repeats)
            walk = timed(foreign_entries, root, args.repeats)
            assert foreign_entries(root) == []
            print(f"{folders:>9,} {floor:>15.3f}s {walk:>15.3f}s {walk / floor:>6.2f} {walk / folders * 1e6:>10.1f}")


if __name__ == "__main__":
    main()
