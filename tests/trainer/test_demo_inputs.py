"""Demo inputs: corrupted poses, one caption's sentence embedding per image, and the label-file split."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from labeldist.engine.split import SplitError, split_indices, split_labels
from labeldist.trainer.inputs import demo_inputs
from labeldist.trainer.inputs.demo_inputs import corrupt_poses, minilm_path, pose_inputs
from tests.conftest import DATA
from tests.trainer.conftest import N_ITEMS, STORE


def test_corrupt_poses_hides_and_jitters_present_joints_only() -> None:
    rng = np.random.default_rng(0)
    xy = rng.normal(size=(400, 16, 2)) * 3
    present = rng.random((400, 16)) > 0.1
    out = corrupt_poses(xy, present, hide=0.25, jitter=0.1, seed=1).reshape(400, 16, 3)
    shown = out[..., 2] == 1
    assert not (shown & ~present).any()  # a missing joint is never shown
    assert np.all(out[~shown] == 0)  # hidden or missing: (0, 0, 0)
    assert 0.70 < shown.sum() / present.sum() < 0.80  # about 1 - hide of the present joints
    assert shown.any(1).all()  # every pose keeps a joint
    noise = (out[..., :2] - xy)[shown]
    size = np.sqrt(((xy - xy.mean(1, keepdims=True)) ** 2).sum(-1).mean(1))  # about the pose size
    assert 0.05 * size.mean() < noise.std() < 0.2 * size.mean()
    again = corrupt_poses(xy, present, hide=0.25, jitter=0.1, seed=1)
    assert np.array_equal(again, out.reshape(400, -1))  # seeded
    assert not np.array_equal(corrupt_poses(xy, present, seed=2), again)


def test_pose_inputs_are_indexed_like_the_store(pose_store: Path) -> None:
    x = pose_inputs(str(pose_store / STORE), seed=0)
    assert x.shape == (N_ITEMS, 16 * 3) and x.dtype == np.float32
    with pytest.raises(ValueError, match="not a caption store"):
        demo_inputs.caption_inputs(str(pose_store / STORE))


def test_caption_inputs_embed_one_seeded_caption_per_image(monkeypatch: pytest.MonkeyPatch) -> None:
    captions = [["a dog", "the dog runs"], ["two cats"], ["a red bus", "bus on a road", "a city bus"]]

    class Labels:  # what labeldist.view.stored.stored_labels gives for a caption store, reduced to what is used
        caption_offsets = None

        def __len__(self) -> int:
            return len(captions)

        def captions(self, i: int) -> list[str]:
            return captions[i]

    reader = types.SimpleNamespace(manifest={"kind": "caption_wmd"})
    monkeypatch.setattr(demo_inputs, "StoreReader", lambda store: reader)
    monkeypatch.setattr(demo_inputs, "stored_labels", lambda read: Labels() if read is reader else None)
    seen = {}

    class FakeModel:
        def __init__(self, path: str, device: str) -> None:
            seen["path"] = path

        def encode(self, texts, **kw):
            seen["texts"] = texts
            return np.ones((len(texts), 384))

    # a stand-in module: the real one takes seconds to import and its model is exercised in RESULTS.md's runs
    monkeypatch.setitem(sys.modules, "sentence_transformers", types.SimpleNamespace(SentenceTransformer=FakeModel))
    x = demo_inputs.caption_inputs("any", seed=0)
    assert x.shape == (3, 384) and x.dtype == np.float32
    assert [t in c for t, c in zip(seen["texts"], captions)] == [True, True, True]
    assert seen["path"] == str(minilm_path())
    assert (minilm_path() / "config.json").is_file()  # the model ships in the package, offline


def test_split_is_seeded_disjoint_and_complete() -> None:
    s = split_indices(100, seed=4)
    assert len(s["train"]) == 80 and len(s["test"]) == 20 and len(s["queries"]) == 4
    assert sorted(s["train"] + s["test"]) == list(range(100))
    assert sorted(s["queries"] + s["gallery"]) == list(range(20))
    assert split_indices(100, seed=4) == s and split_indices(100, seed=5) != s
    with pytest.raises(ValueError, match="test_fraction"):
        split_indices(10, test_fraction=1.5)


def test_split_labels_writes_both_formats(tmp_path: Path) -> None:
    images = [{"image": f"im{i}.jpg", "caption": [f"caption {i}"]} for i in range(10)]
    (tmp_path / "caps.json").write_text(json.dumps(images))
    info = split_labels(tmp_path / "caps.json", tmp_path / "c", test_fraction=0.3, query_fraction=0.34)
    test = json.loads((tmp_path / "c" / "test.json").read_text())
    assert test == [images[i] for i in info["test"]] and len(test) == 3
    assert json.loads((tmp_path / "c" / "split.json").read_text())["queries"] == info["queries"]
    (tmp_path / "poses.csv").write_text("a,b\n" + "".join(f"{i},{i * 2}\n" for i in range(10)))
    info = split_labels(tmp_path / "poses.csv", tmp_path / "p", test_fraction=0.3, query_fraction=0.34)
    rows = (tmp_path / "p" / "train.csv").read_text().splitlines()
    assert rows[0] == "a,b" and rows[1:] == [f"{i},{i * 2}" for i in info["train"]]
    with pytest.raises(ValueError, match=r"known: \.json, \.csv, \.tsv, \.txt"):
        split_labels(tmp_path / "x.png", tmp_path / "x")


def test_split_labels_refuses_repeated_ids(tmp_path: Path) -> None:
    """The fifth adversarial run: the first 3 rows of MPII appended to it, split, both parts built: the 3 ids were
    in the train and the test store. ``precompute`` refuses the whole file; ``split`` now does too, writing
    nothing."""
    lines = (DATA / "mpii" / "mpii_valid_2958.csv").read_text().splitlines()
    (tmp_path / "dup.csv").write_text("\n".join([*lines, *lines[1:4]]) + "\n")
    with pytest.raises(SplitError, match=r"dup.csv, line 2960: repeats the item id '.+' of line 2"):
        split_labels(tmp_path / "dup.csv", tmp_path / "sp", seed=39)
    images = [{"image": f"COCO_val2014_{i % 4:012d}.jpg", "caption": ["a caption"]} for i in range(5)]
    (tmp_path / "caps.json").write_text(json.dumps(images))
    with pytest.raises(SplitError, match=r"caps.json, item 4: repeats the item id '0' of item 0"):
        split_labels(tmp_path / "caps.json", tmp_path / "sp")
    (tmp_path / "ids.csv").write_text("id,x\na,1\nb,2\na,3\n")
    with pytest.raises(SplitError, match=r"ids.csv, line 4: repeats the item id 'a' of line 2"):
        split_labels(tmp_path / "ids.csv", tmp_path / "sp")
    assert not (tmp_path / "sp").exists()


def test_split_labels_never_replaces_another_split_without_overwrite(tmp_path: Path) -> None:
    source = tmp_path / "poses.csv"
    source.write_text("a,b\n" + "".join(f"{i},{i * 2}\n" for i in range(20)))
    out = tmp_path / "p"
    first = split_labels(source, out, seed=0)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert split_labels(source, out, seed=0) == first  # the same split again: nothing to replace
    with pytest.raises(SplitError, match=r"train\.csv, .*test\.csv, .*split\.json: exists with other contents"):
        split_labels(source, out, seed=1)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    second = split_labels(source, out, seed=1, overwrite=True)
    assert second["test"] != first["test"] and json.loads((out / "split.json").read_text())["seed"] == 1
    (out / "test.csv").unlink()
    elsewhere = tmp_path / "elsewhere.csv"  # not the input (a link to the input is refused as the input itself)
    elsewhere.write_text(source.read_text())
    (out / "test.csv").symlink_to(elsewhere)  # --overwrite replaces regular files only, never what a link points to
    original = elsewhere.read_text()
    with pytest.raises(SplitError, match="test.csv: a symbolic link; --overwrite replaces regular files only"):
        split_labels(source, out, seed=2, overwrite=True)
    assert elsewhere.read_text() == original


def test_a_split_with_few_queries_warns_and_says_what_to_ask(tmp_path: Path, capsys) -> None:
    """280 items split by default give 11 queries (the researcher's case): a warning naming the count and what to
    ask; 600 items asked for enough queries give none."""
    from labeldist.engine.split import FEW_QUERIES
    from labeldist.trainer.cli import main

    source = tmp_path / "rows.csv"
    source.write_text("a,b\n" + "".join(f"{i},{i * 2}\n" for i in range(280)))
    assert main(["split", str(source), "--out", str(tmp_path / "few")]) == 0
    err = capsys.readouterr().err
    queries = len(json.loads((tmp_path / "few" / "split.json").read_text())["queries"])
    assert queries == 11 and f"trainer split: warning: only {queries} queries" in err, err
    source.write_text("a,b\n" + "".join(f"{i},{i * 2}\n" for i in range(600)))
    args = ["split", str(source), "--out", str(tmp_path / "enough"), "--test-fraction", "0.4"]
    assert main([*args, "--query-fraction", "0.5"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert len(json.loads((tmp_path / "enough" / "split.json").read_text())["queries"]) >= FEW_QUERIES
