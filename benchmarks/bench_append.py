"""Appending 10 % new items to a store (``labeldist.engine.append``) against a full recompute, on poses and on captions.

For each dataset the first N items are split into a base (the first round(N / 1.1) items) and the new items
(the rest, 10 % of the base). Each repeat, on one Dask LocalCluster of 2 single-threaded workers for all the
runs of a dataset (``client=``, ``progress=False``):

  (a) ``precompute`` of the base into a fresh store: setup, not part of the comparison (its time is printed);
  (b) ``append`` of the new items to that store: the figure;
  (c) ``precompute`` of all N items into another store: the baseline, measured in the same run (after the
      append in odd repeats, before the base in even ones, so that a drifting load favours neither).

It prints the wall time of (b) and (c) and their ratio (the median of each repeat's ratio), and the exact
distances each computed (``AppendResult.exact_pairs``; for the full recompute the sum of ``progress/exact_pairs``,
:func:`labeldist.store.exact_pairs_total`) and their ratio, beside the theoretical count of the append
(:func:`labeldist.engine.grow.appended_pairs`, no pruning) and of the full recompute counted alike (N^2, or
N (N + 1) / 2 in the symmetric mode; the engine's own counts include the diagonal squares of its row blocks whole).
Every repeat checks that the appended store equals the full recompute: same ids, same labels digest, kNN indices
identical, kNN distances and dense matrix equal (bit for bit); the script fails otherwise.

Stores: the default, dense (a dense matrix and kNN lists, k = 100). For poses (``PoseDistance``, not symmetric)
that is the plain mode, every ordered pair computed; for captions (``CaptionSetWMD``, symmetric) the symmetric
mode, the upper triangle computed and mirrored. ``--captions-knn-only`` adds a kNN-only caption run, where both
jobs prune with the caption-set lower bound, so their exact pairs are far below the formula's. Captions: the first
``--captions-n`` images of the 5,000 of the Karpathy test split (2,200 by default: a full dense recompute then
takes 1-2 minutes on the 2-core development machine).

For 10 % new items the theoretical share of pairs is about 0.17 in both modes: plain, M (N + M) + N M over
(N + M)^2 = 0.21 / 1.21; symmetric, N M + M^2 / 2 over (N + M)^2 / 2 = 0.105 / 0.605 (N old items, M = N / 10).

    .venv/bin/python benchmarks/bench_append.py [--datasets poses captions] [--captions-n 2200] [--repeat R]
        [--captions-knn-only] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labeldist.distances.base import LabelDistance
from labeldist.distances.caption_sets import CaptionSetWMD
from labeldist.distances.pose import PoseDistance
from labeldist.engine import dask_client, precompute
from labeldist.engine.grow import append, appended_pairs
from labeldist.labels.base import LabelSet
from labeldist.labels.captions import read_captions
from labeldist.labels.pose_files import read_mpii_csv
from labeldist.store import StoreReader, exact_pairs_total

ROOT = Path(__file__).resolve().parents[1]
POSES = ROOT / "data" / "mpii" / "mpii_valid_2958.csv"
CAPTIONS = ROOT / "data" / "coco" / "coco_karpathy_test.json"
K = 100


@dataclass
class Run:
    """One repeat of one dataset and mode."""

    base_s: float
    append_s: float
    full_s: float
    append_pairs: int
    full_pairs: int
    load: tuple[float, float]  # load average before and after


@dataclass
class Case:
    name: str
    labels: LabelSet
    distance: Callable[[], LabelDistance]
    dense: bool
    repeats: int


def split(n: int) -> tuple[int, int]:
    """The base (round(n / 1.1) items) and the new items (the rest) of ``n`` items."""
    base = round(n / 1.1)
    return base, n - base


def full_pairs_formula(n: int, symmetric_dense: bool) -> int:
    """Distances a full recompute computes without pruning, counted as :func:`labeldist.engine.grow.appended_pairs`
    counts an append's: every row against every item, or in the symmetric dense mode the upper triangle with its
    diagonal. (The engine computes the diagonal squares of its row blocks whole, and counts them so in
    ``progress/exact_pairs``: a few per cent more, in both jobs.)"""
    return n * (n + 1) // 2 if symmetric_dense else n * n


def check_equal(appended: str, full: str) -> str:
    """AssertionError unless the two stores hold the same items, labels, kNN lists and dense matrix; a line saying
    what was compared."""
    a, b = StoreReader(appended), StoreReader(full)
    assert a.n_items == b.n_items, (a.n_items, b.n_items)
    assert np.array_equal(a.ids, b.ids), "ids differ"
    assert a.manifest["labels_sha256"] == b.manifest["labels_sha256"], "labels differ"
    (ai, ad), (bi, bd) = a.knn(), b.knn()
    assert np.array_equal(ai, bi), f"kNN indices differ in {int((ai != bi).any(axis=1).sum())} rows"
    assert np.array_equal(ad, bd), f"kNN distances differ: largest {float(np.abs(ad - bd).max())}"
    what = f"ids, labels, kNN indices and distances ({a.n_items:,} x {a.k}) identical"
    assert a.has_dense == b.has_dense
    if a.has_dense:
        da, db = a.dense_rows(0, a.n_items), b.dense_rows(0, b.n_items)
        assert np.array_equal(da, db), f"dense differs in {int((da != db).sum())} entries"
        what += f", dense {a.n_items:,} x {a.n_items:,} equal"
    return what


def one_repeat(case: Case, client, where: str, n_base: int, full_first: bool) -> tuple[Run, str]:
    base_labels, new_labels = case.labels.subset(slice(0, n_base)), case.labels.subset(slice(n_base, None))
    grown, full = os.path.join(where, "appended"), os.path.join(where, "full")
    load0 = os.getloadavg()[0]
    common = {"dataset": "bench", "k": K, "dense": case.dense, "client": client, "progress": False}

    def recompute() -> float:
        t0 = time.perf_counter()
        precompute(case.labels, case.distance(), full, **common)
        return time.perf_counter() - t0

    full_s = recompute() if full_first else 0.0
    t0 = time.perf_counter()
    precompute(base_labels, case.distance(), grown, **common)
    base_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = append(grown, new_labels, client=client, progress=False)
    append_s = time.perf_counter() - t0
    full_s = full_s if full_first else recompute()
    run = Run(base_s, append_s, full_s, result.exact_pairs, exact_pairs_total(full), (load0, os.getloadavg()[0]))
    assert result.n_old == n_base and result.n_new == len(new_labels) and result.generation == 2, result
    checked = check_equal(grown, full)
    shutil.rmtree(grown)
    shutil.rmtree(full)
    return run, checked


def run_case(case: Case, client, out_dir: str) -> list[Run]:
    n = len(case.labels)
    n_base, n_new = split(n)
    symmetric = case.dense and case.distance().symmetric
    mode = ("dense, symmetric" if symmetric else "dense, plain") if case.dense else "kNN only"
    print(f"\n{case.name}, {mode}: N = {n:,} = {n_base:,} base + {n_new:,} new, k = {K}, {case.repeats} repeat(s)")
    runs = []
    for r in range(case.repeats):
        where = os.path.join(out_dir, f"{case.name}-{'dense' if case.dense else 'knn'}-{r}")
        run, checked = one_repeat(case, client, where, n_base, full_first=r % 2 == 1)
        runs.append(run)
        print(
            f"  repeat {r + 1}: base {run.base_s:.1f} s; append {run.append_s:.2f} s, {run.append_pairs:,} pairs; "
            f"full {run.full_s:.2f} s, {run.full_pairs:,} pairs; time ratio {run.append_s / run.full_s:.3f}; "
            f"load {run.load[0]:.2f} -> {run.load[1]:.2f}{'; full recompute first' if r % 2 else ''}"
        )
        print(f"    appended store equals the full recompute: {checked}")
    return runs


def table_row(case: Case, runs: list[Run]) -> str:
    n = len(case.labels)
    n_base, n_new = split(n)
    symmetric = case.dense and case.distance().symmetric
    mode = ("dense (symmetric)" if symmetric else "dense (plain)") if case.dense else "kNN only (pruned)"
    append_s = statistics.median(r.append_s for r in runs)
    full_s = statistics.median(r.full_s for r in runs)
    base_s = statistics.median(r.base_s for r in runs)
    ratios = [r.append_s / r.full_s for r in runs]  # each repeat's two runs were minutes apart, at one load
    each = ", ".join(f"{ratio:.3f}" for ratio in ratios)
    pairs_a, pairs_f = runs[-1].append_pairs, runs[-1].full_pairs
    theory_a, theory_f = appended_pairs(n_base, n_new, symmetric), full_pairs_formula(n, symmetric)
    return (
        f"| {case.name} | {mode} | {n:,} = {n_base:,} + {n_new:,} | {base_s:.1f} s | {append_s:.2f} s | "
        f"{full_s:.2f} s | **{statistics.median(ratios):.3f}** ({each}) | {pairs_a:,} | {pairs_f:,} | "
        f"**{pairs_a / pairs_f:.3f}** | {theory_a:,} / {theory_f:,} = {theory_a / theory_f:.3f} | "
        f"{len(runs)} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", choices=["poses", "captions"], default=["poses", "captions"])
    parser.add_argument("--captions-n", type=int, default=2200, help="caption images (of 5,000): base + new")
    parser.add_argument(
        "--repeat", type=int, help="repeats of each run, medians reported (default: 3 for poses, 1 for captions)"
    )
    parser.add_argument("--captions-knn-only", action="store_true", help="also a kNN-only caption run")
    parser.add_argument("--out-dir", help="where the stores are built (default: a temporary folder, removed)")
    args = parser.parse_args()

    print(f"cpus: {os.cpu_count()}, load average at start: {os.getloadavg()[0]:.2f}")
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="bench-append-")
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    try:
        for dataset in args.datasets:
            if dataset == "poses":
                cases = [Case("poses", read_mpii_csv(POSES), PoseDistance, True, args.repeat or 3)]
            else:
                coco = read_captions(CAPTIONS)
                labels = coco.subset(slice(0, args.captions_n))
                cases = [Case("captions", labels, CaptionSetWMD, True, args.repeat or 1)]
                if args.captions_knn_only:
                    cases.append(Case("captions", labels, CaptionSetWMD, False, args.repeat or 1))
            with dask_client(n_workers=2) as client:
                # warm-up: every worker loads the compiled kernels once, as a standing cluster has
                warm = cases[0].labels.subset(slice(0, 150))
                precompute(
                    warm,
                    cases[0].distance(),
                    os.path.join(out_dir, f"warm-{dataset}"),
                    dataset="bench",
                    k=K,
                    client=client,
                    progress=False,
                )
                shutil.rmtree(os.path.join(out_dir, f"warm-{dataset}"))
                for case in cases:
                    rows.append(table_row(case, run_case(case, client, out_dir)))
    finally:
        if not args.out_dir:
            shutil.rmtree(out_dir, ignore_errors=True)

    print(
        f"\nload average at the end: {os.getloadavg()[0]:.2f}; times are medians, the time ratio the median of each "
        "repeat's own (in brackets); pairs of the last repeat (the same in every repeat)"
    )
    print(
        "\n| dataset | store | N = base + new | (a) base precompute | (b) append | (c) full recompute | "
        "time (b) / (c) | exact pairs (b) | exact pairs (c) | pairs (b) / (c) | theory (b) / (c), no pruning | "
        "repeats |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
