"""Exact kNN lists of one vectors file three ways in one run: labeldist's store, FAISS directly, a NumPy brute force.

    .venv/bin/python benchmarks/bench_vectors.py --n 100000 --d 64 --k 100 --repeats 3
    .venv/bin/python benchmarks/bench_vectors.py --n 1000000 --d 64 --k 100 --repeats 1 --baseline-rows 20000 \\
        --store /tmp/vec1m-store

Writes N seeded random D-dimensional float32 vectors (normal, seed 0) to an ``.npy`` file, then runs each tool in a
process of its own, timed from its start to its exit (Python, imports, reading the file and writing the result
included) while its resident memory, summed over its process tree (labeldist's Dask workers count; shared pages are
counted once per process), is sampled every 0.1 s:

1. ``labeldist precompute vectors FILE --knn-only --k K --workers W`` (the command line: a real Dask LocalCluster,
   FAISS in each worker, the exact float64 re-rank, a Zarr store written);
2. FAISS directly: ``IndexFlatL2`` over the float32 vectors, one ``search`` for k + 1 (the item itself dropped),
   every core (FAISS's default);
3. NumPy: row chunks of squared distances by one BLAS matrix product, ``argpartition`` for the k + 1 smallest, the
   item itself dropped, sorted: what one writes by hand.

Repeats are interleaved (FAISS, labeldist, NumPy, FAISS, ...) so that the load of a shared machine falls on all of
them; the table has the median wall time of each and its ratio to FAISS's. With ``--baseline-rows M``, FAISS and
NumPy search only the first M rows (against all N items) and their times are scaled by N / M (both are exact brute
forces whose time is linear in the rows searched); labeldist always builds the whole store.

The neighbour lists are checked on a sample of rows against ``scipy.spatial.distance.cdist`` in float64: each
tool's k neighbours must be at the true k nearest distances (relative tolerance 2e-5 for FAISS's float32
arithmetic, 1e-6 for the others), i.e. indices equal except where distances tie, and the share of indices equal to
the exact lists (ties by index) is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
from scipy.spatial.distance import cdist

REPO = Path(__file__).resolve().parents[1]

FAISS = """
import json, sys, time, numpy as np, faiss
x = np.load(sys.argv[1]); k = int(sys.argv[2]); rows = int(sys.argv[3]); out = sys.argv[4]
t0 = time.perf_counter()
index = faiss.IndexFlatL2(x.shape[1]); index.add(x)
dist, idx = index.search(x[:rows], k + 1)
own = idx == np.arange(rows)[:, None]  # the item itself: dropped, else the last one
keep = np.where(own.any(axis=1, keepdims=True), ~own, np.arange(k + 1) < k)
idx, dist = idx[keep].reshape(rows, k), np.sqrt(np.maximum(dist[keep].reshape(rows, k), 0))
search = time.perf_counter() - t0
np.savez(out, indices=idx, distances=dist)
print(json.dumps({"search_s": search, "threads": faiss.omp_get_max_threads()}))
"""

NUMPY = """
import json, sys, time, numpy as np
x = np.load(sys.argv[1]).astype(np.float64); k = int(sys.argv[2]); rows = int(sys.argv[3]); out = sys.argv[4]
t0 = time.perf_counter()
sq = np.einsum("ij,ij->i", x, x)
idx = np.empty((rows, k), np.int64); dist = np.empty((rows, k), np.float64)
chunk = max(1, 2**25 // len(x))  # a (chunk, N) float64 block: 256 MiB
for s in range(0, rows, chunk):
    e = min(s + chunk, rows)
    d = sq[s:e, None] + sq[None, :] - 2.0 * (x[s:e] @ x.T)
    d[np.arange(e - s), np.arange(s, e)] = np.inf  # not its own neighbour
    part = np.argpartition(d, k, axis=1)[:, :k]
    order = np.take_along_axis(d, part, 1).argsort(axis=1, kind="stable")
    idx[s:e] = np.take_along_axis(part, order, 1)
    dist[s:e] = np.sqrt(np.maximum(np.take_along_axis(d, idx[s:e], 1), 0))
np.savez(out, indices=idx, distances=dist)
print(json.dumps({"search_s": time.perf_counter() - t0}))
"""


def measured(cmd: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak resident memory (GiB, summed over the process tree) and stdout of ``cmd``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            total = 0
            for p in tree:
                try:
                    total += p.memory_info().rss
                except psutil.Error:  # a process of the tree that has just ended
                    pass
            peak = max(peak, total)
        except psutil.Error:
            pass
        time.sleep(0.1)
    wall = time.perf_counter() - t0
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} failed:\n{err[-3000:]}")
    return wall, peak / 2**30, out


def check(name: str, idx: np.ndarray, dist: np.ndarray, x: np.ndarray, sample: np.ndarray, k: int, tol: float) -> str:
    """Each sample row's neighbours against cdist in float64: at the true k nearest distances within ``tol``."""
    x64 = x.astype(np.float64)
    order, truth, at = [], [], []
    for part in np.array_split(sample, max(1, len(sample) * len(x) // 2**25)):  # (rows, N) blocks of 256 MiB
        exact = cdist(x64[part], x64)
        exact[np.arange(len(part)), part] = np.inf
        order.append(np.argsort(exact, axis=1, kind="stable")[:, :k])
        truth.append(np.take_along_axis(exact, order[-1], 1))
        at.append(np.take_along_axis(exact, idx[part].astype(np.int64), 1))
    order, truth, at = np.concatenate(order), np.concatenate(truth), np.concatenate(at)
    placed = float(np.max(np.abs(at - truth) / truth))  # its neighbours' true distances vs the true k nearest
    told = float(np.max(np.abs(dist[sample] - truth) / truth))  # the distances it reports
    same = float((idx[sample] == order).mean())
    ok = placed <= tol and told <= tol
    return (
        f"{name}: {'ok' if ok else 'DIFFERS'}: neighbours at the true distances within {placed:.1e}, reported "
        f"distances within {told:.1e} (tolerance {tol:.0e}); {100 * same:.3f} % of indices equal to the exact "
        "lists, the rest ties"
    )


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--workers", type=int, default=2, help="labeldist's LocalCluster workers")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--baseline-rows", type=int, default=None, help="rows FAISS and NumPy search (default: all N)")
    p.add_argument(
        "--tools", nargs="+", default=["faiss", "labeldist", "numpy"], choices=["faiss", "labeldist", "numpy"]
    )
    p.add_argument("--store", default=None, help="where labeldist's store is written and kept (default: scratch)")
    p.add_argument("--sample", type=int, default=500, help="rows checked against cdist")
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    args = p.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-vectors-"))
    work.mkdir(parents=True, exist_ok=True)
    x = np.random.default_rng(0).normal(size=(args.n, args.d)).astype(np.float32)
    np.save(work / "x.npy", x)
    rows = min(args.baseline_rows or args.n, args.n)
    scale = args.n / rows
    store = Path(args.store) if args.store else work / "store"
    scaled = f" (times x {scale:g})" if scale > 1 else ""
    print(
        f"{args.n:,} float32 vectors of {args.d} numbers, k = {args.k}; {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}; faiss and numpy search {rows:,} rows{scaled}",
        flush=True,
    )
    commands = {
        "faiss": [sys.executable, "-c", FAISS, str(work / "x.npy"), str(args.k), str(rows), str(work / "faiss.npz")],
        "numpy": [sys.executable, "-c", NUMPY, str(work / "x.npy"), str(args.k), str(rows), str(work / "numpy.npz")],
        "labeldist": [
            sys.executable,
            "-m",
            "labeldist.cli",
            "precompute",
            "vectors",
            str(work / "x.npy"),
            "--knn-only",
            "--k",
            str(args.k),
            "--workers",
            str(args.workers),
            "--out",
            str(store),
            "--no-progress",
        ],
    }
    walls: dict[str, list[float]] = {t: [] for t in args.tools}
    peaks: dict[str, list[float]] = {t: [] for t in args.tools}
    inner: dict[str, list[float]] = {t: [] for t in args.tools}
    for r in range(args.repeats):
        for tool in args.tools:
            if tool == "labeldist" and store.exists():
                shutil.rmtree(store)  # a store that is there would be reused, not built
            wall, peak, out = measured(commands[tool])
            factor = 1.0 if tool == "labeldist" else scale
            walls[tool].append(wall * factor)
            peaks[tool].append(peak)
            if out.strip().startswith("{"):
                inner[tool].append(json.loads(out.strip().splitlines()[-1])["search_s"] * factor)
            print(
                f"repeat {r + 1}: {tool}: {wall:.1f} s wall (x {factor:g}), peak {peak:.2f} GiB, load average "
                f"{os.getloadavg()[0]:.1f}",
                flush=True,
            )
    print()
    print("| tool | wall, median | wall, each repeat | peak RSS (process tree) | ratio to FAISS |")
    print("|---|---|---|---|---|")
    med = {t: statistics.median(w) for t, w in walls.items()}
    names = {
        "faiss": "faiss-cpu `IndexFlatL2` (exact)",
        "numpy": "NumPy chunked brute force (BLAS)",
        "labeldist": f"`labeldist precompute vectors --knn-only` ({args.workers} workers)",
    }
    for tool in args.tools:
        ratio = f"{med[tool] / med['faiss']:.2f}" if "faiss" in med else "-"
        each = ", ".join(f"{w:.1f}" for w in walls[tool])
        search = f" (search alone {statistics.median(inner[tool]):.1f} s)" if inner[tool] else ""
        print(f"| {names[tool]} | {med[tool]:.1f} s{search} | {each} | {max(peaks[tool]):.2f} GiB | {ratio} |")
    if "faiss" in med and "labeldist" in med:
        ratios = [w / f for w, f in zip(walls["labeldist"], walls["faiss"])]
        print(f"\nlabeldist / FAISS, repeat by repeat: {', '.join(f'{q:.2f}' for q in ratios)}")
    sample = np.random.default_rng(1).choice(rows, size=min(rows, args.sample), replace=False)
    for tool in args.tools:
        if tool == "labeldist":
            from labeldist.store import StoreReader

            idx, dist = StoreReader(str(store)).knn()
            tol = 1e-6
        else:
            got = np.load(work / f"{tool}.npz")
            idx, dist, tol = got["indices"], got["distances"], 2e-5 if tool == "faiss" else 1e-6
        print(check(tool, idx, dist, x, sample, args.k, tol))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
