"""``trainer fit``: train an embedding on minibatches from a store (wired in :mod:`labeldist.trainer.cli`)."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from pathlib import Path

from labeldist.core.options import (
    finite_float,
    layer_width,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
    seed_int,
    share_float,
    worker_count,
)
from labeldist.trainer.commands.eval import _print_eval
from labeldist.trainer.commands.options import (
    add_input_args,
    add_service_args,
    batch_size,
    local_store,
    loss_options,
    percent_float,
    unit_float,
)
from labeldist.trainer.inputs.augment import AUGMENT_NAMES, check_crop_scale
from labeldist.trainer.losses import LOSSES
from labeldist.trainer.training.recipes import (
    OPTIMIZERS,
    RECIPE_FIELDS,
    RECIPES,
    SCHEDULES,
    describe_recipes,
    recipe_name,
    resolve_recipe,
)


def _fit(args: argparse.Namespace) -> int:
    from labeldist.store.outputs import check_not_inputs
    from labeldist.trainer.training.config import CHECKPOINT, LOG, FitConfig
    from labeldist.trainer.training.fit import open_source
    from labeldist.trainer.training.sequence import HeldOut, fit_and_evaluate

    run = Path(args.out)
    check_not_inputs(  # the run's folder and every file a run writes there
        [run, *(run / name for name in (CHECKPOINT, LOG, "eval.json", "eval.png"))],
        [
            ("the --features", args.features),
            ("the --images folder", args.images),
            ("the --image-index", args.image_index),
            ("the --weights", args.weights),
            ("the --split", args.split),
            ("the --eval-features", args.eval_features),
            ("the --eval-images folder", args.eval_images),
            ("the --eval-image-index", args.eval_image_index),
            ("the store trained on", local_store(args.stores, args.store)),
            ("the --eval-store", local_store(args.stores, args.eval_store)),
        ],
    )
    if args.eval_store and not ((args.eval_features or args.eval_images) and args.split):
        raise SystemExit("--eval-store needs --split and --eval-features or --eval-images")
    check_crop_scale(tuple(args.crop_scale))
    with open_source(args.stores, args.url, args.api_key) as source:
        kind = source.store(args.store).get("kind")
    recipe = RECIPES[recipe_name(args.recipe, kind, args.images is not None, args.weights)]
    args.loss = args.loss or recipe.loss
    names = {f.name for f in fields(FitConfig)}
    values = {k: v for k, v in vars(args).items() if k in names and v is not None}
    if args.lr_step_epochs is not None:
        values["lr_step_epochs"] = tuple(args.lr_step_epochs)
    values["hidden"] = tuple(args.hidden)
    values["loss_options"] = loss_options(args)
    values["progress"] = not args.no_progress
    values["flip"] = not args.no_flip
    values["crop_scale"] = tuple(args.crop_scale)
    given = {k: v for k, v in values.items() if k in RECIPE_FIELDS or k == "loss_options"}
    resolved = resolve_recipe(args.recipe, kind=kind, images=args.images is not None, given=given, weights=args.weights)
    values.update(resolved)
    config = FitConfig(**values)
    held_out = None
    if args.eval_store:
        held_out = HeldOut(
            args.eval_store,
            args.split,
            features=args.eval_features,
            images=args.eval_images,
            image_pattern=args.image_pattern,
            image_index=args.eval_image_index,
            k_max=args.k_max,
        )
    done = fit_and_evaluate(config, held_out)
    if args.json:
        print(json.dumps(done["fit"]))
    else:
        from labeldist.trainer.results.report import fit_table, run_device

        print(fit_table(done["fit"], run=args.out, loss=args.loss, device=run_device(args.out)))
    if done["eval"] is not None:
        if not args.json:
            print()  # the metrics' table apart from the run's
        _print_eval(done["eval"], args.json)
    return 0


def _fit_loss_args(fit: argparse.ArgumentParser) -> None:
    """fit: the loss and its options (--loss, --margin, --positives, log_ratio's --squared, the ladder's)."""
    fit.add_argument("--loss", choices=sorted(LOSSES), help="recipe: log_ratio (Kim et al.), ladder (Zhou et al.)")
    fit.add_argument(
        "--anchors",
        choices=("first", "all"),
        help="which members of a minibatch the loss takes as anchors: all (each in turn, by the minibatch's "
        "pairwise label distances; the scratch recipe's) or first (the authors' code: the distances to one "
        "anchor; the kim2019 recipes'). Default: the recipe's, else the loss's own (first; the ladder: all)",
    )
    fit.add_argument(
        "--margin",
        type=nonnegative_float,
        help="triplet margin (default: 0.03 dense, 0.2 binary); lifted: the "
        "negative margin (1); proxy_anchor: delta (0.1)",
    )
    fit.add_argument(
        "--positives",
        type=positive_int,
        help="binary_triplet, lifted, proxy_anchor, multi_similarity: the N "
        "items of each minibatch nearest the anchor in label distance are its positives, the rest its "
        "negatives (default: a fifth of the other items, 30 of 149 as Kim et al.); proxy_anchor: those N and "
        "the anchor form the class of the anchor's store index, every other item the class of its own (one "
        "proxy per store item)",
    )
    squared = fit.add_mutually_exclusive_group()
    squared.add_argument(
        "--unsquared",
        action="store_true",
        help="log_ratio: Euclidean D(f), as the authors' code (the kim2019 recipes' choice)",
    )
    squared.add_argument(
        "--squared",
        action="store_true",
        help="log_ratio: squared Euclidean D(f), as the paper's Eq. 5 (labeldist-v1's choice)",
    )
    fit.add_argument("--thresholds", type=finite_float, nargs="+", help="ladder: relevance thresholds, decreasing")
    fit.add_argument("--relevance", choices=("one_minus", "inverse"), help="ladder: relevance from distance")
    fit.add_argument(
        "--ladder-calibrate",
        choices=("auto", "quantile", "off", "percentile"),
        help="ladder: auto "
        "(default) keeps the thresholds where the first batch's relevances lie in [0, 1] and form a rung, "
        "else sets them at quantiles of its label distances (quantile: always; off: never, an error); "
        "percentile: Zhou et al.'s adaptive thresholds, per anchor at percentiles of its own relevances "
        "to the minibatch (--ladder-percentiles)",
    )
    fit.add_argument(
        "--ladder-percentiles",
        type=percent_float,
        nargs="+",
        help="ladder, --ladder-calibrate percentile: one per rung, decreasing (default 95 85, the authors' code)",
    )
    fit.add_argument(
        "--ladder-shares",
        type=share_float,
        nargs="+",
        help="ladder: shares of the first batch's pairs at "
        "or below each calibrated threshold, one per rung, increasing (default 0.05 0.2)",
    )


def _fit_recipe_args(fit: argparse.ArgumentParser) -> None:
    """fit: the recipe and the training settings (minibatches, epochs, optimiser and schedule, embedding), most of
    them the recipe's unless given."""
    fit.add_argument(
        "--recipe",
        default="auto",
        choices=("auto", *RECIPES),
        help="the training settings by name "
        "(optimiser, lr and decay, epochs, batch, neighbours, loss, anchors, embedding, augmentation); every "
        "option below overrides its field. auto: over images from random weights (no --weights) scratch, "
        "the recipe that learns from them; over images from --weights the paper's recipe of the store's kind "
        "(kim2019-pose, kim2019-layout, kim2019-caption, zhou2020 for sentences); over features labeldist-v1 "
        "(the defaults before recipes). The choice and its reason are printed and logged. " + describe_recipes(),
    )
    fit.add_argument(
        "--size", type=batch_size, help="minibatch size with the anchor (recipe; paper: 150 poses, 50 captions)"
    )
    fit.add_argument("--neighbors", type=nonnegative_int, help="nearest neighbours per minibatch (recipe; paper: 5)")
    fit.add_argument(
        "--batches-per-step", type=positive_int, default=1, help="minibatches (anchors) per optimizer step"
    )
    fit.add_argument("--epochs", type=positive_int, help="passes over every item as an anchor (recipe; papers: 30)")
    fit.add_argument("--max-steps", type=positive_int)
    fit.add_argument("--optimizer", choices=OPTIMIZERS, help="recipe: sgd (Kim et al.) or adam")
    fit.add_argument("--lr", type=positive_float, help="initial learning rate (recipe: 0.01 Kim et al.)")
    fit.add_argument("--momentum", type=unit_float, help="sgd momentum (recipe: 0.9)")
    fit.add_argument("--weight-decay", type=nonnegative_float, help="recipe: 5e-4 Kim et al.")
    fit.add_argument(
        "--lr-schedule",
        choices=SCHEDULES,
        help="constant, inverse: lr / (1 + DECAY * step) (Kim et al.), step: x DECAY at --lr-step-epochs (VSE++), "
        "cosine: from lr down to lr x DECAY over the --epochs (--max-steps stops early, the schedule unchanged)",
    )
    fit.add_argument("--lr-decay", type=nonnegative_float, help="the schedule's DECAY (recipe: 1e-4 inverse, 0.1 step)")
    fit.add_argument("--lr-step-epochs", type=positive_int, nargs="*", help="step schedule: the epochs where it decays")
    fit.add_argument("--embedding-dim", type=layer_width, help="recipe: 128 (Kim et al.), 1024 (Zhou et al.)")
    fit.add_argument("--hidden", type=layer_width, nargs="*", default=[512], help="hidden widths of the MLP (features)")


def _fit_image_args(fit: argparse.ArgumentParser) -> None:
    """fit, images: their augmentation and decoded-image cache."""
    fit.add_argument(
        "--augment",
        choices=AUGMENT_NAMES,
        help="images: kind (the store kind's own "
        "transforms: poses a +-5%% scale and +-3%% shift jitter and a flip of the whole minibatch or "
        "none of it; layouts the minibatch flip), flip (the kind's flip alone, no jitter: every distance "
        "kept), none, or imagenet (random resized crop and a flip per image; refused where the distance "
        "is not mirror-invariant) (recipe: scratch none, kim2019 kind, labeldist-v1 imagenet)",
    )
    fit.add_argument(
        "--allow-image-flip",
        action="store_true",
        help="images: allow a per-image flip on a kind "
        "whose distance is not mirror-invariant (poses, layouts): it teaches that a pose and its mirror "
        "are alike, which the distance says they are not",
    )
    fit.add_argument("--no-flip", action="store_true", help="images: no flip in the chosen augmentation")
    fit.add_argument(
        "--crop-scale",
        type=share_float,
        nargs=2,
        default=[0.08, 1.0],
        metavar=("MIN", "MAX"),
        help="images, --augment imagenet: area range of the random resized crop (default: %(default)s)",
    )
    fit.add_argument(
        "--image-cache",
        choices=("auto", "on", "off"),
        default="auto",
        help="images: decode every "
        "image once into a shared uint8 array in memory (auto: when it fits), else decode in loader "
        "processes each step",
    )


def _fit_run_args(fit: argparse.ArgumentParser) -> None:
    """fit: precision, device, threads, seed, checkpoints and resume, prefetch, progress."""
    fit.add_argument(
        "--precision",
        choices=("auto", "bf16", "fp16", "fp32"),
        default="auto",
        help="forward pass (auto: bf16 on CUDA, fp32 on CPU; the loss is always fp32) (default: %(default)s)",
    )
    fit.add_argument(
        "--channels-last",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="images: channels-last convolutions (default: on CUDA only)",
    )
    fit.add_argument("--compile", action="store_true", help="torch.compile the model (CUDA; the first steps compile)")
    fit.add_argument("--seed", type=seed_int, default=0)
    fit.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1, ...")
    fit.add_argument(
        "--threads",
        type=worker_count,
        help="torch CPU threads (default on CPU: 1 for the MLP over features, whose small matrices lose to "
        "spinning threads; every usable core for a CNN over images)",
    )
    fit.add_argument("--checkpoint-every", type=positive_int, default=500)
    fit.add_argument("--resume", action="store_true", help="continue from <out>/checkpoint.pt")
    fit.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run already in --out (else refused; --resume continues it)",
    )
    fit.add_argument("--prefetch", type=positive_int, default=8, help="requests fetched ahead")
    fit.add_argument("--workers", type=worker_count, default=2, help="prefetch threads")
    fit.add_argument(
        "--anchors-per-request",
        type=positive_int,
        help="minibatches per service request (default: 8 over features, --batches-per-step over images)",
    )
    fit.add_argument("--no-progress", action="store_true")


def _fit_eval_args(fit: argparse.ArgumentParser) -> None:
    """fit: the evaluation after training (--eval-store ...), and --json."""
    fit.add_argument("--eval-store", help="after training, evaluate on this (test) store ...")
    fit.add_argument("--eval-features", help="... with these features (or --eval-images) ...")
    fit.add_argument("--eval-images", help="... or these images (the same --image-pattern) ...")
    fit.add_argument("--eval-image-index", help="... mapped by this id,path CSV (default: EVAL_IMAGES/index.csv) ...")
    fit.add_argument("--split", help="... and the queries/gallery of this split.json")
    fit.add_argument("--k-max", type=positive_int, default=100)
    fit.add_argument("--json", action="store_true", help="end with JSON lines (summary, metrics), not tables")


def add_fit_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """``trainer fit``: train an embedding."""
    fit = subparsers.add_parser("fit", help="train an embedding on minibatches from the service")
    add_service_args(fit)
    fit.add_argument("--store", required=True, help="training store, as the service names it")
    add_input_args(fit)
    fit.add_argument("--out", required=True, help="run folder: checkpoint.pt, log.jsonl, eval.json, eval.png")
    _fit_loss_args(fit)
    _fit_recipe_args(fit)
    _fit_image_args(fit)
    _fit_run_args(fit)
    _fit_eval_args(fit)
    fit.set_defaults(func=_fit)
    return fit
