"""The ``trainer`` command: ``fit``, ``eval``, ``plot``, ``demo-inputs``, ``split`` (an alias of ``labeldist split``,
which needs no torch) and ``render``.

    trainer fit --url http://127.0.0.1:8000 --store mpii-train-pose --features train.npy --out runs/lr
    trainer render stores/mpii-train-pose --out images/mpii-train           # images drawn from the labels
    trainer fit --store mpii-train-pose --images images/mpii-train --backbone resnet18 --out runs/cnn
    trainer eval --url http://127.0.0.1:8000 --store mpii-test-pose --features test.npy --split split.json \\
        --checkpoint runs/lr/checkpoint.pt --out runs/lr/eval.json --plot runs/lr/eval.png
    trainer plot runs/lr runs/triplet --out fig3.png            # eval.json of each run, named after the run
    trainer plot --loss-curves runs/lr runs/triplet --out loss.png
    trainer split stores/mpii-pose --out stores/mpii-split   # a train store and a test store, and split.json

``fit`` and ``eval`` end with a table; ``--json`` prints their JSON lines instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from labeldist import __version__
from labeldist.core.options import (
    finite_float,
    image_side,
    layer_width,
    nonnegative_float,
    nonnegative_int,
    number_option,
    os_error_message,
    positive_float,
    positive_int,
    seed_int,
    share_float,
    show_defaults,
    worker_count,
)
from labeldist.engine.split import add_split_parser
from labeldist.errors import LabeldistError
from labeldist.trainer.inputs.augment import AUGMENT_NAMES, check_crop_scale
from labeldist.trainer.losses import LOSSES
from labeldist.trainer.training.models import BACKBONES
from labeldist.trainer.training.recipes import (
    OPTIMIZERS,
    RECIPE_FIELDS,
    RECIPES,
    SCHEDULES,
    describe_recipes,
    recipe_name,
    resolve_recipe,
)

#: losses that split a minibatch into positives and negatives by the binary rule (--positives)
BINARY_LOSSES = ("binary_triplet", "lifted", "proxy_anchor", "multi_similarity")


#: a minibatch's size, anchor included
batch_size = number_option(int, 2, 1_000_000)
#: image decoding processes (0: in the training process)
loader_count = number_option(int, 0, 256)
#: a percentile
percent_float = number_option(float, 0, 100)
#: SGD's momentum
unit_float = number_option(float, 0, 1)
#: a probability that leaves something (a joint hidden with probability 1 would hide every pose)
probability_below_one = number_option(float, 0, 1, below=True)


def _loss_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.margin is not None and args.loss in ("log_ratio", "ladder", "multi_similarity"):
        raise SystemExit(
            f"--margin does not apply to {args.loss} (log_ratio has none; ladder and multi_similarity keep the papers')"
        )
    options: dict[str, Any] = {}
    if args.margin is not None:
        options["margin"] = args.margin
    if args.loss in BINARY_LOSSES and args.positives is not None:
        options["positives"] = args.positives
    if args.loss == "log_ratio" and (args.unsquared or args.squared):
        options["squared"] = bool(args.squared)
    ladder_flags = args.ladder_calibrate or args.ladder_percentiles or args.ladder_shares
    if args.loss == "ladder" or (args.loss is None and ladder_flags):  # the recipe's ladder (zhou2020)
        if args.thresholds:
            options["thresholds"] = args.thresholds
        if args.relevance:
            options["relevance"] = args.relevance
        if args.ladder_calibrate:
            options["calibrate"] = args.ladder_calibrate
        if args.ladder_shares:
            options["shares"] = args.ladder_shares
        if args.ladder_percentiles:
            if args.ladder_calibrate != "percentile":
                raise SystemExit("--ladder-percentiles needs --ladder-calibrate percentile")
            options["percentiles"] = args.ladder_percentiles
    elif ladder_flags:
        raise SystemExit(
            f"--ladder-calibrate, --ladder-percentiles and --ladder-shares are options of the ladder "
            f"loss, not of {args.loss}"
        )
    return options


def _local_store(stores: str | None, store: str | None) -> str | None:
    """The folder of the store ``store`` read from the local folder ``stores`` (None when served)."""
    return None if stores is None or store is None else os.path.join(stores, store)


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
            ("the store trained on", _local_store(args.stores, args.store)),
            ("the --eval-store", _local_store(args.stores, args.eval_store)),
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
    values["loss_options"] = _loss_options(args)
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


def _eval(args: argparse.Namespace) -> int:
    from labeldist.store.outputs import check_not_inputs, check_output_file, write_text
    from labeldist.trainer.results.plots import plot_format
    from labeldist.trainer.training.evaluate import (
        UNTRAINED_BACKBONE,
        ImageSource,
        check_split_store,
        evaluate,
        load_split,
        plot_curves,
    )
    from labeldist.trainer.training.fit import open_source

    if args.plot:
        plot_format(args.plot)
    check_not_inputs(
        [args.out, args.plot],
        [
            ("the --features", args.features),
            ("the --split", args.split),
            ("the --checkpoint", args.checkpoint),
            ("the --images folder", args.images),
            ("the --image-index", args.image_index),
            ("the --weights", args.weights),
            ("the store evaluated", _local_store(args.stores, args.store)),
        ],
    )
    for out in filter(None, (args.out, args.plot)):  # refused before the evaluation rather than after it
        if Path(out).parent.is_dir():  # else made, with its folder, once the results are in
            check_output_file(out, args.overwrite)
    queries, gallery = load_split(args.split)
    images = None
    if args.images:
        images = ImageSource(
            args.images,
            pattern=args.image_pattern,
            index=args.image_index,
            input_size=args.input_size,
            workers=args.loader_workers,
        )
    with open_source(args.stores, args.url, args.api_key) as client:
        check_split_store(args.split, client.store(args.store), args.store)
        result = evaluate(
            client,
            args.store,
            args.features,
            queries,
            gallery,
            checkpoint=args.checkpoint,
            k_max=args.k_max,
            device=args.device,
            images=images,
            backbone=args.backbone,
            embedding_dim=args.embedding_dim,
            weights=args.weights,
            progress=False if args.no_progress else None,
        )
    untrained = "input features" if args.features else f"untrained {args.backbone or UNTRAINED_BACKBONE}"
    result["label"] = args.label or (result.get("loss") or untrained)
    write_text(args.out, json.dumps(result), args.overwrite)
    if args.plot:
        plot_curves({result["label"]: result}, args.plot, title=args.store, overwrite=args.overwrite)
    _print_eval(result, args.json)
    return 0


def _print_eval(result: dict[str, Any], as_json: bool) -> None:
    """The metrics of an evaluation: a table, or (``--json``) the summary's JSON line as before."""
    from labeldist.trainer.results.report import eval_table

    print(json.dumps(result["summary"]) if as_json else eval_table(result))


def _plot(args: argparse.Namespace) -> int:
    from labeldist.trainer.results.plots import legend_labels, plot_evals, plot_format, plot_losses

    plot_format(args.out)
    if args.loss_curves:
        fig = plot_losses(
            args.results,
            args.out,
            labels=args.label,
            title=args.title or "",
            y_scale=args.y_scale,
            overwrite=args.overwrite,
        )
    else:
        fig = plot_evals(args.results, args.out, labels=args.label, title=args.title or "", overwrite=args.overwrite)
    labels = legend_labels(fig)
    print(f"{args.out}: {len(labels)} curves: " + "; ".join(labels))
    return 0


def _demo_inputs(args: argparse.Namespace) -> int:
    from labeldist.trainer.inputs.demo_inputs import write_demo_inputs

    options = {} if args.hide is None else {"hide": args.hide}
    if args.jitter is not None:
        options["jitter"] = args.jitter
    features = write_demo_inputs(args.store, args.out, seed=args.seed, overwrite=args.overwrite, **options)
    print(f"{args.out}: {features.shape} {features.dtype}")
    return 0


def _render(args: argparse.Namespace) -> int:
    from labeldist.store.outputs import check_not_inputs
    from labeldist.trainer.render.base import INDEX, META, read_frame, render_store

    try:
        out = Path(args.out)
        check_not_inputs(
            [out, out / INDEX, out / META],
            [("the store rendered", args.store), ("the --frame-from render", args.frame_from)],
        )
        frame = read_frame(args.frame_from) if args.frame_from else args.frame
        meta = render_store(
            args.store,
            args.out,
            size=args.size,
            seed=args.seed,
            fmt=args.format,
            items=args.items,
            workers=args.workers,
            overwrite=args.overwrite,
            progress=not args.no_progress,
            frame=frame,
        )
    except LabeldistError as e:  # one line, no traceback
        print(f"trainer render: {e}", file=sys.stderr)
        return 2
    print(f"{args.out}: {meta['count']} {meta['kind']} images, {meta['size']} px, seed {meta['seed']}")
    if meta.get("frame") is not None:
        print(f"frame (cx, cy, half) = {tuple(meta['frame'])}: {meta['frame_source']}")
    return 0


def _input_args(p: argparse.ArgumentParser, train: bool = True) -> None:
    """--features or --images, and how images are found, sized and embedded."""
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--features", help="input features indexed like the store (.npy or zarr): an MLP head")
    which.add_argument(
        "--images",
        metavar="ROOT",
        help="a folder of images, one per store item: a ResNet (trainer render draws them from pose and layout labels)",
    )
    p.add_argument(
        "--image-pattern",
        help="images: the file of an item under ROOT, e.g. '{id}.jpg' (default: "
        "ROOT/index.csv when it exists, else '{id}.jpg')",
    )
    p.add_argument("--image-index", help="images: a CSV with columns id,path (paths relative to the CSV)")
    if train:
        p.add_argument(
            "--backbone",
            default="resnet34",
            choices=BACKBONES,
            help="images: torchvision ResNet (default: %(default)s)",
        )
    else:  # no default: given with --checkpoint, it must be the checkpoint's (another one is refused)
        p.add_argument(
            "--backbone",
            choices=BACKBONES,
            help="images: torchvision ResNet when untrained (default: resnet34); with --checkpoint, the checkpoint's",
        )
    p.add_argument(
        "--weights",
        help="images: a local state dict to start from (torchvision's ImageNet checkpoint "
        "of the backbone, or a trainer checkpoint); default: random initialisation",
    )
    own = "" if train else ", or the checkpoint's"
    p.add_argument(
        "--input-size",
        type=image_side,
        help=f"images: side of the square input in pixels (default: the images' own size when they all have one{own})",
    )
    p.add_argument(
        "--loader-workers", type=loader_count, help="images: decoding processes (default: CPU cores - 1, max 16)"
    )


def _service_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default="http://127.0.0.1:8000", help="labeldist service (default: %(default)s)")
    p.add_argument(
        "--stores",
        metavar="DIR",
        help="read the stores in this process from DIR (as `labeldist serve "
        "--stores DIR` names them), no service: the same minibatches for the same seed",
    )
    p.add_argument("--api-key", help="sent as X-API-Key (when the service computes distances only with one)")


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
    _service_args(fit)
    fit.add_argument("--store", required=True, help="training store, as the service names it")
    _input_args(fit)
    fit.add_argument("--out", required=True, help="run folder: checkpoint.pt, log.jsonl, eval.json, eval.png")
    _fit_loss_args(fit)
    _fit_recipe_args(fit)
    _fit_image_args(fit)
    _fit_run_args(fit)
    _fit_eval_args(fit)
    fit.set_defaults(func=_fit)
    return fit


def add_eval_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """``trainer eval``: retrieval metrics of a checkpoint, or of the untrained inputs."""
    ev = subparsers.add_parser(
        "eval", help="retrieval metrics of a checkpoint (or of the input features) on a test store"
    )
    _service_args(ev)
    ev.add_argument("--store", required=True)
    _input_args(ev, train=False)
    ev.add_argument("--split", required=True, help="split.json with queries and gallery (positions in the store)")
    ev.add_argument(
        "--checkpoint",
        help="model to evaluate (default: untrained, the input features themselves, or "
        "with --images the --backbone as initialised)",
    )
    ev.add_argument(
        "--embedding-dim",
        type=layer_width,
        help="untrained backbone's head (default: 128); with --checkpoint, the checkpoint's",
    )
    ev.add_argument("--out", required=True, help="results JSON")
    ev.add_argument("--plot", help="PNG of nDCG@K and mean label distance@K")
    ev.add_argument("--label", help="name of this result in plots")
    ev.add_argument("--overwrite", action="store_true", help="replace --out and --plot if they exist")
    ev.add_argument("--k-max", type=positive_int, default=100)
    ev.add_argument("--device", default="auto")
    ev.add_argument("--json", action="store_true", help="print the metrics' summary as JSON, not a table")
    ev.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress (a bar on a terminal, else a plain line every few seconds)",
    )
    ev.set_defaults(func=_eval)
    return ev


def add_plot_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """``trainer plot``: one figure of several runs' eval results or losses."""
    pl = subparsers.add_parser("plot", help="one figure of several runs' eval results (Fig. 3 of Kim et al.) or losses")
    pl.add_argument("results", nargs="+", help="eval.json files or run folders (--loss-curves: log.jsonl or folders)")
    pl.add_argument("--out", required=True, help="PNG")
    pl.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    pl.add_argument("--title")
    pl.add_argument("--loss-curves", action="store_true", help="loss against step from each run's log.jsonl")
    pl.add_argument("--label", action="append", help="a curve's name, once per run in order (default: the run's)")
    pl.add_argument(
        "--y-scale",
        choices=("auto", "linear", "log"),
        default="auto",
        help="loss curves: auto is log where the losses span more than two decades",
    )
    pl.set_defaults(func=_plot)
    return pl


def add_demo_inputs_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """``trainer demo-inputs``: demo input features for a store."""
    demo = subparsers.add_parser("demo-inputs", help="write demo input features for a caption, sentence or pose store")
    demo.add_argument("store", help="store path")
    demo.add_argument("--out", required=True, help=".npy file")
    demo.add_argument(
        "--overwrite", action="store_true", help="replace --out if it holds other inputs (the same ones: kept)"
    )
    demo.add_argument("--seed", type=seed_int, default=0)
    demo.add_argument("--hide", type=probability_below_one, help="poses: probability a joint is hidden (0.25)")
    demo.add_argument("--jitter", type=nonnegative_float, help="poses: noise as a fraction of the pose size (0.1)")
    demo.set_defaults(func=_demo_inputs)
    return demo


def add_render_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """``trainer render``: one image per item of a pose or layout store."""
    rd = subparsers.add_parser("render", help="draw one image per item of a pose or layout store, from its label")
    rd.add_argument("store", help="store path")
    rd.add_argument("--out", required=True, help="folder: the images, index.csv (id,path) and render.json")
    rd.add_argument("--size", type=image_side, default=128, help="image side in pixels (default: %(default)s)")
    rd.add_argument("--seed", type=seed_int, default=0, help="item i is drawn from (seed, i) alone")
    rd.add_argument("--format", choices=("png", "jpg"), default="png")
    rd.add_argument("--items", type=positive_int, help="render only the first N items")
    rd.add_argument(
        "--workers", type=worker_count, help="processes (default: the CPU count; the images do not depend on it)"
    )
    rd.add_argument("--overwrite", action="store_true", help="replace a different render in --out")
    rf = rd.add_mutually_exclusive_group()
    rf.add_argument(
        "--frame",
        type=finite_float,
        nargs=3,
        metavar=("CX", "CY", "HALF"),
        help="poses: the square of label coordinates the picture shows (default: 0 0 1.1 for a "
        "center_scale store, else the store's own extent); a test store takes its train "
        "render's",
    )
    rf.add_argument(
        "--frame-from",
        metavar="RENDER",
        help="poses: the frame of the render in this folder (the train store's render)",
    )
    rd.add_argument("--no-progress", action="store_true")
    rd.set_defaults(func=_render)
    return rd


def build_parser() -> argparse.ArgumentParser:
    """The ``trainer`` command's parser: one subcommand each (fit, eval, plot, demo-inputs, split, render)."""
    parser = argparse.ArgumentParser(prog="trainer", description="Train and evaluate embeddings on labeldist stores")
    parser.add_argument("--version", action="version", version=f"trainer (labeldist {__version__})")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_fit_parser(subparsers)
    add_eval_parser(subparsers)
    add_plot_parser(subparsers)
    add_demo_inputs_parser(subparsers)
    add_split_parser(subparsers, "trainer split")
    add_render_parser(subparsers)
    return show_defaults(parser)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except LabeldistError as e:  # the user can fix it: one line
        print(f"trainer {args.command}: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a missing, unreadable or unwritable path, met up front or while working
        print(f"trainer {args.command}: {os_error_message(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
