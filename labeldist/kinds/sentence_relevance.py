"""The sentence kind, ``labeldist precompute sentences``: sentences (:mod:`labeldist.labels.sentences`) under
1 - relevance (:mod:`labeldist.distances.sts`: CBoW, BERT, coarse-to-fine, cascade), and the options choosing and
calibrating a relevance scorer that ``labeldist sts eval`` (:mod:`labeldist.commands.sts`) shares.

labeldist precompute sentences data/coco/coco_karpathy_test.json --model models/sts-bi-cosine --knn-only
labeldist precompute sentences my_sentences.csv --column sentence --id-column id --knn-only   # or .txt, .tsv, .jsonl
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.core.dense import check_dense_size
from labeldist.core.options import (
    check_file,
    check_folder,
    finite_float,
    positive_float,
    positive_int,
    share_float,
)
from labeldist.distances.sts import SentenceRelevance, cbow_gate, cbow_units
from labeldist.errors import UsageError
from labeldist.kinds import Kind
from labeldist.labels.sentences import (
    EMPTY_SENTENCE_POLICIES,
    SENTENCE_FORMATS,
    Sentences,
    read_sentences,
    sentences_from_texts,
)
from labeldist.labels.text import Tokenizer, default_word_vectors
from labeldist.sts.cascade import (
    DEFAULT_PASS_SHARE,
    DEFAULT_SCORER,
    calibrate_cbow_threshold,
    cbow_pair_relevance,
    threshold_for_candidates,
    threshold_for_share,
)
from labeldist.sts.models import PACKAGED, resolve_model
from labeldist.sts.onnx_backend import BACKENDS
from labeldist.sts.scorers import bi_encoder_scorer
from labeldist.sts.stsb import read_sts

#: where the STS-B files are shipped: package data of labeldist.sts (1.2 MB, CC BY-SA; readme.txt and LICENSE.txt
#: beside them), so that a wheel has them and the coarse-to-fine and cascade scorers calibrate without --train.
#: Resolved from this file, not from the working directory, so the defaults hold from any folder.
STSB_DIR = Path(__file__).resolve().parents[1] / "sts" / "data"
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
    words = f"no default: this installation has no {STSB_DIR / name} (the package data of labeldist.sts)"
    return words.replace("%", "%%")  # argparse %-formats help


def stsb_file(args: argparse.Namespace, option: str) -> str:
    """The STS-B file of ``--train`` or ``--dev`` (``option``), checked to be a readable file: an OSError naming
    it, or a UsageError when it was not given and this installation ships none."""
    path = getattr(args, option)
    if path is None:
        name = TRAIN_FILE if option == "train" else DEV_FILE
        raise UsageError(
            f"--{option}: no STS-B file given, and this installation has none at {STSB_DIR / name} "
            "(an installation without the package data of labeldist.sts); "
            f"pass --{option} FILE"
        )
    check_file(path, "STS-B file")
    return path


def recorded_stsb(path: str) -> str:
    """How a store's manifest names the STS-B file ``path``: a shipped file as ``data/stsb/<name>``, the name the
    default had when it was relative (the files were then in the repository's data/), any other file as given. A
    manifest is a store's fingerprint: it must not depend on where labeldist lies, and a store made with the old
    default must still be reused."""
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
    bert = (
        args.scorer == "cascade"
        and getattr(args, "bert_threshold", None) is None
        and getattr(args, "candidates", None) is None
    )
    return cbow or bert


def check_model(name: str | None) -> None:
    """An OSError naming ``name`` unless it is None, the packaged model or a model folder (one with config.json):
    checked before any sentence is read or scored, so that a typo is one line, not a failure minutes later."""

    if name is None or str(name) == PACKAGED:
        return
    check_folder(name)
    if not os.path.isfile(os.path.join(name, "config.json")):
        raise FileNotFoundError(
            errno.ENOENT,
            "no config.json: not a sentence model folder (make one with `labeldist sts fit --out FOLDER`)",
            os.fspath(name),
        )


def sentence_labels(first: list[str], second: list[str], source: str) -> tuple[Any, Any, Any]:
    """Sentences of the distinct texts of STS pairs, and the index of each pair's two sentences (a sentence
    without a word vector is an error: benchmarks/bench_sts.py and the cascade's calibration read it so)."""
    labels, i, j, _ = kept_sentence_pairs(first, second, source)
    return labels, i, j


def kept_sentence_pairs(
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
    names: dict[str, str] = {}
    for column, texts in ((1, first), (2, second)):
        for t, text in enumerate(texts):
            names.setdefault(text, f"line {lines[t]}, sentence{column}" if lines else str(len(names)))
    labels = sentences_from_texts(list(names.values()), list(names), source=source, empty=empty, needs_cbow=needs_cbow)
    where = {t: n for n, t in enumerate(labels.texts)}
    kept = np.array([a in where and b in where for a, b in zip(first, second)], dtype=bool)
    i = np.array([where[a] for a, k in zip(first, kept) if k], dtype=np.int64)
    j = np.array([where[b] for b, k in zip(second, kept) if k], dtype=np.int64)
    return labels, i, j, kept


def build_distance(args: argparse.Namespace, labels: Any = None) -> SentenceRelevance:
    """The SentenceRelevance the options ask for, thresholds calibrated where not given.

    CBoW threshold: ``--cbow-threshold``, else the score passing ``--pass-share`` of the STS-B training pairs.
    Cascade gate: ``--bert-threshold``, else on average ``--candidates`` per sentence of ``labels`` (the corpus),
    else the bi-encoder score passing ``--bert-pass-share`` of the training pairs that pass the CBoW gate.
    """
    calibration: dict[str, Any] = {}
    cbow_threshold = args.cbow_threshold
    if args.scorer in ("coarse_to_fine", "cascade") and cbow_threshold is None:
        train = read_sts(stsb_file(args, "train"))
        cbow_threshold, calibration["cbow"] = calibrate_cbow_threshold(train, args.pass_share)
        if "file" in calibration["cbow"]:
            calibration["cbow"]["file"] = recorded_stsb(calibration["cbow"]["file"])
    bert_threshold = getattr(args, "bert_threshold", None)
    common = dict(
        model=args.model,
        cbow_threshold=cbow_threshold,
        below=args.below,
        max_length=args.max_length,
        backend=getattr(args, "backend", None),
    )
    if args.scorer == "cascade" and bert_threshold is None:
        first = SentenceRelevance("bert", **common)
        if getattr(args, "candidates", None) is not None and labels is not None:
            sample = np.sort(np.random.default_rng(0).choice(len(labels), min(len(labels), 2000), replace=False))
            sub = labels.subset(sample)
            emb = bi_encoder_scorer(resolve_model(first.model), args.max_length, first.backend).embed(sub.texts)
            units, defined = cbow_units(sub), sub.cbow_defined
            share = args.candidates / (len(labels) - 1)

            def gate(r: np.ndarray) -> np.ndarray:  # the distance's own gate: a pair without CBoW passes
                return cbow_gate(units[r] @ units.T, ~(defined[r, None] & defined[None, :]), cbow_threshold)

            bert_threshold = threshold_for_candidates(emb, share * (len(sub) - 1), gate=gate)
            calibration["bert"] = {
                "method": "corpus_candidates",
                "candidates": args.candidates,
                "sample": len(sub),
                "seed": 0,
            }
        else:
            train = read_sts(stsb_file(args, "train"))
            cbow = cbow_pair_relevance(train.first, train.second, Tokenizer(), default_word_vectors())
            keep = np.flatnonzero(cbow >= cbow_threshold)  # a sentence without vectors has CBoW 0: never kept
            tl, i, j = sentence_labels([train.first[t] for t in keep], [train.second[t] for t in keep], train.source)
            bi = 1.0 - first.pairs(tl, i, j)
            bert_threshold = threshold_for_share(bi, args.bert_pass_share)
            calibration["bert"] = {
                "method": "sts_quantile",
                "pass_share": args.bert_pass_share,
                "of": "train pairs passing the CBoW gate",
                "sha256": train.sha256,
            }
    return SentenceRelevance(
        args.scorer,
        cross_model=getattr(args, "cross_model", None),
        bert_threshold=bert_threshold,
        calibration=calibration or None,
        **common,
    )


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
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        help="what runs the bi-encoder: onnx (ONNX Runtime; the model exported once to $LABELDIST_CACHE/onnx, "
        "1.4-1.65x torch's speed on a CPU, the same embeddings to 1e-6) or torch (default: onnx on a machine "
        "without CUDA where onnxruntime is installed, else torch on the GPU)",
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
    p.add_argument(
        "--max-length",
        type=positive_int,
        default=256,
        help="word pieces per model input; longer is truncated (default: %(default)s)",
    )
    p.add_argument(
        "--train",
        default=shipped_stsb(TRAIN_FILE),
        metavar="FILE",
        help=f"STS-B file the thresholds are calibrated on, where they are not given ({stsb_default_help(TRAIN_FILE)})",
    )


def load(args: argparse.Namespace) -> tuple[Sentences, SentenceRelevance, str]:
    """``labeldist precompute sentences``: the sentences of a file (COCO/Karpathy captions JSON, .txt, .csv,
    .tsv, .jsonl; :func:`labeldist.labels.sentences.read_sentences`) and their relevance distance."""
    check_file(args.input)
    check_model(args.model)
    check_model(args.cross_model)
    if needs_train(args):  # checked before the sentences are read, which can take minutes
        stsb_file(args, "train")
    progress = not getattr(args, "no_progress", False)
    started = time.perf_counter()
    labels = read_sentences(
        args.input,
        format=args.format,
        column=args.column,
        id_column=args.id_column,
        empty=args.empty,
        limit=args.limit,
        needs_cbow=args.scorer != "bert",
    )
    if progress:  # what the seconds before the first block went to (word vectors, when CBoW needs them)
        print(f"sentences: {len(labels):,} sentences read in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    if args.dense:  # the engine checks too; here before the model is loaded and its thresholds calibrated
        check_dense_size(len(labels), args.dense_limit, "sentences")
    started = time.perf_counter()
    distance = build_distance(args, labels)  # its prepare() embeds each sentence once, if the store needs it
    if progress:  # a model loaded, thresholds calibrated on STS-B where not given
        print(
            f"sentences: the {args.scorer} scorer made in {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
        )
    dataset = args.dataset or Path(args.input).stem + (f"-first{args.limit}" if args.limit else "")
    return labels, distance, dataset


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``precompute sentences`` (the sentence kind's, :data:`KIND`)."""
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


KIND = Kind(
    name="sentence_relevance",
    distance="labeldist.distances.sts:SentenceRelevance",
    command="sentences",
    help="sentences (1 - relevance: CBoW, BERT, coarse-to-fine, cascade)",
    add_arguments=add_arguments,
    load=load,
)
