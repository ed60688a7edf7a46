"""Layout distance (1 - mIoU) over generated LSUN type-5 maps: the block kernel against a per-pair loop.

Prints, measured in the same run (medians of repeats):
  - the time to generate the maps;
  - ``LayoutMIoU.block`` on all x all (the full N x N matrix; equal row and column maps: upper triangle only);
  - the same matrix with the columns permuted, so every entry is computed (what an off-diagonal tile pays);
  - the per-pair reference (boolean masks, ``LayoutMIoU.reference``) in a Python loop over a random sample of
    pairs, extrapolated to all N x N entries and to the N (N - 1) / 2 distinct pairs;
  - the largest difference between the block and the reference on the sampled pairs.
Target: the block kernel at least 100x faster than the loop.

    .venv/bin/python benchmarks/bench_layout.py [--n 2000] [--size 128] [--pairs 4000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from timing import timed  # benchmarks/timing.py (scripts run from benchmarks/)

from labeldist.distances.layout import LayoutMIoU
from labeldist.labels.lsun_rooms import generate_layouts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000, help="number of maps")
    parser.add_argument("--size", type=int, default=128, help="maps are size x size pixels")
    parser.add_argument("--type", type=int, default=5, help="LSUN layout type")
    parser.add_argument("--pairs", type=int, default=4000, help="pairs timed in the per-pair loop")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    t0 = time.perf_counter()
    maps = generate_layouts(args.n, layout_type=args.type, height=args.size, width=args.size, seed=args.seed)
    t_gen = time.perf_counter() - t0
    n = len(maps)
    distance = LayoutMIoU()
    print(f"{n} LSUN type-{args.type} layout maps of {args.size} x {args.size}, generated in {t_gen:.2f} s")

    distance.block(maps.subset(slice(0, 2)), maps.subset(slice(0, 3)))  # load the compiled kernel untimed
    t_block, full = timed(lambda: distance.block(maps, maps), args.repeats)
    perm = np.random.default_rng(args.seed).permutation(n)
    shuffled = maps.subset(perm)
    t_general, full_perm = timed(lambda: distance.block(maps, shuffled), args.repeats)
    assert np.array_equal(full_perm, full[:, perm])

    rng = np.random.default_rng(args.seed + 1)
    i, j = rng.integers(0, n, args.pairs), rng.integers(0, n, args.pairs)

    def loop() -> np.ndarray:
        return np.array([distance.reference(maps, a, maps, b) for a, b in zip(i.tolist(), j.tolist())])

    t_loop, ref = timed(loop, args.repeats)
    per_pair = t_loop / args.pairs
    loop_all, loop_distinct = per_pair * n * n, per_pair * n * (n - 1) / 2
    err = float(np.abs(full[i, j] - ref).max())

    rows = [
        (f"block kernel, full {n} x {n} matrix", f"{t_block:9.2f} s", "equal rows and columns: upper triangle"),
        ("block kernel, columns permuted", f"{t_general:9.2f} s", "every entry computed"),
        ("per-pair loop (reference)", f"{per_pair * 1e6:9.1f} us", f"per pair, timed on {args.pairs} random pairs"),
        (f"  extrapolated to all {n * n} entries", f"{loop_all:9.1f} s", ""),
        (f"  extrapolated to the {n * (n - 1) // 2} distinct pairs", f"{loop_distinct:9.1f} s", ""),
        ("max |block - reference| on those pairs", f"{err:9.1e}", ""),
        ("speed-up, same entries, symmetric block", f"{loop_all / t_block:9.1f} x", ""),
        ("speed-up, same entries, every entry computed", f"{loop_all / t_general:9.1f} x", ""),
        ("speed-up, loop over distinct pairs only", f"{loop_distinct / t_block:9.1f} x", "target: at least 100x"),
    ]
    print(f"times are medians of {args.repeats} repeats")
    for label, value, note in rows:
        print(f"{label:<48} {value:<13} {note}".rstrip())


if __name__ == "__main__":
    main()
