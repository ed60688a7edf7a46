"""Caption WMD: our batched numba kernel against gensim's ``KeyedVectors.wmdistance``, same tokens, same run.

Prints, measured in the same run on real COCO captions (Karpathy test split, GloVe 6B 50-d, unit vectors as
gensim's default ``norm=True``):
  - per caption pair: ``wmd_pairs`` (one batched call over all sampled pairs), ``wmd`` called once per pair
    from Python, and gensim's ``wmdistance`` in a loop — medians over repeats — and the ratios;
  - the largest relative difference between ours and gensim on those pairs;
  - one ``CaptionSetWMD.block`` of rows x cols images (timed once) and its ``lower_bound_block``, against
    what gensim would need for the same caption pairs, *extrapolated* from its measured per-pair time.
Target: at least 50x faster than gensim per caption pair.

    .venv/bin/python benchmarks/bench_wmd_kernel.py [--pairs 2000] [--repeats 5] [--rows 100] [--cols 5000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from gensim.models import KeyedVectors
from timing import timed  # benchmarks/timing.py (scripts run from benchmarks/)

from labeldist.distances.caption_sets import CaptionSetWMD
from labeldist.distances.wmd import unit_rows, wmd, wmd_pairs
from labeldist.labels.captions import read_captions

DATA = Path(__file__).resolve().parents[1] / "data" / "coco" / "coco_karpathy_test.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=2000, help="random caption pairs timed")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, default=100, help="row images of the block")
    parser.add_argument("--cols", type=int, default=5000, help="column images of the block")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    t0 = time.perf_counter()
    coco = read_captions(DATA)
    print(
        f"{len(coco)} images, {coco.n_captions} captions, {len(coco.vocab)} words; read in "
        f"{time.perf_counter() - t0:.1f} s"
    )
    tokens, offsets = coco.tokens, coco.token_offsets
    vectors = unit_rows(coco.vectors)
    kv = KeyedVectors(vector_size=coco.vectors.shape[1])
    kv.add_vectors(coco.vocab.tolist(), coco.vectors)  # the same GloVe rows; gensim normalises them itself

    rng = np.random.default_rng(args.seed)
    i = rng.integers(0, coco.n_captions, args.pairs)
    j = rng.integers(0, coco.n_captions, args.pairs)
    words = [coco.caption_words(k) for k in range(coco.n_captions)]
    bags = []
    for k in range(coco.n_captions):
        ids, counts = np.unique(tokens[offsets[k] : offsets[k + 1]], return_counts=True)
        bags.append((vectors[ids].astype(np.float64), counts / counts.sum()))

    # warm-ups, untimed: our compiled kernel loads; gensim's first wmdistance imports POT's backends (seconds)
    wmd_pairs(tokens, offsets, vectors, tokens, offsets, vectors, i[:2], j[:2])
    wmd(*bags[0], *bags[1])
    for k in range(20):
        kv.wmdistance(words[i[k]], words[j[k]])
    t_ours, ours = timed(lambda: wmd_pairs(tokens, offsets, vectors, tokens, offsets, vectors, i, j), args.repeats)
    t_one, _ = timed(lambda: [wmd(*bags[k], *bags[l]) for k, l in zip(i, j)], args.repeats)
    t_gensim, theirs = timed(lambda: np.array([kv.wmdistance(words[k], words[l]) for k, l in zip(i, j)]), args.repeats)
    per_ours, per_one, per_gensim = t_ours / args.pairs, t_one / args.pairs, t_gensim / args.pairs
    err = np.max(np.abs(ours - theirs) / np.maximum(np.abs(theirs), 1e-12))
    print(f"\n{args.pairs} random caption pairs (median of repeats):")
    print(f"  ours, batched   wmd_pairs : {per_ours * 1e6:9.2f} us/pair")
    print(f"  ours, per call  wmd       : {per_one * 1e6:9.2f} us/pair   (Python call overhead included)")
    print(f"  gensim          wmdistance: {per_gensim * 1e6:9.2f} us/pair")
    print(f"  speed-up: batched {per_gensim / per_ours:.0f}x, per call {per_gensim / per_one:.1f}x  (target >= 50x)")
    print(f"  max relative difference ours vs gensim: {err:.1e}")

    rows = coco.subset(slice(0, args.rows))
    cols = coco.subset(rng.permutation(len(coco))[: args.cols])
    n_pairs = rows.n_captions * cols.n_captions
    distance = CaptionSetWMD()
    t0 = time.perf_counter()
    w = distance.block(rows, cols)
    t_block = time.perf_counter() - t0
    t0 = time.perf_counter()
    lb = distance.lower_bound_block(rows, cols)
    t_lb = time.perf_counter() - t0
    print(f"\none CaptionSetWMD block, {len(rows)} x {len(cols)} images = {n_pairs:,} caption pairs (timed once):")
    print(f"  ours  block            : {t_block:8.1f} s   ({t_block / n_pairs * 1e6:.2f} us per caption pair)")
    print(f"  ours  lower_bound_block: {t_lb:8.1f} s   (bound / exact: mean {np.mean(lb / np.maximum(w, 1e-12)):.2f})")
    print(
        f"  gensim, extrapolated   : {per_gensim * n_pairs:8.0f} s   ({per_gensim * 1e6:.0f} us x {n_pairs:,} pairs; "
        "not run)"
    )
    print(f"  speed-up: {per_gensim * n_pairs / t_block:.0f}x")


if __name__ == "__main__":
    main()
