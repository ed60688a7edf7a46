"""Train/test splits, so that train and test stores share no item.

- **Two stores.** :func:`split_store` splits a store of any kind into a train store and a test store (a dense
  store's parts copied out of its matrix, a kNN-only store's precomputed from their labels); :func:`split_labels`
  splits a label file instead, of any format ``precompute`` reads, into two files of its format
  (:mod:`labeldist.labels.records`).
- **One store and a pool.** ``MinibatchStream(anchors=train)`` draws every member of every minibatch from the
  anchors (``pool`` of ``POST .../batches``), so the items left out never appear.

Either way ``split.json`` names the split: ``train`` and ``test`` (ascending positions in the input: item ``t`` of a
part is the input's ``train[t]`` or ``test[t]``), and the ``queries`` and ``gallery`` positions inside the test
items. docs/training.md, "Hold out a test split".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.core.clusters import ClusterError, ClusterSpec, add_cluster_options, cluster_spec
from labeldist.core.options import part_float, seed_int
from labeldist.errors import LabeldistError, UsageError
from labeldist.labels.base import LabelError
from labeldist.labels.records import SPLIT_SUFFIXES, LabelRecords, read_records
from labeldist.store import is_store
from labeldist.store.outputs import (
    OutputError,
    check_not_inputs,
    check_output_file,
    holds,
    make_folder,
    what_is,
    write_bytes,
)
from labeldist.view.stored import stored_distance, stored_labels

#: what ``labeldist split`` takes, for its errors
TAKES = (
    "split takes a store of any kind (and writes a train store and a test store) or a label file of any format "
    "precompute reads (.json: Karpathy, COCO captions or COCO keypoints; .csv or .tsv tables; .txt or .jsonl "
    "sentences; .npy or .parquet vectors: it writes train and test files of that format to build the two stores "
    "from); for another file, build its store first (labeldist precompute KIND FILE --out STORE) and split the store"
)


class SplitError(LabeldistError, ValueError):
    """A label file that cannot be split (one line naming it and what split takes)."""


def split_indices(
    n: int, *, test_fraction: float = 0.2, query_fraction: float = 0.2, seed: int = 0
) -> dict[str, list[int]]:
    """A seeded split of ``n`` items: ``train`` and ``test`` (row numbers of the input, ascending), and
    ``queries`` / ``gallery`` (positions inside the test items, ascending).

    >>> s = split_indices(10, test_fraction=0.5, query_fraction=0.4, seed=0)
    >>> len(s["train"]), len(s["test"]), len(s["queries"]), len(s["gallery"])
    (5, 5, 2, 3)
    """
    for name, value in (("test_fraction", test_fraction), ("query_fraction", query_fraction)):
        if not 0.0 < value < 1.0:
            raise UsageError(f"{name} must lie in (0, 1), got {value}")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    n_test = round(n * test_fraction)
    n_query = round(n_test * query_fraction)
    if n_test < 2 or n - n_test < 1 or n_query < 1 or n_test - n_query < 1:
        raise UsageError(f"{n} items are too few for test_fraction={test_fraction}, query_fraction={query_fraction}")
    test = np.sort(perm[:n_test])
    in_test = rng.permutation(n_test)
    return {
        "train": np.sort(perm[n_test:]).tolist(),
        "test": test.tolist(),
        "queries": np.sort(in_test[:n_query]).tolist(),
        "gallery": np.sort(in_test[n_query:]).tolist(),
    }


#: queries below which a split's evaluation is noise: if one query's nDCG@10 spreads with a standard deviation
#: sigma (0.1 to 0.2 is common), the mean of n queries spreads with sigma / sqrt(n): about 0.02 at 50 queries, 0.045
#: at the 11 that a 280-item store gives by default, more than most differences between methods
FEW_QUERIES = 50


def few_queries_warning(n_queries: int, n_test: int) -> str | None:
    """A warning when a split has fewer than :data:`FEW_QUERIES` queries, saying what to ask instead; None
    otherwise. The advice keeps at least half of the test items as the gallery.

    >>> few_queries_warning(11, 56)[:47]
    'only 11 queries: with a spread of 0.15 for one '
    """
    if n_queries >= FEW_QUERIES:
        return None
    spread = 0.15 / np.sqrt(max(n_queries, 1))
    if n_test >= 2 * FEW_QUERIES:
        advice = f"ask --query-fraction {FEW_QUERIES / n_test:.2g} (the rest of the test items stay the gallery)"
    else:
        advice = (
            f"the {n_test} test items are too few for a stable mean: ask a larger --test-fraction with "
            "--query-fraction 0.5, or evaluate on more items"
        )
    return (
        f"only {n_queries} queries: with a spread of 0.15 for one query's nDCG@10, their mean varies by about "
        f"{spread:.2f} from one split to another, more than most differences between methods; {advice}"
    )


def _check_input(path: Path) -> None:
    """Refuse, naming ``path`` and what split takes, what is no label file (a folder that is no store)."""
    if path.is_dir():
        raise SplitError(f"{path} is a folder with no labeldist store, not a label file: {TAKES}")
    if path.suffix.lower() not in SPLIT_SUFFIXES:
        known = ", ".join(SPLIT_SUFFIXES)
        raise SplitError(f"{path}: unknown label file type {path.suffix!r} (known: {known}); {TAKES}")
    if not path.exists():
        raise SplitError(f"{path}: no such file; {TAKES}")


def _read(path: Path) -> LabelRecords:
    """The file's records (:func:`read_records`), their ids checked unique: a repeat would be an item in both
    parts, a held-out item trained on. SplitError naming the file (and both places of a repeat)."""
    try:
        records = read_records(path)
    except LabelError as e:
        raise SplitError(f"{e}; {TAKES}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SplitError(f"{path}: cannot read it as a label file ({type(e).__name__}: {e})") from None
    except RecursionError:
        raise SplitError(f"{path}: cannot read it as a label file (nested too deeply)") from None
    place = (lambda i: f"line {i + 2}") if records.fmt in ("csv", "tsv") else "item {}".format  # the header is line 1
    first: dict[str, int] = {}
    for i, item in enumerate(records.ids):
        if item in first:
            raise SplitError(
                f"{path}, {place(i)}: repeats the item id {item!r} of {place(first[item])}; an item in both "
                "parts would be a held-out item trained on: remove the repeat (precompute refuses it too)"
            )
        first[item] = i
    if not records.ids:
        raise SplitError(f"{path}: no items to split")
    return records


def _check_not_input(outputs: Any, inputs: Any, replaced: Any = ()) -> None:
    """:func:`~labeldist.store.outputs.check_not_inputs` as a SplitError: no part is the input it is split from."""
    try:
        check_not_inputs(outputs, inputs, replaced=replaced)
    except OutputError as e:
        raise SplitError(str(e)) from None


def _store_or_empty(folder: Path) -> bool:
    return is_store(folder) or not any(folder.iterdir())


def _write_files(files: dict[Path, bytes], overwrite: bool) -> None:
    """Write ``files`` (path -> contents) by :mod:`labeldist.store.outputs`' rule. Files already there with other
    contents are refused (SplitError naming them) unless ``overwrite``, and then only regular files outside any
    store are replaced; a rerun that would write the same contents writes nothing. Every file is checked before the
    first is written; each goes in by a rename, whole or not at all."""
    differ = [p for p, data in files.items() if os.path.lexists(p) and not holds(p, data)]
    if differ and not overwrite:
        names = ", ".join(str(p) for p in differ)
        raise SplitError(f"{names}: exists with other contents (another split); give --overwrite to replace it")
    todo = {p: text for p, text in files.items() if p in differ or not os.path.lexists(p)}
    try:
        for path in todo:
            check_output_file(path, overwrite)
    except OutputError as e:
        raise SplitError(str(e)) from None
    for path, data in todo.items():
        write_bytes(path, data, overwrite)


def split_labels(
    path: str | Path,
    out: str | Path,
    *,
    test_fraction: float = 0.2,
    query_fraction: float = 0.2,
    seed: int = 0,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write ``out/train<ext>``, ``out/test<ext>`` and ``out/split.json`` for a label file of any format
    :func:`~labeldist.labels.records.read_records` reads; files already there with other contents are replaced only
    with ``overwrite`` (:func:`_write_files`).

    Returns the split (also in ``split.json``, with ``source``, ``seed`` and the fractions)."""
    path, out = Path(path), Path(out)
    _check_input(path)
    records = _read(path)
    try:
        split = split_indices(len(records.ids), test_fraction=test_fraction, query_fraction=query_fraction, seed=seed)
    except ValueError as e:  # too few items, fractions out of range
        raise SplitError(f"{path}: {e}") from None
    info = {
        "source": str(path),
        "format": records.fmt,
        "seed": seed,
        "test_fraction": test_fraction,
        "query_fraction": query_fraction,
    }
    info.update(split)
    info["ids"] = {name: [records.ids[i] for i in split[name]] for name in ("train", "test")}
    files = {out / f"{name}{path.suffix}": records.part(split[name]) for name in ("train", "test")}
    files[out / "split.json"] = json.dumps(info).encode("utf-8")
    _check_not_input(files, [("the label file being split", path)])
    make_folder(out)
    _write_files(files, overwrite)
    return info


# ---------------------------------------------------------------- a store into two stores
def split_store(
    path: str | Path,
    out: str | Path,
    *,
    test_fraction: float = 0.2,
    query_fraction: float = 0.2,
    seed: int = 0,
    overwrite: bool = False,
    cluster: ClusterSpec | None = None,
    scheduler: str | None = None,
    n_workers: int | None = None,
    client: Any | None = None,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Split the store at ``path`` into ``out/train`` and ``out/test``, two stores of its kind, and write
    ``out/split.json`` (:func:`split_indices` of its items: the same split as :func:`split_labels` of the file the
    store was built from, for the same seed and fractions).

    Each part holds its items' labels and ids, in the store's order, with the store's distance and parameters,
    ``k`` (at most the part's items - 1) and dataset name + ``-train`` / ``-test``. A dense store's parts are dense,
    copied out of its matrix: every distance of a part equals the store's, bit for bit, and nothing is computed.
    A kNN-only store's parts are precomputed from their labels (a part's neighbours are not all on the store's
    lists), on ``client``, else where ``cluster`` says (:class:`~labeldist.core.clusters.ClusterSpec`: a scheduler, a
    job queue such as SLURM, or a LocalCluster; or the shorter ``scheduler=`` / ``n_workers=``), as precompute does.

    A part already there made from the same labels and parameters is kept as it is; another store there is
    refused (:class:`SplitError`) unless ``overwrite``, which builds the new one beside it and swaps it in.
    Returns the split (as in ``split.json``, with ``source``, ``kind``, ``stores`` and the fractions)."""
    from labeldist.store import StoreError, StoreReader

    path, out = Path(path), Path(out)
    try:
        reader = StoreReader(str(path))
        manifest = reader.manifest
        split = split_indices(reader.n_items, test_fraction=test_fraction, query_fraction=query_fraction, seed=seed)
    except (StoreError, ValueError) as e:  # damaged, incomplete, too few items, fractions out of range
        raise SplitError(f"{path}: {e}") from None
    if len(split["train"]) < 2:  # a store needs two items to hold a distance
        raise SplitError(
            f"{path}: {reader.n_items} items leave {len(split['train'])} for the train store at "
            f"test_fraction={test_fraction}; a store needs at least 2"
        )
    parts = [out / part for part in ("train", "test")]
    _check_not_input([out / "split.json"], [("the store being split", path)], replaced=parts)
    for part in parts:  # refused before any part is built or moved: never a link, nothing split did not make
        if os.path.islink(part) or (os.path.lexists(part) and not (os.path.isdir(part) and _store_or_empty(part))):
            raise SplitError(
                f"{part}: {what_is(part)}, where split writes a store of its own; split replaces only a store, "
                "never a link or what it did not make: remove it, or give another --out"
            )
    info = {
        "source": str(path),
        "kind": manifest["kind"],
        "stores": {part: str(out / part) for part in ("train", "test")},
        "seed": seed,
        "test_fraction": test_fraction,
        "query_fraction": query_fraction,
        **split,
    }
    plan, text = out / "split.json", json.dumps(info)
    if os.path.lexists(plan) and not holds(plan, text.encode("utf-8")):  # refused now, not after the parts
        if not overwrite:
            raise SplitError(f"{plan}: exists with other contents (another split); give --overwrite to replace it")
        try:
            check_output_file(plan, overwrite)  # a regular file only: never a link's target, a FIFO
        except OutputError as e:
            raise SplitError(str(e)) from None
    make_folder(out)
    for part in ("train", "test"):
        items = np.asarray(split[part], dtype=np.int64)
        url = out / part
        try:
            _write_part(
                reader,
                items,
                url,
                f"{manifest['dataset']}-{part}",
                overwrite=overwrite,
                cluster=cluster,
                scheduler=scheduler,
                n_workers=n_workers,
                client=client,
                progress=progress,
            )
        except (StoreError, ValueError) as e:  # a store of other parameters there, a locked one, a damaged chunk
            raise SplitError(f"{url}: {e}") from None
    _write_files({plan: text.encode("utf-8")}, overwrite)
    return info


def _write_part(
    reader: Any,
    items: np.ndarray,
    url: Path,
    dataset: str,
    *,
    overwrite: bool,
    cluster: ClusterSpec | None,
    scheduler: str | None,
    n_workers: int | None,
    client: Any | None,
    progress: bool | None,
) -> None:
    """One part of :func:`split_store`: the store of ``items`` at ``url``."""
    from labeldist.engine import precompute

    stored = stored_labels(reader)
    labels = stored.subset(items)
    labels.provenance = dict(stored.provenance)  # the store's reading, recorded again in the part's params
    k = min(reader.k, len(items) - 1)
    if not reader.has_dense:
        precompute(
            labels,
            stored_distance(reader),
            url,
            dataset=dataset,
            k=k,
            dense=False,
            cluster=cluster,
            scheduler=scheduler,
            n_workers=n_workers,
            client=client,
            overwrite=overwrite,
            progress=progress,
        )
        return
    _copy_dense_part(reader, items, labels, str(url), dataset, k, overwrite)


def _copy_dense_part(
    reader: Any, items: np.ndarray, labels: Any, url: str, dataset: str, k: int, overwrite: bool
) -> None:
    """The dense store of ``items`` at ``url``, copied out of ``reader``'s matrix a row block at a time (memory: one
    of its row blocks and one of the part's), under the store's lock, as precompute writes one: laid out, each
    row block written and marked, then published; over a complete store of other parameters, built beside it and
    swapped in."""
    from labeldist.core.knn import topk_rows
    from labeldist.engine import finish_replacement, replace_with_staged, staging_url, store_lock
    from labeldist.store import (
        StoreError,
        build_manifest,
        create_store,
        fingerprint_diff,
        publish,
        read_manifest,
        write_block,
    )

    source = reader.manifest
    params = {key: value for key, value in source["params"].items() if key != "labels"}
    block_rows = int(source["block_rows"])
    manifest = build_manifest(
        dataset=dataset, kind=source["kind"], params=params, labels=labels, k=k, dense=True, block_rows=block_rows
    )
    with store_lock(url, "split"):
        finish_replacement(url)
        target = url
        existing = read_manifest(url)
        if existing is not None:
            diff = fingerprint_diff(existing, manifest)
            if not diff and existing.get("complete") is True:
                return  # made by an earlier split with the same labels and parameters
            if existing.get("complete") is True:
                if not overwrite:
                    differ = [f"{key} differs" for key in diff if key != "labels_sha256"]
                    differ += ["the labels differ"] if "labels_sha256" in diff else []
                    raise StoreError(
                        f"another store is already there ({'; '.join(differ)}): another split, or "
                        "another source; choose another --out or pass --overwrite"
                    )
                url = staging_url(url)
        elif Path(url).exists() and (not Path(url).is_dir() or any(Path(url).iterdir())):
            raise StoreError("exists and is not a labeldist store; refusing to write over it")
        create_store(url, manifest, labels)  # an unfinished store there (a split stopped half-way) is laid out again
        n, size = reader.n_items, len(items)
        pending: list[np.ndarray] = []
        done = 0  # rows of the part written

        def flush(rows: np.ndarray) -> None:
            nonlocal done
            start = done
            indices, distances = topk_rows(rows, k, exclude=np.arange(start, start + len(rows)))
            # 0 distances computed (a copy): progress/exact_pairs' fill value, written all the same (store.open_array)
            write_block(url, start, indices, distances, rows, start // block_rows, 0)
            done += len(rows)

        source_rows = reader.dense_block_rows
        for start in range(0, n, source_rows):
            stop = min(start + source_rows, n)
            mine = items[(items >= start) & (items < stop)]
            if mine.size:
                pending.append(np.asarray(reader.dense_rows(start, stop), dtype=np.float32)[mine - start][:, items])
            last = stop == n
            if sum(len(p) for p in pending) >= block_rows or (last and pending):
                rows, pending = np.concatenate(pending), []
                whole = len(rows) if last else len(rows) - len(rows) % block_rows  # the part's blocks stay aligned
                for b in range(0, whole, block_rows):
                    flush(rows[b : b + block_rows])
                if whole < len(rows):
                    pending = [rows[whole:]]
        if done != size:  # a guard: every row of the part is written exactly once
            raise StoreError(f"wrote {done} of the part's {size} rows")
        publish(url)
        if url != target:
            replace_with_staged(target)


def split_input(
    path: str | Path,
    out: str | Path,
    *,
    test_fraction: float = 0.2,
    query_fraction: float = 0.2,
    seed: int = 0,
    overwrite: bool = False,
    **store_options: Any,
) -> dict[str, Any]:
    """What ``labeldist split`` does: :func:`split_store` for a store, :func:`split_labels` for a label file; both
    replace another split in ``out`` only with ``overwrite``."""
    common = {"test_fraction": test_fraction, "query_fraction": query_fraction, "seed": seed, "overwrite": overwrite}
    if is_store(path):
        return split_store(path, out, **common, **store_options)
    return split_labels(path, out, **common)


# ---------------------------------------------------------------- the command
def add_split_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], prog: str
) -> argparse.ArgumentParser:
    """The ``split`` command (``prog``: ``labeldist split``, or its alias ``trainer split``): a store or a label file
    into train and test parts, by :func:`split_command`."""
    sp = subparsers.add_parser(
        "split",
        help="split a store of any kind into a train store and a test store, or a "
        "label file of any format precompute reads into train/test label files of that format",
    )
    sp.add_argument(
        "input",
        help="a store (any kind: writes OUT/train and OUT/test, two stores), or a label file: Karpathy or "
        "COCO captions JSON, COCO keypoints JSON, a CSV/TSV table, .txt or .jsonl sentences, .npy or .parquet "
        "vectors, whose halves OUT/train.EXT and OUT/test.EXT (its format) each build a store",
    )
    sp.add_argument("--out", required=True, help="folder: the two parts and split.json")
    sp.add_argument("--test-fraction", type=part_float, default=0.2)
    sp.add_argument(
        "--query-fraction",
        type=part_float,
        default=0.2,
        help="of the test items, the queries; the rest is the gallery (default: %(default)s)",
    )
    sp.add_argument("--seed", type=seed_int, default=0)
    sp.add_argument(
        "--overwrite",
        action="store_true",
        help="a store: replace parts made with other labels or parameters (built beside them, then swapped in)",
    )
    add_cluster_options(
        sp.add_argument_group("where a kNN-only store's parts are precomputed (a dense store's are copied out of it)")
    )
    sp.add_argument(
        "--json",
        action="store_true",
        help="print the summary as one JSON object (the parts' items and paths) instead of lines of text",
    )
    sp.set_defaults(func=split_command, split_prog=prog)
    return sp


def split_summary(info: dict[str, Any], out: str | Path) -> dict[str, Any]:
    """What ``labeldist split`` says it wrote, from :func:`split_input`'s ``info``: the input, each part's items and
    path (a store, or a label file of the input's format), the test part's queries and gallery, and ``split.json``.

    >>> s = split_summary({"source": "a.csv", "train": [0, 2], "test": [1, 3], "queries": [0], "gallery": [1]}, "o")
    >>> s["parts"]["train"], s["parts"]["test"]["queries"]
    ({'items': 2, 'path': 'o/train.csv'}, 1)
    """
    paths = info.get("stores") or {
        part: str(Path(out) / f"{part}{Path(info['source']).suffix}") for part in ("train", "test")
    }
    parts: dict[str, dict[str, Any]] = {
        part: {"items": len(info[part]), "path": paths[part]} for part in ("train", "test")
    }
    parts["test"].update(queries=len(info["queries"]), gallery=len(info["gallery"]))
    return {
        "source": info["source"],
        "what": "stores" if "stores" in info else "files",
        "parts": parts,
        "split": str(Path(out) / "split.json"),
    }


def format_split_summary(info: dict[str, Any], out: str | Path) -> str:
    """:func:`split_summary` as a few lines for a person: the input, one line per part (its items and where it is),
    and split.json."""
    summary = split_summary(info, out)
    train, test = summary["parts"]["train"], summary["parts"]["test"]
    what = "store" if summary["what"] == "stores" else "file"
    width = len(f"{max(train['items'], test['items']):,}")
    return "\n".join(
        [
            f"split {summary['source']}: {train['items'] + test['items']:,} items, seed {info.get('seed', 0)}",
            f"  train  {train['items']:>{width},} items  {what} {train['path']}",
            f"  test   {test['items']:>{width},} items  {what} {test['path']}"
            f"  ({test['queries']:,} queries, {test['gallery']:,} gallery)",
            f"  each part's items, the queries and the gallery: {summary['split']}",
        ]
    )


def split_command(args: argparse.Namespace) -> int:
    """``labeldist split`` (and its alias ``trainer split``): :func:`split_input` of the parsed ``args``, its
    parts and sizes printed, a refused input one line naming it (exit 2)."""
    try:
        info = split_input(
            args.input,
            args.out,
            test_fraction=args.test_fraction,
            query_fraction=args.query_fraction,
            seed=args.seed,
            overwrite=args.overwrite,
            cluster=cluster_spec(args),
        )
    except (SplitError, ClusterError) as e:  # one line, no traceback
        print(f"{args.split_prog}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(split_summary(info, args.out)) if args.json else format_split_summary(info, args.out))
    warning = few_queries_warning(len(info["queries"]), len(info["test"]))
    if warning:
        print(f"{args.split_prog}: warning: {warning}", file=sys.stderr)
    return 0
