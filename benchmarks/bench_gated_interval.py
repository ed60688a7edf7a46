r"""The coarse-to-fine sentence search's bounds: the one-pass numba interval against the NumPy formula, one run.

A coarse-to-fine store's kNN blocks bound each pair's distance from two float32 products (CBoW and BERT) through
the gate (:func:`labeldist.distances.sts_knn.gated_interval`); before it, the same float64 operations were a dozen
NumPy passes over each (rows x 4,096) chunk. This times whole search blocks (:func:`sts_knn.search_block`, 1,024
rows, k = 100) of the Karpathy-test captions both ways, alternating block by block, and checks that both give the
same lists, distances and exact counts.

    .venv/bin/python benchmarks/bench_gated_interval.py --model models/sts-bi-cosine --blocks 3

``--model`` is the bi-encoder (default: the packaged zero-shot MiniLM); the CBoW threshold is the calibrated
default's (0.728), the fill the default 0 (``below="zero"``). The embeddings are computed once first (cached in
LABELDIST_CACHE).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from labeldist.distances import sts_knn
from labeldist.distances.sts import SentenceRelevance
from labeldist.kinds.sentence_relevance import STSB_DIR
from labeldist.labels.sentences import read_caption_sentences
from labeldist.sts.cascade import calibrate_cbow_threshold
from labeldist.sts.models import PACKAGED
from labeldist.sts.stsb import read_sts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.sts.test_knn_search import gated_interval_numpy  # noqa: E402

COCO = "data/coco/coco_karpathy_test.json"


def interval_numpy(*args) -> None:
    """:func:`sts_knn.gated_interval`'s signature (``center`` and ``radius`` filled, last) over the NumPy formula, an
    operation a pass: the form before the kernel, the tests' oracle."""
    args[-2][:], args[-1][:] = gated_interval_numpy(*args[:-2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=PACKAGED, help="bi-encoder (default: %(default)s)")
    parser.add_argument("--blocks", type=int, default=3, help="blocks timed each way (default: %(default)s)")
    parser.add_argument("--limit", type=int, default=None, help="the first N captions (default: all 25,009)")
    args = parser.parse_args()

    labels = read_caption_sentences(COCO, limit=args.limit)
    threshold, _ = calibrate_cbow_threshold(read_sts(STSB_DIR / "sts-train.csv"))
    distance = SentenceRelevance("coarse_to_fine", model=args.model, cbow_threshold=threshold, below="zero")
    started = time.perf_counter()
    distance.embed_once(labels)
    print(f"{len(labels):,} captions embedded in {time.perf_counter() - started:.0f} s; CBoW threshold {threshold:.3f}")
    kernel = sts_knn.gated_interval

    sts_knn.search_block(distance, labels, 0, min(1024, len(labels)), 100)  # compiled, matrices made
    seconds: dict[str, list[float]] = {"numpy": [], "kernel": []}
    starts = np.linspace(1024, max(1024, len(labels) - 1024), args.blocks).astype(int)
    for start in starts:
        stop = min(start + 1024, len(labels))
        results = []
        for way, function in (("numpy", interval_numpy), ("kernel", kernel)):
            sts_knn.gated_interval = function
            began = time.perf_counter()
            results.append(sts_knn.search_block(distance, labels, start, stop, 100))
            seconds[way].append(time.perf_counter() - began)
        sts_knn.gated_interval = kernel
        (ia, da, ea), (ib, db, eb) = results
        same = np.array_equal(ia, ib) and np.array_equal(da, db) and ea == eb
        print(
            f"rows {start:,}-{stop:,}: NumPy {seconds['numpy'][-1]:.2f} s, kernel {seconds['kernel'][-1]:.2f} s, "
            f"{eb / (stop - start):.0f} exact pairs a row, lists {'identical' if same else 'DIFFER'}"
        )
    numpy_s, kernel_s = float(np.median(seconds["numpy"])), float(np.median(seconds["kernel"]))
    print(
        f"a 1,024-row block (median): kernel {kernel_s:.2f} s, NumPy formula {numpy_s:.2f} s: "
        f"{kernel_s / numpy_s:.2f}x the time"
    )


if __name__ == "__main__":
    main()
