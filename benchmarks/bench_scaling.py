"""Scale-out of the precompute job on a real multi-process Dask cluster, and a projection to all of COCO-2014.

The job is the expensive one: exact caption-set WMD kNN (k = 100, lower-bound pruning) of the first N images of
the COCO Karpathy test split. The cluster is the docker-compose topology as processes: one ``dask scheduler`` and
W ``dask worker`` processes (one thread each) on 127.0.0.1; the job connects to it as
``labeldist precompute captions ... --scheduler tcp://...`` does. For W = 1 and 2 and each N it prints:

  - wall time of the job (the cluster already running, as in a deployment), and the speed-up of 2 workers
    over 1 measured in the same run (the baseline);
  - exact image pairs computed (the rest pruned by the bounds);
  - peak RSS of a worker process (``ru_maxrss``) and of this (client) process.

From the growth with N it fits ``single-worker time ~ N^b`` and ``worker RSS ~ c + d N`` and projects
COCO-2014 (123,287 images, k = 100) on clusters of several sizes by Amdahl's law, with the serial fraction
taken from the measured 1-to-2-worker speed-up (pessimistic here: on 2 cores the client and the scheduler share
the workers' cores; the tasks are independent row blocks). The projection extrapolates from N <= 5,000 over a
factor of 25 in N, and the pruned share changes with N: quote it as an order of magnitude.

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


def serial_fraction(speedup: float, workers: int) -> float:
    """Amdahl's serial fraction s from a measured speed-up S on W workers: S = 1 / (s + (1 - s) / W).

    >>> round(serial_fraction(2.0, 2), 6), round(serial_fraction(1.0, 2), 6)
    (0.0, 1.0)
    """
    return float(np.clip((workers / speedup - 1) / (workers - 1), 0.0, 1.0))


def amdahl(serial: float, workers: int) -> float:
    """Amdahl's law: the speed-up on ``workers`` workers with serial fraction ``serial``."""
    return 1.0 / (serial + (1.0 - serial) / workers)


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
    tmp = tempfile.mkdtemp(prefix="bench-scaling-")
    try:
        for w in args.workers:
            cluster = Cluster(n_workers=w)
            try:
                with Client(cluster.address) as client:
                    # warm up: every worker loads the compiled kernels once, as a long-running cluster has
                    run_job(client, coco.subset(slice(0, 40)), os.path.join(tmp, f"warm-{w}"))
                    for n in args.sizes:
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

    a, b = fit_power(sizes, np.array([results[w_lo, n][0] * w_lo for n in args.sizes]))  # in worker-seconds
    _, b_exact = fit_power(sizes, np.array([results[w_hi, n][1] for n in args.sizes], dtype=float))
    speedup_hi = results[w_lo, args.sizes[-1]][0] / results[w_hi, args.sizes[-1]][0] * w_lo  # over 1 worker
    efficiency = speedup_hi / w_hi
    rss = np.array([results[w_hi, n][2] for n in args.sizes], dtype=float)
    d, c = np.polyfit(sizes, rss, 1)
    print(f"\ngrowth: wall ~ N^{b:.2f}, exact pairs ~ N^{b_exact:.2f}; parallel efficiency at N={args.sizes[-1]}: "
          f"{efficiency:.2f}; worker RSS ~ {c / 2**20:.0f} MiB + {d * 1000 / 2**20:.1f} MiB per 1,000 images; "
          f"client peak RSS {client_rss / 2**20:.0f} MiB")  # fmt: skip
    worker_seconds = a * COCO_2014**b  # the whole job's work, in single-worker seconds
    rss_target = c + d * COCO_2014
    print(f"\nCOCO-2014 projection ({COCO_2014:,} images, k = {K}, kNN only): {worker_seconds / 3600:,.0f} "
          f"worker-hours; per worker ~{rss_target / 2**30:.1f} GiB RSS; store ~{COCO_2014 * K * 8 / 2**20:.0f} MiB "
          "of kNN lists before compression (a dense matrix would be "
          f"{COCO_2014**2 * 4 / 2**30:.0f} GiB)")  # fmt: skip
    print("| workers | projected wall time |")
    print("|---|---|")
    serial = serial_fraction(min(speedup_hi, w_hi), w_hi)
    for w in args.project:
        speedup = amdahl(serial, w)
        print(f"| {w} | {worker_seconds / speedup / 3600:,.1f} h (speed-up {speedup:.1f}) |")


if __name__ == "__main__":
    main()
