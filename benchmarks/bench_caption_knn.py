"""Exact caption-set kNN (k = 100) and the dense caption-set WMD matrix through the engine, against gensim.

Caption-set WMD: Kim et al., CVPR 2019, Eq. 13, over exact caption WMDs (Kusner et al., ICML 2015), on the
COCO Karpathy test split (5,000 images, GloVe 6B 50-d, unit vectors as gensim's ``wmdistance(norm=True)``).
Prints, measured in the same run:
  - gensim's ``KeyedVectors.wmdistance`` per caption pair (median of repeats over random caption pairs, same
    tokens), from which every gensim figure below is *extrapolated* (not run): a task's image pairs, counted
    once per unordered pair (symmetry granted to gensim), times their caption pairs, times that time;
  - one engine row block (256 images against all 5,000): ``lower_bound_block`` (linear-complexity RWMD)
    against the previous per-caption-pair RWMD/WCD bound, and the exact ``pairs`` of that block's pruned kNN
    against the plain one-``wmd_pairs``-call path (medians of repeats, the old bound timed once);
  - exact kNN, k = 100, through ``labeldist.engine.precompute(..., dense=False)`` on a new 2-worker
    LocalCluster for N = 1,000 / 2,000 / 5,000: wall time (cluster start included), the share of image pairs
    pruned (1 - exact pairs / (N (N - 1)), from the store's ``progress/exact_pairs``), peak memory (RSS summed
    over this process and all its children, workers included, sampled every 0.1 s) and CPU seconds of the
    process tree;
  - the full dense N x N matrix through the engine (``dense=True``), same figures (skip with ``--dense 0``);
    caption-set WMD is symmetric, so the engine computes the upper triangle once and mirrors it (the share of
    pairs computed is then about half);
  - the engine's fixed cost (cluster start, imports, compiled kernels loaded in each worker): kNN of 20 images.
Targets: kNN of 5,000 images in at most 2 minutes on 2 cores; dense 5,000 x 5,000 in at most 15
minutes and 4 GB. The machine's load average is printed: on a shared machine wall times stretch with it.

    .venv/bin/python benchmarks/bench_caption_knn.py [--sizes 1000 2000 5000] [--dense 5000] [--pairs 300]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import zarr
from gensim.models import KeyedVectors
from timing import timed  # benchmarks/timing.py (scripts run from benchmarks/)

from labeldist.core.knn import pruned_topk
from labeldist.distances.caption_sets import CaptionSetWMD
from labeldist.distances.wmd import unit_rows, wmd_pairs
from labeldist.engine import default_block_rows, precompute
from labeldist.labels.captions import CaptionSets, read_captions

DATA = Path(__file__).resolve().parents[1] / "data" / "coco" / "coco_karpathy_test.json"
K = 100


class TreeMonitor:
    """Peak RSS (bytes) and CPU seconds of this process and all its descendants, sampled in a thread.

    RSS is summed over processes (shared library pages counted once per process: an over-estimate). CPU time
    is each process's last sampled user + system time, summed (a process's last < 0.1 s may be missed).
    """

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.peak = 0
        self._cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        total = 0
        for proc in [me, *me.children(recursive=True)]:
            try:
                total += proc.memory_info().rss
                times = proc.cpu_times()
                self._cpu[proc.pid] = times.user + times.system
            except psutil.Error:  # a process that just ended
                pass
        self.peak = max(self.peak, total)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    @property
    def cpu(self) -> float:
        return sum(self._cpu.values())

    def __enter__(self) -> TreeMonitor:
        base = psutil.Process().cpu_times()
        self._cpu_base = base.user + base.system
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self._cpu[psutil.Process().pid] -= self._cpu_base


def caption_pairs_unordered(labels: CaptionSets) -> int:
    """Caption pairs over all unordered pairs of distinct images: ((sum c)^2 - sum c^2) / 2."""
    c = np.diff(labels.caption_offsets).astype(np.int64)
    return int((c.sum() ** 2 - (c**2).sum()) // 2)


def gensim_per_pair(coco: CaptionSets, n_pairs: int, repeats: int, seed: int) -> tuple[float, float]:
    """Median seconds per caption pair of gensim's ``wmdistance`` and of our ``wmd_pairs`` (same pairs)."""
    kv = KeyedVectors(vector_size=coco.vectors.shape[1])
    kv.add_vectors(coco.vocab.tolist(), coco.vectors)  # the same GloVe rows; gensim normalises them itself
    rng = np.random.default_rng(seed)
    i, j = rng.integers(0, coco.n_captions, n_pairs), rng.integers(0, coco.n_captions, n_pairs)
    words = [coco.caption_words(k) for k in range(coco.n_captions)]
    tok, off, vec = coco.tokens, coco.token_offsets, unit_rows(coco.vectors)
    for k in range(20):  # warm-up: gensim's first call imports POT's backends; ours loads its compiled kernel
        kv.wmdistance(words[i[k]], words[j[k]])
    wmd_pairs(tok, off, vec, tok, off, vec, i[:2], j[:2])
    t_gensim, theirs = timed(lambda: [kv.wmdistance(words[a], words[b]) for a, b in zip(i, j)], repeats)
    t_ours, ours = timed(lambda: wmd_pairs(tok, off, vec, tok, off, vec, i, j), repeats)
    assert np.allclose(ours, theirs, rtol=1e-6), "our WMD and gensim's disagree"
    return t_gensim / n_pairs, t_ours / n_pairs


def block_kernels(coco: CaptionSets, rows: int, repeats: int, per_gensim: float) -> None:
    """One engine row block against all images: the two bounds, and the exact pairs its pruned kNN needs."""
    distance = CaptionSetWMD()
    block = coco.subset(slice(0, rows))
    distance.lower_bound_block(coco.subset(slice(0, 2)), coco)  # load the compiled kernels
    distance.pairs(coco, np.array([0]), np.array([1]))
    t_new, lower = timed(lambda: distance.lower_bound_block(block, coco), repeats)
    t0 = time.perf_counter()
    old = distance._lower_bound_pairwise(block, coco)
    t_old = time.perf_counter() - t0
    assert (lower <= old * (1 + 1e-6)).all() or np.mean(lower <= old * (1 + 1e-6)) > 0.99
    asked: list[tuple[np.ndarray, np.ndarray]] = []

    def exact(r: np.ndarray, c: np.ndarray) -> np.ndarray:
        asked.append((r, c))
        return distance.pairs(coco, r, c)

    pruned_topk(lower, exact, K, exclude=np.arange(rows))
    i = np.concatenate([r for r, _ in asked])
    j = np.concatenate([c for _, c in asked])
    t_pairs, fast = timed(lambda: distance.pairs(coco, i, j), repeats)
    t_plain, plain = timed(lambda: distance._pairs_plain(coco, i, j), repeats)
    assert np.array_equal(fast, plain)
    cap = np.diff(coco.caption_offsets)
    n_caption_pairs = int((cap[i] * cap[j]).sum())
    print(f"\none engine block: {rows} images x all {len(coco)} ({rows * len(coco):,} image pairs)")
    print(f"  lower_bound_block, linear RWMD   : {t_new:7.2f} s")
    print(f"  previous bound (per-pair RWMD/WCD): {t_old:7.2f} s   ({t_old / t_new:.0f}x slower, timed once)")
    print(
        f"  exact pairs of its pruned kNN     : {len(i):,} image pairs = {len(i) / (rows * (len(coco) - 1)):.1%}"
        f" ({n_caption_pairs:,} caption pairs)"
    )
    print(
        f"    pairs (caption WMDs skipped)     : {t_pairs:7.2f} s   ({t_pairs / n_caption_pairs * 1e6:.2f} us per "
        "caption pair)"
    )
    print(f"    plain (all caption WMDs)         : {t_plain:7.2f} s   ({t_plain / t_pairs:.2f}x slower)")
    print(f"    gensim, extrapolated             : {per_gensim * n_caption_pairs:7.0f} s")


def run_engine(labels: CaptionSets, dense: bool, out: Path) -> dict[str, float]:
    """One precompute on a new 2-worker LocalCluster; wall time, pruning, memory and CPU of the process tree."""
    with TreeMonitor() as monitor:
        t0 = time.perf_counter()
        precompute(
            labels, CaptionSetWMD(), out, dataset=f"coco{len(labels)}", k=K, dense=dense, n_workers=2, progress=False
        )
        wall = time.perf_counter() - t0
    n = len(labels)
    group = zarr.open_group(str(out), mode="r")
    exact = int(group["progress/exact_pairs"][:].sum())
    symmetric = bool(group.attrs["labeldist"].get("symmetric", False))
    return {
        "wall": wall,
        "exact": exact / (n * (n - 1)),
        "peak": monitor.peak,
        "cpu": monitor.cpu,
        "symmetric": symmetric,
    }


def report(task: str, labels: CaptionSets, got: dict[str, float], per_gensim: float, target: str) -> None:
    gensim = per_gensim * caption_pairs_unordered(labels)
    exact = got["exact"]
    if got["symmetric"]:  # dense, upper triangle computed once: exact pairs are about half, none pruned
        pruned = f"upper triangle: {exact:6.1%} of pairs"
    else:
        pruned = f"exact pairs {exact:6.1%} (pruned {1 - exact:6.1%})" if exact < 1 else "all pairs exact"
    print(
        f"  {task:<28}: {got['wall']:8.1f} s wall  {got['cpu']:8.0f} CPU s  peak {got['peak'] / 2**30:5.2f} GB  "
        f"{pruned:<34} | gensim {gensim:9.0f} s "
        f"= {gensim / 3600:5.1f} h  ({gensim / got['wall']:,.0f}x)  target {target}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 2000, 5000], help="kNN runs (images)")
    parser.add_argument("--dense", type=int, default=5000, help="images of the dense run (0: skip it)")
    parser.add_argument("--pairs", type=int, default=300, help="random caption pairs for the per-pair times")
    parser.add_argument("--block-rows", type=int, default=0, help="rows of the kernel block (0: the engine's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    coco = read_captions(DATA)
    print(f"{len(coco)} images, {coco.n_captions} captions, {len(coco.vocab)} words")
    per_gensim, per_ours = gensim_per_pair(coco, args.pairs, args.repeats, args.seed)
    print(f"\nper caption pair (median of {args.repeats} x {args.pairs} random pairs):")
    print(
        f"  gensim wmdistance: {per_gensim * 1e6:8.1f} us;  ours (wmd_pairs): {per_ours * 1e6:6.2f} us  "
        f"({per_gensim / per_ours:.0f}x)"
    )

    rows = args.block_rows or default_block_rows(len(coco))
    block_kernels(coco, rows, args.repeats, per_gensim)

    tmp = Path(tempfile.mkdtemp(prefix="bench-caption-knn-"))
    try:
        print(f"\nthrough the engine (new 2-worker LocalCluster each; gensim extrapolated, one core; k = {K}):")
        small = coco.subset(slice(0, 20))
        got = run_engine(small, dense=False, out=tmp / "fixed")
        report("fixed cost: kNN, N = 20", small, got, per_gensim, "-")
        for n in args.sizes:
            labels = coco.subset(slice(0, n))
            got = run_engine(labels, dense=False, out=tmp / f"knn{n}")
            report(f"kNN, N = {n:,}", labels, got, per_gensim, "<= 120 s" if n == 5000 else "-")
            shutil.rmtree(tmp / f"knn{n}")
        if args.dense:
            labels = coco.subset(slice(0, args.dense))
            got = run_engine(labels, dense=True, out=tmp / "dense")
            report(f"dense {args.dense:,} x {args.dense:,}", labels, got, per_gensim, "<= 900 s, <= 4 GB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
