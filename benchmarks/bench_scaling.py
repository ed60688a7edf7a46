"""Scale-out of the precompute job on a real multi-process Dask cluster, and a projection to all of COCO-2014.

The job is the expensive one: exact caption-set WMD kNN (k = 100, lower-bound pruning) of the first N images of
the COCO Karpathy test split. The cluster is the docker-compose topology as processes: one ``dask scheduler`` and
W ``dask worker`` processes (one thread each) on 127.0.0.1; the job connects to it as
``labeldist precompute captions ... --scheduler tcp://...`` does. For W = 1 and 2 and each N it prints:

  - wall time of the job (the cluster already running, as in a deployment), and the speed-up of 2 workers
    over 1 measured in the same run (the baseline);
  - exact image pairs computed (the rest pruned by the bounds);
  - peak RSS of a worker process (``ru_maxrss``) and of this (client) process.

Model: wall(W) = serial + work / W, both read off the 1- and 2-worker runs at each N. The work has a part that
grows as N^2 — the lower bounds of every image pair, timed directly on one row block — and the rest (exact
WMDs of the pairs the bounds cannot rule out, about 250 per image, and the top-k), fitted as a power of N; the
serial part (graph, scatter of the labels, publish; on this 2-core machine also the cores the client and the
scheduler take) is taken as linear in N, and worker RSS as c + d N. The projection to COCO-2014 (123,287 images,
k = 100) extrapolates over a factor of 25 in N: quote it as an order of magnitude.

    .venv/bin/python benchmarks/bench_scaling.py [--sizes 1000 2000 5000] [--workers 1 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the process helpers of the system tests: the same cluster the tests start

from labeldist.distances.caption_sets import CaptionSetWMD  # noqa: E402
from labeldist.engine import precompute  # noqa: E402
from labeldist.labels.captions import read_captions  # noqa: E402
from labeldist.store import open_array  # noqa: E402
from tests.processes import Cluster  # noqa: E402

DATA = ROOT / "data" / "coco" / "coco_karpathy_test.json"
K = 100
COCO_2014 = 123_287


def worker_peak_rss(client) -> int:
    """Largest peak RSS (bytes) over the worker processes (Linux ``ru_maxrss`` is in KiB)."""
    peaks = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return max(peaks.values())


def run_job(client, labels, out: str) -> tuple[float, int]:
    """Wall seconds of one kNN-only precompute on the running cluster, and the exact pairs it computed."""
    t0 = time.perf_counter()
    precompute(labels, CaptionSetWMD(), out, dataset="bench", k=K, dense=False, client=client, progress=False)
    seconds = time.perf_counter() - t0
    return seconds, int(open_array(out, "progress/exact_pairs", "r")[:].sum())


def fit_power(n: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """Least-squares fit of ``t = a n^b`` in log-log: (a, b)."""
    b, log_a = np.polyfit(np.log(n), np.log(t), 1)
    return float(np.exp(log_a)), float(b)


def bound_seconds(labels, rows: int = 256) -> float:
    """Single-thread seconds of the lower bounds of all N x N image pairs, timed on one ``rows``-row block and
    scaled to all rows: the part of the job that grows as N^2 (every row against every column)."""
    distance = CaptionSetWMD()
    distance.lower_bound_block(labels.subset(slice(0, 2)), labels.subset(slice(0, 2)))  # compiled kernels loaded
    block = labels.subset(slice(0, rows))
    t0 = time.perf_counter()
    distance.lower_bound_block(block, labels)
    return (time.perf_counter() - t0) * len(labels) / rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 5000])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--project", type=int, nargs="+", default=[2, 16, 64, 256], help="cluster sizes")
    args = parser.parse_args()
    from distributed import Client

    print(f"cpus: {os.cpu_count()}, load average at start: {os.getloadavg()[0]:.2f}")
    coco = read_captions(str(DATA))
    results: dict[tuple[int, int], tuple[float, int, int]] = {}
    bounds: dict[int, float] = {}
    tmp = tempfile.mkdtemp(prefix="bench-scaling-")
    try:
        for w in args.workers:
            cluster = Cluster(n_workers=w)
            try:
                with Client(cluster.address) as client:
                    # warm up: every worker loads the compiled kernels once, as a long-running cluster has
                    run_job(client, coco.subset(slice(0, 40)), os.path.join(tmp, f"warm-{w}"))
                    for n in args.sizes:
                        if n not in bounds:
                            bounds[n] = bound_seconds(coco.subset(slice(0, n)))
                        seconds, exact = run_job(client, coco.subset(slice(0, n)), os.path.join(tmp, f"{w}-{n}"))
                        results[w, n] = (seconds, exact, worker_peak_rss(client))
                        share = 1 - exact / (n * (n - 1))
                        print(
                            f"W={w} N={n:>6}: {seconds:8.1f} s   exact pairs {exact:>11,} ({share:.1%} pruned)   "
                            f"worker peak RSS {results[w, n][2] / 2**20:6.0f} MiB   load {os.getloadavg()[0]:.2f}"
                        )
            finally:
                cluster.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    client_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    sizes = np.array(args.sizes, dtype=float)
    print("\n| N | " + " | ".join(f"{w} worker{'s' if w > 1 else ''}" for w in args.workers) + " | speed-up |")
    print("|---|" + "---|" * (len(args.workers) + 1))
    w_lo, w_hi = min(args.workers), max(args.workers)
    for n in args.sizes:
        cells = " | ".join(f"{results[w, n][0]:.1f} s" for w in args.workers)
        speedup = results[w_lo, n][0] / results[w_hi, n][0]
        print(f"| {n:,} | {cells} | {speedup:.2f}x ({w_hi} vs {w_lo}) |")

    # wall(W) = serial + work / W, from the 1- and 2-worker runs at each N (serial: the client's graph, the
    # scatter of the labels, the publish, and on this machine the cores the client and scheduler take)
    t1 = np.array([results[w_lo, n][0] * w_lo for n in args.sizes])  # as if on one worker
    t2 = np.array([results[w_hi, n][0] for n in args.sizes])
    serial = np.clip((w_hi * t2 - t1) / (w_hi - 1), 0.0, None)
    work = t1 - serial
    bound = np.array([bounds[n] for n in args.sizes])
    rest = np.clip(work - bound, 1e-9, None)
    beta = bound[-1] / sizes[-1] ** 2  # bounds: every pair, N^2
    c_rest, p_rest = fit_power(sizes, rest)  # exact WMDs and top-k: ~250 exact pairs per item, ~N
    _, p_exact = fit_power(sizes, np.array([results[w_hi, n][1] for n in args.sizes], dtype=float))
    serial_per_item = serial[-1] / sizes[-1]
    rss = np.array([max(results[w, n][2] for w in args.workers) for n in args.sizes], dtype=float)
    d, c = np.polyfit(sizes, rss, 1)
    print("\n| N | serial | work (1 worker) | of which bounds (N^2) | rest | exact pairs |")
    print("|---|---|---|---|---|---|")
    for i, n in enumerate(args.sizes):
        print(
            f"| {n:,} | {serial[i]:.1f} s | {work[i]:.1f} s | {bound[i]:.1f} s | {rest[i]:.1f} s | "
            f"{results[w_hi, n][1]:,} |"
        )
    print(
        f"\nfits: bounds = {beta * 1e9:.3f} ns x N^2; rest ~ N^{p_rest:.2f}; exact pairs ~ N^{p_exact:.2f}; "
        f"serial ~ {serial_per_item * 1e3:.2f} ms x N; worker RSS ~ {c / 2**20:.0f} MiB + "
        f"{d * 1000 / 2**20:.1f} MiB per 1,000 images; client peak RSS {client_rss / 2**20:.0f} MiB"
    )

    n = COCO_2014
    work_n = beta * n**2 + c_rest * n**p_rest
    serial_n = serial_per_item * n
    print(
        f"\nCOCO-2014 projection ({n:,} images, k = {K}, kNN only): work {work_n / 3600:,.1f} worker-hours "
        f"({beta * n**2 / 3600:,.1f} h bounds + {c_rest * n**p_rest / 3600:,.1f} h exact WMDs and top-k), serial "
        f"{serial_n / 60:,.1f} min; per worker ~{(c + d * n) / 2**30:.1f} GiB RSS; kNN lists "
        f"{n * K * 8 / 2**20:.0f} MiB before compression (dense: {n**2 * 4 / 2**30:.0f} GiB)"
    )
    print("| workers | projected wall time | memory (all workers) |")
    print("|---|---|---|")
    for w in args.project:
        hours = (serial_n + work_n / w) / 3600
        print(f"| {w} | {hours:,.2f} h | {w * (c + d * n) / 2**30:,.0f} GiB |")


if __name__ == "__main__":
    main()
