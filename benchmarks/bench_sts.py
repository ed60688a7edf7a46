r"""Sentence relevance: STS-B dev correlations of every scorer, and relevance stores of the Karpathy-test captions.

Three parts (run each under ``nice -n 19``; the machine is shared):

``dev``: Pearson and Spearman on STS-B dev (1,500 pairs, gold / 5) of CBoW, the zero-shot bi-encoder, the
fine-tuned models, coarse-to-fine at the calibrated CBoW threshold (both fills), the paper's 0.8 threshold, a
pass-share sweep, and the cascade; with the transformer calls each needs. Every headline row is computed with
``SentenceRelevance.pairs`` — what a store computes — and equals ``labeldist sts eval`` with the same options.

    nice -n 19 .venv/bin/python benchmarks/bench_sts.py dev --bi models/sts-bi-cosent models/sts-bi-cosine \
        --cross models/sts-cross-bce-2000 --best models/sts-bi-cosine --cascade-bi models/sts-bi-cosine

``corpus``: one top-100 kNN-only store of the 25,009 captions through the engine on a 2-worker LocalCluster,
as ``labeldist precompute sentences data/coco/coco_karpathy_test.json --knn-only --k 100 <scorer options>``
runs it; prints wall time and the transformer calls the workers made.

    nice -n 19 .venv/bin/python benchmarks/bench_sts.py corpus --scorer coarse_to_fine --model models/sts-bi-cosine

``estimate``: for the modes too slow to run on the whole corpus (a cross-encoder behind the CBoW gate): the
pairs that pass the gate and the measured cross-encoder throughput, hence the calls and the time they would take.

    nice -n 19 .venv/bin/python benchmarks/bench_sts.py estimate --cross models/sts-cross-bce-2000
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.distances.sts import SentenceRelevance, cbow_units
from labeldist.kinds.sentence_relevance import add_scorer_options, build_distance, sentence_labels
from labeldist.sts.cascade import calibrate_cbow_threshold, combine
from labeldist.sts.fit import correlations
from labeldist.sts.models import PACKAGED
from labeldist.sts.stsb import read_sts

ROOT = Path(__file__).resolve().parents[1]
TRAIN, DEV = ROOT / "labeldist/sts/data/sts-train.csv", ROOT / "labeldist/sts/data/sts-dev.csv"
COCO = ROOT / "data/coco/coco_karpathy_test.json"


def _row(name: str, relevance: np.ndarray, gold: np.ndarray, calls: str, seconds: float | None = None) -> str:
    c = correlations(relevance, gold)
    sec = "" if seconds is None else f"{seconds:.0f}"
    return f"| {name} | {c['pearson']:.4f} | {c['spearman']:.4f} | {calls} | {sec} |"


def _bert_calls(model: str, gate: np.ndarray, i: np.ndarray, j: np.ndarray) -> str:
    """Transformer calls for the gated pairs: sentences embedded (bi) or pair orders scored (cross)."""
    from labeldist.sts.models import architecture, resolve_model

    if architecture(resolve_model(model)) == "bi":
        return f"{len(np.unique(np.concatenate([i[gate], j[gate]])))} sentences"
    pairs = {frozenset((a, b)) for a, b in zip(i[gate], j[gate]) if a != b}
    return f"{2 * len(pairs)} pair orders"


def dev_part(args: argparse.Namespace) -> None:
    dev, train = read_sts(DEV), read_sts(TRAIN)
    labels, i, j = sentence_labels(list(dev.first), list(dev.second), dev.source)
    gold = dev.relevance
    print(f"STS-B dev: {len(dev)} pairs, {len(labels)} distinct sentences\n")
    print("| scorer | Pearson | Spearman | transformer calls | seconds |\n|---|---|---|---|---|")
    cbow = 1.0 - SentenceRelevance("cbow").pairs(labels, i, j)
    print(_row("CBoW (GloVe 6B-50d, averaged, cosine)", cbow, gold, "0"))
    models = {"bi-encoder all-MiniLM-L6-v2, zero-shot": PACKAGED}
    models |= {f"bi-encoder fine-tuned ({m})": m for m in args.bi} | {f"cross-encoder ({m})": m for m in args.cross}
    bert: dict[str, np.ndarray] = {}
    for name, model in models.items():
        started = time.perf_counter()
        bert[model] = 1.0 - SentenceRelevance("bert", model=model).pairs(labels, i, j)
        seconds = time.perf_counter() - started
        print(_row(name, bert[model], gold, _bert_calls(model, np.ones(len(i), bool), i, j), seconds))

    theta, _ = calibrate_cbow_threshold(train, args.pass_share)
    passed = cbow >= theta
    print(
        f"\nCoarse-to-fine: CBoW threshold {theta:.4f} = the score passing {args.pass_share:.0%} of STS-B train "
        f"pairs; it passes {passed.mean():.1%} of dev pairs.\n"
    )
    print("| coarse-to-fine | Pearson | Spearman | transformer calls | seconds |\n|---|---|---|---|---|")
    for name, model in models.items():
        for below in ("coarse", "zero"):
            distance = SentenceRelevance("coarse_to_fine", model=model, cbow_threshold=theta, below=below)
            started = time.perf_counter()
            r = 1.0 - distance.pairs(labels, i, j)
            seconds = time.perf_counter() - started
            # the same numbers up to batch padding (a cross-encoder pair scored in another batch: ~1e-6)
            np.testing.assert_allclose(r, combine(cbow, bert[model], theta, below), atol=1e-5)
            print(
                _row(
                    f"CBoW >= {theta:.3f}, then {name}; below: {below}",
                    r,
                    gold,
                    _bert_calls(model, passed, i, j),
                    seconds,
                )
            )
    best = args.best or next(iter(reversed(models.values())))
    print(f"\nPass-share sweep, BERT = {best} (threshold calibrated on train, scored on dev):\n")
    print("| pass share (train) | threshold | dev pairs passing | Pearson (coarse) | Pearson (zero) |")
    print("|---|---|---|---|---|")
    for share in (0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0):
        t, _ = calibrate_cbow_threshold(train, share)
        pc, pz = (correlations(combine(cbow, bert[best], t, b), gold)["pearson"] for b in ("coarse", "zero"))
        print(f"| {share:.0%} | {t:.4f} | {(cbow >= t).mean():.1%} | {pc:.4f} | {pz:.4f} |")
    pc, pz = (correlations(combine(cbow, bert[best], 0.8, b), gold)["pearson"] for b in ("coarse", "zero"))
    print(f"| the paper's 0.8 | 0.8000 | {(cbow >= 0.8).mean():.1%} | {pc:.4f} | {pz:.4f} |")

    best_bi = args.cascade_bi or PACKAGED
    if args.cross:
        ns = argparse.Namespace(
            scorer="cascade",
            model=best_bi,
            cross_model=args.cross[0],
            cbow_threshold=None,
            pass_share=args.pass_share,
            bert_threshold=None,
            bert_pass_share=args.bert_pass_share,
            below=args.below,
            max_length=256,
            train=str(TRAIN),
            candidates=None,
        )
        distance = build_distance(ns)
        started = time.perf_counter()
        r = 1.0 - distance.pairs(labels, i, j)
        seconds = time.perf_counter() - started
        gate = passed & (bert[best_bi] >= distance.bert_threshold)
        print(
            f"\nCascade: CBoW >= {theta:.3f} ({args.pass_share:.0%} of train), then bi-encoder >= "
            f"{distance.bert_threshold:.3f} ({args.bert_pass_share:.0%} of the train pairs past CBoW), then the "
            f"cross-encoder; below: {distance.below}. {gate.mean():.1%} of dev pairs reach the cross-encoder.\n"
        )
        print("| cascade | Pearson | Spearman | transformer calls | seconds |\n|---|---|---|---|---|")
        calls = f"{_bert_calls(best_bi, passed, i, j)} + {_bert_calls(args.cross[0], gate, i, j)}"
        print(_row("CBoW, bi-encoder, cross-encoder", r, gold, calls, seconds))
        print(json.dumps({"cascade_params": distance.params()}))


def corpus_part(args: argparse.Namespace) -> None:
    import os

    from labeldist.engine import dask_client, precompute
    from labeldist.labels.sentences import read_caption_sentences
    from labeldist.sts.scorers import transformer_calls

    os.environ["LABELDIST_CACHE"] = args.cache or tempfile.mkdtemp(prefix="bench-sts-cache-", dir=ROOT / ".tmp")
    started = time.perf_counter()
    labels = read_caption_sentences(COCO, limit=args.limit)
    distance = build_distance(args, labels)
    if not args.per_worker_embeddings:
        distance.embed_once(labels)
    driver_calls = transformer_calls()
    prepared = time.perf_counter() - started
    out = Path(tempfile.mkdtemp(prefix="bench-sts-", dir=ROOT / ".tmp")) / "store"
    try:
        with dask_client(n_workers=args.workers) as client:
            result = precompute(
                labels,
                distance,
                out,
                dataset="coco-karpathy-test",
                k=args.k,
                dense=False,
                client=client,
                progress=False,
            )
            calls = client.run(transformer_calls)
        wall = time.perf_counter() - started
        from labeldist.store import StoreReader

        reader = StoreReader(str(out))
        _, dists = reader.knn()
        report: dict[str, Any] = {
            "scorer": args.scorer,
            "n": len(labels),
            "k": args.k,
            "workers": args.workers,
            "wall_seconds": round(wall, 1),
            "of_which_reading_calibrating_embedding": round(prepared, 1),
            "transformer_calls_here": driver_calls,
            "transformer_calls_per_worker": calls,
            "blocks": result.blocks_total,
            "nearest_distance_median": float(np.median(dists[:, 0])),
            "kth_distance_median": float(np.median(dists[:, -1])),
            "params": distance.params(),
        }
        if args.keep:
            shutil.copytree(out, args.keep, dirs_exist_ok=False)
            report["kept"] = args.keep
        print(json.dumps(report, indent=2))
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)


def estimate_part(args: argparse.Namespace) -> None:
    import torch

    from labeldist.labels.sentences import read_caption_sentences
    from labeldist.sts.models import resolve_model
    from labeldist.sts.scorers import CrossEncoderScorer, cosine_relevance

    torch.set_num_threads(1)  # a Dask worker's setting: one thread per worker, one worker per core
    labels = read_caption_sentences(COCO)
    n = len(labels)
    units = cbow_units(labels)
    train = read_sts(TRAIN)
    print("| CBoW threshold | how | unordered caption pairs passing | share | cross-encoder calls (2 orders) |")
    print("|---|---|---|---|---|")
    thresholds = {f"{s:.0%} of STS-B train": calibrate_cbow_threshold(train, s)[0] for s in args.shares}
    thresholds["the paper's 0.8"] = 0.8
    counts = {}
    for how, t in thresholds.items():
        count = 0
        for start in range(0, n, 1024):
            rel = cosine_relevance(units[start : start + 1024], units)
            rows = np.arange(start, min(start + 1024, n))
            count += int(np.sum((rel >= t) & (rows[:, None] < np.arange(n))))  # each unordered pair once
        counts[how] = count
        print(f"| {t:.4f} | {how} | {count:,} | {count / (n * (n - 1) / 2):.1%} | {2 * count:,} |")
    scorer = CrossEncoderScorer(resolve_model(args.cross))
    rng = np.random.default_rng(0)
    a, b = rng.choice(n, args.pairs), rng.choice(n, args.pairs)
    started = time.perf_counter()
    scorer.one_order([labels.texts[x] for x in a], [labels.texts[y] for y in b])
    per_second = args.pairs / (time.perf_counter() - started)
    print(
        f"\ncross-encoder throughput: {per_second:.0f} pair orders / s on one core (1 thread, batch 64, "
        f"{args.pairs} random caption pairs); two workers: {2 * per_second:.0f} / s"
    )
    for how, count in counts.items():
        hours = 2 * count / (2 * per_second) / 3600
        print(
            f"- coarse-to-fine with the cross-encoder, CBoW gate {how}: {2 * count:,} calls, about {hours:,.1f} h "
            "on 2 cores"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="part", required=True)
    dev = sub.add_parser("dev")
    dev.add_argument("--bi", nargs="*", default=[], help="fine-tuned bi-encoder folders")
    dev.add_argument("--cross", nargs="*", default=[], help="fine-tuned cross-encoder folders")
    dev.add_argument("--best", help="the model of the pass-share sweep (default: the last one)")
    dev.add_argument("--cascade-bi", help="the cascade's bi-encoder (default: the packaged zero-shot one)")
    dev.add_argument("--pass-share", type=float, default=0.9)
    dev.add_argument("--bert-pass-share", type=float, default=0.2)
    dev.add_argument("--below", choices=("coarse", "zero"), help="the cascade's fill (default: coarse)")
    corpus = sub.add_parser("corpus")
    add_scorer_options(corpus)
    corpus.add_argument("--candidates", type=float)
    corpus.add_argument("--limit", type=int)
    corpus.add_argument("--k", type=int, default=100)
    corpus.add_argument("--workers", type=int, default=2)
    corpus.add_argument("--keep", help="copy the finished store here")
    corpus.add_argument("--per-worker-embeddings", action="store_true", help="let each worker embed all sentences")
    corpus.add_argument("--cache", help="embedding cache folder (default: a new temporary one, so nothing is reused)")
    est = sub.add_parser("estimate")
    est.add_argument("--cross", required=True)
    est.add_argument("--shares", type=float, nargs="*", default=[0.5, 0.2])
    est.add_argument("--pairs", type=int, default=1000)
    args = parser.parse_args()
    {"dev": dev_part, "corpus": corpus_part, "estimate": estimate_part}[args.part](args)


if __name__ == "__main__":
    main()
