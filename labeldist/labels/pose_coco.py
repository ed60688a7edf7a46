"""Poses from a COCO keypoints JSON: :func:`read_coco_keypoints` (each person's ``keypoints`` x, y, v and its
``bbox``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.labels.base import LabelError, json_number, json_repr, unique_ids
from labeldist.labels.pose_columns import check_normalization, parse_joints
from labeldist.labels.poses import (
    COCO_JOINTS,
    Normalization,
    Poses,
    check_joint_names,
    normalize_poses,
    short_list,
)

log = logging.getLogger(__name__)


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
    check_normalization(normalization)
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
