"""What the ``trainer`` commands share: option types, the input and service options of ``fit`` and ``eval``, and the
loss options read from the command line."""

from __future__ import annotations

import argparse
import os
from typing import Any

from labeldist.core.options import (
    image_side,
    number_option,
)
from labeldist.trainer.training.models import BACKBONES

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


def loss_options(args: argparse.Namespace) -> dict[str, Any]:
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


def local_store(stores: str | None, store: str | None) -> str | None:
    """The folder of the store ``store`` read from the local folder ``stores`` (None when served)."""
    return None if stores is None or store is None else os.path.join(stores, store)


def add_input_args(p: argparse.ArgumentParser, train: bool = True) -> None:
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


def add_service_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default="http://127.0.0.1:8000", help="labeldist service (default: %(default)s)")
    p.add_argument(
        "--stores",
        metavar="DIR",
        help="read the stores in this process from DIR (as `labeldist serve "
        "--stores DIR` names them), no service: the same minibatches for the same seed",
    )
    p.add_argument("--api-key", help="sent as X-API-Key (when the service computes distances only with one)")
