"""The checks every label reader, every kind's JSON form and every kind's ``block`` go through, plugin
kinds included: repeated column names, ids compared as Python strings (null, NUL, duplicates), JSON values no
label can hold (lone surrogates, integers no float holds), a distance's own limits on its labels
(:meth:`LabelDistance.check_labels`), and NaN distances named by item and kind (:func:`labeldist.kinds.check_block`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from labeldist.distances.base import LabelDistance
from labeldist.distances.pose import PoseDistance
from labeldist.kinds import KindError, check_block, probe, read_label
from labeldist.labels.base import LabelError, LabelSet, check_header, check_json_value, json_number, unique_ids
from labeldist.labels.pose_files import read_mpii_csv
from labeldist.labels.poses import Poses
from labeldist.labels.vectors import Vectors
from tests.conftest import DATA

MPII = DATA / "mpii" / "mpii_valid_2958.csv"
HUGE = 10**400


# ---------------------------------------------------------------- the shared helpers
def test_check_header_names_every_repeated_column() -> None:
    check_header(["id", "a", "b"], "f.csv, line 1")
    with pytest.raises(
        LabelError,
        match=r"^f\.csv, line 1: the header names column 'a' twice \(fields 2 and 4\), "
        r"column 'b' 3 times \(fields 3, 5 and 6\): ",
    ):
        check_header(["id", "a", "b", "a", "b", "b"], "f.csv, line 1")


def test_ids_are_compared_as_python_strings() -> None:
    assert unique_ids(["x", 7, "y"], "f") == ["x", "7", "y"]
    for ids, says in (
        (["x\x00", "x"], r"f, item 0: the item id 'x\x00' holds a NUL character"),
        (["x", "a\x00b"], r"f, item 1: the item id 'a\x00b' holds a NUL character"),
        (["x", None], "f, item 1: the item id is null"),
        (["x", "y", "x"], "f, item 2: duplicate item id 'x' (first at item 0)"),
        (["x", ""], "f, item 1: the item id is empty"),
    ):
        with pytest.raises(LabelError) as e:
            unique_ids(ids, "f")
        assert str(e.value).startswith(says), str(e.value)


def test_a_label_set_refuses_ids_numpy_would_merge() -> None:
    with pytest.raises(LabelError, match=r"item 0: the item id 'x\\x00' holds a NUL character"):
        Vectors(["x\x00", "x"], np.zeros((2, 1)))
    with pytest.raises(LabelError, match="item 1: the item id is null"):
        Vectors(np.array(["x", None], dtype=object), np.zeros((2, 1)))
    with pytest.raises(LabelError, match="duplicate item ids: \\['x'\\]"):
        Vectors(np.array(["x", "x"]), np.zeros((2, 1)))  # a NumPy string array, as a store gives back


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (["\ud800 dog"], r"label[0] '\ud800 dog' holds a lone surrogate (U+D800 at character 0): not Unicode text"),
        ({"a": [1, {"\udc80": 2}]}, r"label['a'][1] has the key '\udc80', which holds a lone surrogate (U+DC80"),
        ([1.0, HUGE], "label[1] is an integer of 401 digits, too large for a number (at most about 1.8e308)"),
        (-HUGE, "label is an integer of 401 digits, too large for a number"),
    ],
)
def test_json_values_no_label_can_hold(value: object, says: str) -> None:
    with pytest.raises(LabelError) as e:
        check_json_value(value, "label")
    assert str(e.value).startswith(says), str(e.value)


def test_json_values_any_label_can_hold() -> None:
    check_json_value({"a": ["é ✓ 𝄞", 1, 2.5, None, True, 10**300, -(10**300)], "b": {"c": []}}, "label")
    deep: Any = 1
    for _ in range(10_000):  # deeper than Python's recursion limit: the walk is a loop
        deep = [deep]
    check_json_value(deep, "label")


def test_json_number_refuses_an_integer_no_float_holds() -> None:
    assert json_number(10**300, "x") == 1e300
    with pytest.raises(LabelError, match="x is an integer of 401 digits, too large for a number"):
        json_number(HUGE, "x")


def test_every_json_form_refuses_huge_integers_and_surrogates_itself() -> None:
    """Called directly, without the service's check first."""
    vectors = Vectors(np.array(["a", "b"]), np.zeros((2, 2)), ["p", "q"])
    with pytest.raises(LabelError, match="number 1 of the vector is an integer of 401 digits"):
        Vectors.from_json([1, HUGE], like=vectors)
    poses = read_mpii_csv(MPII).subset(slice(0, 3))
    with pytest.raises(LabelError, match=r"joint 0 \(r_ankle\) x is an integer of 401 digits"):
        Poses.from_json([[HUGE, 1]] + [None] * 15, like=poses)


# ---------------------------------------------------------------- read_label: what the service reads a label with
class Angles(LabelSet):
    """A plugin-like kind whose JSON form trusts its input (``math.isfinite`` of a huge integer raises)."""

    label_type = "angles"

    def __init__(self, ids: Any, degrees: Any) -> None:
        super().__init__(ids)
        self.degrees = np.asarray(degrees, dtype=np.float64).reshape(-1)

    def subset(self, index: Any) -> Angles:
        return Angles(self.ids[index], self.degrees[index])

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"degrees": self.degrees}

    @classmethod
    def from_arrays(cls, ids: np.ndarray, arrays: dict[str, np.ndarray]) -> Angles:
        return cls(ids, arrays["degrees"])

    @classmethod
    def from_json(cls, value: object, *, like: LabelSet) -> Angles:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise LabelError("not finite")
        return cls(["query"], [float(value)])  # type: ignore[arg-type]


class NaNDistance(LabelDistance):
    """A plugin-like distance that is NaN between two angles over 1000 (and has no check_labels of its own)."""

    kind = "angles"
    labels_class = Angles

    def params(self) -> dict[str, Any]:
        return {}

    def block(self, rows: Angles, cols: Angles) -> np.ndarray:
        out = np.abs(rows.degrees[:, None] - cols.degrees[None, :])
        out[(rows.degrees[:, None] > 1000) & (cols.degrees[None, :] > 1000)] = np.nan
        return out

    def reference(self, a: Angles, i: int, b: Angles, j: int) -> float:
        return float(self.block(a.subset(np.array([i])), b.subset(np.array([j])))[0, 0])


def test_a_plugin_kind_gets_the_json_checks() -> None:
    angles = Angles(["a", "b"], [1.0, 2.0])
    assert read_label(5, angles, NaNDistance()).degrees.tolist() == [5.0]
    with pytest.raises(LabelError, match="label is an integer of 401 digits"):
        read_label(HUGE, angles, NaNDistance())  # the kind's math.isfinite would raise OverflowError
    with pytest.raises(LabelError, match=r"^label: not finite$"):
        read_label(float("nan"), angles, NaNDistance())


def test_read_label_applies_the_distances_limits() -> None:
    poses = read_mpii_csv(MPII).subset(slice(0, 5))
    far = [[1e308, -1e308]] + [None] * 15
    with pytest.raises(LabelError, match="the label's values are too large for the pose distance"):
        read_label(far, poses, PoseDistance())
    near = [[float(x), float(y)] if p else None for (x, y), p in zip(poses.xy[0], poses.present[0])]
    assert read_label(near, poses, PoseDistance()).xy.tolist() == poses.xy[:1].tolist()


# ---------------------------------------------------------------- NaN distances: named by item and kind
def test_check_block_names_the_items_and_the_kind() -> None:
    block = np.array([[0.0, np.nan, 1.0], [np.nan, 2.0, 3.0]])
    with pytest.raises(KindError) as e:
        check_block("angles", block, 2, 3, row_ids=np.array(["r0", "r1"]), col_ids=np.array(["c0", "c1", "c2"]))
    assert str(e.value).startswith(
        "kind 'angles': block() returned NaN distances for 2 of 6 pairs: 'r0' to 'c1', 'r1' to 'c0'"
    ), str(e.value)
    with pytest.raises(KindError, match=r"NaN distances for 2 of 6 pairs: row 0 to column 1, row 1 to column 0"):
        check_block("angles", block, 2, 3)


def test_the_engine_refuses_a_nan_block_naming_the_items() -> None:
    """Where the probe's first items are fine, the NaN of a later block was written into the store."""
    from labeldist.engine.blocks import block_kernel, upper_kernel

    labels = Angles([f"i{t}" for t in range(6)], [1.0, 2.0, 3.0, 4.0, 2000.0, 3000.0])
    probe(NaNDistance(), labels)  # its first three items are fine
    for kernel in (
        lambda: block_kernel(labels, NaNDistance(), 4, 6, 2),
        lambda: upper_kernel(labels, NaNDistance(), 4, 6),
    ):
        with pytest.raises(
            KindError,
            match=r"kind 'angles': block\(\) returned NaN distances for 4 of \d+ pairs: "
            r"'i4' to 'i4', 'i4' to 'i5', 'i5' to 'i4'",
        ):
            kernel()


# ---------------------------------------------------------------- the other readers: repeated columns, ids
def test_a_pose_csv_with_a_repeated_column_is_refused(tmp_path: Path) -> None:
    lines = MPII.read_text().splitlines()[:4]
    lines = [lines[0] + ",scale"] + [line + ",9.5" for line in lines[1:]]  # the person's scale, twice
    path = tmp_path / "poses.csv"
    path.write_text("\n".join(lines) + "\n")
    header = lines[0].split(",")
    with pytest.raises(
        LabelError,
        match=rf"poses\.csv, line 1: the header names column 'scale' twice \(fields "
        rf"{header.index('scale') + 1} and {len(header)}\)",
    ):
        read_mpii_csv(path)


def test_a_pose_csv_with_a_repeated_person_names_its_lines(tmp_path: Path) -> None:
    lines = MPII.read_text().splitlines()[:4]
    path = tmp_path / "poses.csv"
    path.write_text("\n".join(lines + [lines[2]]) + "\n")
    with pytest.raises(LabelError, match=r"poses\.csv, line 5: duplicate item id '\S+#\d+' \(first at line 3\)"):
        read_mpii_csv(path)


def test_a_sentence_table_with_a_repeated_column_is_refused(tmp_path: Path) -> None:
    from labeldist.labels.sentences import read_sentences

    path = tmp_path / "s.csv"
    path.write_text("id,text,note,note\na,A dog runs.,x,y\n")
    with pytest.raises(LabelError, match=r"s\.csv, line 1: the header names column 'note' twice \(fields 3 and 4\)"):
        read_sentences(path)
    path.write_text("id,text\na\x00,A dog runs.\na,A cat sleeps.\n")
    with pytest.raises(LabelError, match=r"s\.csv, line 2: the item id 'a\\x00' holds a NUL character"):
        read_sentences(path)
    path = tmp_path / "s.jsonl"
    rows = [{"id": "a\x00", "text": "A dog runs."}, {"id": "a", "text": "A cat."}]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    with pytest.raises(LabelError, match=r"s\.jsonl, line 1: the item id 'a\\x00' holds a NUL character"):
        read_sentences(path)


def test_json_files_with_a_lone_surrogate_are_refused_naming_the_place(tmp_path: Path) -> None:
    from labeldist.labels.captions import read_captions
    from labeldist.labels.sentences import read_sentences

    path = tmp_path / "caps.json"
    path.write_text('[{"image": "a/COCO_1.jpg", "caption": ["a dog", "\\ud800 cat"]}]')
    with pytest.raises(
        LabelError,
        match=r"caps\.json: \[0\]\['caption'\]\[1\] '\\ud800 cat' holds a lone "
        r"surrogate \(U\+D800 at character 0\)",
    ):
        read_captions(path)
    with pytest.raises(LabelError, match=r"caps\.json: \[0\]\['caption'\]\[1\] '\\ud800 cat' holds a lone"):
        read_sentences(path)
    path = tmp_path / "s.jsonl"
    path.write_text('"A dog runs."\n"A \\udfff cat."\n')
    with pytest.raises(LabelError, match=r"s\.jsonl, line 2: the value 'A \\udfff cat\.' holds a lone surrogate"):
        read_sentences(path)


def test_a_pose_file_whose_distances_overflow_is_refused_unwritten(tmp_path: Path, capsys) -> None:
    """A coordinate of 1e300 made distances past float32: stored as infinity, like poses that share no joint."""
    from labeldist.cli import main

    lines = MPII.read_text().splitlines()[:6]
    fields = lines[3].split(",")
    fields[lines[0].split(",").index("r_ankle_x")] = "1e300"
    path = tmp_path / "poses.csv"
    path.write_text("\n".join(lines[:3] + [",".join(fields)] + lines[4:]) + "\n")
    out = tmp_path / "store"
    code = main(["precompute", "pose", str(path), "--k", "1", "--out", str(out), "--workers", "1", "--no-progress"])
    assert code != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"labeldist: error: {path}: pose '051423444.jpg#0': its values are too large for the pose "
        "distance (euclidean): joint 0 (r_ankle) x spans 317 (pose '052475643.jpg#0') to 1e+300 "
        "(pose '051423444.jpg#0'), so that distances reach 1.6e+301"
    ), err
    assert len(err.splitlines()) == 1 and not out.exists()
