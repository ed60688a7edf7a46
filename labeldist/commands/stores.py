"""The ``labeldist info``, ``verify``, ``export`` and ``split`` commands (wired in :mod:`labeldist.cli`): what a store
holds, whether it is whole and right, its lists as a table, and its items split into train, val and test.

labeldist info stores/mpii-pose
labeldist verify stores/mpii-pose --sample 500
labeldist export stores/mpii-pose --format csv --out mpii-neighbors.csv
labeldist split stores/mpii-pose --out stores/mpii-split
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

from labeldist.core.options import check_store_path, nonnegative_int, positive_int, seed_int
from labeldist.store import StoreError


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


def add_store_parsers(sub: Any) -> None:
    """``info``, ``verify``, ``export`` and ``split``, on the sub-parsers ``sub`` of ``labeldist``."""
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
