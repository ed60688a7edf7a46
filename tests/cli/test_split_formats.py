"""``labeldist split`` of a label file of every format ``precompute`` reads: each part is a file of the input's
format that the kind's own reader reads into exactly the input's labels of the part's items (checked against the
input read whole and subset); the parts share no item and cover every item the reader reads; the split is the
one ``split_indices`` gives for that many items. A COCO keypoints file's parts build pose stores by ``labeldist
precompute`` as docs/training.md says. A file of a format split cannot take says what to do."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from labeldist.engine.split import split_indices
from labeldist.labels.captions import read_captions
from labeldist.labels.pose_files import read_coco_keypoints, read_poses
from labeldist.labels.poses import MPII_JOINTS
from labeldist.labels.sentence_files import read_plain_sentences
from labeldist.labels.vectors import read_vectors
from labeldist.store import StoreReader
from tests.cli.test_cli import run_cli
from tests.conftest import DATA
from tests.labels.test_pose_formats import mpii_rows, write_coco

SENTENCES = [f"Sentence number {i} is about {w}." for i, w in enumerate("cats dogs rain sun boats trees".split() * 5)]


def split(capsys, path: Path, out: Path, *extra: str) -> dict:
    rc, stdout, err = run_cli(capsys, "split", path, "--out", out, "--seed", "3", *extra)
    assert rc == 0, err
    info = json.loads((out / "split.json").read_text())
    lines = stdout.splitlines()  # a summary for a person: the input, each part's items and file, split.json
    assert lines[0] == f"split {path}: {len(info['train']) + len(info['test']):,} items, seed 3"
    for line, part in zip(lines[1:3], ("train", "test")):
        assert line.split()[:3] == [part, f"{len(info[part]):,}", "items"]
        assert str(out / f"{part}{path.suffix}") in line
    assert f"({len(info['queries']):,} queries, {len(info['gallery']):,} gallery)" in lines[2]
    assert lines[3].endswith(str(out / "split.json")) and len(lines) == 4
    return info


def test_json_summary(capsys, tmp_path: Path) -> None:
    """``--json`` prints the summary as one JSON object: each part's items and path, the queries and gallery."""
    path = tmp_path / "sentences.txt"
    path.write_text("\n".join(SENTENCES) + "\n")
    out = tmp_path / "split"
    rc, stdout, err = run_cli(capsys, "split", path, "--out", out, "--seed", "3", "--json")
    assert rc == 0, err
    info = json.loads((out / "split.json").read_text())
    assert json.loads(stdout) == {
        "source": str(path),
        "what": "files",
        "parts": {
            "train": {"items": len(info["train"]), "path": str(out / "train.txt")},
            "test": {
                "items": len(info["test"]),
                "path": str(out / "test.txt"),
                "queries": len(info["queries"]),
                "gallery": len(info["gallery"]),
            },
        },
        "split": str(out / "split.json"),
    }
    assert (out / "train.txt").read_text().count("\n") == len(info["train"])


def check_split(info: dict, n: int) -> None:
    want = split_indices(n, seed=3)
    for name in ("train", "test", "queries", "gallery"):
        assert info[name] == want[name]
    assert not set(info["ids"]["train"]) & set(info["ids"]["test"])


def test_coco_keypoints(capsys, tmp_path: Path) -> None:
    path = write_coco(
        tmp_path / "person_keypoints_mine.json", mpii_rows(60), MPII_JOINTS, {j: j for j in MPII_JOINTS}, extras=True
    )
    whole = read_coco_keypoints(path)
    info = split(capsys, path, tmp_path / "split")
    assert info["format"] == "coco_keypoints" and len(whole) == 60  # the crowd and the person without keypoints
    check_split(info, len(whole))
    for part in ("train", "test"):
        got = read_coco_keypoints(tmp_path / "split" / f"{part}.json")
        want = whole.subset(np.asarray(info[part]))
        assert got.ids.tolist() == want.ids.tolist() == info["ids"][part]
        assert np.array_equal(got.xy, want.xy) and np.array_equal(got.visible, want.visible)
        assert got.joint_names == want.joint_names
        data = json.loads((tmp_path / "split" / f"{part}.json").read_text())
        assert {im["id"] for im in data["images"]} == {a["image_id"] for a in data["annotations"]}


def test_coco_keypoints_parts_build_stores(capsys, tmp_path: Path) -> None:
    path = write_coco(tmp_path / "kp.json", mpii_rows(50), MPII_JOINTS, {j: j for j in MPII_JOINTS})
    info = split(capsys, path, tmp_path / "split")
    rc, _, err = run_cli(
        capsys,
        "precompute",
        "pose",
        tmp_path / "split" / "train.json",
        "--out",
        tmp_path / "train",
        "--k",
        "5",
        "--workers",
        "1",
    )
    assert rc == 0, err
    reader = StoreReader(str(tmp_path / "train"))
    assert reader.ids.tolist() == info["ids"]["train"]


@pytest.mark.parametrize("suffix", [".txt", ".jsonl", ".tsv", ".csv"])
def test_sentence_files(capsys, tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"mine{suffix}"
    if suffix == ".txt":
        path.write_text("\n".join(SENTENCES[:12]) + "\n\n" + "\n".join(SENTENCES[12:]) + "\n")  # a blank line
    elif suffix == ".jsonl":
        path.write_text("".join(json.dumps({"id": f"s{i}", "text": s}) + "\n" for i, s in enumerate(SENTENCES)))
    else:
        pd.DataFrame({"id": [f"s{i}" for i in range(len(SENTENCES))], "sentence": SENTENCES}).to_csv(
            path, sep="\t" if suffix == ".tsv" else ",", index=False
        )
    kind = suffix[1:]
    ids, texts, _, _ = read_plain_sentences(path, kind, None, None, empty="drop", limit=None)
    info = split(capsys, path, tmp_path / "split")
    check_split(info, len(SENTENCES))
    assert info["ids"]["train"] == [ids[i] for i in info["train"]]
    for part in ("train", "test"):
        got_ids, got, _, _ = read_plain_sentences(
            tmp_path / "split" / f"{part}{suffix}", kind, None, None, empty="error", limit=None
        )
        assert got == [texts[i] for i in info[part]]
        if suffix != ".txt":  # a .txt part numbers its lines again
            assert got_ids == info["ids"][part]


@pytest.mark.parametrize("suffix", [".npy", ".parquet", ".csv"])
def test_vector_files(capsys, tmp_path: Path, suffix: str) -> None:
    values = np.random.default_rng(0).normal(size=(40, 3))
    path = tmp_path / f"vec{suffix}"
    if suffix == ".npy":
        np.save(path, values)
    else:
        frame = pd.DataFrame(values, columns=["a", "b", "c"]).assign(id=[f"v{i}" for i in range(40)])
        frame.to_parquet(path) if suffix == ".parquet" else frame.to_csv(path, index=False)
    whole = read_vectors(path)
    info = split(capsys, path, tmp_path / "split")
    check_split(info, 40)
    for part in ("train", "test"):
        got = read_vectors(tmp_path / "split" / f"{part}{suffix}")
        assert np.array_equal(got.values, whole.values[info[part]])
        if suffix != ".npy":
            assert got.ids.tolist() == info["ids"][part] and got.columns == whole.columns


def test_coco_captions(capsys, tmp_path: Path) -> None:
    karpathy = json.loads((DATA / "coco" / "coco_karpathy_test.json").read_text())[:30]
    images = [{"id": 500 + n, "file_name": e["image"].split("/")[-1]} for n, e in enumerate(karpathy)]
    annotations = [
        {"id": 10 * n + c, "image_id": 500 + n, "caption": cap}
        for n, e in enumerate(karpathy)
        for c, cap in enumerate(e["caption"])
    ]
    path = tmp_path / "captions_mine.json"
    path.write_text(json.dumps({"info": {"v": 1}, "images": images, "annotations": annotations}))
    whole = read_captions(path)
    info = split(capsys, path, tmp_path / "split")
    assert info["format"] == "coco_captions"
    check_split(info, 30)
    for part in ("train", "test"):
        got = read_captions(tmp_path / "split" / f"{part}.json")
        assert got.ids.tolist() == info["ids"][part] == whole.ids[info[part]].tolist()
        assert [got.captions(i) for i in range(len(got))] == [whole.captions(i) for i in info[part]]


def test_karpathy_list(capsys, tmp_path: Path) -> None:
    data = json.loads((DATA / "coco" / "coco_karpathy_test.json").read_text())[:25]
    path = tmp_path / "k.json"
    path.write_text(json.dumps(data))
    info = split(capsys, path, tmp_path / "split")
    assert info["format"] == "karpathy"
    part = json.loads((tmp_path / "split" / "test.json").read_text())
    assert part == [data[i] for i in info["test"]]


def test_pose_csv_any_format(capsys, tmp_path: Path) -> None:
    info = split(capsys, DATA / "mpii" / "mpii_valid_2958.csv", tmp_path / "split")
    whole = read_poses(DATA / "mpii" / "mpii_valid_2958.csv")
    got = read_poses(tmp_path / "split" / "test.csv")
    assert got.ids.tolist() == whole.ids[info["test"]].tolist() == info["ids"]["test"]
    assert np.array_equal(got.xy, whole.xy[info["test"]])


@pytest.mark.parametrize(
    ("name", "body", "says"),
    [
        ("maps.png", b"\x89PNG", "unknown label file type '.png'"),
        ("odd.json", b'{"images": []}', "Karpathy list or a COCO object"),
    ],
)
def test_what_split_cannot_take_says_what_to_do(capsys, tmp_path: Path, name: str, body: bytes, says: str) -> None:
    path = tmp_path / name
    path.write_bytes(body)
    rc, _, err = run_cli(capsys, "split", path, "--out", tmp_path / "split")
    assert rc == 2 and says in err
    assert "labeldist precompute KIND FILE --out STORE" in err and "split the store" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "split").exists()
