"""Human poses: J named joints of (x, y) with a visibility flag: the label type :class:`Poses`, the skeletons the
pose kind declares (:data:`SKELETONS`: MPII's 16 joints, COCO's 17), joint names, the normalisations
(:func:`normalize_poses`) and the JSON form of a pose that a search sends (:meth:`Poses.from_json`). Poses are
read from files (an MPII CSV, any pose CSV, COCO keypoints JSON) by :mod:`labeldist.labels.pose_files`.

**Joint names.** Every :class:`Poses` has its joint names (:attr:`Poses.joint_names`); a store keeps them as the
shared label array ``labels/joint_names`` unless they are the default for their number (MPII's for 16 joints,
``joint_0``, ``joint_1``, ... otherwise): so an MPII store, and every store made before joint names were recorded,
has the same arrays and ``labels_sha256`` as before and reads back with MPII's names. The label view and the
renderer draw the bones of every declared skeleton both of whose ends a store has (:func:`skeleton_edges`),
left and right told apart by the names (:func:`joint_side`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
from typing_extensions import Self

from labeldist.errors import UsageError
from labeldist.labels.base import LabelError, LabelSet, as_str_array, json_number, json_repr

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

    array_dimensions: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "xy": ("item", "joint", "coordinate"),
        "present": ("item", "joint"),
        "visible": ("item", "joint"),
        "joint_names": ("joint",),
    }

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
                f"the new poses' joints ({short_list(other.joint_names)}) are not the store's "
                f"({short_list(self.joint_names)})"
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


def short_list(names: Sequence[str], at_most: int = 6) -> str:
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
                f"that the store's poses do not have ({short_list(names)})"
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
    raise UsageError(f"unknown normalization {how!r}; known: {', '.join(NORMALIZATIONS)}")
