"""Reading poses from files: three readers of one :class:`~labeldist.labels.poses.Poses` (what ``labeldist
precompute pose`` and ``labeldist append`` read), each in the module of its format (:mod:`labeldist.labels.pose_csv`,
:mod:`labeldist.labels.pose_coco`; what they share, :mod:`labeldist.labels.pose_columns`), and :func:`read_poses`,
which reads a file in any of their formats:

- :func:`read_mpii_csv`: the shipped ``data/mpii/mpii_valid_2958.csv`` (``<joint>_x, <joint>_y, <joint>_vis`` for
  MPII's 16 joints; x = y = 0 with vis = 0 is a missing joint, coordinates with vis = 0 an occluded, present one);
- :func:`read_pose_csv`: any CSV of one row per person, its joint columns found by a naming rule or named;
- :func:`read_coco_keypoints`: a COCO keypoints JSON (each person's ``keypoints`` x, y, v and its ``bbox``).

A file with some but not all of the joints of a declared skeleton (:data:`~labeldist.labels.poses.SKELETONS`) is
refused, naming every missing column: fewer joints would change every distance (the J / |S| rescaling of missing
joints). Fewer joints are read when asked for by name (``joints``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from labeldist.errors import UsageError
from labeldist.labels.base import LabelError
from labeldist.labels.pose_coco import read_coco_keypoints
from labeldist.labels.pose_csv import read_mpii_csv, read_pose_csv
from labeldist.labels.poses import Normalization, Poses

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
