"""``trainer demo-inputs`` and ``trainer render``: input features and images made for a store, for a first run
(wired in :mod:`labeldist.trainer.cli`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from labeldist.core.options import (
    finite_float,
    image_side,
    nonnegative_float,
    positive_int,
    seed_int,
    worker_count,
)
from labeldist.errors import LabeldistError
from labeldist.trainer.commands.options import probability_below_one


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
