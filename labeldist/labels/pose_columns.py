"""What the pose readers share (:mod:`labeldist.labels.pose_csv`, :mod:`labeldist.labels.pose_coco`): which joints to
read and under which columns (``--joints``, ``--columns``, ``--joint-columns``), and how a missing or unknown column
is named."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from labeldist.errors import UsageError
from labeldist.labels.base import LabelError, json_repr
from labeldist.labels.poses import (
    MPII_JOINTS,
    NORMALIZATIONS,
    SKELETONS,
    check_joint_names,
)


def parse_float(text: str, path: str, line: int, column: str) -> float:
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


def refuse_other_joint_columns(header: Sequence[str], expected: Sequence[str], path: str) -> None:
    # a coordinate-like column of another joint would be silently ignored; "center_x, center_y" are the person's
    other = [c for c in header if c.endswith(("_x", "_y", "_vis")) and c not in expected and not c.startswith("center")]
    if other:
        raise LabelError(
            f"{path}: header has columns of joints that are not MPII's: {', '.join(other)}; "
            f"known joints: {', '.join(MPII_JOINTS)}"
        )


#: a missing column: (its name in the file, the joint it belongs to or None, what it is for)
Missing = tuple[str, "str | None", str]


def missing_text(missing: Sequence[Missing], joint_note: str = "") -> str:
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


def check_normalization(normalization: str) -> None:
    if normalization not in NORMALIZATIONS:
        raise UsageError(f"unknown normalization {normalization!r}; known: {', '.join(NORMALIZATIONS)}")


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
        if column in out.values():
            first = next(n for n, c in out.items() if c == column)
            raise LabelError(f"columns: {first!r} and {name!r} both read the file's column {column!r}")
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


def template_joints(template: str, header: Sequence[str]) -> dict[str, str]:
    """Joint name -> column, for each column of ``header`` that the template ``template`` ({joint}) matches."""
    before, after = template.split("{joint}")
    pattern = re.compile(re.escape(before) + "(.+)" + re.escape(after) + r"\Z")
    return {m.group(1): column for column in header if (m := pattern.match(column))}
