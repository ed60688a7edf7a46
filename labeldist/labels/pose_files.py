"""Reading poses from files: three readers of one :class:`~labeldist.labels.poses.Poses` (what ``labeldist
precompute pose`` and ``labeldist append`` read), and :func:`read_poses`, which reads a file in any of their
formats:

- :func:`read_mpii_csv`: the shipped ``data/mpii/mpii_valid_2958.csv`` (``<joint>_x, <joint>_y, <joint>_vis`` for
  MPII's 16 joints; x = y = 0 with vis = 0 is a missing joint, coordinates with vis = 0 an occluded, present one);
- :func:`read_pose_csv`: any CSV of one row per person, its joint columns found by a naming rule or named;
- :func:`read_coco_keypoints`: a COCO keypoints JSON (each person's ``keypoints`` x, y, v and its ``bbox``).

A file with some but not all of the joints of a declared skeleton (:data:`~labeldist.labels.poses.SKELETONS`) is
refused, naming every missing column: fewer joints would change every distance (the J / |S| rescaling of missing
joints). Fewer joints are read when asked for by name (``joints``).
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.core.reading import read_csv
from labeldist.errors import UsageError
from labeldist.labels.base import LabelError, check_header, json_number, json_repr, label_file_errors, unique_ids
from labeldist.labels.poses import (
    COCO_JOINTS,
    MPII_JOINTS,
    NORMALIZATIONS,
    SKELETONS,
    Normalization,
    Poses,
    check_joint_names,
    normalize_poses,
    short_list,
)

log = logging.getLogger(__name__)


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


def _check_normalization(normalization: str) -> None:
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


def _template_joints(template: str, header: Sequence[str]) -> dict[str, str]:
    """Joint name -> column, for each column of ``header`` that the template ``template`` ({joint}) matches."""
    before, after = template.split("{joint}")
    pattern = re.compile(re.escape(before) + "(.+)" + re.escape(after) + r"\Z")
    return {m.group(1): column for column in header if (m := pattern.match(column))}


# ---------------------------------------------------------------- CSV
def _read_rows(path: str) -> list[list[str]]:
    with label_file_errors(path):  # missing, a folder, no permission: one line naming the path, not a traceback
        rows = read_csv(path, "label file")  # UTF-8 (a byte-order mark dropped), long fields, regular files only
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
    (:data:`~labeldist.labels.poses.SKELETONS`), refused naming the missing columns when they are most but not all
    of one, else in the header's order. A joint is missing in a row where its x and y cells are empty, or x = y = 0
    and vis = 0 (MPII's convention); vis, 0 or 1, is 1 for a visible joint; without vis columns every joint given is
    visible.

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
    templates = parse_joint_columns(joint_columns)
    rows = _read_rows(path)
    check_header(rows[0], f"{path}, line 1")
    layout = _csv_layout(rows[0], pairs, names_of, templates, normalization, path, _mpii)
    names = layout.names
    if min_joints > len(names):
        raise LabelError(
            f"{path}: --min-joints {min_joints} is more than its {len(names)} joints ({short_list(names)})"
        )
    ids, lines, xy, present, visible, person = _csv_rows(rows, layout, normalization, path)
    ids = unique_ids(ids, path, lambda i: f"line {lines[i]}")
    too_few = np.flatnonzero(present.sum(axis=1) < min_joints)
    if too_few.size:
        raise LabelError(
            f"{path}: pose {ids[too_few[0]]!r} (line {lines[too_few[0]]}) has fewer than {min_joints} joints"
        )
    poses = Poses(ids, _normalize_rows(xy, person, normalization, path, lines), present, visible, names)
    poses.provenance = _csv_provenance(layout, names_of, templates, normalization, min_joints, _mpii)
    return poses


@dataclass(frozen=True)
class _CsvLayout:
    """Where a pose CSV's values are (:func:`_csv_layout`): its header; the joints read, as (name, the file's name
    for it), and their names; each joint's (x, y, vis) columns (vis None where the naming rule has none) and whether
    the vis columns are read; the columns of the item id (:func:`_id_columns`); the file's name of each column of
    :data:`CSV_COLUMNS`."""

    header: list[str]
    pairs: list[tuple[str, str]]
    names: tuple[str, ...]
    joint_cols: list[tuple[str | None, ...]]
    with_vis: bool
    id_cols: list[str] | None
    other: dict[str, str]


def _csv_layout(
    header: list[str],
    pairs: list[tuple[str, str]] | None,
    names_of: dict[str, str],
    templates: tuple[str, str, str | None],
    normalization: Normalization,
    path: str,
    mpii: bool,
) -> _CsvLayout:
    """The layout of a pose CSV whose first line is ``header`` (see :func:`read_pose_csv`): the joints ``pairs``,
    else those the header has (:func:`_header_joints`), their columns as ``names_of`` (:func:`parse_columns`) names
    them, else by the naming rule ``templates``. LabelError for a column ``names_of`` names that the reader does
    not know, then one naming every column the header lacks (and, for an MPII CSV, any column of another joint)."""
    other = {name: names_of.get(name, name) for name in CSV_COLUMNS}
    note = ""
    if pairs is None:
        pairs, note = _header_joints(header, templates, names_of, other, path)
    names = tuple(name for name, _ in pairs)
    _refuse_unknown_columns(names_of, names)
    # (x, y, vis) column of each joint: mapped by name, else by the naming rule
    joint_cols = [
        tuple(
            names_of.get(f"{name}_{a}", t.format(joint=source) if t else None)
            for a, t in zip(("x", "y", "vis"), templates)
        )
        for name, source in pairs
    ]
    with_vis = mpii or any(cv is not None and cv in header for _, _, cv in joint_cols)
    layout = _CsvLayout(header, pairs, names, joint_cols, with_vis, _id_columns(header, other), other)
    missing = _missing_columns(layout, names_of, normalization)
    if missing:
        hint = (
            MPII_HINT
            if mpii
            else (
                "other names: --columns NAME=COLUMN,...; another naming rule of the joints' "
                "columns: --joint-columns; fewer joints: --joints"
            )
        )
        raise LabelError(f"{path}: header lacks the columns {_missing_text(missing, note)}; {hint}")
    if mpii:
        _refuse_other_joint_columns(header, [c for cols in joint_cols for c in cols if c], path)
    return layout


def _refuse_unknown_columns(names_of: Mapping[str, str], names: Sequence[str]) -> None:
    """LabelError naming each column ``names_of`` (:func:`parse_columns`) names that the reader does not know: none
    of :data:`CSV_COLUMNS`, nor the x, y or vis of a joint ``names``."""
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


def _missing_columns(layout: _CsvLayout, names_of: Mapping[str, str], normalization: Normalization) -> list[Missing]:
    """Every column ``layout`` reads that its header lacks: the joints' (vis only where read), the item id's, the
    normalisation's, and any that ``names_of`` renames, used or not (a typo is not ignored)."""
    header, other = layout.header, layout.other
    missing: list[Missing] = [
        (c, name, "")
        for name, cols in zip(layout.names, layout.joint_cols)
        for c in (cols if layout.with_vis else cols[:2])
        if c is not None and c not in header
    ]
    if layout.id_cols is None and not {"id", "imgname"} & names_of.keys():  # else named below, as columns renames it
        missing.append(
            (other["imgname"], None, f"the image, the item id with {other['person']}; or an {other['id']} column")
        )
    for name in NORMALIZATION_COLUMNS[normalization]:
        if other[name] not in header:
            missing.append((other[name], None, f"{CSV_COLUMNS[name]}, for normalization {normalization!r}"))
    for name in names_of:  # a column renamed must be there, used or not: a typo is not ignored
        if name in CSV_COLUMNS and other[name] not in header and all(other[name] != c for c, _, _ in missing):
            missing.append((other[name], None, f"{CSV_COLUMNS[name]}, as columns names it"))
    return missing


def _csv_rows(
    rows: Sequence[list[str]], layout: _CsvLayout, normalization: Normalization, path: str
) -> tuple[list[str], list[int], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows of a pose CSV after its header, blank ones skipped: (ids, lines, (N, J, 2) coordinates, (N, J)
    present, (N, J) visible, (N, C) the person's columns the normalisation reads, in :data:`NORMALIZATION_COLUMNS`
    order). LabelError naming the file and line of a row of another length than the header or with a bad value,
    and one for a file of no row."""
    header, joint_cols, with_vis = layout.header, layout.joint_cols, layout.with_vis
    pos = {c: i for i, c in enumerate(header)}
    person_cols = [layout.other[c] for c in NORMALIZATION_COLUMNS[normalization]]
    n_other = len(header) - sum(c in pos for cols in joint_cols for c in (cols if with_vis else cols[:2]))
    ids, lines, coords, present_rows, visible_rows, person = [], [], [], [], [], []
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise LabelError(
                f"{path}, line {line}: {len(row)} fields, expected {len(header)} ({len(layout.names)} joints x "
                f"({'x, y, vis' if with_vis else 'x, y'}) and {n_other} other columns)"
            )
        xy, here, vis = _csv_joints(row, pos, joint_cols, with_vis, layout.names, path, line)
        if layout.id_cols is not None:
            ids.append("#".join(row[pos[c]] for c in layout.id_cols))
        lines.append(line)
        coords.append(xy)
        present_rows.append(here)
        visible_rows.append(vis)
        person.append([_parse_float(row[pos[c]], path, line, c) for c in person_cols])
    if not lines:
        raise LabelError(f"{path}: no pose rows")
    return (
        ids,
        lines,
        np.asarray(coords),
        np.asarray(present_rows),
        np.asarray(visible_rows),
        np.asarray(person).reshape(len(lines), -1),
    )


def _csv_provenance(
    layout: _CsvLayout,
    names_of: Mapping[str, str],
    templates: tuple[str, str, str | None],
    normalization: Normalization,
    min_joints: int,
    mpii: bool,
) -> dict[str, Any]:
    """What the poses read from a CSV record of how they were read (their ``provenance``)."""
    # an MPII CSV read as one records what MPII's reader always did (a store of it is the same store)
    as_mpii = mpii or (
        layout.names == MPII_JOINTS
        and all(n == s for n, s in layout.pairs)
        and not names_of
        and templates == DEFAULT_JOINT_COLUMNS
        and layout.with_vis
    )
    rule = "x = y = 0 and vis = 0" if as_mpii else "x and y empty, or x = y = 0 and vis = 0"
    return {
        "format": "mpii_csv" if as_mpii else "csv",
        "normalization": normalization,
        "min_joints": min_joints,
        "missing_joint": rule,
    }


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
    name or id, where several do), COCO's 17 (:data:`~labeldist.labels.poses.COCO_JOINTS`) for a file without
    categories; ``joints`` reads some of them, renamed as wished (:func:`parse_joints`: ``r_ankle=right_ankle``).
    Each annotation of that category is a pose: ``keypoints`` holds x, y, v per keypoint; v = 0 is a keypoint not
    labelled (missing), 1 labelled but not visible (present, occluded), 2 visible. Its id is ``<file_name>#<annotation
    id>`` (the image's ``file_name`` from ``images``, else its id). ``normalization``: ``none`` (pixels) or ``box``
    (by the annotation's ``bbox``, :func:`~labeldist.labels.poses.normalize_poses`); COCO has no person scale or
    head size.

    Crowd annotations (``iscrowd``: 1) and those with fewer than ``max(min_joints, 1)`` of the joints read
    labelled are left out (a COCO file has many people without keypoints), and counted in a warning. Raises
    LabelError naming the file and the annotation (its position and id) for anything malformed.
    """
    from labeldist.labels.coco import load_json

    path = os.fspath(path)
    _check_coco_normalization(normalization, path)
    pairs = parse_joints(joints)
    data = load_json(Path(path))
    if not isinstance(data, dict) or not isinstance(data.get("annotations"), list):
        raise LabelError(f"{path}: expected an object with an 'annotations' list (COCO keypoints format)")
    read = _coco_joints(data, pairs, category, path)
    if min_joints > len(read.names):
        raise LabelError(f"{path}: --min-joints {min_joints} is more than its {len(read.names)} joints")
    people = _coco_people(data, read, max(min_joints, 1), normalization == "box", path)
    ids = unique_ids(people.ids, path, lambda i: people.places[i].split(", ", 1)[1])
    xy = np.asarray(people.coords)
    v = np.asarray(people.flags)
    if normalization == "box":
        xy = normalize_poses(xy, None, None, None, "box", box=np.asarray(people.boxes))
    poses = Poses(ids, xy, v > 0, v == 2, read.names)
    poses.provenance = {
        "format": "coco_keypoints",
        "normalization": normalization,
        "min_joints": min_joints,
        "missing_joint": "v = 0",
    }
    return poses


def _check_coco_normalization(normalization: str, path: str) -> None:
    """ValueError for an unknown normalisation, LabelError for one that needs what COCO has not."""
    _check_normalization(normalization)
    if normalization in ("head", "center_scale"):
        what = "head size" if normalization == "head" else "scale"
        raise LabelError(
            f"{path}: COCO keypoints have no person {what} for normalization {normalization!r}: use "
            "'box' (by each person's bbox) or 'none'"
        )


@dataclass(frozen=True)
class _CocoJoints:
    """The joints read from a COCO keypoints file (:func:`_coco_joints`): the keypoints of its category, in order,
    and the category's id (None: every annotation is read); the joints read, as (name, the keypoint's name), their
    names, and their positions among the keypoints."""

    keypoints: tuple[str, ...]
    category_id: Any
    pairs: list[tuple[str, str]]
    names: tuple[str, ...]
    take: np.ndarray


def _coco_joints(data: dict, pairs: list[tuple[str, str]] | None, category: str | None, path: str) -> _CocoJoints:
    """The joints ``pairs`` (:func:`parse_joints`; None: every keypoint) of the keypoints of the category
    ``category`` (:func:`_coco_category`), COCO's 17 for a file without categories; LabelError naming those the
    keypoints lack."""
    keypoints, category_id = _coco_category(data, path, category)
    if keypoints is None:
        keypoints = COCO_JOINTS
    if pairs is None:
        pairs = [(j, j) for j in keypoints]
    lacking = [source for _, source in pairs if source not in keypoints]
    if lacking:
        raise LabelError(f"{path}: the keypoints ({short_list(keypoints)}) lack {', '.join(lacking)}")
    names = check_joint_names([name for name, _ in pairs], len(pairs), f"{path}: joints")
    take = np.array([keypoints.index(source) for _, source in pairs])
    return _CocoJoints(keypoints, category_id, pairs, names, take)


@dataclass
class _CocoPeople:
    """The poses read from a COCO keypoints file's annotations (:func:`_coco_people`): each one's id, where it is
    (for messages), (J, 2) coordinates, (J,) v flags and box (``box`` normalisation only); how many annotations
    were left out as crowds, and as having too few joints labelled."""

    ids: list[str] = field(default_factory=list)
    places: list[str] = field(default_factory=list)
    coords: list[np.ndarray] = field(default_factory=list)
    flags: list[np.ndarray] = field(default_factory=list)
    boxes: list[list[float]] = field(default_factory=list)
    crowd: int = 0
    few: int = 0


def _coco_id(value: object) -> bool:
    """Whether ``value`` can name a COCO annotation or image in an item id: an integer (COCO's own ids) or a
    non-empty string; never null, a boolean, a float or a container, which would make ids such as ``img#None``."""
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, str) and value != "")


def _coco_people(data: dict, read: _CocoJoints, least: int, with_box: bool, path: str) -> _CocoPeople:
    """The annotations of ``data`` of the category read, but crowds and those with fewer than ``least`` of the
    joints ``read`` labelled, which are counted in a warning; LabelError naming the file and the annotation of
    anything malformed, and one for a file of no annotation read."""
    images = _coco_images(data, path)
    people = _CocoPeople()
    for k, ann in enumerate(data["annotations"]):
        where = f"{path}, annotations[{k}]"
        if not isinstance(ann, dict):
            raise LabelError(f"{where}: not an object")
        if "id" in ann:
            where += f" (id {json_repr(ann['id'])})"
        if read.category_id is not None and ann.get("category_id") != read.category_id:
            continue
        if ann.get("iscrowd") in (1, True):
            people.crowd += 1
            continue
        xy, v = _coco_pose(ann.get("keypoints"), read, where)
        if int((v > 0).sum()) < least:
            people.few += 1
            continue
        if "id" not in ann:
            raise LabelError(f"{where}: no annotation 'id' (an item's id is <file_name>#<annotation id>)")
        if not _coco_id(ann["id"]):
            raise LabelError(f"{where}: the annotation 'id' must be an integer or a non-empty string")
        image = ann.get("image_id")
        name = images.get(image) if images and _coco_id(image) else None
        if name is None and not _coco_id(image):
            raise LabelError(
                f"{where}: 'image_id' must be an integer or a non-empty string (an item's id is "
                "<file_name>#<annotation id>, or <image_id>#<annotation id> without an images table)"
            )
        people.ids.append(f"{name if name is not None else image}#{ann['id']}")
        people.places.append(where)
        people.coords.append(xy)
        people.flags.append(v)
        if with_box:
            people.boxes.append(_coco_box(ann.get("bbox"), where))
    if people.crowd or people.few:
        log.warning(
            "%s: %d of %d annotations left out: %d crowd, %d with fewer than %d of the %d joints read labelled",
            path,
            people.crowd + people.few,
            people.crowd + people.few + len(people.ids),
            people.crowd,
            people.few,
            least,
            len(read.names),
        )
    if not people.ids:
        raise LabelError(f"{path}: no person annotation with {least} or more labelled keypoints of the joints read")
    return people


def _coco_pose(kp: object, read: _CocoJoints, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(J, 2) coordinates (0 for a joint not labelled) and (J,) v flags of the joints ``read`` of an annotation's
    ``keypoints`` ``kp``; LabelError naming ``where`` for anything malformed."""
    if not isinstance(kp, list) or len(kp) != 3 * len(read.keypoints):
        got = f"{len(kp)} numbers" if isinstance(kp, list) else json_repr(kp)
        raise LabelError(
            f"{where}: 'keypoints' must be {3 * len(read.keypoints)} numbers (x, y, v for each of "
            f"{short_list(read.keypoints)}), got {got}"
        )
    values = np.array([json_number(v, f"{where}: keypoints[{i}]") for i, v in enumerate(kp)]).reshape(-1, 3)
    v = values[read.take, 2]
    if not np.isin(v, (0.0, 1.0, 2.0)).all():
        t = int(np.flatnonzero(~np.isin(v, (0.0, 1.0, 2.0)))[0])
        raise LabelError(
            f"{where}: keypoint {read.pairs[t][1]} has v = {v[t]:g}: v is 0 (not labelled), 1 (labelled, "
            "not visible) or 2 (visible)"
        )
    return np.where((v > 0)[:, None], values[read.take, :2], 0.0), v


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
        if not isinstance(image, dict):
            raise LabelError(f"{path}, images[{n}]: not an object")
        if "id" in image and not _coco_id(image["id"]):
            raise LabelError(
                f"{path}, images[{n}]: the image 'id' must be an integer or a non-empty string, got "
                f"{json_repr(image['id'])}"
            )
        if "id" in image and isinstance(image.get("file_name"), str):
            out[image["id"]] = image["file_name"]
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
        raise UsageError(f"unknown pose format {format!r}; known: {', '.join(FORMATS)}")
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
