"""``trainer eval``: a checkpoint scored on a store's items (wired in :mod:`labeldist.trainer.cli`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from labeldist.core.options import (
    layer_width,
    positive_int,
)
from labeldist.trainer.commands.options import add_input_args, add_service_args, local_store


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
            ("the store evaluated", local_store(args.stores, args.store)),
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


def add_eval_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """``trainer eval``: retrieval metrics of a checkpoint, or of the untrained inputs."""
    ev = subparsers.add_parser(
        "eval", help="retrieval metrics of a checkpoint (or of the input features) on a test store"
    )
    add_service_args(ev)
    ev.add_argument("--store", required=True)
    add_input_args(ev, train=False)
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
