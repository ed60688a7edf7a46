"""``trainer eval --split`` checks its split file (RELIABILITY.md, "The fourth adversarial run").

Before: queries that were also in the gallery gave nDCG@1 = 1.0 with exit 0; booleans and floats passed as
positions; an empty side, a missing key, broken JSON or a top-level list gave tracebacks. Now each is refused in
one line naming the file, exit 2, before anything is evaluated."""

from __future__ import annotations

import json

import numpy as np
import pytest

from labeldist.client import InputError
from labeldist.trainer.training.evaluate import load_split
from tests.trainer.conftest import N_ITEMS, STORE
from tests.trainer.test_outputs import refused, trainer

GOOD = {"queries": [0, 1, 2], "gallery": list(range(3, 40))}
CASES = {
    "shared items": ({"queries": [0, 1, 5], "gallery": list(range(3, 40))}, "1 item(s) are both queries and gallery"),
    "booleans": ({"queries": [True, False], "gallery": [3, 4]}, '"queries" holds true: item positions are integers'),
    "floats": ({"queries": [0, 1.5], "gallery": [3, 4]}, '"queries" holds 1.5'),
    "strings": ({"queries": ["0"], "gallery": [3, 4]}, '"queries" holds "0"'),
    "null": ({"queries": [None], "gallery": [3, 4]}, '"queries" holds null'),
    "negative": ({"queries": [-1], "gallery": [3, 4]}, '"queries" holds -1'),
    "huge": ({"queries": [2**70], "gallery": [3, 4]}, '"queries" holds 1180591620717411303424'),
    "twice": ({"queries": [0, 0], "gallery": [3, 4]}, '"queries" names item 0 more than once'),
    "empty side": (
        {"queries": [], "gallery": [3, 4]},
        '"queries" must be a non-empty list of item positions, not a list',
    ),
    "not a list": (
        {"queries": 3, "gallery": [3, 4]},
        '"queries" must be a non-empty list of item positions, not a number',
    ),
    "missing key": ({"queries": [0]}, 'no "gallery" list'),
    "top-level list": ([[0], [3, 4]], "a split is a JSON object"),
    "broken JSON": ('{"queries": [0', "not a split file (not JSON"),
    "deep JSON": ("[" * 100_000 + "]" * 100_000, "not a split file"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_split_is_refused_in_one_line(case, tmp_path) -> None:
    content, message = CASES[case]
    path = tmp_path / "split.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(InputError) as caught:
        load_split(path)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value), caught.value
    assert "\n" not in str(caught.value)


def test_a_good_split_loads(tmp_path) -> None:
    path = tmp_path / "split.json"
    path.write_text(json.dumps({**GOOD, "seed": 0, "test_fraction": 0.2}))
    queries, gallery = load_split(path)
    assert queries.tolist() == GOOD["queries"] and gallery.tolist() == GOOD["gallery"] and queries.dtype == np.int64


def test_the_command_refuses_before_evaluating(pose_store, features, tmp_path, capsys) -> None:
    split = tmp_path / "split.json"
    out = tmp_path / "eval.json"
    args = ("eval", "--stores", pose_store, "--store", STORE, "--features", features, "--out", out, "--no-progress")
    for content, message in (CASES["shared items"], CASES["broken JSON"], CASES["top-level list"]):
        split.write_text(content if isinstance(content, str) else json.dumps(content))
        refused(trainer(capsys, *args, "--split", split), message)
    split.write_text(json.dumps({"queries": [0, 1], "gallery": [2, N_ITEMS + 5]}))
    refused(trainer(capsys, *args, "--split", split), f"the split names item {N_ITEMS + 5}, but store {STORE!r} has")
    assert not out.exists()


def test_a_split_made_for_another_store_is_refused(pose_store, features, tmp_path, capsys) -> None:
    """The fifth adversarial run: ``labeldist split`` of a store, then ``trainer eval`` of the whole store with that
    split: accepted, and 471 of the 592 items evaluated were training items. ``split.json`` says which test store
    its positions index (its items, its kind, its path): another is refused before anything is evaluated."""
    split, out = tmp_path / "split.json", tmp_path / "eval.json"
    args = ("eval", "--stores", pose_store, "--store", STORE, "--features", features, "--out", out, "--no-progress")
    made = {**GOOD, "test": list(range(12)), "kind": "pose", "stores": {"test": "sp/test", "train": "sp/train"}}
    split.write_text(json.dumps(made))
    refused(
        trainer(capsys, *args, "--split", split),
        f"{split}: made for the test store sp/test (12 items); store {STORE!r} has {N_ITEMS}: its positions would",
    )
    split.write_text(json.dumps({**made, "test": list(range(N_ITEMS)), "kind": "caption_wmd"}))
    refused(trainer(capsys, *args, "--split", split), f"{split}: made for a caption_wmd store; store {STORE!r} is a")
    assert not out.exists()
    split.write_text(json.dumps({**made, "test": list(range(N_ITEMS))}))  # its own test store: evaluated
    assert trainer(capsys, *args, "--split", split)[0] == 0 and out.exists()
