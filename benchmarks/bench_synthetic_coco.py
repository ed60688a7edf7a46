"""The realism check of the synthetic COCO-2014 maker (:mod:`labeldist.labels.synthetic_coco`): does a synthetic
set cost an exact caption-set kNN what a real one does?

At 5,000 images, in the same run:
  - the real Karpathy test split (``data/coco/coco_karpathy_test.json``, the baseline);
  - 5,000 synthetic children only (``make_coco_like(source, 10,000, seed)[5000:]``: one child of every real
    image, the real ones dropped);
each through ``labeldist precompute captions FILE --out DIR --knn-only --k 100 --no-progress`` (a fresh
LocalCluster, one worker per core), with the wall time, the CPU seconds of the command and its workers, and the
pruning figures read back from the store: ``progress/exact_pairs`` (the caption-set WMDs each row block
computed; ``labeldist.store.exact_pairs_total`` sums them; ``labeldist info`` does not print them) and the items
(``labeldist info --json``): exact pairs per item (exact_pairs / N) and the share of
ordered pairs pruned (1 - exact_pairs / (N (N - 1))).

Beside them, for the real split, the 5,000 synthetic images and the full COCO-2014 size (123,287 images, the
real ones included; ``--full 0`` skips it): captions, the duplicate-caption share (1 - distinct / all, texts
compared lower-case with spaces and a final full stop ignored), mean words (``[a-z]+``) and mean WMD tokens
(stop words and words without a GloVe vector dropped, as the caption kind does) per caption, the distinct
WMD tokens, and the time to make the set.

    flock /tmp/heavy.lock .venv/bin/python benchmarks/bench_synthetic_coco.py [--seed 0] [--full 123287]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from labeldist.labels.coco import load_json
from labeldist.labels.synthetic_coco import (
    DEFAULT_MIN_SIMILARITY,
    DEFAULT_SOURCE,
    DEFAULT_SWAP_BORROWED,
    DEFAULT_WORD_SWAP,
    make_coco_like,
    write_entries,
)
from labeldist.labels.text import Tokenizer, default_word_vectors
from labeldist.store import exact_pairs_total

K = 100
LABELDIST = [sys.executable, "-c", "import sys; from labeldist.cli import main; sys.exit(main())"]


def children_cpu() -> float:
    """User + system CPU seconds of the finished, waited-for child processes (and theirs) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def knn_store(path: Path, out: Path) -> dict[str, Any]:
    """Build the caption kNN store of ``path`` at ``out``; its wall, CPU and pruning figures."""
    cpu = children_cpu()
    start = time.perf_counter()
    cmd = [*LABELDIST, "precompute", "captions", str(path), "--out", str(out), "--knn-only", "--k", str(K)]
    subprocess.run([*cmd, "--no-progress"], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    cpu = children_cpu() - cpu
    info = json.loads(subprocess.run([*LABELDIST, "info", "--json", str(out)], check=True, capture_output=True).stdout)
    n = int(info["manifest"]["n_items"])
    exact = exact_pairs_total(str(out))  # the sum of the store's progress/exact_pairs (one count per row block)
    return {
        "n": n,
        "wall": wall,
        "cpu": cpu,
        "exact_pairs": exact,
        "per_item": exact / n,
        "pruned": 1 - exact / (n * (n - 1)),
    }


def caption_stats(entries: list[dict[str, Any]]) -> dict[str, float]:
    """Captions, duplicate share, mean words and WMD tokens per caption, distinct WMD tokens."""
    tokenizer, vectors = Tokenizer(), default_word_vectors()
    captions = [c for e in entries for c in e["caption"]]
    normal = [re.sub(r"\s+", " ", c.lower()).strip().rstrip(".").strip() for c in captions]
    words = tokens = 0
    vocabulary: set[str] = set()
    for c in captions:
        words += len(re.findall(r"[a-z]+", c.lower()))
        kept = [w for w in tokenizer.words(c) if w in vectors]
        tokens += len(kept)
        vocabulary.update(kept)
    return {
        "images": len(entries),
        "captions": len(captions),
        "duplicates": 1 - len(set(normal)) / len(captions),
        "words": words / len(captions),
        "tokens": tokens / len(captions),
        "vocabulary": len(vocabulary),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--word-swap", type=float, default=DEFAULT_WORD_SWAP)
    parser.add_argument("--min-similarity", type=float, default=DEFAULT_MIN_SIMILARITY)
    parser.add_argument("--swap-borrowed", action=argparse.BooleanOptionalAction, default=DEFAULT_SWAP_BORROWED)
    parser.add_argument("--full", type=int, default=123_287, help="also the stats of this size (0: skip)")
    parser.add_argument("--no-knn", action="store_true", help="caption statistics only")
    args = parser.parse_args()
    made_with = {
        "word_swap": args.word_swap,
        "min_similarity": args.min_similarity,
        "swap_borrowed": args.swap_borrowed,
    }
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; seed {args.seed}, {made_with}", flush=True)

    source = load_json(DEFAULT_SOURCE)
    start = time.perf_counter()
    synthetic = make_coco_like(source, 2 * len(source), args.seed, **made_with)[len(source) :]
    made = time.perf_counter() - start
    sets = {"real test split": (source, 0.0), "synthetic children": (synthetic, made)}
    if args.full:
        start = time.perf_counter()
        full = make_coco_like(source, args.full, args.seed, **made_with)
        sets[f"synthetic, {args.full:,} in all"] = (full, time.perf_counter() - start)

    print(
        "\n| set | images | captions | duplicate captions | words / caption | WMD tokens / caption | "
        "distinct WMD tokens | made in |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, (entries, seconds) in sets.items():
        s = caption_stats(entries)
        print(
            f"| {name} | {s['images']:,} | {s['captions']:,} | {s['duplicates']:.2%} | {s['words']:.2f} | "
            f"{s['tokens']:.2f} | {s['vocabulary']:,} | {seconds:.1f} s |",
            flush=True,
        )
    if args.no_knn:
        return

    folder = Path(tempfile.mkdtemp(prefix="bench_synthetic_coco_"))
    try:
        synthetic_file = folder / "synthetic_5000.json"
        write_entries(synthetic, synthetic_file)
        print(f"\ncaption-set WMD kNN, k = {K}, --knn-only")
        print("| set | N | wall | CPU | exact pairs | exact pairs per item | pruned |")
        print("|---|---|---|---|---|---|---|")
        for name, path in (("real test split", DEFAULT_SOURCE), ("synthetic children", synthetic_file)):
            r = knn_store(path, folder / f"store-{len(name)}")
            print(
                f"| {name} | {r['n']:,} | {r['wall']:.1f} s | {r['cpu']:.0f} s | {r['exact_pairs']:,} | "
                f"{r['per_item']:.0f} | {r['pruned']:.2%} |",
                flush=True,
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
