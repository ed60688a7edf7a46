"""COCO-style caption files: the official COCO captions JSON and Karpathy's split lists, parsed into ids and
the captions of each image. The caption-set kind (:mod:`labeldist.labels.captions`) and the sentence kind
(:mod:`labeldist.labels.sentences`) both read them; the pose kind reads COCO keypoint files with :func:`load_json`.

Two layouts:

- official COCO captions JSON: ``{"images": [{"id"}...] (optional), "annotations": [{"image_id", "caption"}...]}``;
  items follow ``images`` when present (each must have a caption), else the first appearance in
  ``annotations``;
- Karpathy-style list: ``[{"image": "val2014/COCO_val2014_000000391895.jpg", "caption": [str, ...]}, ...]``;
  the item id is the integer in the file name (``"391895"``).

Bad input is a :class:`~labeldist.labels.base.LabelError` naming the file and the place in it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from labeldist.core.reading import read_regular_text
from labeldist.labels.base import NESTED_TOO_DEEPLY, LabelError, check_json_value, item_id, label_file_errors

#: names accepted by ``read_captions(format=...)``: ``auto`` tells the two layouts apart (an object is COCO, a
#: list Karpathy)
CAPTION_FORMATS = ("auto", "coco", "karpathy")

_IMAGE_ID = re.compile(r"(\d+)\.[A-Za-z]+$")


def load_json(path: Path) -> Any:
    """The parsed JSON file ``path`` (UTF-8, a byte-order mark tolerated); a LabelError naming it if unreadable (a
    FIFO or device refused before it could block) or not UTF-8 (its line named)."""
    with label_file_errors(path):
        text = read_regular_text(path, "label file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise LabelError(f"{path}: malformed JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    except ValueError as e:  # an integer past Python's limit on its digits
        raise LabelError(f"{path}: {e}") from None
    except RecursionError:
        raise LabelError(f"{path}: {NESTED_TOO_DEEPLY}") from None
    check_json_value(data, source=str(path))  # no lone surrogate, no integer past a float64, named by its place
    return data


def _image_key(value: Any, where: str) -> str:
    # COCO ids are ints; accept id strings too, but nothing else (bool is an int in Python)
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "":
        raise LabelError(f"{where}: image id must be an integer or a non-empty string, got {value!r}")
    return item_id(value, where)


def parse_coco(data: Any, source: str) -> tuple[list[str], list[list[Any]]]:
    """Ids and caption lists from a parsed official COCO captions JSON."""
    if not isinstance(data, dict) or not isinstance(data.get("annotations"), list):
        raise LabelError(f"{source}: expected an object with an 'annotations' list (COCO captions format)")
    groups: dict[str, list[Any]] = {}
    if "images" in data:
        if not isinstance(data["images"], list):
            raise LabelError(f"{source}: 'images' must be a list")
        for n, image in enumerate(data["images"]):
            if not isinstance(image, dict) or "id" not in image:
                raise LabelError(f"{source}: images[{n}] has no 'id'")
            key = _image_key(image["id"], f"{source}: images[{n}]")
            if key in groups:
                raise LabelError(f"{source}: duplicate image id {key!r} in 'images' (images[{n}])")
            groups[key] = []
    for n, ann in enumerate(data["annotations"]):
        if not isinstance(ann, dict) or "image_id" not in ann or "caption" not in ann:
            raise LabelError(f"{source}: annotations[{n}] needs 'image_id' and 'caption'")
        key = _image_key(ann["image_id"], f"{source}: annotations[{n}]")
        if "images" in data and key not in groups:
            raise LabelError(f"{source}: annotations[{n}] refers to image {key!r}, which is not in 'images'")
        groups.setdefault(key, []).append(ann["caption"])
    return list(groups), list(groups.values())


def parse_karpathy(data: Any, source: str) -> tuple[list[str], list[list[Any]]]:
    """Ids and caption lists from a parsed Karpathy-style list (see the module docstring)."""
    if not isinstance(data, list):
        raise LabelError(f"{source}: expected a JSON list of {{'image', 'caption'}} objects (Karpathy format)")
    ids: list[str] = []
    captions: list[list[Any]] = []
    for n, item in enumerate(data):
        if not isinstance(item, dict) or "image" not in item or "caption" not in item:
            raise LabelError(f"{source}: item {n} needs 'image' and 'caption'")
        image = item["image"]
        match = _IMAGE_ID.search(image) if isinstance(image, str) else None
        if match is None:
            raise LabelError(f"{source}: item {n}: no image id in file name {image!r}")
        caps = item["caption"]
        if isinstance(caps, str):
            caps = [caps]
        if not isinstance(caps, list):
            raise LabelError(f"{source}: item {n} ({image}): 'caption' must be a list of strings")
        ids.append(str(int(match.group(1))))
        captions.append(caps)
    return ids, captions
