"""The pose kind, ``labeldist precompute pose``: human poses (:mod:`labeldist.labels.poses`, read from files by
:mod:`labeldist.labels.pose_files`) under the thin-slicing pose distance (:mod:`labeldist.distances.pose`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from labeldist.core.options import check_file, nonnegative_int
from labeldist.distances.pose import PoseDistance
from labeldist.kinds import Kind, check_file_labels
from labeldist.labels.pose_files import FORMATS, read_poses
from labeldist.labels.poses import NORMALIZATIONS, Poses


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The input and the distance's options of ``labeldist precompute pose``."""
    p.add_argument(
        "input",
        help="poses: an MPII CSV (e.g. data/mpii/mpii_valid_2958.csv), any CSV with x and y "
        "columns per joint, or a COCO keypoints JSON",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="auto",
        help="the input's format; auto: coco for a .json file, else csv, which reads an MPII CSV as mpii "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--joints",
        metavar="NAMES",
        help="the joints to read, in order: mpii, coco, or NAME[=SOURCE],... (SOURCE: the joint's name in "
        "the file, e.g. r_ankle=right_ankle; default: every joint the file has)",
    )
    p.add_argument(
        "--columns",
        metavar="NAME=COLUMN,...",
        help="CSV: the file's name of a column the reader knows: id, imgname, person, center_x, "
        "center_y, scale, normalize, box_x, box_y, box_w, box_h, or <joint>_x, <joint>_y, "
        "<joint>_vis (e.g. imgname=image,person=pid)",
    )
    p.add_argument(
        "--joint-columns",
        metavar="X,Y[,VIS]",
        help="CSV: the naming rule of a joint's columns, each holding {joint} (default: "
        "{joint}_x,{joint}_y,{joint}_vis)",
    )
    p.add_argument("--category", help="COCO: the category whose keypoints to read, where several have some")
    p.add_argument(
        "--metric",
        choices=("euclidean", "sqeuclidean"),
        default="euclidean",
        help="distance between corresponding joints (default: %(default)s)",
    )
    p.add_argument(
        "--missing",
        choices=("rescale", "skip"),
        default="rescale",
        help="rule for a joint missing in either pose (default: %(default)s)",
    )
    p.add_argument(
        "--normalization",
        choices=NORMALIZATIONS,
        default="none",
        help="frame of the joint coordinates: image pixels, or centred and scaled by the head size "
        "(needs center_x, center_y, normalize), the person scale (center_x, center_y, scale) or "
        "the person's box (COCO's bbox; CSV: box_x, box_y, box_w, box_h) (default: "
        "%(default)s)",
    )
    p.add_argument(
        "--min-joints",
        type=nonnegative_int,
        default=1,
        help="reject poses with fewer joints present, at most the joints read (COCO: leave them out) "
        "(default: %(default)s)",
    )


def load(args: argparse.Namespace) -> tuple[Poses, PoseDistance, str]:
    """Read the poses of ``args.input`` and make the distance the options ask for."""
    check_file(args.input)
    labels = read_poses(
        args.input,
        args.format,
        args.normalization,
        args.min_joints,
        joints=args.joints,
        columns=args.columns,
        joint_columns=args.joint_columns,
        category=args.category,
    )
    distance = PoseDistance(metric=args.metric, missing=args.missing)
    check_file_labels(distance, labels, args.input)
    return labels, distance, args.dataset or Path(args.input).stem


KIND = Kind(
    name="pose",
    distance="labeldist.distances.pose:PoseDistance",
    command="pose",
    help="human poses from an MPII CSV, any pose CSV or COCO keypoints JSON (thin-slicing distance)",
    add_arguments=add_arguments,
    load=load,
)
