"""The ``labeldist sts ...`` commands (wired in :mod:`labeldist.cli`): fine-tune a sentence relevance model on
STS-B, and score a relevance scorer on STS-B dev. The scorer options and ``precompute sentences`` belong to the
sentence kind, :mod:`labeldist.kinds.sentence_relevance`.

labeldist sts fit --architecture bi --loss cosine --epochs 1 --seed 0 --out models/sts-bi-cosine
labeldist sts eval --scorer coarse_to_fine --model models/sts-bi-cosine
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from labeldist.core.options import nonnegative_float, number_option, positive_float, positive_int, seed_int
from labeldist.distances.sts import cbow_gate
from labeldist.kinds.sentence_relevance import (
    DEV_FILE,
    EMPTY_HELP,
    TRAIN_FILE,
    add_scorer_options,
    build_distance,
    check_model,
    kept_sentence_pairs,
    needs_train,
    shipped_stsb,
    stsb_default_help,
    stsb_file,
)
from labeldist.labels.sentences import EMPTY_SENTENCE_POLICIES


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
    labels, i, j, kept = kept_sentence_pairs(
        list(dev.first),
        list(dev.second),
        dev.source,
        empty=args.empty,
        needs_cbow=args.scorer != "bert",
        lines=dev.lines,
    )
    before = transformer_calls()
    started = time.perf_counter()
    relevance = 1.0 - distance.pairs(labels, i, j)
    seconds = time.perf_counter() - started
    calls = {k: v - before[k] for k, v in transformer_calls().items()}
    report = {
        "scorer": args.scorer,
        "pairs": int(kept.sum()),
        "pairs_left_out": int((~kept).sum()),
        "empty": args.empty,
        **{k: round(v, 4) for k, v in correlations(relevance, dev.relevance[kept]).items()},
        "transformer_calls": calls,
        "seconds": round(seconds, 1),
        "params": distance.params(),
    }
    if distance.cbow_threshold is not None:
        cbow = 1.0 - type(distance)("cbow").pairs(labels, i, j)
        undefined = ~(labels.cbow_defined[i] & labels.cbow_defined[j])
        report["cbow_pass_share"] = round(float(cbow_gate(cbow, undefined, distance.cbow_threshold).mean()), 4)
    print(json.dumps(report, indent=2))
    return 0


def _fit(args: argparse.Namespace) -> int:
    from labeldist.store.outputs import refuse_inside_store
    from labeldist.sts.fit import FitConfig, check_model_folder, fit
    from labeldist.sts.stsb import read_sts

    check_model(args.base_model)
    train_file, dev_file = stsb_file(args, "train"), stsb_file(args, "dev")
    config = FitConfig(
        architecture=args.architecture,
        loss=args.loss,
        base_model=args.base_model,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup=args.warmup,
        weight_decay=args.weight_decay,
        max_length=args.max_length,
        swap=args.swap,
        seed=args.seed,
    )
    train = read_sts(train_file).head(args.limit)
    dev = read_sts(dev_file).head(args.dev_limit)
    out = args.out or f"models/sts-{config.architecture}-{config.loss}"
    refuse_inside_store(out)  # before the training, not after it
    check_model_folder(out, args.overwrite)
    result = fit(train, dev, config, out, progress=False if args.no_progress else None)
    print(
        json.dumps(
            {
                "model": str(result.path),
                "dev_pearson": round(result.dev_pearson, 4),
                "dev_spearman": round(result.dev_spearman, 4),
                "seconds": round(result.seconds, 1),
            }
        )
    )
    return 0


def add_sts_parser(sub: Any) -> None:
    """Add the ``sts`` command group to the top-level subparsers ``sub``."""
    sts = sub.add_parser("sts", help="sentence relevance models: fine-tune on STS-B, evaluate scorers")
    cmds = sts.add_subparsers(dest="sts_command", required=True)

    fit = cmds.add_parser("fit", help="fine-tune all-MiniLM-L6-v2 on STS-B train, score it on dev, save it")
    fit.add_argument(
        "--architecture",
        choices=("bi", "cross"),
        default="bi",
        help="bi-encoder (cosine of embeddings) or cross-encoder (default: %(default)s)",
    )
    fit.add_argument("--loss", help="bi: cosent (default) or cosine; cross: bce (default) or mse")
    fit.add_argument(
        "--base-model",
        default="all-MiniLM-L6-v2",
        help="start from this model folder (default: the packaged %(default)s)",
    )
    fit.add_argument("--epochs", type=positive_int, default=4, help="passes over the data (default: %(default)s)")
    fit.add_argument("--batch-size", type=positive_int, default=16, help="pairs per step (default: %(default)s)")
    fit.add_argument("--lr", type=positive_float, default=2e-5, help="peak learning rate (default: %(default)s)")
    fit.add_argument(
        "--warmup",
        type=number_option(float, 0, 1, below=True),
        default=0.1,
        help="share of the steps with linear warm-up, 0 <= share < 1 (default: %(default)s)",
    )
    fit.add_argument(
        "--weight-decay", type=nonnegative_float, default=0.01, help="AdamW weight decay (default: %(default)s)"
    )
    fit.add_argument(
        "--max-length",
        type=positive_int,
        default=128,
        help="word pieces per input while training (default: %(default)s)",
    )
    fit.add_argument("--swap", action="store_true", help="cross-encoder: train on both orders of each pair")
    fit.add_argument(
        "--seed", type=seed_int, default=0, help="seed of shuffles and initial weights (default: %(default)s)"
    )
    fit.add_argument(
        "--train",
        default=shipped_stsb(TRAIN_FILE),
        metavar="FILE",
        help=f"STS-B training file ({stsb_default_help(TRAIN_FILE)})",
    )
    fit.add_argument(
        "--dev", default=shipped_stsb(DEV_FILE), metavar="FILE", help=f"STS-B dev file ({stsb_default_help(DEV_FILE)})"
    )
    fit.add_argument("--limit", type=positive_int, help="train on the first N pairs only (quick checks)")
    fit.add_argument("--dev-limit", type=positive_int, help="score on the first N dev pairs only")
    fit.add_argument("--out", help="model folder (default: models/sts-<architecture>-<loss>, in the working folder)")
    fit.add_argument("--no-progress", action="store_true", help="no progress bar")
    fit.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the model already in --out (the stores built on it then answer 503 until rebuilt)",
    )
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
    ev.add_argument(
        "--dev",
        default=shipped_stsb(DEV_FILE),
        metavar="FILE",
        help=f"STS-B file to score ({stsb_default_help(DEV_FILE)})",
    )
    ev.add_argument("--dev-limit", type=positive_int, help="the first N pairs only")
    ev.set_defaults(func=_eval)
