"""The ``labeldist sts ...`` commands and the ``precompute sentences`` loader (wired in :mod:`labeldist.cli`).

labeldist sts fit --architecture bi --loss cosine --epochs 1 --seed 0 --out models/sts-bi-cosine
labeldist sts eval --scorer coarse_to_fine --model models/sts-bi-cosine
labeldist precompute sentences data/coco/coco_karpathy_test.json --model models/sts-bi-cosine --knn-only
labeldist precompute sentences my_sentences.csv --column sentence --id-column id --knn-only   # or .txt, .tsv, .jsonl
"""

from __future__ import annotations

import argparse
import errno
import json
import os
from pathlib import Path
from typing import Any

from labeldist.cli import (
    UsageError,
    check_file,
    check_folder,
    finite_float,
    nonnegative_float,
    number_option,
    positive_float,
    positive_int,
    seed_int,
    share_float,
)
from labeldist.engine import check_dense_size
from labeldist.labels.sentences import EMPTY_SENTENCE_POLICIES, SENTENCE_FORMATS
from labeldist.sts.cascade import DEFAULT_PASS_SHARE, DEFAULT_SCORER

#: where the STS-B files are shipped: data/stsb/ of the repository the labeldist package sits in (a checkout, or
#: an editable install of it). They are not in the package: an installed wheel has none, and its commands then
#: need --train and --dev. Resolved from this file, not from the working directory, so the defaults hold from any
#: folder (a relative "data/stsb/sts-train.csv" failed with "cannot read" outside the repository).
STSB_DIR = Path(__file__).resolve().parents[2] / "data" / "stsb"
TRAIN_FILE, DEV_FILE = "sts-train.csv", "sts-dev.csv"
#: what --empty means, shared by ``sts eval`` and ``precompute sentences`` (each fills in its drop and default)
EMPTY_HELP = (
    "a sentence none of whose words has a word vector (all stop words, e.g. 'You should do it.') has no CBoW "
    "score. error: stop, naming it (not with --scorer bert, which never reads CBoW and keeps it); "
    "{drop}; zero: keep it with a zero CBoW vector: CBoW relevance 0 to every other sentence under --scorer "
    "cbow, while coarse_to_fine and cascade send its pairs to BERT"
)


def shipped_stsb(name: str) -> str | None:
    """The absolute path of the STS-B file ``name`` in :data:`STSB_DIR`, or None where this installation has no
    such file: the default of ``--train`` or ``--dev``, shown in ``--help``."""
    path = STSB_DIR / name
    return str(path) if path.is_file() else None


def stsb_default_help(name: str) -> str:
    """How ``--help`` words the default of an STS-B file option: the file itself, or that there is none."""
    if shipped_stsb(name) is not None:
        return "default: %(default)s, the shipped file"
    words = f"no default: this installation has no {STSB_DIR / name} (the repository's data/stsb/{name})"
    return words.replace("%", "%%")  # argparse %-formats help


def stsb_file(args: argparse.Namespace, option: str) -> str:
    """The STS-B file of ``--train`` or ``--dev`` (``option``), checked to be a readable file: an OSError naming
    it, or a UsageError when it was not given and this installation ships none."""
    path = getattr(args, option)
    if path is None:
        name = TRAIN_FILE if option == "train" else DEV_FILE
        raise UsageError(f"--{option}: no STS-B file given, and this installation has none at {STSB_DIR / name} "
                         f"(the STS-B data ships in the labeldist repository's data/stsb/, not in the package); "
                         f"pass --{option} FILE")  # fmt: skip
    check_file(path)
    return path


def recorded_stsb(path: str) -> str:
    """How a store's manifest names the STS-B file ``path``: a shipped file as ``data/stsb/<name>``, the name the
    default had when it was relative, any other file as given. A manifest is a store's fingerprint: it must not
    depend on where the repository lies, and a store made with the old default must still be reused."""
    for name in (TRAIN_FILE, DEV_FILE):
        shipped = shipped_stsb(name)
        if shipped is not None and os.path.isfile(path) and os.path.samefile(path, shipped):
            return f"data/stsb/{name}"
    return path


def needs_train(args: argparse.Namespace) -> bool:
    """Whether :func:`build_distance` reads the STS-B training file: to calibrate the CBoW gate (coarse-to-fine
    and cascade without ``--cbow-threshold``) or the cascade's bi-encoder gate (no ``--bert-threshold`` and no
    ``--candidates``)."""
    cbow = args.scorer in ("coarse_to_fine", "cascade") and args.cbow_threshold is None
    bert = (args.scorer == "cascade" and getattr(args, "bert_threshold", None) is None
            and getattr(args, "candidates", None) is None)  # fmt: skip
    return cbow or bert


def check_model(name: str | None) -> None:
    """An OSError naming ``name`` unless it is None, the packaged model or a model folder (one with config.json):
    checked before any sentence is read or scored, so that a typo is one line, not a failure minutes later."""
    from labeldist.sts.models import PACKAGED

    if name is None or str(name) == PACKAGED:
        return
    check_folder(name)
    if not os.path.isfile(os.path.join(name, "config.json")):
        raise FileNotFoundError(errno.ENOENT, "no config.json: not a sentence model folder (make one with "
                                "`labeldist sts fit --out FOLDER`)", os.fspath(name))  # fmt: skip


def _sentence_labels(first: list[str], second: list[str], source: str) -> tuple[Any, Any, Any]:
    """Sentences of the distinct texts of STS pairs, and the index of each pair's two sentences (a sentence
    without a word vector is an error: benchmarks/bench_sts.py and the cascade's calibration read it so)."""
    labels, i, j, _ = _kept_sentence_pairs(first, second, source)
    return labels, i, j


def _kept_sentence_pairs(
    first: list[str],
    second: list[str],
    source: str,
    *,
    empty: str = "error",
    needs_cbow: bool = True,
    lines: tuple[int, ...] | None = None,
) -> tuple[Any, Any, Any, Any]:
    """Sentences of the distinct texts of STS pairs, the index of each kept pair's two sentences, and which
    pairs are kept (all but those with a sentence left out under ``empty="drop"``).

    With ``lines`` (the pairs' line numbers) a sentence is named in errors by where it occurs, e.g.
    ``line 3, sentence1``, rather than by a number that appears nowhere in the file.
    """
    import numpy as np

    from labeldist.labels.sentences import sentences_from_texts

    names: dict[str, str] = {}
    for column, texts in ((1, first), (2, second)):
        for t, text in enumerate(texts):
            names.setdefault(text, f"line {lines[t]}, sentence{column}" if lines else str(len(names)))
    labels = sentences_from_texts(list(names.values()), list(names), source=source, empty=empty,
                                  needs_cbow=needs_cbow)  # fmt: skip
    where = {t: n for n, t in enumerate(labels.texts)}
    kept = np.array([a in where and b in where for a, b in zip(first, second)], dtype=bool)
    i = np.array([where[a] for a, k in zip(first, kept) if k], dtype=np.int64)
    j = np.array([where[b] for b, k in zip(second, kept) if k], dtype=np.int64)
    return labels, i, j, kept


def build_distance(args: argparse.Namespace, labels: Any = None) -> Any:
    """The SentenceRelevance the options ask for, thresholds calibrated where not given.

    CBoW threshold: ``--cbow-threshold``, else the score passing ``--pass-share`` of the STS-B training pairs.
    Cascade gate: ``--bert-threshold``, else on average ``--candidates`` per sentence of ``labels`` (the corpus),
    else the bi-encoder score passing ``--bert-pass-share`` of the training pairs that pass the CBoW gate.
    """
    import numpy as np

    from labeldist.distances.sts import SentenceRelevance
    from labeldist.sts.cascade import calibrate_cbow_threshold, threshold_for_candidates, threshold_for_share
    from labeldist.sts.stsb import read_sts

    calibration: dict[str, Any] = {}
    cbow_threshold = args.cbow_threshold
    if args.scorer in ("coarse_to_fine", "cascade") and cbow_threshold is None:
        train = read_sts(stsb_file(args, "train"))
        cbow_threshold, calibration["cbow"] = calibrate_cbow_threshold(train, args.pass_share)
        if "file" in calibration["cbow"]:
            calibration["cbow"]["file"] = recorded_stsb(calibration["cbow"]["file"])
    bert_threshold = getattr(args, "bert_threshold", None)
    common = dict(model=args.model, cbow_threshold=cbow_threshold, below=args.below, max_length=args.max_length)
    if args.scorer == "cascade" and bert_threshold is None:
        first = SentenceRelevance("bert", **common)
        if getattr(args, "candidates", None) is not None and labels is not None:
            from labeldist.distances.sts import cbow_gate, cbow_units
            from labeldist.sts.models import resolve_model
            from labeldist.sts.scorers import bi_encoder_scorer

            sample = np.sort(np.random.default_rng(0).choice(len(labels), min(len(labels), 2000), replace=False))
            sub = labels.subset(sample)
            emb = bi_encoder_scorer(resolve_model(first.model), args.max_length).embed(sub.texts)
            units, defined = cbow_units(sub), sub.cbow_defined
            share = args.candidates / (len(labels) - 1)

            def gate(r: np.ndarray) -> np.ndarray:  # the distance's own gate: a pair without CBoW passes
                return cbow_gate(units[r] @ units.T, ~(defined[r, None] & defined[None, :]), cbow_threshold)

            bert_threshold = threshold_for_candidates(emb, share * (len(sub) - 1), gate=gate)
            calibration["bert"] = {"method": "corpus_candidates", "candidates": args.candidates,
                                   "sample": len(sub), "seed": 0}  # fmt: skip
        else:
            from labeldist.labels.text import Tokenizer, default_word_vectors
            from labeldist.sts.cascade import cbow_pair_relevance

            train = read_sts(stsb_file(args, "train"))
            cbow = cbow_pair_relevance(train.first, train.second, Tokenizer(), default_word_vectors())
            keep = np.flatnonzero(cbow >= cbow_threshold)  # a sentence without vectors has CBoW 0: never kept
            tl, i, j = _sentence_labels([train.first[t] for t in keep], [train.second[t] for t in keep], train.source)
            bi = 1.0 - first.pairs(tl, i, j)
            bert_threshold = threshold_for_share(bi, args.bert_pass_share)
            calibration["bert"] = {"method": "sts_quantile", "pass_share": args.bert_pass_share,
                                   "of": "train pairs passing the CBoW gate", "sha256": train.sha256}  # fmt: skip
    return SentenceRelevance(
        args.scorer, cross_model=getattr(args, "cross_model", None), bert_threshold=bert_threshold,
        calibration=calibration or None, **common,
    )  # fmt: skip


def _eval(args: argparse.Namespace) -> int:
    import time

    from labeldist.sts.fit import correlations
    from labeldist.sts.scorers import transformer_calls
    from labeldist.sts.stsb import read_sts

    check_model(args.model)
    check_model(args.cross_model)
    dev_file = stsb_file(args, "dev")
    if needs_train(args):
        stsb_file(args, "train")
    distance = build_distance(args)
    dev = read_sts(dev_file).head(args.dev_limit)
    labels, i, j, kept = _kept_sentence_pairs(list(dev.first), list(dev.second), dev.source, empty=args.empty,
                                              needs_cbow=args.scorer != "bert", lines=dev.lines)  # fmt: skip
    before = transformer_calls()
    started = time.perf_counter()
    relevance = 1.0 - distance.pairs(labels, i, j)
    seconds = time.perf_counter() - started
    calls = {k: v - before[k] for k, v in transformer_calls().items()}
    report = {
        "scorer": args.scorer, "pairs": int(kept.sum()), "pairs_left_out": int((~kept).sum()),
        "empty": args.empty, **{k: round(v, 4) for k, v in correlations(relevance, dev.relevance[kept]).items()},
        "transformer_calls": calls, "seconds": round(seconds, 1), "params": distance.params(),
    }  # fmt: skip
    if distance.cbow_threshold is not None:
        from labeldist.distances.sts import cbow_gate

        cbow = 1.0 - type(distance)("cbow").pairs(labels, i, j)
        undefined = ~(labels.cbow_defined[i] & labels.cbow_defined[j])
        report["cbow_pass_share"] = round(float(cbow_gate(cbow, undefined, distance.cbow_threshold).mean()), 4)
    print(json.dumps(report, indent=2))
    return 0


def add_scorer_options(p: argparse.ArgumentParser) -> None:
    """Options choosing a sentence relevance scorer (``sts eval`` and ``precompute sentences``)."""
    p.add_argument(
        "--scorer",
        choices=("cbow", "bert", "coarse_to_fine", "cascade"),
        default=DEFAULT_SCORER,
        help="relevance R: CBoW, BERT alone, CBoW then BERT (the paper's), or CBoW, bi- then cross-encoder "
        "(default: %(default)s). With a bi-encoder --model the CBoW gate of coarse_to_fine saves no BERT call "
        "and drops part of each sentence's BERT top k (at the calibrated gate, 4.4%% of a caption's top 10 on "
        "the COCO test captions, 25%% on STS-B dev sentences; BENCHMARKS.md); it pays only in front of a "
        "cross-encoder",
    )
    p.add_argument(
        "--model",
        default="all-MiniLM-L6-v2",
        help="BERT model folder (bi- or cross-encoder; the bi-encoder of the cascade), e.g. "
        "models/sts-bi-cosine from `labeldist sts fit` (default: the packaged zero-shot %(default)s)",
    )
    p.add_argument("--cross-model", help="cascade: the cross-encoder folder")
    p.add_argument("--cbow-threshold", type=finite_float, help="CBoW gate (default: calibrated, see --pass-share)")
    p.add_argument(
        "--pass-share",
        type=share_float,
        default=DEFAULT_PASS_SHARE,
        help="calibrate the CBoW gate to pass this share of STS-B train pairs (default: %(default)s, a gate of "
        "0.728 with GloVe-50); a lower gate keeps more of BERT's top k and passes more pairs to BERT",
    )
    p.add_argument("--bert-threshold", type=finite_float, help="cascade: bi-encoder gate of the cross-encoder")
    p.add_argument(
        "--bert-pass-share",
        type=share_float,
        default=0.2,
        help="cascade, no --candidates: the bi gate passes this share of the STS-B train pairs that "
        "pass the CBoW gate (default: %(default)s)",
    )
    p.add_argument(
        "--below",
        choices=("coarse", "zero"),
        help="a pair under a gate gets 0 (paper's code) or keeps the coarser score (paper's text) "
        "(default: zero for coarse_to_fine, coarse for cascade)",
    )
    p.add_argument("--max-length", type=positive_int, default=256,
                   help="word pieces per model input; longer is truncated (default: %(default)s)")  # fmt: skip
    p.add_argument("--train", default=shipped_stsb(TRAIN_FILE), metavar="FILE",
                   help="STS-B file the thresholds are calibrated on, where they are not given "
                        f"({stsb_default_help(TRAIN_FILE)})")  # fmt: skip


def load_sentences(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """``labeldist precompute sentences``: the sentences of a file (COCO/Karpathy captions JSON, .txt, .csv,
    .tsv, .jsonl; :func:`labeldist.labels.sentences.read_sentences`) and their relevance distance."""
    from labeldist.labels.sentences import read_sentences

    check_file(args.input)
    check_model(args.model)
    check_model(args.cross_model)
    if needs_train(args):  # checked before the sentences are read, which can take minutes
        stsb_file(args, "train")
    labels = read_sentences(args.input, format=args.format, column=args.column, id_column=args.id_column,
                            empty=args.empty, limit=args.limit, needs_cbow=args.scorer != "bert")  # fmt: skip
    if args.dense:  # the engine checks too; here before the model is loaded and its thresholds calibrated
        check_dense_size(len(labels), args.dense_limit, "sentences")
    distance = build_distance(args, labels)  # its prepare() embeds each sentence once, if the store needs it
    dataset = args.dataset or Path(args.input).stem + (f"-first{args.limit}" if args.limit else "")
    return labels, distance, dataset


def add_sentence_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``precompute sentences`` (the sentence kind's, :data:`labeldist.labels.sentences.KIND`)."""
    p.add_argument(
        "input",
        help="COCO captions JSON or Karpathy-style list (e.g. data/coco/coco_karpathy_test.json; ids "
        "<image id>#<n>), or a plain file: .txt (one sentence a line; ids the line numbers from 0), .csv or .tsv "
        "(a header row; the sentence column, see --column), .jsonl (a JSON string or object a line)",
    )
    p.add_argument(
        "--format",
        choices=SENTENCE_FORMATS,
        default="auto",
        help="input format; auto: .txt, .csv, .tsv, .jsonl by the suffix, any other file captions JSON (an "
        "object COCO, a list Karpathy) (default: %(default)s)",
    )
    p.add_argument(
        "--column",
        help="csv, tsv: the column holding the sentences; jsonl: the key (default: sentence, else text; else an "
        "error listing the columns)",
    )
    p.add_argument(
        "--id-column",
        help="csv, tsv, jsonl: the column (key) holding each sentence's id (default: a column named id where "
        "there is one, else the row numbers from 0 below the header (csv, tsv) or the line numbers from 0 (jsonl))",
    )
    p.add_argument(
        "--empty",
        choices=EMPTY_SENTENCE_POLICIES,
        default="error",
        # error by default: a store's manifest records the policy, and a store made before zero existed must
        # still be found equal (and reused) when the same command is run again
        help=EMPTY_HELP.format(drop="drop: leave it out of the store (the other ids do not change)")
        + ". A blank line or empty sentence of a plain file is left out under drop, an error otherwise"
        + " (default: %(default)s)",
    )
    p.add_argument("--limit", type=positive_int, help="the first N sentences only (blank lines do not count)")
    p.add_argument(
        "--candidates",
        type=positive_float,
        help="cascade: set the bi-encoder gate so that a sentence has this many candidates on average",
    )
    add_scorer_options(p)


def _fit(args: argparse.Namespace) -> int:
    from labeldist.sts.fit import FitConfig, fit
    from labeldist.sts.stsb import read_sts

    check_model(args.base_model)
    train_file, dev_file = stsb_file(args, "train"), stsb_file(args, "dev")
    config = FitConfig(
        architecture=args.architecture, loss=args.loss, base_model=args.base_model, epochs=args.epochs,
        batch_size=args.batch_size, lr=args.lr, warmup=args.warmup, weight_decay=args.weight_decay,
        max_length=args.max_length, swap=args.swap, seed=args.seed,
    )  # fmt: skip
    train = read_sts(train_file).head(args.limit)
    dev = read_sts(dev_file).head(args.dev_limit)
    out = args.out or f"models/sts-{config.architecture}-{config.loss}"
    result = fit(train, dev, config, out, progress=False if args.no_progress else None)
    print(json.dumps({"model": str(result.path), "dev_pearson": round(result.dev_pearson, 4),
                      "dev_spearman": round(result.dev_spearman, 4), "seconds": round(result.seconds, 1)}))  # fmt: skip
    return 0


def add_sts_parser(sub: Any) -> None:
    """Add the ``sts`` command group to the top-level subparsers ``sub``."""
    sts = sub.add_parser("sts", help="sentence relevance models: fine-tune on STS-B, evaluate scorers")
    cmds = sts.add_subparsers(dest="sts_command", required=True)

    fit = cmds.add_parser("fit", help="fine-tune all-MiniLM-L6-v2 on STS-B train, score it on dev, save it")
    fit.add_argument("--architecture", choices=("bi", "cross"), default="bi",
                     help="bi-encoder (cosine of embeddings) or cross-encoder (default: %(default)s)")  # fmt: skip
    fit.add_argument("--loss", help="bi: cosent (default) or cosine; cross: bce (default) or mse")
    fit.add_argument("--base-model", default="all-MiniLM-L6-v2",
                     help="start from this model folder (default: the packaged %(default)s)")  # fmt: skip
    fit.add_argument("--epochs", type=positive_int, default=4, help="passes over the data (default: %(default)s)")
    fit.add_argument("--batch-size", type=positive_int, default=16, help="pairs per step (default: %(default)s)")
    fit.add_argument("--lr", type=positive_float, default=2e-5, help="peak learning rate (default: %(default)s)")
    fit.add_argument("--warmup", type=number_option(float, 0, 1, below=True), default=0.1,
                     help="share of the steps with linear warm-up, 0 <= share < 1 (default: %(default)s)")  # fmt: skip
    fit.add_argument("--weight-decay", type=nonnegative_float, default=0.01,
                     help="AdamW weight decay (default: %(default)s)")  # fmt: skip
    fit.add_argument("--max-length", type=positive_int, default=128,
                     help="word pieces per input while training (default: %(default)s)")  # fmt: skip
    fit.add_argument("--swap", action="store_true", help="cross-encoder: train on both orders of each pair")
    fit.add_argument(
        "--seed", type=seed_int, default=0, help="seed of shuffles and initial weights (default: %(default)s)"
    )
    fit.add_argument("--train", default=shipped_stsb(TRAIN_FILE), metavar="FILE",
                     help=f"STS-B training file ({stsb_default_help(TRAIN_FILE)})")  # fmt: skip
    fit.add_argument("--dev", default=shipped_stsb(DEV_FILE), metavar="FILE",
                     help=f"STS-B dev file ({stsb_default_help(DEV_FILE)})")  # fmt: skip
    fit.add_argument("--limit", type=positive_int, help="train on the first N pairs only (quick checks)")
    fit.add_argument("--dev-limit", type=positive_int, help="score on the first N dev pairs only")
    fit.add_argument("--out", help="model folder (default: models/sts-<architecture>-<loss>, in the working "
                     "folder)")  # fmt: skip
    fit.add_argument("--no-progress", action="store_true", help="no progress bar")
    fit.set_defaults(func=_fit)

    ev = cmds.add_parser("eval", help="Pearson and Spearman of a relevance scorer on STS-B dev")
    add_scorer_options(ev)
    ev.add_argument(
        "--empty",
        choices=EMPTY_SENTENCE_POLICIES,
        default="zero",
        # zero by default: a benchmark is every pair of its file; drop would score another, smaller one
        help=EMPTY_HELP.format(drop="drop: leave out the pairs that hold it (the report counts them)")
        + " (default: %(default)s: every pair is scored)",
    )
    ev.add_argument("--dev", default=shipped_stsb(DEV_FILE), metavar="FILE",
                    help=f"STS-B file to score ({stsb_default_help(DEV_FILE)})")  # fmt: skip
    ev.add_argument("--dev-limit", type=positive_int, help="the first N pairs only")
    ev.set_defaults(func=_eval)
