"""The ``labeldist precompute KIND`` and ``labeldist append`` commands (wired in :mod:`labeldist.cli`): a store built
from a label file, one sub-command per kind of the registry, and a store grown by the items of another file.

labeldist precompute pose data/mpii/mpii_valid_2958.csv --out stores/mpii-pose
labeldist append stores/mpii-pose more-poses.csv
"""

from __future__ import annotations

import argparse
from typing import Any

from labeldist.core.clusters import cluster_spec
from labeldist.core.extras import require_kind
from labeldist.core.options import check_output, check_store_path
from labeldist.store import StoreError
from labeldist.store.outputs import check_not_inputs, command_paths


def add_kind_commands(kinds: Any) -> None:
    """One ``precompute`` sub-command per kind of the registry (built-in and plugins): the kind's options, then
    the options every kind shares."""
    from labeldist.engine.job_options import add_common_options
    from labeldist.kinds import registry

    taken = set(kinds.choices)
    for kind in sorted(registry().kinds.values(), key=lambda k: k.subcommand):
        if kind.subcommand in taken:
            continue
        plugin = "" if kind.origin == "built-in" else f" [{kind.origin.split(':')[0]}]"
        p = kinds.add_parser(kind.subcommand, help=kind.help + plugin, description=kind.help + plugin)
        kind.add_arguments(p)
        add_common_options(p)
        p.set_defaults(loader=kind.load, kind_name=kind.name)


def _precompute(args: argparse.Namespace) -> int:
    from labeldist.engine.jobs import build_store

    require_kind(args.kind_name, f"labeldist precompute {args.kind}")  # before anything is read
    inputs = command_paths(vars(args), skip=("out",))
    if args.out is not None:
        check_output(args.out)  # before the labels are read, which can take minutes
        check_not_inputs([], inputs, replaced=[args.out])
    cluster = cluster_spec(args)
    labels, distance, dataset = args.loader(args)
    out = args.out or f"stores/{dataset}-{distance.kind}"
    check_not_inputs([], inputs, replaced=[out])
    result = build_store(
        labels,
        distance,
        out,
        dataset=dataset,
        k=args.k,
        dense=args.dense,
        dense_limit=args.dense_limit,
        block_rows=args.block_rows,
        cluster=cluster,
        overwrite=args.overwrite,
        progress=False if args.no_progress else None,
    )
    what = (
        "reused (same labels and parameters)"
        if result.reused
        else (f"{result.blocks_computed} of {result.blocks_total} blocks computed")
    )
    print(
        f"{result.url}: complete, {result.manifest['n_items']} items, k={result.manifest['k']}, "
        f"dense={result.manifest['dense']}; {what}"
    )
    return 0


def _append(args: argparse.Namespace) -> int:
    from labeldist.engine.job_options import append_parser
    from labeldist.engine.jobs import grow_store
    from labeldist.kinds import get_kind
    from labeldist.store import read_manifest, store_url

    check_store_path(args.store)
    manifest = read_manifest(store_url(args.store))
    if manifest is None:
        raise StoreError(f"{store_url(args.store)}: no labeldist store there (no manifest)")
    require_kind(manifest["kind"], "labeldist append")
    options = append_parser(args.store, manifest).parse_args(args.kind_args)
    check_not_inputs([], command_paths(vars(options)), replaced=[args.store])  # the store grows; nothing else
    cluster = cluster_spec(options)
    labels, distance, _ = get_kind(manifest["kind"]).load(options)
    result = grow_store(
        args.store,
        labels,
        distance=distance,
        dense_limit=options.dense_limit,
        cluster=cluster,
        progress=False if options.no_progress else None,
    )
    n = result.n_old + result.n_new
    if result.reused:
        print(f"{result.url}: these {result.n_new} items are already its generation {result.generation}; nothing to do")
        return 0
    print(
        f"{result.url}: generation {result.generation} complete, {result.n_old} + {result.n_new} = {n} items; "
        f"{result.blocks_computed} of {result.blocks_total} blocks computed, {result.exact_pairs:,} distances "
        f"({result.exact_pairs / n**2:.1%} of the {n**2:,} of a recompute)"
    )
    return 0


def add_build_parsers(sub: Any) -> None:
    """``precompute`` (one sub-command per kind) and ``append``, on the sub-parsers ``sub`` of ``labeldist``."""
    pre = sub.add_parser("precompute", help="compute a store of label distances")
    kinds = pre.add_subparsers(dest="kind", required=True)

    add_kind_commands(kinds)
    pre.set_defaults(func=_precompute)

    app = sub.add_parser(
        "append",
        help="append the items of a file to a store: a new generation, exact, computing only pairs with a new item",
        description="Append the items of FILE to the complete store STORE: their rows against every item, every "
        "old item's kNN list merged with them, the dense matrix grown; the grown store equals a precompute of all "
        "items. Built beside the store and swapped in once complete (a service serving it reloads it); a rerun "
        "resumes. Ids already in the store are refused. `labeldist append STORE --help` lists the options of "
        "the store's kind.",
    )
    app.add_argument("store", help="the store to grow")
    app.add_argument(
        "kind_args",
        nargs=argparse.REMAINDER,
        metavar="FILE [OPTIONS]",
        help="the new items' file and the options of the store's kind, as precompute has them",
    )
    app.set_defaults(func=_append)
