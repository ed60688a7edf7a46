"""Human poses: J named joints of (x, y) with a visibility flag, read from an MPII CSV, any pose CSV, or COCO
keypoints JSON.

Three readers, one :class:`Poses` (what ``labeldist precompute pose`` and ``labeldist append`` read):

- :func:`read_mpii_csv`: the shipped ``data/mpii/mpii_valid_2958.csv`` (MPII Human Pose, validation split of the
  Stacked Hourglass work) has one row per person: ``row, imgname, index, person, center_x, center_y, scale,
  normalize, torsoangle`` and then ``<joint>_x, <joint>_y, <joint>_vis`` for the 16 joints of
  :data:`MPII_JOINTS`. A joint with no annotation is stored as x = y = 0 with vis = 0; a joint with coordinates
  and vis = 0 is annotated but occluded, and counts as present.
- :func:`read_pose_csv`: any CSV with one row per person and, per joint, an x and a y column and optionally a
  visibility column, found by a naming rule (``<joint>_x``, ``<joint>_y``, ``<joint>_vis`` by default, another with
  ``joint_columns``) or named one by one (``columns``); the joints are those the header names, or the ones asked
  for (``joints``, renamed as wished: ``r_ankle=RightAnkle``). An MPII CSV is one of them.
- :func:`read_coco_keypoints`: a COCO keypoints JSON (``person_keypoints_*.json``): each person annotation's
  ``keypoints`` (x, y, v for each of the category's keypoints; v = 0 not labelled, 1 labelled but not visible,
  2 visible) and its ``bbox`` (for ``box`` normalisation).

A file whose joints are those of a declared skeleton (:data:`SKELETONS`: MPII's 16, COCO's 17) but some is
refused, naming every missing column: reading it as poses of fewer joints would change every distance without a
word (the J / |S| rescaling of missing joints) and make stores of one kind incomparable. Fewer joints are read
when asked for by name (``joints``).

**Joint names.** Every :class:`Poses` has its joint names (:attr:`Poses.joint_names`); a store keeps them as the
shared label array ``labels/joint_names`` unless they are the default for their number (MPII's for 16 joints,
``joint_0``, ``joint_1``, ... otherwise): so an MPII store, and every store made before joint names were recorded,
has the same arrays and ``labels_sha256`` as before and reads back with MPII's names. The label view and the
renderer draw the bones of every declared skeleton both of whose ends a store has (:func:`skeleton_edges`),
left and right told apart by the names (:func:`joint_side`).
"""

from __future__ import annotations

import csv
import functools
import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from typing_extensions import Self

from labeldist.labels.base import (
    LabelError,
    LabelSet,
    as_str_array,
    check_header,
    json_number,
    json_repr,
    unique_ids,
)

log = logging.getLogger(__name__)

MPII_JOINTS = (
    "r_ankle",
    "r_knee",
    "r_hip",
    "l_hip",
    "l_knee",
    "l_ankle",
    "pelvis",
    "thorax",
    "upper_neck",
    "head_top",
    "r_wrist",
    "r_elbow",
    "r_shoulder",
    "l_shoulder",
    "l_elbow",
    "l_wrist",
)
#: MPII's person scale is relative to a 200-pixel-tall person
MPII_SCALE_PIXELS = 200.0
Normalization = Literal["none", "head", "center_scale", "box"]
NORMALIZATIONS = ("none", "head", "center_scale", "box")
#: what each normalisation takes of a person besides its joints (a reader's columns, a search's fields)
NORMALIZATION_NEEDS = {
    "none": (),
    "head": ("center", "head"),
    "center_scale": ("center", "scale"),
    "box": ("box",),
}
#: each normalisation as a formula, for messages and docs
NORMALIZATION_FORMULA = {
    "none": "image pixels",
    "head": "(p - center) / head",
    "center_scale": "(p - center) / (200 scale)",
    "box": "(p - box centre) / max(box w, box h)",
}
#: bones of the MPII 16-joint skeleton, as pairs of joint positions in MPII_JOINTS (drawn by the service's
#: label view and by ``trainer render``)
MPII_EDGES = (
    (0, 1),
    (1, 2),
    (2, 6),
    (6, 3),
    (3, 4),
    (4, 5),  # right leg, pelvis, left leg
    (6, 7),
    (7, 8),
    (8, 9),  # spine, neck, head
    (7, 12),
    (12, 11),
    (11, 10),  # right arm
    (7, 13),
    (13, 14),
    (14, 15),  # left arm
)
#: COCO's 17 person keypoints, in the order of ``categories[0].keypoints`` of ``person_keypoints_*.json``
COCO_JOINTS = (
    "nose",
    "left_eye",
    "right_eye",
    "left_ear",
    "right_ear",
    "left_shoulder",
    "right_shoulder",
    "left_elbow",
    "right_elbow",
    "left_wrist",
    "right_wrist",
    "left_hip",
    "right_hip",
    "left_knee",
    "right_knee",
    "left_ankle",
    "right_ankle",
)
#: COCO's person skeleton (``categories[0].skeleton``, there 1-based), as pairs of positions in COCO_JOINTS
COCO_EDGES = (
    (15, 13),
    (13, 11),
    (16, 14),
    (14, 12),
    (11, 12),
    (5, 11),
    (6, 12),
    (5, 6),
    (5, 7),
    (6, 8),
    (7, 9),
    (8, 10),
    (1, 2),
    (0, 1),
    (0, 2),
    (1, 3),
    (2, 4),
    (3, 5),
    (4, 6),
)


@dataclass(frozen=True)
class Skeleton:
    """A joint set the pose kind knows: its joint names, in order, and its bones (pairs of positions)."""

    name: str
    joints: tuple[str, ...]
    edges: tuple[tuple[int, int], ...]


#: the skeletons the pose kind declares: files of these joints are read in this order, and their bones drawn
SKELETONS = {
    "mpii": Skeleton("mpii", MPII_JOINTS, MPII_EDGES),
    "coco": Skeleton("coco", COCO_JOINTS, COCO_EDGES),
}


def default_joint_names(n: int) -> tuple[str, ...]:
    """The names of ``n`` joints not named otherwise: MPII's for 16 (every store made before joint names were
    recorded holds MPII's 16 joints), else ``joint_0``, ``joint_1``, ..."""
    return MPII_JOINTS if n == len(MPII_JOINTS) else tuple(f"joint_{t}" for t in range(n))


@functools.lru_cache(maxsize=64)
def skeleton_edges(names: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """The bones among joints ``names``: every bone of a declared skeleton (:data:`SKELETONS`) both of whose joints
    are in ``names``, as pairs of positions in ``names``, in the skeletons' order, each once. MPII's 16 names give
    :data:`MPII_EDGES`, COCO's 17 :data:`COCO_EDGES`; names no skeleton knows give no bones."""
    index = {name: t for t, name in enumerate(names)}
    out: list[tuple[int, int]] = []
    for skeleton in SKELETONS.values():
        for a, b in skeleton.edges:
            ja, jb = index.get(skeleton.joints[a]), index.get(skeleton.joints[b])
            if ja is not None and jb is not None and (ja, jb) not in out and (jb, ja) not in out:
                out.append((ja, jb))
    return tuple(out)


_SIDE = re.compile(r"^(?:(r|right)|(l|left))(?:[_\-. ]|(?=[A-Z]))")


def joint_side(name: str) -> Literal["left", "right", "center"]:
    """The side of the body a joint name says: ``right`` for ``r_...``, ``right_...``, ``Right...`` (also with
    ``-``, ``.`` or a space), ``left`` likewise, else ``center``."""
    m = _SIDE.match(name) or _SIDE.match(name.lower())
    if m is None:
        return "center"
    return "right" if m.group(1) else "left"


def check_joint_names(names: Sequence[object], n: int, where: str = "joint names") -> tuple[str, ...]:
    """``names`` as a tuple of ``n`` distinct non-empty strings without a comma or NUL; LabelError naming what is
    wrong."""
    names = tuple(str(v) for v in names)
    if len(names) != n:
        raise LabelError(f"{where}: {len(names)} names for {n} joints")
    for name in names:
        if not name or "\x00" in name or "," in name or "=" in name or name != name.strip():
            raise LabelError(f"{where}: {name!r} is not a joint name (non-empty, no comma, '=', NUL or edge spaces)")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise LabelError(f"{where}: {', '.join(twice)} named more than once")
    return names


class Poses(LabelSet):
    """N poses of J named joints.

    Attributes
    ----------
    xy : (N, J, 2) float64 joint coordinates, after the chosen normalisation.
    present : (N, J) bool, False for a joint with no annotation.
    visible : (N, J) bool, the annotator's visibility flag (occluded joints are present but not visible).
    joint_names : J names (default :func:`default_joint_names`).
    """

    label_type = "pose"
    #: the joint names describe the whole set: appended poses must have the same (LabelSet.concat)
    shared_arrays = ("joint_names",)

    def __init__(
        self,
        ids: np.ndarray,
        xy: np.ndarray,
        present: np.ndarray,
        visible: np.ndarray,
        joint_names: Sequence[str] | None = None,
    ) -> None:
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
        j = xy.shape[1]
        names = default_joint_names(j) if joint_names is None else check_joint_names(joint_names, j)
        bad = ~np.isfinite(xy).all(axis=2) & present
        if bad.any():
            item, joint = np.argwhere(bad)[0]
            raise LabelError(f"pose {self.ids[item]!r}: joint {joint} ({names[joint]}) has a non-finite coordinate")
        self.xy, self.present, self.visible = xy, present, visible
        self.joint_names: tuple[str, ...] = names

    @property
    def n_joints(self) -> int:
        return self.xy.shape[1]

    def subset(self, index: slice | np.ndarray) -> Self:
        return type(self)(self.ids[index], self.xy[index], self.present[index], self.visible[index], self.joint_names)

    def to_arrays(self) -> dict[str, np.ndarray]:
        arrays = {
            "xy": self.xy,
            "present": self.present.astype(np.uint8),
            "visible": self.visible.astype(np.uint8),
        }
        if self.joint_names != default_joint_names(self.n_joints):  # the default is not written: see the module
            arrays["joint_names"] = np.array(self.joint_names, dtype=str)
        return arrays

    @classmethod
    def from_arrays(cls, ids: np.ndarray, arrays: dict[str, np.ndarray]) -> Self:
        names = arrays.get("joint_names")
        return cls(
            ids,
            arrays["xy"],
            arrays["present"].astype(bool),
            arrays["visible"].astype(bool),
            None if names is None else as_str_array(names).tolist(),
        )

    def concat(self, other: LabelSet) -> Self:
        """These poses followed by ``other``'s (:meth:`LabelSet.concat`), which must have the same joints, in the same
        order: LabelError naming both joint lists otherwise."""
        if isinstance(other, Poses) and other.joint_names != self.joint_names:
            raise LabelError(
                f"the new poses' joints ({_names(other.joint_names)}) are not the store's ({_names(self.joint_names)})"
            )
        return super().concat(other)

    @functools.cached_property
    def extent(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(lo, hi): the least and greatest x and y of every present joint, None for no joint (computed once)."""
        if not self.present.any():
            return None
        pts = self.xy[self.present]
        return pts.min(axis=0), pts.max(axis=0)

    @classmethod
    def from_json(cls, value: object, *, like: LabelSet) -> Self:
        """A pose from JSON, for a search of a store of poses ``like``.

        Two forms:

        - a list of the store's J joints, in the store's order (:attr:`joint_names`), each ``[x, y]`` or ``null``
          for a joint not annotated, **in the frame of the store's coordinates** (image pixels for a store made
          with ``--normalization none``, else the normalised frame the manifest's ``params.labels.normalization``
          names); an object of joint names to ``[x, y]`` (joints left out are not annotated) is read the same way;
        - an object ``{"joints": ..., "center": [x, y], "scale": s}`` (``center_scale``; ``"center"`` and ``"head":
          h`` for ``head``, ``"box": [x, y, w, h]`` for ``box``): the joints in image pixels with what the store's
          normalisation takes of the person, normalised here as the store's poses were (:func:`normalize_poses`);
          ``{"joints": ...}`` alone is the joints in the frame of the store's coordinates.

        Coordinates lying far outside the store's normalised poses (more than :data:`FAR` times their half-span
        from their centre) are refused, saying what is needed: raw pixels sent to a normalised store. A joint
        given is present and visible (the distance does not use visibility); a pose needs at least one joint,
        and at least the store's ``min_joints``.
        """
        if not isinstance(like, Poses):
            raise TypeError(f"like must be Poses, got {type(like).__name__}")
        names = like.joint_names
        n = len(names)
        recorded = like.provenance.get("normalization")
        how = recorded if recorded in NORMALIZATIONS else None
        person: dict[str, object] = {}
        if isinstance(value, dict) and "joints" not in value and {"center", "scale", "head", "box"} & value.keys():
            raise LabelError(
                "the pose has no 'joints': a pose in image pixels is {\"joints\": [[x, y] or null, ...], "
                f"{_person_example(how or 'center_scale')}}}"
            )
        if isinstance(value, dict) and "joints" in value:
            unknown = [key for key in value if key not in ("joints", "center", "scale", "head", "box")]
            if unknown:
                raise LabelError(
                    f"the pose has the field{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))}; "
                    'a pose is {"joints": ...} with "center", "scale", "head" or "box" as '
                    "its store's normalisation needs"
                )
            person = {key: v for key, v in value.items() if key != "joints"}
            if person:  # without them, the joints are in the frame of the store's coordinates, as a list's are
                _check_person_fields(person, how)
            value = value["joints"]
        xy, present = _json_joints(value, names)
        found = int(present.sum())
        if found == 0:
            raise LabelError(f"the pose has no joint: every one of its {n} joints is null")
        least = like.provenance.get("min_joints")
        if isinstance(least, int) and found < least:
            raise LabelError(
                f"the pose has {found} joint{'s' * (found > 1)}; the store's poses have at least {least} (min_joints)"
            )
        if person:
            assert how is not None
            center, scale, head, box = _json_person(person)
            xy = normalize_poses(xy, center, scale, head, how, box=box)
            bad = ~np.isfinite(xy).all(axis=2) & present
            if bad.any():
                t = int(np.flatnonzero(bad[0])[0])
                raise LabelError(
                    f"joint {t} ({names[t]}) is not finite once normalised ({how!r}: {NORMALIZATION_FORMULA[how]})"
                )
        if how not in (None, "none"):
            _check_in_store_frame(xy, present, like, how, bool(person))
        return cls(np.array(["query"]), xy, present, present.copy(), names)

    def to_json(self, i: int) -> list[list[float] | None]:
        """Pose ``i`` in the JSON form :meth:`from_json` reads: its J joints in order, each ``[x, y]`` in the frame
        of the store's coordinates, or ``null`` for a joint not annotated (visibility is not part of it)."""
        return [[float(x), float(y)] if p else None for (x, y), p in zip(self.xy[i].tolist(), self.present[i])]


#: a search's pose lying more than FAR times the half-span of a normalised store's poses from their centre is
#: refused as raw pixels (Poses.from_json): normalised poses span about one unit (center_scale, box) or ten
#: (head); a person's pixel coordinates are hundreds
FAR = 10.0


def _names(names: Sequence[str], at_most: int = 6) -> str:
    shown = ", ".join(names[:at_most])
    return f"{len(names)} joints: {shown}{', ...' if len(names) > at_most else ''}"


def _person_example(how: str) -> str:
    return {
        "head": '"center": [x, y], "head": h',
        "center_scale": '"center": [x, y], "scale": s',
        "box": '"box": [x, y, w, h]',
    }.get(how, "")


def _check_person_fields(person: dict[str, object], how: str | None) -> None:
    """LabelError unless ``person`` holds exactly the fields the store's normalisation ``how`` takes."""
    if how is None:
        raise LabelError(
            "the store does not record how its poses were normalised (params.labels.normalization): "
            "give the joints in the frame of its coordinates, without "
            f"{', '.join(map(repr, person))}"
        )
    needs = NORMALIZATION_NEEDS[how]
    if how == "none":
        raise LabelError(
            f"the store's poses are image pixels (normalization 'none'): give the joints as they are, "
            f"without {', '.join(map(repr, person))}"
        )
    missing = [key for key in needs if key not in person]
    extra = [key for key in person if key not in needs]
    if missing or extra:
        said = "; ".join(
            ([f"it lacks {', '.join(map(repr, missing))}"] if missing else [])
            + ([f"it does not take {', '.join(map(repr, extra))}"] if extra else [])
        )
        raise LabelError(
            f"the store's poses are normalised {how!r} ({NORMALIZATION_FORMULA[how]}): a pose in "
            f'image pixels comes with {{"joints": ..., {_person_example(how)}}}; {said}'
        )


def _json_person(person: dict[str, object]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(center (1, 2), scale (1,), head (1,), box (1, 4) or None) of a search's person fields (those given)."""

    def numbers(key: str, count: int) -> list[float]:
        value = person[key]
        if count == 1 and not isinstance(value, list):
            value = [value]
        if not isinstance(value, list) or len(value) != count:
            shape = {1: "a number", 2: "[x, y]", 4: "[x, y, w, h]"}[count]
            raise LabelError(f"{key!r} must be {shape}, got {json_repr(person[key])}")
        return [json_number(v, f"{key}{f'[{i}]' if count > 1 else ''}") for i, v in enumerate(value)]

    center = np.array([numbers("center", 2)]) if "center" in person else np.zeros((1, 2))
    scale = np.array(numbers("scale", 1)) if "scale" in person else np.ones(1)
    head = np.array(numbers("head", 1)) if "head" in person else np.ones(1)
    box = np.array([numbers("box", 4)]) if "box" in person else None
    for key, arr in (("scale", scale), ("head", head)):
        if key in person and not arr[0] > 0:
            raise LabelError(f"{key!r} must be positive, got {json_repr(person[key])}")
    if box is not None and not (box[0, 2] > 0 and box[0, 3] > 0):
        raise LabelError(f"'box' [x, y, w, h] must have a positive width and height, got {json_repr(person['box'])}")
    return center, scale, head, box


def _json_joints(value: object, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(1, J, 2) coordinates and (1, J) present of a search's joints: a list of the J joints, or an object of
    joint names to [x, y]."""
    n = len(names)
    xy = np.zeros((1, n, 2), dtype=np.float64)
    present = np.zeros((1, n), dtype=bool)
    if isinstance(value, dict):
        unknown = [key for key in value if key not in names]
        if unknown:
            raise LabelError(
                f"the pose names joint{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown[:5]))} "
                f"that the store's poses do not have ({_names(names)})"
            )
        items = [(names.index(key), joint) for key, joint in value.items()]
    elif isinstance(value, list):
        if len(value) != n:
            raise LabelError(
                f"the pose has {len(value)} joints, the store's poses have {n} "
                f"({', '.join(names[:3])}, ...), each [x, y] or null"
            )
        items = list(enumerate(value))
    else:
        raise LabelError(f"the pose must be a list of {n} joints, each [x, y] or null, got {json_repr(value)}")
    for t, joint in items:
        if joint is None:
            continue
        where = f"joint {t} ({names[t]})"
        if not isinstance(joint, list) or len(joint) != 2:
            raise LabelError(f"{where} must be [x, y] or null, got {json_repr(joint)}")
        xy[0, t] = [json_number(c, f"{where} {axis}") for c, axis in zip(joint, "xy")]
        present[0, t] = True
    return xy, present


def _check_in_store_frame(xy: np.ndarray, present: np.ndarray, like: Poses, how: str, normalised: bool) -> None:
    """LabelError where a pose lies far outside a normalised store's poses (:data:`FAR`), saying what is needed."""
    extent = like.extent
    if extent is None:
        return
    lo, hi = extent
    centre, half = (lo + hi) / 2, max(float((hi - lo).max()) / 2, 1e-9)
    off = np.abs(xy[0] - centre).max(axis=1) / half
    off[~present[0]] = 0.0
    if off.max() <= FAR:
        return
    t = int(np.argmax(off))
    x, y = xy[0, t]
    span = f"x {lo[0]:.3g}..{hi[0]:.3g}, y {lo[1]:.3g}..{hi[1]:.3g}"
    if normalised:
        raise LabelError(
            f"normalised as the store's poses ({how!r}: {NORMALIZATION_FORMULA[how]}), joint {t} "
            f"({like.joint_names[t]}) is at ({x:.6g}, {y:.6g}), far outside the store's poses ({span}): "
            "check the person's fields and their units"
        )
    raise LabelError(
        f"joint {t} ({like.joint_names[t]}) is at ({x:.6g}, {y:.6g}), far outside the store's poses, "
        f"normalised {how!r} ({NORMALIZATION_FORMULA[how]}: {span}): image pixels? Send "
        f'{{"joints": [[x, y] or null, ...], {_person_example(how)}}} to have them normalised as '
        "the store's were, or joints already normalised"
    )


def _parse_float(text: str, path: str, line: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise LabelError(f"{path}, line {line}: column {column!r} is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise LabelError(f"{path}, line {line}: column {column!r} is not finite: {text!r}")
    return value


MPII_HINT = (
    f"an MPII CSV has <joint>_x, <joint>_y, <joint>_vis for each of the {len(MPII_JOINTS)} MPII joints "
    "(a joint not annotated in a row is 0,0,0 there)"
)


def _refuse_other_joint_columns(header: Sequence[str], expected: Sequence[str], path: str) -> None:
    # a coordinate-like column of another joint would be silently ignored; "center_x, center_y" are the person's
    other = [c for c in header if c.endswith(("_x", "_y", "_vis")) and c not in expected and not c.startswith("center")]
    if other:
        raise LabelError(
            f"{path}: header has columns of joints that are not MPII's: {', '.join(other)}; "
            f"known joints: {', '.join(MPII_JOINTS)}"
        )


#: a missing column: (its name in the file, the joint it belongs to or None, what it is for)
Missing = tuple[str, "str | None", str]


def _missing_text(missing: Sequence[Missing], joint_note: str = "") -> str:
    """``a_x, a_y, a_vis (joint a), imgname (the item id)``: every missing column, those of joints first (then
    ``joint_note``), then each other group with what it is for."""
    parts = []
    joint_columns = [c for c, joint, _ in missing if joint is not None]
    if joint_columns:
        joints = list(dict.fromkeys(joint for _, joint, _ in missing if joint is not None))
        parts.append(f"{', '.join(joint_columns)} (joint{'s' * (len(joints) > 1)} {', '.join(joints)}{joint_note})")
    groups: dict[str, list[str]] = {}
    for column, joint, why in missing:
        if joint is None:
            groups.setdefault(why, []).append(column)
    parts.extend(f"{', '.join(columns)} ({why})" for why, columns in groups.items())
    return ", ".join(parts)


def normalize_poses(
    xy: np.ndarray,
    center: np.ndarray | None,
    scale: np.ndarray | None,
    head: np.ndarray | None,
    how: Normalization,
    *,
    box: np.ndarray | None = None,
) -> np.ndarray:
    """Express joint coordinates in a frame comparable across images.

    - ``none``: image pixels, as annotated (the default; what thin-slicing compares within one image size).
    - ``head``: :math:`(p - c) / h`, centred on the person centre :math:`c` and divided by the head size
      :math:`h` (MPII's ``normalize`` column, the PCKh unit).
    - ``center_scale``: :math:`(p - c) / (200 s)`, MPII's person scale :math:`s` is relative to 200 pixels.
    - ``box``: :math:`(p - b) / \\max(w, h)`, centred on the centre :math:`b` of the person's box ``[x, y, w,
      h]`` (N, 4) and divided by its longer side (COCO's ``bbox``; the box holds the person, so its joints lie
      within 0.5 of the centre).
    """
    if how == "none":
        return xy
    if how == "head":
        return (xy - center[:, None, :]) / head[:, None, None]
    if how == "center_scale":
        return (xy - center[:, None, :]) / (MPII_SCALE_PIXELS * scale[:, None, None])
    if how == "box":
        box = np.asarray(box, dtype=np.float64)
        middle = box[:, :2] + box[:, 2:] / 2
        return (xy - middle[:, None, :]) / np.maximum(box[:, 2], box[:, 3])[:, None, None]
    raise ValueError(f"unknown normalization {how!r}; known: {', '.join(NORMALIZATIONS)}")


def _check_normalization(normalization: str) -> None:
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"unknown normalization {normalization!r}; known: {', '.join(NORMALIZATIONS)}")


# ---------------------------------------------------------------- which joints to read, and their columns
def parse_joints(spec: str | Sequence[str] | Mapping[str, str] | None) -> list[tuple[str, str]] | None:
    """The joints to read, as (name in the store, name in the file): from ``"mpii"`` or ``"coco"`` (a declared
    skeleton's joints), a comma-separated list of ``NAME`` or ``NAME=SOURCE`` (``r_ankle=RightAnkle``: the file's
    joint ``RightAnkle`` stored as ``r_ankle``), a sequence of such, or a mapping; None: every joint the file has."""
    if spec is None:
        return None
    if isinstance(spec, Mapping):
        pairs = [(str(k), str(v)) for k, v in spec.items()]
    else:
        items = spec.split(",") if isinstance(spec, str) else list(spec)
        if isinstance(spec, str) and spec.strip().lower() in SKELETONS:
            items = list(SKELETONS[spec.strip().lower()].joints)
        pairs = []
        for item in items:
            name, _, source = str(item).partition("=")
            name, source = name.strip(), source.strip()
            pairs.append((name, source or name))
    if not pairs:
        raise LabelError("joints: no joint named")
    for name, source in pairs:
        if not name or not source:
            raise LabelError(
                f"joints: {name or source or '(empty)'!r}: a joint is NAME or NAME=SOURCE, e.g. r_ankle=RightAnkle"
            )
    check_joint_names([name for name, _ in pairs], len(pairs), "joints")
    sources = [source for _, source in pairs]
    twice = sorted({s for s in sources if sources.count(s) > 1})
    if twice:
        raise LabelError(f"joints: the file's joint{'s' * (len(twice) > 1)} {', '.join(twice)} read more than once")
    return pairs


#: the columns of a pose CSV other than the joints', by the name the reader knows them by, and what each is for
CSV_COLUMNS = {
    "id": "the item id",
    "imgname": "the image, the item id with person",
    "person": "the person in the image",
    "center_x": "the person's centre",
    "center_y": "the person's centre",
    "scale": "the person's scale, MPII's: 200 px per unit",
    "normalize": "the head size",
    "box_x": "the person's box: left, top, width, height",
    "box_y": "the person's box: left, top, width, height",
    "box_w": "the person's box: left, top, width, height",
    "box_h": "the person's box: left, top, width, height",
}
#: the columns each normalisation reads
NORMALIZATION_COLUMNS = {
    "none": (),
    "head": ("center_x", "center_y", "normalize"),
    "center_scale": ("center_x", "center_y", "scale"),
    "box": ("box_x", "box_y", "box_w", "box_h"),
}
DEFAULT_JOINT_COLUMNS = ("{joint}_x", "{joint}_y", "{joint}_vis")


def parse_columns(spec: str | Mapping[str, str] | None) -> dict[str, str]:
    """The file's name of each column the reader knows (:data:`CSV_COLUMNS`, and a joint's ``<joint>_x``,
    ``<joint>_y``, ``<joint>_vis``), from ``NAME=COLUMN,NAME=COLUMN`` or a mapping."""
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        pairs = [(str(k), str(v)) for k, v in spec.items()]
    else:
        pairs = []
        for item in spec.split(","):
            if not item.strip():
                continue
            name, eq, column = item.partition("=")
            if not eq or not name.strip() or not column.strip():
                raise LabelError(f"columns: {item.strip()!r} is not NAME=COLUMN, e.g. imgname=image")
            pairs.append((name.strip(), column.strip()))
    out: dict[str, str] = {}
    for name, column in pairs:
        if name in out:
            raise LabelError(f"columns: {name!r} mapped twice")
        out[name] = column
    return out


def parse_joint_columns(spec: str | Sequence[str] | None) -> tuple[str, str, str | None]:
    """The naming rule of a joint's columns: x, y and optionally vis templates holding ``{joint}``, from
    ``"{joint}.X,{joint}.Y,{joint}.V"`` or a sequence; None: ``<joint>_x, <joint>_y, <joint>_vis``."""
    if spec is None:
        return DEFAULT_JOINT_COLUMNS
    parts = [p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec)]
    if len(parts) not in (2, 3) or any(p.count("{joint}") != 1 for p in parts) or len(set(parts)) != len(parts):
        raise LabelError(
            f"joint columns: {json_repr(spec, 60)} is not X,Y or X,Y,VIS, three different names each "
            "holding {joint} once, e.g. {joint}_x,{joint}_y,{joint}_vis"
        )
    return parts[0], parts[1], parts[2] if len(parts) == 3 else None


def _template_joints(template: str, header: Sequence[str]) -> dict[str, str]:
    """Joint name -> column, for each column of ``header`` that the template ``template`` ({joint}) matches."""
    before, after = template.split("{joint}")
    pattern = re.compile(re.escape(before) + "(.+)" + re.escape(after) + r"\Z")
    return {m.group(1): column for column in header if (m := pattern.match(column))}


# ---------------------------------------------------------------- CSV
def _read_rows(path: str) -> list[list[str]]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except UnicodeDecodeError as e:
        raise LabelError(f"{path}: not UTF-8 text ({e})") from None
    except csv.Error as e:
        raise LabelError(f"{path}: not a CSV file ({e})") from None
    except OSError as e:  # missing, a folder, no permission: one line naming the path, not a traceback
        raise LabelError(f"{path}: cannot read: {e.strerror or e}") from None
    if not rows:
        raise LabelError(f"{path}: empty file")
    return rows


def read_pose_csv(
    path: str | os.PathLike[str],
    normalization: Normalization = "none",
    min_joints: int = 1,
    *,
    joints: str | Sequence[str] | Mapping[str, str] | None = None,
    columns: str | Mapping[str, str] | None = None,
    joint_columns: str | Sequence[str] | None = None,
    _mpii: bool = False,
) -> Poses:
    """Read poses from a CSV of one row per person.

    **Joint columns.** A joint ``J`` of the file has an x and a y column and optionally a visibility column, named
    by the rule ``joint_columns`` (default ``J_x``, ``J_y``, ``J_vis``; e.g. ``"{joint}.X,{joint}.Y"``); one
    column is named outright with ``columns`` (``"r_ankle_x=RA_X"``, by the store's joint name). The joints are
    ``joints`` (:func:`parse_joints`: names, each optionally the file's other name for it, ``r_ankle=RightAnkle``)
    in that order, else every joint the header has: in a declared skeleton's order when they are its joints
    (:data:`SKELETONS`), refused naming the missing columns when they are most but not all of one, else in the
    header's order. A joint is missing in a row where its x and y cells are empty, or x = y = 0 and vis = 0
    (MPII's convention); vis, 0 or 1, is 1 for a visible joint; without vis columns every joint given is visible.

    **Other columns**, by the names of :data:`CSV_COLUMNS`, renamed with ``columns`` (``"imgname=image"``): the
    item id is ``id``, else ``<imgname>#<person>``, else ``imgname``; the normalisation reads only its own
    (:data:`NORMALIZATION_COLUMNS`: ``head`` the centre and ``normalize``, ``center_scale`` the centre and
    ``scale``, ``box`` ``box_x, box_y, box_w, box_h``). Every missing column is named in one error.

    Raises LabelError naming the file for a path that cannot be read, the columns for a header that lacks some, and
    the file, line and column for a malformed row, a non-numeric or non-finite value, a vis flag other than 0/1,
    a pose with fewer than ``min_joints`` joints present, or a non-positive scale, head size or box side where the
    normalisation divides by it.
    """
    path = os.fspath(path)
    _check_normalization(normalization)
    pairs = parse_joints(joints)
    names_of = parse_columns(columns)
    tx, ty, tv = templates = parse_joint_columns(joint_columns)
    rows = _read_rows(path)
    header = rows[0]
    check_header(header, f"{path}, line 1")
    other = {name: names_of.get(name, name) for name in CSV_COLUMNS}
    note = ""
    if pairs is None:
        pairs, note = _header_joints(header, templates, names_of, other, path)
    names = tuple(name for name, _ in pairs)
    unknown = [
        key
        for key in names_of
        if key not in CSV_COLUMNS and key not in {f"{name}_{a}" for name in names for a in ("x", "y", "vis")}
    ]
    if unknown:
        raise LabelError(
            f"columns: {', '.join(map(repr, unknown))}: no column the reader knows "
            f"({', '.join(CSV_COLUMNS)}, or <joint>_x, <joint>_y, <joint>_vis of a joint "
            "read)"
        )
    # (x, y, vis) column of each joint: mapped by name, else by the naming rule
    joint_cols = [
        tuple(
            names_of.get(f"{name}_{a}", t.format(joint=source) if t else None)
            for a, t in zip(("x", "y", "vis"), templates)
        )
        for name, source in pairs
    ]
    with_vis = _mpii or any(cv is not None and cv in header for _, _, cv in joint_cols)
    missing: list[Missing] = [
        (c, name, "")
        for name, cols in zip(names, joint_cols)
        for c in (cols if with_vis else cols[:2])
        if c is not None and c not in header
    ]
    id_cols = _id_columns(header, other)
    if id_cols is None and not {"id", "imgname"} & names_of.keys():  # else named below, as columns renames it
        missing.append(
            (other["imgname"], None, f"the image, the item id with {other['person']}; or an {other['id']} column")
        )
    for name in NORMALIZATION_COLUMNS[normalization]:
        if other[name] not in header:
            missing.append((other[name], None, f"{CSV_COLUMNS[name]}, for normalization {normalization!r}"))
    for name in names_of:  # a column renamed must be there, used or not: a typo is not ignored
        if name in CSV_COLUMNS and other[name] not in header and all(other[name] != c for c, _, _ in missing):
            missing.append((other[name], None, f"{CSV_COLUMNS[name]}, as columns names it"))
    if missing:
        hint = (
            MPII_HINT
            if _mpii
            else (
                "other names: --columns NAME=COLUMN,...; another naming rule of the joints' "
                "columns: --joint-columns; fewer joints: --joints"
            )
        )
        raise LabelError(f"{path}: header lacks the columns {_missing_text(missing, note)}; {hint}")
    if _mpii:
        _refuse_other_joint_columns(header, [c for cols in joint_cols for c in cols if c], path)
    n_joints = len(names)
    if min_joints > n_joints:
        raise LabelError(f"{path}: --min-joints {min_joints} is more than its {n_joints} joints ({_names(names)})")
    pos = {c: i for i, c in enumerate(header)}
    person_cols = [other[c] for c in NORMALIZATION_COLUMNS[normalization]]
    n_other = len(header) - sum(c in pos for cols in joint_cols for c in (cols if with_vis else cols[:2]))
    ids, lines, coords, present_rows, visible_rows, person = [], [], [], [], [], []
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise LabelError(
                f"{path}, line {line}: {len(row)} fields, expected {len(header)} ({n_joints} joints x "
                f"({'x, y, vis' if with_vis else 'x, y'}) and {n_other} other columns)"
            )
        xy, here, vis = _csv_joints(row, pos, joint_cols, with_vis, names, path, line)
        if id_cols is not None:
            ids.append("#".join(row[pos[c]] for c in id_cols))
        lines.append(line)
        coords.append(xy)
        present_rows.append(here)
        visible_rows.append(vis)
        person.append([_parse_float(row[pos[c]], path, line, c) for c in person_cols])
    if not lines:
        raise LabelError(f"{path}: no pose rows")
    ids = unique_ids(ids, path, lambda i: f"line {lines[i]}")
    present = np.asarray(present_rows)
    too_few = np.flatnonzero(present.sum(axis=1) < min_joints)
    if too_few.size:
        raise LabelError(
            f"{path}: pose {ids[too_few[0]]!r} (line {lines[too_few[0]]}) has fewer than {min_joints} joints"
        )
    xy = _normalize_rows(np.asarray(coords), np.asarray(person).reshape(len(lines), -1), normalization, path, lines)
    poses = Poses(ids, xy, present, np.asarray(visible_rows), names)
    # an MPII CSV read as one records what MPII's reader always did (a store of it is the same store)
    mpii = _mpii or (
        names == MPII_JOINTS
        and all(n == s for n, s in pairs)
        and not names_of
        and templates == DEFAULT_JOINT_COLUMNS
        and with_vis
    )
    rule = "x = y = 0 and vis = 0" if mpii else "x and y empty, or x = y = 0 and vis = 0"
    poses.provenance = {
        "format": "mpii_csv" if mpii else "csv",
        "normalization": normalization,
        "min_joints": min_joints,
        "missing_joint": rule,
    }
    return poses


def _csv_joints(
    row: Sequence[str],
    pos: dict[str, int],
    joint_cols: Sequence[tuple[str | None, ...]],
    with_vis: bool,
    names: Sequence[str],
    path: str,
    line: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(J, 2) coordinates, (J,) present and (J,) visible of one CSV row (see :func:`read_pose_csv`)."""
    n = len(joint_cols)
    xy, here, vis = np.zeros((n, 2)), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    for t, (cx, cy, cv) in enumerate(joint_cols):
        x_text, y_text = row[pos[cx]].strip(), row[pos[cy]].strip()
        v_text = row[pos[cv]].strip() if with_vis else ""
        if not x_text and not y_text:  # not annotated
            if v_text and v_text not in ("0", "0.0"):
                raise LabelError(
                    f"{path}, line {line}: joint {names[t]} has empty {cx!r} and {cy!r} but {cv!r} is "
                    f"{v_text!r}: a joint not annotated has vis 0 or empty"
                )
            continue
        if not x_text or not y_text:
            raise LabelError(
                f"{path}, line {line}: column {cx if not x_text else cy!r} is empty and "
                f"{cy if not x_text else cx!r} is not: a joint not annotated has both empty"
            )
        xy[t] = (_parse_float(x_text, path, line, cx), _parse_float(y_text, path, line, cy))
        if with_vis:
            v = _parse_float(v_text, path, line, cv)
            if v not in (0.0, 1.0):
                raise LabelError(f"{path}, line {line}: a *_vis value is not 0 or 1: column {cv!r} is {v_text!r}")
            vis[t], here[t] = v == 1.0, not (xy[t, 0] == 0 and xy[t, 1] == 0 and v == 0)
        else:
            vis[t] = here[t] = True
    return xy, here, vis


def _normalize_rows(xy: np.ndarray, person: np.ndarray, how: str, path: str, lines: Sequence[int]) -> np.ndarray:
    """``xy`` normalised by each row's person columns (in :data:`NORMALIZATION_COLUMNS` order); LabelError naming
    the file and line of a non-positive head size, scale or box side."""
    if how == "none":
        return xy
    divisors = person[:, 2:4] if how == "box" else person[:, 2:3]
    bad = np.flatnonzero((divisors <= 0).any(axis=1))
    if bad.size:
        what = {"head": "head size", "center_scale": "scale", "box": "box width or height"}[how]
        raise LabelError(f"{path}, line {lines[bad[0]]}: non-positive {what} for normalization {how!r}")
    if how == "box":
        return normalize_poses(xy, None, None, None, "box", box=person)
    return normalize_poses(xy, person[:, :2], person[:, 2], person[:, 2], how)  # type: ignore[arg-type]


def _id_columns(header: Sequence[str], other: dict[str, str]) -> list[str] | None:
    """The columns of the item id: ``id``, else ``imgname`` and ``person`` (joined by ``#``), else ``imgname``."""
    if other["id"] in header:
        return [other["id"]]
    if other["imgname"] in header:
        return [other["imgname"], other["person"]] if other["person"] in header else [other["imgname"]]
    return None


def _header_joints(
    header: Sequence[str],
    templates: tuple[str, str, str | None],
    names_of: dict[str, str],
    other: dict[str, str],
    path: str,
) -> tuple[list[tuple[str, str]], str]:
    """Every joint ``header`` has by the naming rule (an x or a y column that is not a person's), as (name, name),
    and a note for the message naming missing columns: a declared skeleton's joints in its order when they are
    its joints, or when more than half of them are (its missing columns are then named, with the note); else in
    the header's order."""
    tx, ty, _ = templates
    xs, ys = _template_joints(tx, header), _template_joints(ty, header)
    taken = set(other.values()) | set(names_of.values())  # the person's columns, and those renamed by name
    found = [j for j in dict.fromkeys([*xs, *ys]) if xs.get(j) not in taken and ys.get(j) not in taken]
    if not found:
        rule = ", ".join(t.replace("{joint}", "<joint>") for t in templates if t)
        raise LabelError(
            f"{path}: the header names no joint: a joint has the columns {rule} (another naming rule: "
            "--joint-columns; other names: --columns)"
        )
    for skeleton in SKELETONS.values():
        known = [j for j in found if j in skeleton.joints]
        if set(found) == set(skeleton.joints) or 2 * len(known) > len(found):
            note = (
                ""
                if set(found) == set(skeleton.joints)
                else (
                    f", of the {skeleton.name.upper()} skeleton's {len(skeleton.joints)} joints, whose other columns "
                    "the file has: to read fewer joints, name them"
                )
            )
            return [(j, j) for j in skeleton.joints], note
    return [(j, j) for j in found], ""


def read_mpii_csv(path: str | os.PathLike[str], normalization: Normalization = "none", min_joints: int = 1) -> Poses:
    """Read poses from an MPII CSV like ``data/mpii/mpii_valid_2958.csv``: :func:`read_pose_csv` of MPII's 16
    joints under MPII's column names, a vis column for each, and no column of another joint.

    Item ids are ``<imgname>#<person>`` (an image can hold several people). A joint is *missing* when it is
    stored as x = y = 0 with vis = 0. Raises LabelError naming the file for a path that cannot be read (missing,
    a folder, no permission), naming every missing column in one message (the x, y, vis columns of every MPII
    joint, the id's, and those the normalisation reads: ``normalize`` for ``head`` only), and naming the file and
    line for a malformed row, a non-numeric or NaN value, a vis flag other than 0/1, or a pose with fewer than
    ``min_joints`` joints present.
    """
    return read_pose_csv(path, normalization, min_joints, joints=MPII_JOINTS, _mpii=True)


# ---------------------------------------------------------------- COCO keypoints JSON
def read_coco_keypoints(
    path: str | os.PathLike[str],
    normalization: Normalization = "none",
    min_joints: int = 1,
    *,
    joints: str | Sequence[str] | Mapping[str, str] | None = None,
    category: str | None = None,
) -> Poses:
    """Read poses from a COCO keypoints JSON (``person_keypoints_val2017.json`` and the like).

    The joints are the keypoints of the category that names some (``categories[].keypoints``; ``category``, its
    name or id, where several do), COCO's 17 (:data:`COCO_JOINTS`) for a file without categories; ``joints``
    reads some of them, renamed as wished (:func:`parse_joints`: ``r_ankle=right_ankle``). Each annotation of
    that category is a pose: ``keypoints`` holds x, y, v per keypoint; v = 0 is a keypoint not labelled
    (missing), 1 labelled but not visible (present, occluded), 2 visible. Its id is ``<file_name>#<annotation
    id>`` (the image's ``file_name`` from ``images``, else its id). ``normalization``: ``none`` (pixels) or
    ``box`` (by the annotation's ``bbox``, :func:`normalize_poses`); COCO has no person scale or head size.

    Crowd annotations (``iscrowd``: 1) and those with fewer than ``max(min_joints, 1)`` of the joints read
    labelled are left out (a COCO file has many people without keypoints), and counted in a warning. Raises
    LabelError naming the file and the annotation (its position and id) for anything malformed.
    """
    from labeldist.labels.coco import load_json

    path = os.fspath(path)
    _check_normalization(normalization)
    if normalization in ("head", "center_scale"):
        what = "head size" if normalization == "head" else "scale"
        raise LabelError(
            f"{path}: COCO keypoints have no person {what} for normalization {normalization!r}: use "
            "'box' (by each person's bbox) or 'none'"
        )
    pairs = parse_joints(joints)
    data = load_json(Path(path))
    if not isinstance(data, dict) or not isinstance(data.get("annotations"), list):
        raise LabelError(f"{path}: expected an object with an 'annotations' list (COCO keypoints format)")
    file_joints, category_id = _coco_category(data, path, category)
    if file_joints is None:
        file_joints = COCO_JOINTS
    if pairs is None:
        pairs = [(j, j) for j in file_joints]
    lacking = [source for _, source in pairs if source not in file_joints]
    if lacking:
        raise LabelError(f"{path}: the keypoints ({_names(file_joints)}) lack {', '.join(lacking)}")
    names = check_joint_names([name for name, _ in pairs], len(pairs), f"{path}: joints")
    take = np.array([file_joints.index(source) for _, source in pairs])
    if min_joints > len(names):
        raise LabelError(f"{path}: --min-joints {min_joints} is more than its {len(names)} joints")
    images = _coco_images(data, path)
    least = max(min_joints, 1)
    ids, places, coords, flags, boxes = [], [], [], [], []
    crowd = few = 0
    for k, ann in enumerate(data["annotations"]):
        where = f"{path}, annotations[{k}]"
        if not isinstance(ann, dict):
            raise LabelError(f"{where}: not an object")
        if "id" in ann:
            where += f" (id {json_repr(ann['id'])})"
        if category_id is not None and ann.get("category_id") != category_id:
            continue
        if ann.get("iscrowd") in (1, True):
            crowd += 1
            continue
        kp = ann.get("keypoints")
        if not isinstance(kp, list) or len(kp) != 3 * len(file_joints):
            got = f"{len(kp)} numbers" if isinstance(kp, list) else json_repr(kp)
            raise LabelError(
                f"{where}: 'keypoints' must be {3 * len(file_joints)} numbers (x, y, v for each of "
                f"{_names(file_joints)}), got {got}"
            )
        values = np.array([json_number(v, f"{where}: keypoints[{i}]") for i, v in enumerate(kp)]).reshape(-1, 3)
        v = values[take, 2]
        if not np.isin(v, (0.0, 1.0, 2.0)).all():
            t = int(np.flatnonzero(~np.isin(v, (0.0, 1.0, 2.0)))[0])
            raise LabelError(
                f"{where}: keypoint {pairs[t][1]} has v = {v[t]:g}: v is 0 (not labelled), 1 (labelled, "
                "not visible) or 2 (visible)"
            )
        if int((v > 0).sum()) < least:
            few += 1
            continue
        if "id" not in ann:
            raise LabelError(f"{where}: no annotation 'id' (an item's id is <file_name>#<annotation id>)")
        image = ann.get("image_id")
        name = images.get(image) if images else None
        ids.append(f"{name if name is not None else image}#{ann['id']}")
        places.append(where)
        coords.append(np.where((v > 0)[:, None], values[take, :2], 0.0))
        flags.append(v)
        if normalization == "box":
            boxes.append(_coco_box(ann.get("bbox"), where))
    if crowd or few:
        log.warning(
            "%s: %d of %d annotations left out: %d crowd, %d with fewer than %d of the %d joints read labelled",
            path,
            crowd + few,
            crowd + few + len(ids),
            crowd,
            few,
            least,
            len(names),
        )
    if not ids:
        raise LabelError(f"{path}: no person annotation with {least} or more labelled keypoints of the joints read")
    ids = unique_ids(ids, path, lambda i: places[i].split(", ", 1)[1])
    xy = np.asarray(coords)
    v = np.asarray(flags)
    if normalization == "box":
        xy = normalize_poses(xy, None, None, None, "box", box=np.asarray(boxes))
    poses = Poses(ids, xy, v > 0, v == 2, names)
    poses.provenance = {
        "format": "coco_keypoints",
        "normalization": normalization,
        "min_joints": min_joints,
        "missing_joint": "v = 0",
    }
    return poses


def _coco_category(data: dict, path: str, wanted: str | None) -> tuple[tuple[str, ...] | None, Any]:
    """(keypoint names, category id) of the category whose keypoints are read; (None, None) for a file without
    categories that name keypoints."""
    categories = data.get("categories", [])
    if not isinstance(categories, list):
        raise LabelError(f"{path}: 'categories' must be a list")
    named = [c for c in categories if isinstance(c, dict) and c.get("keypoints")]
    if wanted is not None:
        named = [c for c in named if str(c.get("name")) == wanted or str(c.get("id")) == wanted]
        if not named:
            known = [str(c.get("name")) for c in categories if isinstance(c, dict) and c.get("keypoints")]
            raise LabelError(
                f"{path}: no category {wanted!r} with keypoints; categories with keypoints: "
                f"{', '.join(known) or 'none'}"
            )
    if not named:
        return None, None
    if len(named) > 1:
        listed = ", ".join(str(c.get("name")) for c in named)
        raise LabelError(f"{path}: {len(named)} categories have keypoints ({listed}): name the one to read (category)")
    cat = named[0]
    where = f"{path}: category {json_repr(cat.get('name'))} keypoints"
    if not isinstance(cat["keypoints"], list) or not all(isinstance(k, str) for k in cat["keypoints"]):
        raise LabelError(f"{where}: must be a list of names")
    return check_joint_names(cat["keypoints"], len(cat["keypoints"]), where), cat.get("id")


def _coco_images(data: dict, path: str) -> dict[Any, str]:
    images = data.get("images", [])
    if not isinstance(images, list):
        raise LabelError(f"{path}: 'images' must be a list")
    out = {}
    for n, image in enumerate(images):
        if isinstance(image, dict) and "id" in image and isinstance(image.get("file_name"), str):
            out[image["id"]] = image["file_name"]
        elif not isinstance(image, dict):
            raise LabelError(f"{path}, images[{n}]: not an object")
    return out


def _coco_box(bbox: object, where: str) -> list[float]:
    if not isinstance(bbox, list) or len(bbox) != 4:
        raise LabelError(f"{where}: 'bbox' must be [x, y, w, h] for normalization 'box', got {json_repr(bbox)}")
    box = [json_number(b, f"{where}: bbox[{i}]") for i, b in enumerate(bbox)]
    if not (box[2] > 0 and box[3] > 0):
        raise LabelError(f"{where}: 'bbox' {json_repr(bbox)} has a non-positive width or height")
    return box


# ---------------------------------------------------------------- any of them
FORMATS = ("auto", "mpii", "csv", "coco")


def read_poses(
    path: str | os.PathLike[str],
    format: str = "auto",
    normalization: Normalization = "none",
    min_joints: int = 1,
    *,
    joints: str | Sequence[str] | Mapping[str, str] | None = None,
    columns: str | Mapping[str, str] | None = None,
    joint_columns: str | Sequence[str] | None = None,
    category: str | None = None,
) -> Poses:
    """Poses from ``path`` in ``format``: ``coco`` (:func:`read_coco_keypoints`), ``mpii`` (:func:`read_mpii_csv`),
    ``csv`` (:func:`read_pose_csv`), or ``auto``: ``coco`` for a ``.json`` file, else ``csv`` (which reads an MPII
    CSV as ``mpii`` does). Options a format does not take are refused."""
    path = os.fspath(path)
    if format not in FORMATS:
        raise ValueError(f"unknown pose format {format!r}; known: {', '.join(FORMATS)}")
    if format == "auto":
        format = "coco" if path.lower().endswith(".json") else "csv"
    given = {"columns": columns, "joint columns": joint_columns, "category": category}
    takes = {"coco": ("category",), "csv": ("columns", "joint columns"), "mpii": ()}[format]
    extra = [name for name, value in given.items() if value is not None and name not in takes]
    if extra:
        raise LabelError(f"{path}: the {format} format takes no {', '.join(extra)}")
    if format == "coco":
        return read_coco_keypoints(path, normalization, min_joints, joints=joints, category=category)
    if format == "mpii":
        if joints is not None:
            raise LabelError(f"{path}: the mpii format reads MPII's 16 joints; read others with the csv format")
        return read_mpii_csv(path, normalization, min_joints)
    return read_pose_csv(path, normalization, min_joints, joints=joints, columns=columns, joint_columns=joint_columns)
