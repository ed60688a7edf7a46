"""A label file as records, one per item, each with the item id ``precompute`` gives it, and a part of the file
(some of its records) written in the file's own format: what ``labeldist split`` needs to split a label file into
train and test files that each build a store.

Every format ``precompute`` reads is read here by the same reader or its rule for ids:

- ``.json``: a Karpathy list (an image a record, :func:`~labeldist.labels.coco.parse_karpathy`); a COCO captions
  object (an image a record, its captions with it, :func:`~labeldist.labels.coco.parse_coco`); a COCO keypoints
  object (a person a record, :func:`~labeldist.labels.pose_files.read_coco_keypoints`: the annotations it reads;
  crowds and people without keypoints, which it leaves out, are in neither part; each part keeps the images of its
  people and every other key);
- ``.csv`` / ``.tsv``: a header row, then a row a record (pose, vector and sentence tables); ids: an ``id`` column,
  else ``imgname#person``, else ``imgname`` (the pose reader's), else the row numbers;
- ``.txt`` and ``.jsonl`` (``.ndjson``): a sentence a line (:func:`~labeldist.labels.sentence_files.
  read_plain_sentences`; blank lines are in neither part);
- ``.npy`` and ``.parquet``: a row a record (vectors).

Ids that are row or line numbers are numbered again in each part (the part's row 0 is item ``"0"``); the split's
``split.json`` says which input position each part's rows came from.
"""

from __future__ import annotations

import csv
import functools
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from labeldist.core.reading import open_regular, read_csv, read_regular_text
from labeldist.labels.base import LabelError, label_file_errors, read_npy

#: the suffixes a label file is split by, and what each holds
SPLIT_SUFFIXES = {
    ".json": "Karpathy list, COCO captions or COCO keypoints",
    ".csv": "a table with a header row (poses, vectors, sentences)",
    ".tsv": "a tab-separated table with a header row (sentences)",
    ".txt": "a sentence a line",
    ".jsonl": "a sentence (a JSON string or object) a line",
    ".ndjson": "as .jsonl",
    ".npy": "vectors, a row an item",
    ".parquet": "vectors, a row an item",
}


class LabelRecords(Protocol):
    """A label file's records: ``ids`` (one per record, in file order) and ``part(positions)``, the file's bytes
    holding only those records (ascending positions), in the file's format."""

    fmt: str
    ids: list[str]

    def part(self, positions: Sequence[int]) -> bytes: ...


@dataclass
class _JsonList:
    fmt: str
    ids: list[str]
    items: list[Any]

    def part(self, positions: Sequence[int]) -> bytes:
        return json.dumps([self.items[i] for i in positions]).encode("utf-8")


@dataclass
class _CocoCaptions:
    """Records are images; a part keeps its images' entries and captions, and every other key as it is."""

    fmt: str
    ids: list[str]
    data: dict[str, Any]

    def part(self, positions: Sequence[int]) -> bytes:
        keep = {self.ids[i] for i in positions}
        out = dict(self.data)
        out["annotations"] = [a for a in self.data["annotations"] if str(a["image_id"]) in keep]
        if "images" in self.data:
            out["images"] = [image for image in self.data["images"] if str(image["id"]) in keep]
        return json.dumps(out).encode("utf-8")


@dataclass
class _CocoKeypoints:
    """Records are the people the pose reader reads; a part keeps their annotations and their images."""

    fmt: str
    ids: list[str]
    data: dict[str, Any]
    annotations: list[dict[str, Any]]

    def part(self, positions: Sequence[int]) -> bytes:
        chosen = [self.annotations[i] for i in positions]
        images = {str(a.get("image_id")) for a in chosen}
        out = dict(self.data, annotations=chosen)
        if isinstance(self.data.get("images"), list):
            out["images"] = [im for im in self.data["images"] if isinstance(im, dict) and str(im.get("id")) in images]
        return json.dumps(out).encode("utf-8")


@dataclass
class _Table:
    fmt: str
    ids: list[str]
    header: list[str]
    rows: list[list[str]]
    delimiter: str

    def part(self, positions: Sequence[int]) -> bytes:
        buffer = io.StringIO(newline="")
        csv.writer(buffer, delimiter=self.delimiter).writerows([self.header, *(self.rows[i] for i in positions)])
        return buffer.getvalue().encode("utf-8")


@dataclass
class _Lines:
    fmt: str
    ids: list[str]
    lines: list[str]

    def part(self, positions: Sequence[int]) -> bytes:
        return "".join(self.lines[i] + "\n" for i in positions).encode("utf-8")


@dataclass
class _Rows:
    """``.npy`` and ``.parquet``: rows of an array or a table, read from the file once for every part."""

    fmt: str
    ids: list[str]
    path: Path

    @functools.cached_property
    def rows(self) -> Any:
        """The whole array (``.npy``, as stored: its own dtype) or table (``.parquet``, every column)."""
        if self.fmt == "npy":
            return read_npy(self.path)
        import pyarrow.parquet as pq

        with label_file_errors(self.path), open_regular(self.path, "label file") as f:
            return pq.read_table(f)

    def part(self, positions: Sequence[int]) -> bytes:
        buffer = io.BytesIO()
        take = np.asarray(positions, dtype=np.int64)
        if self.fmt == "npy":
            np.save(buffer, self.rows[take], allow_pickle=False)
        else:
            import pyarrow.parquet as pq

            pq.write_table(self.rows.take(take), buffer)
        return buffer.getvalue()


def read_records(path: str | Path) -> LabelRecords:
    """The records of the label file ``path`` by its suffix (:data:`SPLIT_SUFFIXES`); LabelError naming the file
    for a format not split this way, or what its reader refuses (a repeated id, a malformed entry)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _json_records(path)
    if suffix in (".csv", ".tsv"):
        return _table_records(path, "," if suffix == ".csv" else "\t")
    if suffix in (".txt", ".jsonl", ".ndjson"):
        return _line_records(path, "txt" if suffix == ".txt" else "jsonl")
    if suffix in (".npy", ".parquet"):
        from labeldist.labels.vectors import read_vectors

        labels = read_vectors(path)
        return _Rows(suffix[1:], [str(i) for i in labels.ids], path)
    known = ", ".join(SPLIT_SUFFIXES)
    raise LabelError(f"{path}: unknown label file type {suffix or '(no suffix)'!r} (known: {known})")


def _json_records(path: Path) -> LabelRecords:
    from labeldist.labels.coco import load_json, parse_coco, parse_karpathy

    data = load_json(path)
    if isinstance(data, list):
        return _JsonList("karpathy", parse_karpathy(data, str(path))[0], data)
    annotations = data.get("annotations") if isinstance(data, dict) else None
    if not isinstance(annotations, list):
        raise LabelError(
            f"{path}: a JSON label file is a Karpathy list or a COCO object with an 'annotations' list "
            "(captions or keypoints); this is neither"
        )
    if _holds_keypoints(data):
        return _keypoint_records(path, data)
    return _CocoCaptions("coco_captions", parse_coco(data, str(path))[0], data)


def _holds_keypoints(data: dict[str, Any]) -> bool:
    """Whether a COCO object is a keypoints file: a category that names keypoints, or an annotation that has some."""
    categories = data.get("categories")
    if isinstance(categories, list) and any(isinstance(c, dict) and c.get("keypoints") for c in categories):
        return True
    return any(isinstance(a, dict) and "keypoints" in a for a in data["annotations"])


def _keypoint_records(path: Path, data: dict[str, Any]) -> _CocoKeypoints:
    """The people :func:`read_coco_keypoints` reads (its defaults), matched to their annotations by the annotation
    id that ends each item id (``<file_name>#<annotation id>``)."""
    from labeldist.labels.pose_files import read_coco_keypoints

    poses = read_coco_keypoints(path)
    by_id = {str(a.get("id")): a for a in data["annotations"] if isinstance(a, dict)}
    ids = [str(i) for i in poses.ids]
    annotations = []
    for item in ids:
        annotation = by_id.get(item.rsplit("#", 1)[-1])
        if annotation is None:
            raise LabelError(f"{path}: person {item!r} has no annotation with its id")
        annotations.append(annotation)
    return _CocoKeypoints("coco_keypoints", ids, data, annotations)


def _table_records(path: Path, delimiter: str) -> _Table:
    with label_file_errors(path, "cannot read it as a table"):
        rows = [row for row in read_csv(path, "label file", delimiter=delimiter) if row]
    if not rows:
        raise LabelError(f"{path}: empty, no header and no rows")
    header, body = rows[0], rows[1:]
    fmt = "csv" if delimiter == "," else "tsv"
    return _Table(fmt, table_ids(path, header, body), header, body, delimiter)


def table_ids(path: Path, header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Each row's item id as ``precompute`` gives it: the ``id`` column, else ``imgname#person``, else ``imgname``
    (the pose reader's rule, without renamed columns), else the row number below the header."""
    pos = {name: i for i, name in enumerate(header)}
    cols = next((c for c in (["id"], ["imgname", "person"], ["imgname"]) if all(n in pos for n in c)), None)
    if cols is None:
        return [str(i) for i in range(len(rows))]
    return ["#".join(row[pos[c]] if pos[c] < len(row) else "" for c in cols) for row in rows]


def _line_records(path: Path, kind: str) -> _Lines:
    from labeldist.labels.sentence_files import file_lines, read_plain_sentences

    ids, _, lines, _ = read_plain_sentences(path, kind, None, None, empty="drop", limit=None)
    raw = file_lines(read_regular_text(path, "label file"))
    return _Lines(kind, ids, [raw[n - 1] for n in lines])
