"""How close each caption-set bound lets an exact kNN search come to k: the floor each bound sets, against whole rows.

Any search that is exact with a lower bound L computes W for at least the pairs with L <= the row's k-th distance
D_k (a pair below it cannot be ruled out). On R random rows of N caption sets (the shipped split, or synthetic
COCO for N > 5,000, as bench_scale.py makes them), in one run:

- W of each row against every image (``CaptionSetWMD.pairs``), D_k from it;
- the pairs at or below D_k for each bound of the search (``labeldist.distances.caption_bounds``): the image-word
  bound, the caption-level bound (Eq. 13 over relaxed WMDs), the reduction bound (Eq. 13 over Hungarian reduction
  bounds), and for (1 - delta) W, a bound delta from W everywhere (what a tighter bound could reach);
- the exact W that ``knn_block`` computes for the same row (its search), and whether its list equals the whole
  row's.

    .venv/bin/python benchmarks/bench_caption_bounds.py [--images 40000] [--rows 8] [--k 100] [--work DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from bench_scale import make_inputs  # noqa: E402  (sibling script)

from labeldist.core.knn import topk_rows
from labeldist.distances.caption_bounds import (
    chunk_tables,
    image_word_bounds,
    pair_set_reduction,
    pair_set_rwmd,
)
from labeldist.distances.caption_sets import CaptionSetWMD
from labeldist.labels.captions import read_captions

DELTAS = (0.01, 0.02, 0.03, 0.05)


def row_floors(d: CaptionSetWMD, labels, r: int, k: int) -> dict[str, int]:
    """The pairs of row ``r`` at or below its k-th distance under each bound, and the search's exact W."""
    n = len(labels)
    prepared = d._prepared(labels)
    bags, words = prepared.bags(labels), prepared.image_words(labels)
    cols = np.delete(np.arange(n), r)
    exact = d.pairs(labels, np.full(n - 1, r), cols)
    kth = np.partition(exact, k - 1)[k - 1]
    tables = chunk_tables(bags, words, bags.local, labels.caption_offsets, r, r + 1, bags.vectors)
    zeros = np.zeros(n - 1, dtype=np.int64)
    bounds = {
        "image-word": image_word_bounds(tables, words)[0, cols].astype(np.float64),
        "caption-level (relaxed WMD)": pair_set_rwmd(tables, bags, labels.caption_offsets, zeros, cols),
        "reduction": pair_set_reduction(tables, bags, labels.caption_offsets, zeros, cols),
    }
    out = {name: int((b <= kth).sum()) for name, b in bounds.items()}
    for delta in DELTAS:
        out[f"(1 - {delta}) W"] = int((exact * (1 - delta) <= kth).sum())
    idx, dist, computed = d.knn_block(labels, r, r + 1, k)
    whole = np.full((1, n), np.inf, dtype=np.float32)
    whole[0, cols] = exact
    ref_idx, ref_dist = topk_rows(whole, k)
    out["the search's exact W"] = computed
    out["equal to the whole row"] = int(np.array_equal(idx, ref_idx) and np.array_equal(dist, ref_dist))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=40_000)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="caption-bounds-"))
    work.mkdir(parents=True, exist_ok=True)
    file, _ = make_inputs(work, args.images)
    labels = read_captions(file)
    d = CaptionSetWMD()
    rows = np.random.default_rng(args.seed).choice(len(labels), args.rows, replace=False)
    per_row = [row_floors(d, labels, int(r), args.k) for r in rows]
    print(f"{len(labels):,} caption sets, k = {args.k}, rows {rows.tolist()} (seed {args.seed})\n")
    print("| pairs a row at or below D_k under | mean | min | max |")
    print("|---|---|---|---|")
    for name in per_row[0]:
        values = [p[name] for p in per_row]
        if name == "equal to the whole row":
            print(f"| {name} | {sum(values)} of {len(values)} | | |")
        else:
            print(f"| {name} | {np.mean(values):.0f} | {min(values)} | {max(values)} |")


if __name__ == "__main__":
    main()
