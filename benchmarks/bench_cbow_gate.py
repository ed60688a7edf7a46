r"""What the CBoW gate of coarse-to-fine loses, and what it saves: recall@k against BERT alone, and speed-up.

For each corpus, N sentences (a seeded sample; all of them when there are fewer), every one scored against all N
by :meth:`labeldist.distances.sts.SentenceRelevance.block` in row blocks of 256 and its top k kept by
:func:`labeldist.core.knn.topk_rows` (the item itself left out, ties by index): what ``labeldist precompute sentences
--knn-only`` computes and stores, in one process. Per scorer:

- ``bert``: BERT alone (``--model``, default the packaged all-MiniLM-L6-v2: a *bi-encoder*, so each sentence is
  embedded once and the N² relevances are dot products; N of a few thousand is cheap on 2 CPU cores);
- ``coarse_to_fine`` at each CBoW threshold θ_c of ``--thresholds`` plus the current default (the score passing
  90 % of the STS-B train pairs, 0.728 with GloVe-50), below the gate → 0 (the scorer's default fill).

Printed per θ_c and k: recall@k of coarse-to-fine against BERT alone's top k of the same run (per sentence, the
share of BERT's k nearest that coarse-to-fine's k nearest keep: mean and 5th percentile), the share of
unordered pairs past the gate, the sentences with fewer than k others past it (their lists end in ties at
distance 1), and the cost, next to BERT alone's: wall and CPU seconds of all N rows from cold (embedding cache
emptied, model loaded), the BERT calls (sentences embedded), and the seconds of the pair stage alone (every
sentence embedded already: dot products, the gate, the top k). torch runs ``--threads`` threads (1, as in each
Dask worker of a store build); the speed-up is BERT alone's CPU seconds over coarse-to-fine's, CPU time being
what other processes on a shared machine disturb least. Each is timed ``--repeats`` times per scorer,
round robin, after one untimed warm-up run (the first pass over new input shapes costs several times the later
ones), and the best of the rounds is printed: on a shared machine the others' work only ever adds time.

Corpora: ``coco``: captions of the shipped data/coco/coco_karpathy_test.json, each caption a sentence; ``stsb``:
the distinct sentences of labeldist/sts/data/sts-dev.csv (both columns). Sentences without any GloVe word are kept
(``empty="zero"``); the gate lets their pairs through, as the distance does.

    nice -n 19 .venv/bin/python benchmarks/bench_cbow_gate.py --corpus coco stsb --n 2000 --k 10 50

Run it under ``nice``: the machine is shared. Timings there depend on the load; the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from labeldist.core.knn import topk_rows
from labeldist.distances.sts import SentenceRelevance, cbow_gate, cbow_units
from labeldist.sts.cascade import DEFAULT_PASS_SHARE, calibrate_cbow_threshold, topk_recall
from labeldist.sts.models import PACKAGED, load_bi_encoder, resolve_model
from labeldist.sts.scorers import MAX_LENGTH, bi_encoder_scorer, cosine_relevance, transformer_calls
from labeldist.sts.stsb import read_sts

ROOT = Path(__file__).resolve().parents[1]
COCO = ROOT / "data/coco/coco_karpathy_test.json"
TRAIN, DEV = ROOT / "labeldist/sts/data/sts-train.csv", ROOT / "labeldist/sts/data/sts-dev.csv"
BLOCK = 256


def corpus_sentences(name: str, n: int, seed: int):  # -> Sentences
    """N sentences of a corpus, a sample drawn with ``seed`` (kept in file order), or all when fewer."""
    from labeldist.labels.sentences import read_caption_sentences, sentences_from_texts

    if name == "coco":
        labels = read_caption_sentences(COCO, empty="zero")
    else:
        dev = read_sts(DEV)
        texts = list(dict.fromkeys([*dev.first, *dev.second]))
        labels = sentences_from_texts([str(t) for t in range(len(texts))], texts, empty="zero", source=str(DEV))
    if n < len(labels):
        labels = labels.subset(np.sort(np.random.default_rng(seed).choice(len(labels), n, replace=False)))
    return labels


def knn(distance: SentenceRelevance, labels, k: int) -> np.ndarray:
    """Top-k indices of every row, as the engine computes them (row blocks of 256, float32, ties by index)."""
    out = []
    for start in range(0, len(labels), BLOCK):
        stop = min(start + BLOCK, len(labels))
        block = distance.block(labels.subset(slice(start, stop)), labels).astype(np.float32)
        out.append(topk_rows(block, k, exclude=np.arange(start, stop))[0])
    return np.concatenate(out)


def knn_cold(distance: SentenceRelevance, labels, k: int) -> tuple[np.ndarray, float, float, int]:
    """:func:`knn` from an empty embedding cache: the lists, wall and CPU seconds, and the BERT calls made."""
    bi_encoder_scorer.cache_clear()  # a new scorer, no embedding cached (the model itself stays loaded)
    before = transformer_calls()["bi"]
    wall, cpu = time.perf_counter(), time.process_time()
    out = knn(distance, labels, k)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return out, wall, cpu, transformer_calls()["bi"] - before


def gate_counts(labels, threshold: float, ks: list[int]) -> tuple[float, dict[int, int]]:
    """Share of unordered pairs of distinct items past the gate, and per k the sentences with fewer than k
    others past it."""
    units, defined = cbow_units(labels), labels.cbow_defined
    n, passing, short = len(labels), 0, dict.fromkeys(ks, 0)
    for start in range(0, n, 1024):
        rows = np.arange(start, min(start + 1024, n))
        gate = cbow_gate(cosine_relevance(units[rows], units), ~(defined[rows, None] & defined[None, :]), threshold)
        gate[np.arange(len(rows)), rows] = False
        passing += int(np.sum(gate & (rows[:, None] < np.arange(n))))
        for k in ks:
            short[k] += int(np.sum(gate.sum(axis=1) < k))
    return passing / (n * (n - 1) / 2), short


def run_corpus(name: str, args: argparse.Namespace, default_theta: float) -> list[str]:
    labels = corpus_sentences(name, args.n, args.seed)
    kmax = max(args.k)
    thetas = sorted(set(args.thresholds) | {default_theta})
    print(
        f"\n## {name}: {len(labels):,} sentences ({len(set(labels.texts)):,} distinct texts), "
        f"{len(labels) * (len(labels) - 1) // 2:,} pairs; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    configs = {"bert": SentenceRelevance("bert", model=args.model)}
    configs |= {t: SentenceRelevance("coarse_to_fine", model=args.model, cbow_threshold=t) for t in thetas}
    lists: dict[object, np.ndarray] = {}
    times: dict[object, list[tuple[float, float, int]]] = {c: [] for c in configs}
    order = list(configs)
    if args.repeats:  # untimed: the first pass over new input shapes costs several times the later ones
        knn_cold(configs["bert"], labels, kmax)
    for r in range(args.repeats):  # cold runs, round robin (reversed every other round): load drifts alike
        for c in order if r % 2 == 0 else order[::-1]:
            got, wall, cpu, calls = knn_cold(configs[c], labels, kmax)
            if c in lists and not np.array_equal(lists[c], got):
                raise AssertionError(f"{c}: another run gave other lists")
            lists[c] = got
            times[c].append((wall, cpu, calls))
            what = "bert alone" if c == "bert" else f"coarse-to-fine {c:.3f}"
            print(
                f"  round {r + 1}, {what}: {wall:.1f} s wall, {cpu:.1f} s CPU, {calls:,} BERT calls "
                f"(load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    # the pair stage alone, every sentence embedded: what the gate can save with a bi-encoder (dot products, the
    # CBoW gate, the top k), repeated the same way; the first pass of each recall-only run is its lists
    if not args.repeats:
        bi_encoder_scorer.cache_clear()  # nothing from another corpus
    before = transformer_calls()["bi"]
    bi_encoder_scorer(resolve_model(args.model), MAX_LENGTH).embed(sorted(set(labels.texts)))
    embedded = transformer_calls()["bi"] - before  # none after cold runs; all distinct texts in a recall-only run
    pair_times: dict[object, list[float]] = {c: [] for c in configs}
    for r in range(max(args.repeats, 1)):
        for c in order if r % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            got = knn(configs[c], labels, kmax)
            pair_times[c].append(time.perf_counter() - started)
            if c in lists and not np.array_equal(lists[c], got):
                raise AssertionError(f"{c}: the lists from cached embeddings differ from those from cold")
            lists[c] = got

    def cost(c: object) -> tuple[float, float, float, int]:
        """Best of the rounds (the run least disturbed by the machine's other work), and the BERT calls."""
        wall, cpu, calls = zip(*times[c]) if times[c] else ((np.nan,), (np.nan,), (embedded,))
        return min(wall), min(cpu), min(pair_times[c]), max(calls)

    bert_wall, bert_cpu, bert_pairs, bert_calls = cost("bert")
    if times["bert"]:  # how much the machine's other work moved one and the same run
        cpus = [t[1] for t in times["bert"]]
        print(f"bert alone, CPU seconds of its {len(cpus)} cold runs: {min(cpus):.1f} to {max(cpus):.1f}")
    rows = []
    for theta in thetas:
        wall, cpu, pairs, calls = cost(theta)
        share, short = gate_counts(labels, theta, args.k)
        for k in args.k:
            recall = topk_recall(lists["bert"][:, :k], lists[theta][:, :k])
            label = f"{theta:.3f}" + (" (default)" if theta == default_theta else "")
            if args.repeats:
                timed = f"{wall:.1f} / {bert_wall:.1f} | {cpu:.1f} / {bert_cpu:.1f} | {bert_cpu / cpu:.2f}x"
                calls_made = f"{calls:,} / {bert_calls:,}"
            else:  # recall only: the sentences were embedded once, for all scorers
                timed, calls_made = "not timed | not timed | —", f"{embedded:,}, once for both"
            rows.append(
                f"| {name} | {len(labels):,} | {label} | {share:.1%} | {k} | {recall.mean():.3f} | "
                f"{np.percentile(recall, 5):.3f} | {short[k]:,} | {timed} | {pairs:.2f} / {bert_pairs:.2f} | "
                f"{calls_made} |"
            )
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", nargs="+", choices=("coco", "stsb"), default=["coco", "stsb"])
    parser.add_argument("--n", type=int, default=2000, help="sentences per corpus (a seeded sample; default 2000)")
    parser.add_argument("--k", type=int, nargs="+", default=[10, 50])
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.5, 0.6, 0.7, 0.8, 0.9])
    parser.add_argument("--model", default=PACKAGED, help="BERT of both scorers (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as in a Dask worker)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed runs per scorer, best reported; 0: recall only (default 3)"
    )
    args = parser.parse_args()
    os.environ["LABELDIST_CACHE"] = tempfile.mkdtemp(prefix="bench-cbow-gate-")  # nothing embedded is reused
    default_theta, _ = calibrate_cbow_threshold(read_sts(TRAIN), DEFAULT_PASS_SHARE)
    import torch

    torch.set_num_threads(args.threads)
    load_bi_encoder(resolve_model(args.model), MAX_LENGTH)  # loaded once, before any timing
    bi_encoder_scorer(resolve_model(args.model), MAX_LENGTH).embed(["a warm-up sentence"])
    print(
        f"{' '.join(sys.argv)}\nCBoW default threshold {default_theta:.4f} (passes {DEFAULT_PASS_SHARE:.0%} of "
        f"STS-B train pairs); BERT = {args.model}; below the gate -> 0; torch threads: {torch.get_num_threads()} of "
        f"{os.cpu_count()} cores"
    )
    rows = []
    for name in args.corpus:
        rows += run_corpus(name, args, default_theta)
    print(
        "\n| corpus | N | θ_c | pairs past the gate | k | recall@k mean | recall@k 5th pct | sentences with "
        "< k past the gate | wall s, c2f / bert | CPU s, c2f / bert | speed-up (CPU) | pair stage s, c2f / "
        "bert | BERT calls, c2f / bert |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
