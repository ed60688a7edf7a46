"""A vectors store against a plain NumPy brute force, in the same run: time and peak memory of exact kNN lists.

    .venv/bin/python benchmarks/bench_vectors.py --n 100000 --d 64 --k 100

Writes N random D-dimensional vectors (seed 0) to an ``.npy`` file, then runs, each in a process of its own whose
resident memory (summed over its process tree: the Dask workers of labeldist count) is sampled every 0.1 s:

1. the baseline: what one writes in NumPy, squared distances of row chunks by one matrix product, then
   ``argpartition`` for the k + 1 smallest, the item itself removed, sorted;
2. ``labeldist precompute vectors FILE --metric euclidean --knn-only --k K`` (a LocalCluster of ``--workers``).

Prints wall time and peak memory of each and their ratios, and checks that both give the same neighbour
distances (float32) on a sample of rows.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parents[1]

BASELINE = """
import sys, numpy as np
x = np.load(sys.argv[1]); k = int(sys.argv[2]); out = sys.argv[3]
sq = np.einsum("ij,ij->i", x, x)
idx = np.empty((len(x), k), np.int64); dist = np.empty((len(x), k), np.float32)
for s in range(0, len(x), 1024):
    d = sq[s:s + 1024, None] + sq[None, :] - 2.0 * (x[s:s + 1024] @ x.T)
    d[np.arange(len(d)), np.arange(s, s + len(d))] = np.inf  # not its own neighbour
    part = np.argpartition(d, k, axis=1)[:, :k]
    order = np.take_along_axis(d, part, 1).argsort(axis=1, kind="stable")
    idx[s:s + 1024] = np.take_along_axis(part, order, 1)
    dist[s:s + 1024] = np.sqrt(np.maximum(np.take_along_axis(d, idx[s:s + 1024], 1), 0))
np.savez(out, indices=idx, distances=dist)
"""


def measured(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident memory (GiB, summed over the process tree) of ``cmd``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.1)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed:\n{proc.stderr.read()[-2000:]}")
    return wall, peak / 2**30


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--workers", type=int, default=2, help="labeldist's LocalCluster workers")
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    args = p.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-vectors-"))
    work.mkdir(parents=True, exist_ok=True)
    x = np.random.default_rng(0).normal(size=(args.n, args.d))
    np.save(work / "x.npy", x)
    print(f"{args.n:,} vectors of {args.d} numbers, k = {args.k}; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}")  # fmt: skip
    base_t, base_m = measured(
        [sys.executable, "-c", BASELINE, str(work / "x.npy"), str(args.k), str(work / "base.npz")]
    )
    store = work / "store"
    ours_t, ours_m = measured([sys.executable, "-m", "labeldist.cli", "precompute", "vectors", str(work / "x.npy"),
                               "--knn-only", "--k", str(args.k), "--workers", str(args.workers), "--out", str(store),
                               "--overwrite", "--no-progress"])  # fmt: skip
    from labeldist.store import StoreReader

    _, ours = StoreReader(str(store)).knn()
    base = np.load(work / "base.npz")["distances"]
    rows = np.random.default_rng(1).choice(args.n, size=min(args.n, 2000), replace=False)
    worst = float(np.max(np.abs(ours[rows] - base[rows]) / np.maximum(base[rows], 1e-12)))
    print("| | wall | peak memory |")
    print("|---|---|---|")
    print(f"| NumPy brute force (baseline) | {base_t:.1f} s | {base_m:.2f} GiB |")
    print(f"| labeldist precompute vectors --knn-only ({args.workers} workers) | {ours_t:.1f} s | {ours_m:.2f} GiB |")
    print(f"| ratio labeldist / NumPy | {ours_t / base_t:.2f} | {ours_m / base_m:.2f} |")
    print(f"neighbour distances of {len(rows)} rows: largest relative difference {worst:.1e} (float32 rounding and "
          f"the baseline's cancellation); load average at the end {os.getloadavg()[0]:.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
