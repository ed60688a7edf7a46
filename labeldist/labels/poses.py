"""Human poses: J joints of (x, y) with a visibility flag, read from the MPII CSV.

The shipped ``data/mpii/mpii_valid_2958.csv`` (MPII Human Pose, validation split of the Stacked Hourglass
work) has one row per person: ``row, imgname, index, person, center_x, center_y, scale, normalize,
torsoangle`` and then ``<joint>_x, <joint>_y, <joint>_vis`` for 16 joints. A joint with no annotation is stored
as x = y = 0 with vis = 0; a joint with coordinates and vis = 0 is annotated but occluded, and counts as present.

The reader knows the 16 MPII joints (:data:`MPII_JOINTS`) and no other joint set: their columns are found by name,
in any order, and a file lacking some of them is refused, naming the columns. Reading it as poses of fewer joints
would change every distance without a word (the J / |S| rescaling of missing joints) and make stores of one
kind incomparable; a joint without annotation in some rows is stored as ``0, 0, 0`` in those rows instead.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
from pathlib import Path
from typing import Any, Literal

import numpy as np
from typing_extensions import Self

from labeldist.kinds import Kind
from labeldist.labels.base import LabelError, LabelSet, check_header, json_number, json_repr, unique_ids

MPII_JOINTS = (
    "r_ankle", "r_knee", "r_hip", "l_hip", "l_knee", "l_ankle", "pelvis", "thorax", "upper_neck", "head_top",
    "r_wrist", "r_elbow", "r_shoulder", "l_shoulder", "l_elbow", "l_wrist",
)  # fmt: skip
#: MPII's person scale is relative to a 200-pixel-tall person
MPII_SCALE_PIXELS = 200.0
Normalization = Literal["none", "head", "center_scale"]
NORMALIZATIONS = ("none", "head", "center_scale")
#: bones of the MPII 16-joint skeleton, as pairs of joint positions in MPII_JOINTS (drawn by the service's
#: label view and by ``trainer render``)
MPII_EDGES = (
    (0, 1), (1, 2), (2, 6), (6, 3), (3, 4), (4, 5),  # right leg, pelvis, left leg
    (6, 7), (7, 8), (8, 9),  # spine, neck, head
    (7, 12), (12, 11), (11, 10),  # right arm
    (7, 13), (13, 14), (14, 15),  # left arm
)  # fmt: skip


class Poses(LabelSet):
    """N poses of J joints.

    Attributes
    ----------
    xy : (N, J, 2) float64 joint coordinates, after the chosen normalisation.
    present : (N, J) bool, False for a joint with no annotation.
    visible : (N, J) bool, the annotator's visibility flag (occluded joints are present but not visible).
    """

    label_type = "pose"

    def __init__(self, ids: np.ndarray, xy: np.ndarray, present: np.ndarray, visible: np.ndarray) -> None:
        super().__init__(ids)
        xy = np.asarray(xy, dtype=np.float64)
        present = np.asarray(present, dtype=bool)
        visible = np.asarray(visible, dtype=bool)
        n = len(self.ids)
        if xy.ndim != 3 or xy.shape[0] != n or xy.shape[2] != 2:
            raise LabelError(f"pose coordinates must have shape (N={n}, J, 2), got {xy.shape}")
        if present.shape != xy.shape[:2] or visible.shape != xy.shape[:2]:
            raise LabelError(
                f"present/visible shapes {present.shape}, {visible.shape} do not match joints {xy.shape[:2]}"
            )
        bad = ~np.isfinite(xy).all(axis=2) & present
        if bad.any():
            item, joint = np.argwhere(bad)[0]
            raise LabelError(f"pose {self.ids[item]!r}: joint {joint} has a non-finite coordinate")
        self.xy, self.present, self.visible = xy, present, visible

    @property
    def n_joints(self) -> int:
        return self.xy.shape[1]

    def subset(self, index: slice | np.ndarray) -> Self:
        return type(self)(self.ids[index], self.xy[index], self.present[index], self.visible[index])

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {
            "xy": self.xy,
            "present": self.present.astype(np.uint8),
            "visible": self.visible.astype(np.uint8),
        }

    @classmethod
    def from_arrays(cls, ids: np.ndarray, arrays: dict[str, np.ndarray]) -> Self:
        return cls(ids, arrays["xy"], arrays["present"].astype(bool), arrays["visible"].astype(bool))

    @classmethod
    def from_json(cls, value: object, *, like: LabelSet) -> Self:
        """A pose from JSON: a list of the store's J joints (16 for MPII, in :data:`MPII_JOINTS` order), each
        ``[x, y]`` or ``null`` for a joint not annotated.

        Coordinates are taken in the frame of the store's labels, as they are stored: image pixels for a store
        made with ``--normalization none`` (the default), else the normalised frame (``(p - c) / h`` for
        ``head``, ``(p - c) / (200 s)`` for ``center_scale``; the manifest's ``params.labels.normalization`` says
        which). The service cannot normalise a pose itself: that needs the person's centre and scale, which
        are not part of the label. A joint given is present and visible (the distance does not use visibility);
        a pose needs at least one joint, and at least the store's ``min_joints``.
        """
        if not isinstance(like, Poses):
            raise TypeError(f"like must be Poses, got {type(like).__name__}")
        n = like.n_joints
        names = MPII_JOINTS if n == len(MPII_JOINTS) else tuple(f"joint {t}" for t in range(n))
        if not isinstance(value, list):
            raise LabelError(f"the pose must be a list of {n} joints, each [x, y] or null, got {json_repr(value)}")
        if len(value) != n:
            raise LabelError(f"the pose has {len(value)} joints, the store's poses have {n} "
                             f"({', '.join(names[:3])}, ...), each [x, y] or null")  # fmt: skip
        xy = np.zeros((1, n, 2), dtype=np.float64)
        present = np.zeros((1, n), dtype=bool)
        for t, joint in enumerate(value):
            if joint is None:
                continue
            where = f"joint {t} ({names[t]})"
            if not isinstance(joint, list) or len(joint) != 2:
                raise LabelError(f"{where} must be [x, y] or null, got {json_repr(joint)}")
            xy[0, t] = [json_number(c, f"{where} {axis}") for c, axis in zip(joint, "xy")]
            present[0, t] = True
        found = int(present.sum())
        if found == 0:
            raise LabelError(f"the pose has no joint: every one of its {n} joints is null")
        least = like.provenance.get("min_joints")
        if isinstance(least, int) and found < least:
            raise LabelError(f"the pose has {found} joint{'s' * (found > 1)}; the store's poses have at least "
                             f"{least} (min_joints)")  # fmt: skip
        return cls(np.array(["query"]), xy, present, present.copy())

    def to_json(self, i: int) -> list[list[float] | None]:
        """Pose ``i`` in the JSON form :meth:`from_json` reads: its J joints in order, each ``[x, y]`` in the frame
        of the store's coordinates, or ``null`` for a joint not annotated (visibility is not part of it)."""
        return [[float(x), float(y)] if p else None for (x, y), p in zip(self.xy[i].tolist(), self.present[i])]


def _parse_float(text: str, path: str, line: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise LabelError(f"{path}, line {line}: column {column!r} is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise LabelError(f"{path}, line {line}: column {column!r} is not finite: {text!r}")
    return value


def mpii_joint_columns(header: list[str], path: str) -> list[str]:
    """The x, y, vis columns of each of the 16 MPII joints, in :data:`MPII_JOINTS` order; LabelError naming the
    columns when some are missing, appear twice, or name a joint MPII does not have."""
    expected = [f"{j}_{a}" for j in MPII_JOINTS for a in ("x", "y", "vis")]
    missing = [c for c in expected if c not in header]
    if missing:
        joints = list(dict.fromkeys(c.rsplit("_", 1)[0] for c in missing))
        raise LabelError(
            f"{path}: header lacks the columns {', '.join(missing)} (joint{'s' * (len(joints) > 1)} "
            f"{', '.join(joints)}); an MPII CSV has <joint>_x, <joint>_y, <joint>_vis for each of the "
            f"{len(MPII_JOINTS)} MPII joints (a joint not annotated in a row is 0,0,0 there)"
        )
    twice = [c for c in expected if header.count(c) > 1]
    if twice:
        raise LabelError(f"{path}: header has the columns {', '.join(twice)} more than once")
    # a coordinate-like column of another joint would be silently ignored; "center_x, center_y" are the person's
    other = [c for c in header if c.endswith(("_x", "_y", "_vis")) and c not in expected and not c.startswith("center")]
    if other:
        raise LabelError(f"{path}: header has columns of joints that are not MPII's: {', '.join(other)}; "
                         f"known joints: {', '.join(MPII_JOINTS)}")  # fmt: skip
    return expected


def normalize_poses(
    xy: np.ndarray, center: np.ndarray, scale: np.ndarray, head: np.ndarray, how: Normalization
) -> np.ndarray:
    """Express joint coordinates in a frame comparable across images.

    - ``none``: image pixels, as annotated (the default; what thin-slicing compares within one image size).
    - ``head``: :math:`(p - c) / h`, centred on the person centre :math:`c` and divided by the head size
      :math:`h` (MPII's ``normalize`` column, the PCKh unit).
    - ``center_scale``: :math:`(p - c) / (200 s)`, MPII's person scale :math:`s` is relative to 200 pixels.
    """
    if how == "none":
        return xy
    if how == "head":
        return (xy - center[:, None, :]) / head[:, None, None]
    if how == "center_scale":
        return (xy - center[:, None, :]) / (MPII_SCALE_PIXELS * scale[:, None, None])
    raise ValueError(f"unknown normalization {how!r}; known: {', '.join(NORMALIZATIONS)}")


def read_mpii_csv(path: str | os.PathLike[str], normalization: Normalization = "none", min_joints: int = 1) -> Poses:
    """Read poses from an MPII CSV like ``data/mpii/mpii_valid_2958.csv``.

    Item ids are ``<imgname>#<person>`` (an image can hold several people). A joint is *missing* when it is
    stored as x = y = 0 with vis = 0. Raises LabelError naming the file for a path that cannot be read (missing,
    a folder, no permission), naming the columns for a header without the x, y, vis columns of every MPII joint
    (:func:`mpii_joint_columns`), and naming the file and line for a malformed row, a non-numeric or NaN value,
    a vis flag other than 0/1, or a pose with fewer than ``min_joints`` joints present.
    """
    path = os.fspath(path)
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"unknown normalization {normalization!r}; known: {', '.join(NORMALIZATIONS)}")
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except UnicodeDecodeError as e:
        raise LabelError(f"{path}: not UTF-8 text ({e})") from None
    except OSError as e:  # missing, a folder, no permission: one line naming the path, not a traceback
        raise LabelError(f"{path}: cannot read: {e.strerror or e}") from None
    if not rows:
        raise LabelError(f"{path}: empty file")
    header = rows[0]
    check_header(header, f"{path}, line 1")
    joint_cols = mpii_joint_columns(header, path)
    for col in ("imgname", "person", "center_x", "center_y", "scale", "normalize"):
        if col not in header:
            raise LabelError(f"{path}: header lacks column {col!r}")
    pos = {c: i for i, c in enumerate(header)}
    n_joints = len(MPII_JOINTS)
    ids, lines, coords, vis_flags, centers, scales, heads = [], [], [], [], [], [], []
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise LabelError(
                f"{path}, line {line}: {len(row)} fields, expected {len(header)} "
                f"({n_joints} joints x (x, y, vis) and {len(header) - 3 * n_joints} other columns)"
            )
        vals = np.array([_parse_float(row[pos[c]], path, line, c) for c in joint_cols]).reshape(n_joints, 3)
        if not np.isin(vals[:, 2], (0.0, 1.0)).all():
            raise LabelError(f"{path}, line {line}: a *_vis value is not 0 or 1")
        ids.append(f"{row[pos['imgname']]}#{row[pos['person']]}")
        lines.append(line)
        coords.append(vals[:, :2])
        vis_flags.append(vals[:, 2])
        centers.append([_parse_float(row[pos[c]], path, line, c) for c in ("center_x", "center_y")])
        scales.append(_parse_float(row[pos["scale"]], path, line, "scale"))
        heads.append(_parse_float(row[pos["normalize"]], path, line, "normalize"))
    if not ids:
        raise LabelError(f"{path}: no pose rows")
    ids = unique_ids(ids, path, lambda i: f"line {lines[i]}")
    xy = np.asarray(coords)
    vis = np.asarray(vis_flags)
    present = ~((xy[..., 0] == 0) & (xy[..., 1] == 0) & (vis == 0))
    too_few = np.flatnonzero(present.sum(axis=1) < min_joints)
    if too_few.size:
        raise LabelError(f"{path}: pose {ids[too_few[0]]!r} (line {lines[too_few[0]]}) has fewer than {min_joints} "
                         "joints")  # fmt: skip
    scale, head = np.asarray(scales), np.asarray(heads)
    if normalization != "none":
        bad = np.flatnonzero((scale <= 0) if normalization == "center_scale" else (head <= 0))
        if bad.size:
            raise LabelError(f"{path}, line {lines[bad[0]]}: non-positive scale/head size for {normalization!r}")
    xy = normalize_poses(xy, np.asarray(centers), scale, head, normalization)
    poses = Poses(ids, xy, present, vis == 1)
    poses.provenance = {"format": "mpii_csv", "normalization": normalization, "min_joints": min_joints,
                        "missing_joint": "x = y = 0 and vis = 0"}  # fmt: skip
    return poses


# ---------------------------------------------------------------- the kind: `labeldist precompute pose`
def _pose_arguments(p: argparse.ArgumentParser) -> None:
    from labeldist.options import number_option

    p.add_argument("input", help="MPII CSV, e.g. data/mpii/mpii_valid_2958.csv")
    p.add_argument("--metric", choices=("euclidean", "sqeuclidean"), default="euclidean",
                   help="distance between corresponding joints (default: %(default)s)")  # fmt: skip
    p.add_argument("--missing", choices=("rescale", "skip"), default="rescale",
                   help="rule for a joint missing in either pose (default: %(default)s)")  # fmt: skip
    p.add_argument("--normalization", choices=("none", "head", "center_scale"), default="none",
                   help="frame of the joint coordinates: image pixels, or centred and scaled by the head size "
                        "or the person scale (default: %(default)s)")  # fmt: skip
    n = len(MPII_JOINTS)
    p.add_argument("--min-joints", type=number_option(int, 0, n), default=1,
                   help=f"reject poses with fewer joints present, 0-{n} (default: %(default)s)")  # fmt: skip


def _load_pose(args: argparse.Namespace) -> tuple[Poses, Any, str]:
    from labeldist.distances.pose import PoseDistance
    from labeldist.options import check_file

    check_file(args.input)
    labels = read_mpii_csv(args.input, normalization=args.normalization, min_joints=args.min_joints)
    distance = PoseDistance(metric=args.metric, missing=args.missing)
    try:
        distance.check_labels(labels)  # coordinates whose distances overflow: refused naming the file, before any work
    except LabelError as e:
        raise LabelError(f"{args.input}: {e}") from None
    return labels, distance, args.dataset or Path(args.input).stem


KIND = Kind(name="pose", distance="labeldist.distances.pose:PoseDistance", command="pose",
            help="human poses from an MPII CSV (thin-slicing distance)", add_arguments=_pose_arguments,
            load=_load_pose)  # fmt: skip
