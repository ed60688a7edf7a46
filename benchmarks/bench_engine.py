"""Engine overhead: the MPII dense + k=100 store through Dask and Zarr, against in-memory computation.

Prints, measured in the same run (medians of repeats):
  - in-memory, same kernel: ``PoseDistance.block`` on all x all, then the same top-k selection, no Dask, no Zarr;
  - in-memory, plain NumPy: broadcasting over joints, then ``np.argsort(kind="stable")`` per row;
  - the engine on a running 2-worker LocalCluster (what a job on an existing cluster pays);
  - the engine end to end as the CLI runs it (starting its LocalCluster, writing the store).
Target: engine overhead at most 1.5x.

    .venv/bin/python benchmarks/bench_engine.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from timing import timed  # benchmarks/timing.py (scripts run from benchmarks/)

from labeldist.core.knn import topk_rows
from labeldist.distances.pose import PoseDistance
from labeldist.engine import dask_client, precompute
from labeldist.labels.pose_files import read_mpii_csv

ROOT = Path(__file__).resolve().parents[1]
K = 100


def plain_numpy(xy: np.ndarray, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The obvious NumPy program: broadcast each joint over all pairs, rescale, argsort every row."""
    n, J = present.shape
    total = np.zeros((n, n))
    shared = np.zeros((n, n))
    for j in range(J):
        both = present[:, None, j] & present[None, :, j]
        d = np.hypot(xy[:, None, j, 0] - xy[None, :, j, 0], xy[:, None, j, 1] - xy[None, :, j, 1])
        total += np.where(both, d, 0.0)
        shared += both
    with np.errstate(divide="ignore", invalid="ignore"):
        dense = np.where(shared > 0, total * J / shared, np.inf).astype(np.float32)
    masked = dense.copy()
    np.fill_diagonal(masked, np.inf)
    return dense, np.argsort(masked, axis=1, kind="stable")[:, :K]


def same_kernel(poses) -> tuple[np.ndarray, np.ndarray]:
    dense = PoseDistance().block(poses, poses).astype(np.float32)
    return dense, topk_rows(dense, K, exclude=np.arange(len(poses)))[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    poses = read_mpii_csv(ROOT / "data" / "mpii" / "mpii_valid_2958.csv")
    n = len(poses)
    same_kernel(poses.subset(slice(0, 10)))  # compile the numba kernel outside the timings

    t_kernel, (dense_mem, knn_mem) = timed(lambda: same_kernel(poses), args.repeats)
    t_numpy, (dense_np, knn_np) = timed(lambda: plain_numpy(poses.xy, poses.present), args.repeats)
    assert np.allclose(dense_np, dense_mem, rtol=1e-6), "plain NumPy and the kernel disagree"

    tmp = Path(tempfile.mkdtemp(prefix="bench-engine-"))
    try:
        warm = []
        with dask_client(n_workers=2) as client:
            precompute(
                poses.subset(slice(0, 300)), PoseDistance(), tmp / "w", dataset="w", k=K, client=client, progress=False
            )  # warm the workers (imports, numba cache)
            for r in range(args.repeats):
                t0 = time.perf_counter()
                precompute(poses, PoseDistance(), tmp / f"warm{r}", dataset="mpii", k=K, client=client, progress=False)
                warm.append(time.perf_counter() - t0)
        cold = []
        for r in range(max(3, args.repeats // 2)):
            t0 = time.perf_counter()
            res = precompute(poses, PoseDistance(), tmp / f"cold{r}", dataset="mpii", k=K, n_workers=2, progress=False)
            cold.append(time.perf_counter() - t0)
        from labeldist.store import StoreReader

        reader = StoreReader(res.url)
        assert np.array_equal(reader.dense_rows(0, n), dense_mem), "engine and in-memory matrices differ"
        assert np.array_equal(reader.knn()[0], knn_mem), "engine and in-memory kNN lists differ"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    t_warm, t_cold = statistics.median(warm), statistics.median(cold)

    print(f"MPII poses: N = {n}, dense {n}x{n} float32 + kNN k = {K}; medians of {args.repeats} runs, 2 cores")
    print(f"  in-memory, same kernel + top-k        {t_kernel:8.3f} s")
    print(f"  in-memory, plain NumPy + argsort      {t_numpy:8.3f} s")
    print(
        f"  engine, running 2-worker cluster      {t_warm:8.3f} s   {t_warm / t_kernel:5.2f}x same kernel, "
        f"{t_warm / t_numpy:5.2f}x plain NumPy"
    )
    print(
        f"  engine, CLI-style (starts cluster)    {t_cold:8.3f} s   {t_cold / t_kernel:5.2f}x same kernel, "
        f"{t_cold / t_numpy:5.2f}x plain NumPy"
    )
    print("  target: engine overhead <= 1.5x")


if __name__ == "__main__":
    main()
