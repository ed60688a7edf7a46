"""The ``labeldist`` command: ``precompute``, ``append``, ``info``, ``verify``, ``export``, ``split`` and ``serve``.

labeldist precompute pose data/mpii/mpii_valid_2958.csv --out stores/mpii-pose
labeldist precompute layout --generate 2000 --out stores/lsun5-layout_miou
labeldist info stores/mpii-pose
labeldist verify stores/mpii-pose --sample 500
labeldist export stores/mpii-pose --format csv --out mpii-neighbors.csv
labeldist split stores/mpii-pose --out stores/mpii-split
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from labeldist import __version__
from labeldist.core.clusters import cluster_spec
from labeldist.core.extras import extra_of, message, require, require_kind
from labeldist.core.options import (
    check_folder,
    check_output,
    check_store_path,
    nonnegative_int,
    os_error_message,
    port_number,
    positive_int,
    seed_int,
    show_defaults,
)
from labeldist.errors import LabeldistError
from labeldist.store import StoreError
from labeldist.store.outputs import check_not_inputs, command_paths

log = logging.getLogger("labeldist")


# ---------------------------------------------------------------- precompute: one loader per label kind
def _add_kind_commands(kinds: Any) -> None:
    """One ``precompute`` sub-command per kind of the registry (built-in and plugins): the kind's options, then
    the options every kind shares."""
    from labeldist.kinds import registry
    from labeldist.library import add_common_options

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
    from labeldist.library import build_store

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


# ---------------------------------------------------------------- append: a store's next generation
def _append(args: argparse.Namespace) -> int:
    from labeldist.kinds import get_kind
    from labeldist.library import append_parser, grow_store
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


# ---------------------------------------------------------------- info and verify
def store_summary(url: str) -> dict[str, Any]:
    """Manifest plus summary statistics of a store (finished or not), read through the store's checked reader."""
    from labeldist.store import StoreReader, blocks_done, read_manifest, store_url

    url = store_url(url)
    manifest = read_manifest(url)
    if manifest is None:
        raise StoreError(f"{url}: no labeldist store there (no manifest)")
    if not manifest.get("complete"):
        done = blocks_done(url)
        return {"manifest": manifest, "blocks_done": f"{int(done.sum())}/{done.size}"}
    reader = StoreReader(url)  # pinned: everything below is of the generation it opened, or StoreChangedError
    idx, dist = reader.knn()
    finite = dist[idx >= 0]
    summary: dict[str, Any] = {"manifest": reader.manifest}
    done = blocks_done(url)
    summary["blocks_done"] = f"{int(done.sum())}/{done.size}"
    summary["knn"] = {
        "nearest": _stats(dist[:, 0]),
        "kth": _stats(dist[:, -1]),
        "all": _stats(finite),
        "padded_entries": int((idx < 0).sum()),
    }
    summary["dense"] = reader.has_dense
    reader.check_unchanged()
    return summary


def _stats(x: np.ndarray) -> dict[str, float]:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if not x.size:
        return {}
    q = np.percentile(x, [0, 50, 100])
    return {"min": float(q[0]), "median": float(q[1]), "max": float(q[2]), "mean": float(x.mean())}


def _info(args: argparse.Namespace) -> int:
    check_store_path(args.store)
    summary = store_summary(args.store)
    print(json.dumps(summary, indent=2, default=str) if args.json else "\n".join(summary_lines(args.store, summary)))
    return 0


def summary_lines(store: str, summary: dict[str, Any]) -> list[str]:
    """:func:`store_summary` for people: a few lines, long lists summarised (a 128-column store's column names
    are one line, not 128); ``labeldist info --json`` prints everything."""
    m = summary["manifest"]
    state = "complete" if m.get("complete") else f"not complete ({summary['blocks_done']} blocks done)"
    layout = "dense matrix + kNN lists" if m.get("dense") else "kNN lists only"
    params = ", ".join(f"{k}={_short(v)}" for k, v in (m.get("params") or {}).items() if k != "labels")
    lines = [
        f"{store}: {state}; {m.get('kind')} ({params}); dataset {m.get('dataset')!r}",
        f"  {m.get('n_items', 0):,} items, k={m.get('k')}, {layout}, blocks of {m.get('block_rows')} rows",
    ]
    reading = (m.get("params") or {}).get("labels")
    if isinstance(reading, dict) and reading:
        lines.append("  labels read with: " + ", ".join(f"{k}={_short(v)}" for k, v in reading.items()))
    generations = m.get("generations") or []
    made = f"  made {m.get('created')} by labeldist {m.get('engine_version')}"
    if len(generations) > 1:
        spans = ", ".join(f"{g['items'][0]}:{g['items'][1]}" for g in generations)
        made += f"; generation {m.get('generation')} ({len(generations)} generations: items {spans})"
    lines.append(made)
    if "knn" in summary:
        knn = summary["knn"]

        def stats(name: str) -> str:
            got = knn.get(name) or {}
            return f"median {got['median']:.4g} (min {got['min']:.4g}, max {got['max']:.4g})" if got else "none"

        lines.append(f"  nearest neighbour's distance: {stats('nearest')}")
        lines.append(f"  k-th neighbour's distance:    {stats('kth')}")
        if knn.get("padded_entries"):
            lines.append(f"  {knn['padded_entries']:,} list entries padded (-1): items with fewer than k neighbours")
    lines.append("  (labeldist info --json: the whole manifest and every statistic)")
    return lines


def _short(value: Any, most: int = 6) -> str:
    """A value of a manifest in a few words: a long list as its length and its ends, a dict compactly."""
    if isinstance(value, list) and len(value) > most:
        shown = ", ".join(str(v) for v in value[:3])
        return f"[{len(value)} values: {shown}, ..., {value[-1]}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={_short(v, most)}" for k, v in value.items()) + "}"
    return json.dumps(value) if isinstance(value, str) and not value else str(value)


def _verify(args: argparse.Namespace) -> int:
    from labeldist.engine.verify import verify_store

    check_store_path(args.store)
    report = verify_store(args.store, sample=args.sample, seed=args.seed)
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


def _export(args: argparse.Namespace) -> int:
    from labeldist.engine.export import export_neighbors, format_of

    check_store_path(args.store)
    result = export_neighbors(
        args.store,
        args.out,
        format_of(args.format, args.out),
        k=args.k,
        overwrite=args.overwrite,
        progress=not args.no_progress,
    )
    where = "standard output" if result.out == "-" else result.out
    print(
        f"{where}: {result.rows:,} rows ({result.items:,} items, up to {result.k} neighbours each), "
        f"{result.format}, in {result.seconds:.1f} s",
        file=sys.stderr if result.out == "-" else sys.stdout,
    )
    return 0


def _serve(args: argparse.Namespace) -> int:
    require("labeldist serve", "serve")
    from labeldist.api.server import serve

    if args.stores is not None:  # named on the command line: a typo must not serve an empty folder
        check_folder(args.stores)
    return serve(stores_dir=args.stores, host=args.host, port=args.port, workers=args.workers, warm=args.warm)


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="labeldist", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress messages")
    parser.add_argument("--version", action="version", version=f"labeldist {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    pre = sub.add_parser("precompute", help="compute a store of label distances")
    kinds = pre.add_subparsers(dest="kind", required=True)

    _add_kind_commands(kinds)

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

    info = sub.add_parser("info", help="print a store's manifest and summary statistics")
    info.add_argument("store")
    info.add_argument("--json", action="store_true", help="everything, as JSON: the whole manifest and statistics")
    info.set_defaults(func=_info)

    verify = sub.add_parser(
        "verify",
        help="check every chunk's checksum, the labels' digests and the store contract on every row, then recompute "
        "a sample of entries with the slow reference",
    )
    verify.add_argument("store")
    verify.add_argument(
        "--sample",
        type=nonnegative_int,
        default=200,
        help="entries to recompute, 0 for the checksums only (default: %(default)s)",
    )
    verify.add_argument("--seed", type=seed_int, default=0, help="seed of the sample (default: %(default)s)")
    verify.set_defaults(func=_verify)

    export = sub.add_parser(
        "export",
        help="write a store's neighbour lists to a Parquet or CSV file, one row per (item, rank)",
        description="Write the neighbour lists of STORE as a table with the columns item_index, item_id, rank (1 "
        "for the nearest), neighbor_index, neighbor_id, distance (docs/export.md), in item then rank order, a row "
        "block at a time (the memory of one block, whatever the store's size). The file is written beside OUT and "
        "renamed into place once complete.",
    )
    export.add_argument("store", help="a complete store: a folder or an fsspec URL")
    export.add_argument(
        "--format",
        choices=("parquet", "csv"),
        help="file format (default: from --out's suffix, .parquet, .pq or .csv; else parquet, which needs pyarrow)",
    )
    export.add_argument(
        "--out",
        help="file to write; - for standard output (CSV only) (default: "
        "<store name>-neighbors.<format> in the current folder)",
    )
    export.add_argument(
        "--k", type=positive_int, help="the first K neighbours of each item (default: all the store has)"
    )
    export.add_argument("--overwrite", action="store_true", help="replace an existing file at --out")
    export.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    export.set_defaults(func=_export)
    from labeldist.engine.split import add_split_parser

    add_split_parser(sub, "labeldist split")
    serve = sub.add_parser("serve", help="serve the stores of a folder over HTTP (API v1) with uvicorn")
    serve.add_argument("--stores", help="folder of stores (default: LABELDIST_STORES or ./stores)")
    serve.add_argument("--host", help="bind address (default: 127.0.0.1)")
    serve.add_argument("--port", type=port_number, help="port, 1-65535 (default: 8000)")
    serve.add_argument(
        "--workers", type=positive_int, help="uvicorn worker processes, each loading every store (default: 1)"
    )
    warm = serve.add_mutually_exclusive_group()
    warm.add_argument(
        "--warm",
        action="store_const",
        const=True,
        dest="warm",
        help="load every store's labels, and a sentence store's model and embeddings, at start-up, in the "
        "background (GET /readyz answers 503 until done; GET /healthz 200 at once), so that no first request "
        "waits seconds for them (the default, unless LABELDIST_WARM=false)",
    )
    warm.add_argument(
        "--no-warm",
        action="store_const",
        const=False,
        dest="warm",
        help="load each store's labels and models on first need instead: GET /readyz answers 200 at once, and a "
        "store's first search or computed distance waits for them (seconds; a sentence store's model)",
    )
    serve.set_defaults(func=_serve)

    from labeldist.commands.sts import add_sts_parser

    add_sts_parser(sub)
    pre.set_defaults(func=_precompute)
    return show_defaults(parser)


def _command(args: argparse.Namespace) -> str:
    """The command as typed, up to its options: ``labeldist precompute captions``, ``labeldist verify``."""
    words = ["labeldist", args.command, getattr(args, "kind", None) or getattr(args, "sts_command", None)]
    return " ".join(w for w in words if w)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    try:
        if args.command == "sts":
            require(f"labeldist sts {args.sts_command}", "sts")
        return args.func(args)
    except ModuleNotFoundError as e:  # a package of an extra: one line naming the extra (labeldist.core.extras)
        extra = extra_of(e)
        if extra is None:
            raise
        missing = getattr(e, "missing", None) or [(e.name or "").partition(".")[0]]
        print(f"labeldist: error: {message(_command(args), extra, missing)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head`: the reader has all it wanted; not an error to report
        sys.stderr.close()
        return 141
    except OSError as e:  # a missing, unreadable or wrong path, checked up front or met while working
        print(f"labeldist: error: {os_error_message(e)}", file=sys.stderr)
        return 2
    except (LabeldistError, ValueError) as e:  # every error of labeldist's own, and a library's refused value
        print(f"labeldist: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
