"""The all-pairs WMD and RWMD kernels (``wmd_many``, ``rwmd_many``: each text of A against each of B, its words'
costs computed once per text of A and gathered per pair), beside the listed-pairs kernel ``wmd_pairs`` over the same
pairs in the same run (it computes each pair's costs afresh). Fixed random texts of 5-12 words over a 3,000-word
50-d table, so that two trees can be compared on identical input: the sums printed must be equal.

    .venv/bin/python benchmarks/bench_wmd_many.py [--texts 300] [--repeats 5]
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import timed  # benchmarks/timing.py (scripts run from benchmarks/)

from labeldist.distances.wmd import wmd_many, wmd_pairs
from labeldist.distances.wmd_bounds import rwmd_many


def texts(rng: np.random.Generator, n: int, words: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` texts of 5-12 random words: their tokens and offsets."""
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(rng.integers(5, 13, n), out=offsets[1:])
    return rng.integers(0, words, offsets[-1]).astype(np.int64), offsets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    table = rng.normal(size=(3000, 50)).astype(np.float32)
    a, b = texts(rng, args.texts, len(table)), texts(rng, args.texts, len(table))
    i, j = (x.ravel() for x in np.meshgrid(np.arange(args.texts), np.arange(args.texts), indexing="ij"))
    pairs = args.texts**2
    runs = {
        "wmd_many (shared gather)": lambda: wmd_many(*a, table, *b, table),
        "rwmd_many (shared gather)": lambda: rwmd_many(*a, table, *b, table),
        "wmd_pairs, same pairs (baseline)": lambda: wmd_pairs(*a, table, *b, table, i, j),
    }
    print(f"{pairs:,} pairs of texts, median of {args.repeats}")
    for name, run in runs.items():
        run()  # compiled, or loaded from numba's cache
        seconds, out = timed(run, args.repeats)
        per_pair = seconds / pairs * 1e6
        print(f"  {name:34s} {seconds * 1e3:8.1f} ms  {per_pair:6.2f} us/pair  sum {float(np.sum(out)):.6f}")


if __name__ == "__main__":
    main()
