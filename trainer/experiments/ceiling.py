r"""The ceiling of a rendered test set: the nDCG and MLD of a perfect model of the rendered picture.

A model trained on pictures can at best know the label as the picture and its augmentation show it: for a pose
drawn in its label's frame and trained under a scale and shift jitter, the jittered label (:func:`jitter_poses`)

.. math:: \tilde y_i = c + s_i \, (y_i - c) + t_i, \qquad s_i \sim U(1 - \sigma, 1 + \sigma), \quad
    t_i \sim U(-\tau, \tau)^2 \cdot 2h

The perfect model ranks the gallery by :math:`D(\tilde y_q, \tilde y_g)` and is scored against the true
:math:`D(y_q, y_g)` by the modified nDCG@K and MLD@K (Kim et al., "Deep Metric Learning Beyond Binary Supervision",
CVPR 2019, Eq. 12 and §5). A trained model is read against this number, not against 1. With no jitter it is 1 (the
oracle); ``view="bbox"`` sees a pose normalised by its own box (:func:`bbox_normalise`); layouts are 1 by
construction. docs/internals.md, "The ceiling of a rendered test set"; the figures are in RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.errors import UsageError
from labeldist.trainer.inputs.augment import kind_augmentation
from labeldist.trainer.kinds import load, trainer_kind
from labeldist.trainer.training.metrics import mean_label_distance, ndcg
from labeldist.view.stored import stored_distance, stored_labels

#: what the ranking sees of a pose: its label (in the label's frame, jittered) or its bounding-box normalisation
VIEWS = ("label", "bbox")
#: the K of :func:`ceiling`'s ``summary``
SUMMARY_K = (1, 5, 10, 20, 50)


def jitter_poses(
    xy: np.ndarray, *, scale: float, shift: float, frame: Sequence[float], rng: np.random.Generator
) -> np.ndarray:
    r"""(N, J, 2) joints after the training jitter, one draw per item:
    :math:`c + s_i (y_i - c) + t_i`, :math:`s_i \sim U(1 - \text{scale}, 1 + \text{scale})`,
    :math:`t_i \sim U(-\text{shift}, \text{shift})^2 \cdot 2\,\text{half}` with ``frame = (cx, cy, half)``.
    Draws all scales, then all shifts (N and 2N values), whatever the jitter."""
    cx, cy, half = (float(v) for v in frame)
    xy = np.asarray(xy, dtype=np.float64)
    n = xy.shape[0]
    s = rng.uniform(1.0 - scale, 1.0 + scale, size=n)
    t = rng.uniform(-shift, shift, size=(n, 2)) * (2.0 * half)
    centre = np.array([cx, cy])
    return centre + s[:, None, None] * (xy - centre) + t[:, None, :]


def bbox_normalise(xy: np.ndarray, present: np.ndarray) -> np.ndarray:
    r"""(N, J, 2) joints as render version 1 drew them (before its random fill, rotation and shift): centred on
    the box of the pose's present joints and divided by its larger side, :math:`(y - m) / \max(w, h)`.
    A pose with no present joint is left as it is; a box of size 0 is divided by 1."""
    xy = np.asarray(xy, dtype=np.float64)
    present = np.asarray(present, dtype=bool)
    lo = np.where(present[..., None], xy, np.inf).min(axis=1)
    hi = np.where(present[..., None], xy, -np.inf).max(axis=1)
    some = present.any(axis=1)
    mid = np.where(some[:, None], (lo + hi) / 2, 0.0)
    side = np.where(some, (hi - lo).max(axis=1, initial=0.0), 1.0)
    side = np.where(side > 0, side, 1.0)
    return (xy - mid[:, None, :]) / side[:, None, None]


def _with_xy(labels, xy: np.ndarray):
    return type(labels)(labels.ids, xy, labels.present, labels.visible)


def ranking(distances: np.ndarray, k: int) -> np.ndarray:
    """(Q, k) gallery positions by increasing ``distances`` (Q, G), ties by position: what a model that knows
    them retrieves."""
    return np.argsort(np.asarray(distances, dtype=np.float64), axis=1, kind="stable")[:, :k]


def score(true_distances: np.ndarray, ranking_distances: np.ndarray, k_max: int) -> dict[str, np.ndarray]:
    """nDCG@K and MLD@K (K = 1..k_max) of the ranking by ``ranking_distances``, judged by ``true_distances``."""
    retrieved = ranking(ranking_distances, k_max)
    return {
        "ndcg": ndcg(true_distances, retrieved),
        "mean_label_distance": mean_label_distance(true_distances, retrieved),
    }


@dataclass(frozen=True)
class Seeing:
    """How a model sees the pictures it was trained on: the training jitter (``scale``, ``shift``, in the label
    frame ``frame``), the picture's ``view``, ``draws`` jitter draws from ``seed``, and a per-image flip
    (``mirror``)."""

    scale: float
    shift: float
    frame: Sequence[float] | None
    view: str
    draws: int
    seed: int
    mirror: bool


def pose_views(labels, seeing: Seeing) -> tuple[list[Any], int, str]:
    """The poses as a perfect model of their pictures sees them (module docstring), the draws used and a note: the
    labels themselves with no jitter, their bounding-box normalisation (``view="bbox"``), or ``draws`` jittered
    copies in the label frame (generator ``(seed, draw)``, one draw per item)."""
    jitter = bool(seeing.scale or seeing.shift)
    if seeing.view == "bbox":
        if jitter:
            raise UsageError("the bounding-box view undoes any scale and shift: it takes no jitter")
        note = (
            "render version 1: each pose normalised by its own bounding box, its position and size lost; "
            "the ranking is the pose distance between the normalised poses"
        )
        return [_with_xy(labels, bbox_normalise(labels.xy, labels.present))], 1, note
    if not jitter:
        return [labels], 1, "no jitter: the ranking is the label distance's own (the oracle's), so nDCG is 1 at every K"
    if seeing.frame is None:
        raise UsageError("a jitter needs the frame (cx, cy, half): its centre and side")
    note = (
        f"the label's frame {tuple(float(v) for v in seeing.frame)} with the training jitter: scale 1 ± "
        f"{seeing.scale} about the centre, shift ± {seeing.shift} of the side, one draw per item, {seeing.draws} draws"
    )
    views = []
    for d in range(seeing.draws):
        rng = np.random.default_rng(np.random.SeedSequence([int(seeing.seed), d]))
        xy = jitter_poses(labels.xy, scale=seeing.scale, shift=seeing.shift, frame=seeing.frame, rng=rng)
        views.append(_with_xy(labels, xy))
    return views, seeing.draws, note


def painted_views(labels, seeing: Seeing) -> tuple[list[Any], int, str]:
    """Labels painted in their own frame with no jitter (a layout's map is its picture): the labels themselves, so
    the ceiling is 1 by construction. Refuses a jitter, a view and a mirror, which such a picture has none of."""
    if seeing.scale or seeing.shift or seeing.view != "label":
        raise UsageError(
            f"{type(labels).__name__} are painted in their own frame with no jitter: a ceiling "
            "takes no scale, shift or view for them"
        )
    if seeing.mirror:
        raise UsageError("mirror is a pose ceiling: a layout's flip is its own label's")
    note = (
        "drawn in the label's own frame with no jitter (a layout's map is its picture): a perfect model "
        "ranks by the label distance itself, so the ceiling is 1 by construction"
    )
    return [labels], 1, note


def ceiling(
    labels,
    distance,
    queries: Sequence[int] | np.ndarray,
    gallery: Sequence[int] | np.ndarray,
    *,
    scale: float = 0.0,
    shift: float = 0.0,
    frame: Sequence[float] | None = None,
    view: str = "label",
    draws: int = 5,
    seed: int = 0,
    k_max: int = 100,
    mirror: bool = False,
) -> dict[str, Any]:
    r"""The nDCG@K and MLD@K of a perfect model of the rendered picture (module docstring), K = 1..k_max.

    ``labels``: a LabelSet; ``queries`` / ``gallery``: positions in it; ``distance``: its LabelDistance, whose kind
    declares how its pictures are seen (:mod:`labeldist.trainer.kinds`: :func:`pose_views`, :func:`painted_views`).
    Poses: ``frame`` ``(cx, cy, half)`` (needed for a jitter: its centre and side), ``scale`` and ``shift`` the
    jitter (0: none), ``view`` ``"label"`` (the label's frame) or ``"bbox"`` (render version 1's bounding-box
    normalisation, which undoes any scale and shift, so it takes no jitter). Every item gets its own jitter draw,
    ``draws`` times; with no jitter one draw is the answer.

    ``mirror``: the model was trained with an independent per-image flip while the served distances stayed those
    of the unflipped poses, so it cannot tell a picture from its mirror image: it ranks gallery pose :math:`q` by
    :math:`\min(D(p, q), D(p, \bar q))`, :math:`\bar q` the pose with x mirrored about the picture's centre and each
    joint keeping its name (a pixel flip moves the lighter left limbs to the right; it does not relabel them).

    Returns ``k``, ``ndcg`` and ``mean_label_distance`` (means over the draws) with ``*_std`` (their standard
    deviation over the draws), ``oracle_mean_label_distance`` (the gallery sorted by the true distance),
    ``summary`` (``ndcg@K``, ``mean_label_distance@K`` for K in :data:`SUMMARY_K` up to k_max), ``params`` and a
    one-line ``note``.
    """
    if view not in VIEWS:
        raise UsageError(f"unknown view {view!r}; known: {', '.join(VIEWS)}")
    if scale < 0 or shift < 0 or scale >= 1:
        raise UsageError(f"jitter must have 0 <= scale < 1 and shift >= 0, got scale={scale}, shift={shift}")
    if draws < 1:
        raise UsageError(f"draws must be >= 1, got {draws}")
    declared = trainer_kind(distance.kind).ceiling
    if declared is None:
        raise UsageError(f"the {distance.kind} kind is not drawn: it has no ceiling of a rendered picture")
    queries, gallery = np.asarray(queries, dtype=np.int64), np.asarray(gallery, dtype=np.int64)
    k_max = min(int(k_max), len(gallery))
    true = distance.block(labels.subset(queries), labels.subset(gallery))
    views, used, note = load(declared)(labels, Seeing(scale, shift, frame, view, draws, seed, mirror))

    def seen(v) -> np.ndarray:  # the distances the perfect model of the pictures ranks by
        block = distance.block(v.subset(queries), v.subset(gallery))
        if not mirror:
            return block
        cx = 0.0 if view == "bbox" or frame is None else float(frame[0])
        flipped = v.xy.copy()
        flipped[..., 0] = 2 * cx - flipped[..., 0]
        return np.minimum(block, distance.block(v.subset(queries), _with_xy(v, flipped).subset(gallery)))

    if mirror:
        note += "; and a per-image flip: mirror images look alike to it"
    out = _scores(true, [seen(v) for v in views], k_max)
    out["params"] = {
        "scale": float(scale),
        "shift": float(shift),
        "view": view,
        "mirror": bool(mirror),
        "draws": used,
        "seed": int(seed),
        "frame": None if frame is None else [float(v) for v in frame],
        "queries": len(queries),
        "gallery": len(gallery),
    }
    out["note"] = note
    return out


def _scores(true: np.ndarray, seen: list[np.ndarray], k_max: int) -> dict[str, Any]:
    """The ceiling's figures: nDCG and MLD at every K of the rankings by each of ``seen`` against the ``true``
    distances, their means and standard deviations over the draws, the oracle's MLD and the summary."""
    scores = [score(true, ranked, k_max) for ranked in seen]
    out: dict[str, Any] = {"k": np.arange(1, k_max + 1)}
    for name in ("ndcg", "mean_label_distance"):
        stack = np.stack([s[name] for s in scores])
        out[name], out[f"{name}_std"] = stack.mean(0), stack.std(0)
    out["oracle_mean_label_distance"] = mean_label_distance(true, ranking(true, k_max))
    out["summary"] = {
        f"{name}@{k}": float(out[name][k - 1])
        for name in ("ndcg", "mean_label_distance")
        for k in SUMMARY_K
        if k <= k_max
    }
    return out


def _split_positions(split: str | os.PathLike[str] | dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(split, dict):
        split = json.loads(Path(split).read_text(encoding="utf-8"))
    return np.asarray(split["queries"], dtype=np.int64), np.asarray(split["gallery"], dtype=np.int64)


def _frame_for(labels, normalization: str | None, frame: Sequence[float] | None) -> tuple[float, float, float] | None:
    """The frame a pose store is rendered in (labeldist.trainer.render.pose.store_frame), None for other labels."""
    from labeldist.labels.poses import Poses

    if frame is not None or not isinstance(labels, Poses):
        return None if frame is None else tuple(float(v) for v in frame)
    from labeldist.trainer.render.pose import store_frame

    manifest = {"params": {"labels": {"normalization": normalization or "none"}}}
    return tuple(store_frame(manifest, labels)[0])


def store_ceiling(
    store: str | os.PathLike[str],
    split: str | os.PathLike[str] | dict[str, Any],
    *,
    frame: Sequence[float] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """:func:`ceiling` of a test store (labeldist.store) and its split (a ``split.json`` of ``trainer split``, or
    a dict, with ``queries`` and ``gallery``: positions in the store), with the store's own distance; ``options``
    are :func:`ceiling`'s (scale, shift, view, mirror, draws, seed, k_max). ``frame``: None for the one its
    render uses (fixed for a ``center_scale`` pose store; else from its extent, which for a test store should be
    given as its train render's, labeldist.trainer.render.base.read_frame)."""
    from labeldist.store import StoreReader

    reader = StoreReader(os.fspath(store))
    labels = stored_labels(reader)
    queries, gallery = _split_positions(split)
    labels_params = (reader.manifest.get("params") or {}).get("labels") or {}
    frame = _frame_for(labels, labels_params.get("normalization"), frame)
    return ceiling(labels, stored_distance(reader), queries, gallery, frame=frame, **options)


# --------------------------------------------------------------------------------------------------------------
# python -m labeldist.trainer.experiments.ceiling


def _table(rows: dict[str, dict[str, Any]], ks: Sequence[int]) -> str:
    head = ["ranking"] + [f"nDCG@{k}" for k in ks] + [f"MLD@{k}" for k in ks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, result in rows.items():
        cells = [f"{result['ndcg'][k - 1]:.3f}" for k in ks]
        cells += [f"{result['mean_label_distance'][k - 1]:.3f}" for k in ks]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m labeldist.trainer.experiments.ceiling",
        description="The nDCG and MLD of a perfect model of the rendered picture of a test set: the ranking by "
        "the label as the picture and its augmentation show it, against the true label distances. Prints the "
        "label frame with the jitter, with none (the oracle: 1), and render version 1's bounding-box view.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--labels", help="an MPII CSV: split with --split-seed (trainer split's split), poses only")
    src.add_argument("--store", help="a test store; --split names its queries and gallery")
    p.add_argument(
        "--normalization",
        choices=("none", "head", "center_scale"),
        default="center_scale",
        help="--labels: how the poses are read (default: %(default)s, as RESULTS.md's stores)",
    )
    p.add_argument("--split", help="--store: split.json (queries, gallery: positions in the store)")
    p.add_argument("--split-seed", type=int, default=0, help="--labels: split_indices seed (default: %(default)s)")
    p.add_argument("--test-fraction", type=float, default=0.2)
    p.add_argument("--query-fraction", type=float, default=0.2)
    pose = kind_augmentation("pose").augmentation  # the jitter the trainer's pose augmentation uses
    p.add_argument(
        "--scale",
        type=float,
        default=pose.scale,
        help="scale jitter, 1 ± SCALE (default: %(default)s, the pose augmentation's)",
    )
    p.add_argument(
        "--shift",
        type=float,
        default=pose.shift,
        help="shift jitter, ± SHIFT of the side (default: %(default)s, the pose augmentation's)",
    )
    frames = p.add_mutually_exclusive_group()
    frames.add_argument(
        "--frame",
        type=float,
        nargs=3,
        metavar=("CX", "CY", "HALF"),
        help="the render's frame (default: the store's, as trainer render picks it)",
    )
    frames.add_argument(
        "--frame-from",
        metavar="RENDER",
        help="the frame of the render in this folder (its "
        "render.json): the train render, for a test store not normalised center_scale",
    )
    p.add_argument("--draws", type=int, default=5, help="jitter draws to average (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="jitter seed (default: %(default)s)")
    p.add_argument("--k", type=int, nargs="+", default=[1, 10, 50], help="K to print (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the summaries as JSON instead of a table")
    return p


def _test_set(args: argparse.Namespace, p: argparse.ArgumentParser) -> tuple[Any, Any, Any, Any, Any]:
    """The labels, distance, queries, gallery and frame the command's arguments name."""
    if args.frame_from:
        from labeldist.trainer.render.base import RenderError, read_frame

        try:
            args.frame = read_frame(args.frame_from)
        except RenderError as e:
            p.error(str(e))

    if args.labels:
        from labeldist.distances.pose import PoseDistance
        from labeldist.engine.split import split_indices
        from labeldist.labels.pose_files import read_mpii_csv

        every = read_mpii_csv(args.labels, normalization=args.normalization)
        split = split_indices(
            len(every), test_fraction=args.test_fraction, query_fraction=args.query_fraction, seed=args.split_seed
        )
        # the frame of the whole file: what trainer render gives the train store, and must give the test store
        frame = _frame_for(every, args.normalization, args.frame)
        labels, distance = every.subset(np.asarray(split["test"])), PoseDistance()
        queries, gallery = split["queries"], split["gallery"]
    else:
        if not args.split:
            p.error("--store needs --split")
        from labeldist.store import StoreReader

        reader = StoreReader(args.store)
        labels, distance = stored_labels(reader), stored_distance(reader)
        queries, gallery = _split_positions(args.split)
        labels_params = (reader.manifest.get("params") or {}).get("labels") or {}
        frame = _frame_for(labels, labels_params.get("normalization"), args.frame)
    return labels, distance, queries, gallery, frame


def _rows(args: argparse.Namespace, labels, distance, queries, gallery, frame) -> dict[str, dict[str, Any]]:
    """The ceilings the command prints, by row name: every view of poses, the oracle alone of other labels."""
    from labeldist.labels.poses import Poses

    common = {"frame": frame, "draws": args.draws, "seed": args.seed, "k_max": max(args.k)}
    rows: dict[str, dict[str, Any]] = {}
    if isinstance(labels, Poses):
        rows[f"label frame, jitter scale {args.scale} shift {args.shift}"] = ceiling(
            labels, distance, queries, gallery, scale=args.scale, shift=args.shift, **common
        )
    rows["label frame, no jitter (oracle)"] = ceiling(labels, distance, queries, gallery, **common)
    if isinstance(labels, Poses):
        rows["bounding box (render version 1)"] = ceiling(labels, distance, queries, gallery, view="bbox", **common)
        rows["bounding box and a per-image flip (the old render and augmentation)"] = ceiling(
            labels, distance, queries, gallery, view="bbox", mirror=True, **common
        )
        rows[f"label frame, jitter scale {args.scale} shift {args.shift}, and a per-image flip"] = ceiling(
            labels, distance, queries, gallery, scale=args.scale, shift=args.shift, mirror=True, **common
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    labels, distance, queries, gallery, frame = _test_set(args, p)
    rows = _rows(args, labels, distance, queries, gallery, frame)
    if args.json:
        print(
            json.dumps(
                {name: {**r["summary"], "params": r["params"], "note": r["note"]} for name, r in rows.items()}, indent=2
            )
        )
        return 0
    print(f"{len(queries)} queries x {len(gallery)} gallery, frame {frame}")
    print(_table(rows, [k for k in args.k if k <= len(gallery)]))
    for name, r in rows.items():
        print(f"- {name}: {r['note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
