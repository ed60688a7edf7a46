"""Poses from CSV files: :func:`read_pose_csv`, any CSV of one row per person, its joint columns found by a naming
rule or named, and :func:`read_mpii_csv`, the shipped ``data/mpii/mpii_valid_2958.csv`` (``<joint>_x, <joint>_y,
<joint>_vis`` for MPII's 16 joints; x = y = 0 with vis = 0 is a missing joint, coordinates with vis = 0 an occluded,
present one)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from labeldist.core.reading import read_csv
from labeldist.labels.base import LabelError, check_header, label_file_errors, unique_ids
from labeldist.labels.pose_columns import (
    CSV_COLUMNS,
    DEFAULT_JOINT_COLUMNS,
    MPII_HINT,
    NORMALIZATION_COLUMNS,
    Missing,
    check_normalization,
    missing_text,
    parse_columns,
    parse_float,
    parse_joint_columns,
    parse_joints,
    refuse_other_joint_columns,
    template_joints,
)
from labeldist.labels.poses import (
    MPII_JOINTS,
    SKELETONS,
    Normalization,
    Poses,
    normalize_poses,
    short_list,
)


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
    check_normalization(normalization)
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
        raise LabelError(f"{path}: header lacks the columns {missing_text(missing, note)}; {hint}")
    if mpii:
        refuse_other_joint_columns(header, [c for cols in joint_cols for c in cols if c], path)
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
        person.append([parse_float(row[pos[c]], path, line, c) for c in person_cols])
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
        xy[t] = (parse_float(x_text, path, line, cx), parse_float(y_text, path, line, cy))
        if with_vis:
            v = parse_float(v_text, path, line, cv)
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
    xs, ys = template_joints(tx, header), template_joints(ty, header)
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
