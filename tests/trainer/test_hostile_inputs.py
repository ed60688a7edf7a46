"""Every command ends hostile input in one line naming the file or option and what to do, exit status 2, never a
traceback (RELIABILITY.md, "The fourth adversarial run").

The sweep ran every reader and every command's options through the same kinds of input: JSON nested past
Python's parser, oddly typed values, out-of-range and non-finite numbers, sizes past any machine, object and
string arrays as features, a store whose metadata is damaged, read through every command that takes one. Each case
here gave a traceback (or started a million worker processes) before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from labeldist.cli import main as labeldist_main
from labeldist.trainer.cli import main as trainer_main
from tests.conftest import run_main as run
from tests.trainer.conftest import STORE


def one_line(result: tuple[int, str], *words: str) -> None:
    rc, err = result
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("usage:", " "))]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert all(w in lines[0] for w in words), lines[0]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, pose_store: Path) -> Path:
    """Hostile files, and a copy of the pose store whose kNN indices' metadata is damaged."""
    root = tmp_path_factory.mktemp("hostile")
    (root / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    np.save(root / "objects.npy", np.array([[1, 2], [3, None]], dtype=object), allow_pickle=True)
    np.save(root / "strings.npy", np.array([["a", "b"]] * 300))
    np.save(root / "complex.npy", np.ones((300, 3), dtype=complex))
    (root / "eval.json").write_text(json.dumps([1, 2]))
    (root / "log.jsonl").write_text('{"event": "step", "step": 1, "loss": 0.5}\n[1, 2]\n{"event": "step"}\n')
    stores = root / "stores"
    shutil.copytree(pose_store / STORE, stores / "damaged")
    metadata = stores / "damaged" / "knn" / "indices" / "zarr.json"
    metadata.write_text(metadata.read_text()[:-20])
    return root


FEATURES = {
    "objects.npy": "an array of Python objects (dtype object), which is not read",
    "strings.npy": "features must be numbers (integers or floats), got dtype <U1",
    "complex.npy": "features must be numbers (integers or floats), got dtype complex128",
}


@pytest.mark.parametrize("name", list(FEATURES))
def test_features_that_are_no_numbers(name, hostile, pose_store, capsys) -> None:
    args = ("fit", "--stores", pose_store, "--store", STORE, "--features", hostile / name, "--max-steps", "1")
    one_line(run(trainer_main, capsys, *args, "--out", hostile / "runs" / name, "--no-progress"), FEATURES[name])


def test_a_damaged_store_through_every_command(hostile, features, capsys) -> None:
    stores, damaged = hostile / "stores", hostile / "stores" / "damaged"
    message = "the metadata of knn/indices (a zarr.json) cannot be read"
    cases = [
        (trainer_main, "fit", "--stores", stores, "--store", "damaged", "--features", features, "--out", hostile / "r"),
        (trainer_main, "demo-inputs", damaged, "--out", hostile / "d.npy"),
        (trainer_main, "render", damaged, "--out", hostile / "images", "--size", "32"),
        (trainer_main, "split", damaged, "--out", hostile / "split"),
        (labeldist_main, "info", damaged),
        (labeldist_main, "verify", damaged),
        (labeldist_main, "export", damaged, "--out", hostile / "x.csv"),
    ]
    for main, *args in cases:
        one_line(run(main, capsys, *args), message, str(damaged))


def test_json_nested_past_the_parser(hostile, capsys) -> None:
    deep = hostile / "deep.json"
    one_line(run(labeldist_main, capsys, "precompute", "pose", deep, "--out", hostile / "s"), "nested too deeply")
    one_line(run(trainer_main, capsys, "split", deep, "--out", hostile / "sp"), "nested too deeply")
    one_line(run(trainer_main, capsys, "plot", deep, "--out", hostile / "p.png"), "nested too deeply")


def test_files_that_are_not_what_plot_reads(hostile, capsys) -> None:
    one_line(run(trainer_main, capsys, "plot", hostile / "eval.json", "--out", hostile / "p.png"), "is no eval result")
    log = hostile / "log.jsonl"
    one_line(
        run(trainer_main, capsys, "plot", "--loss-curves", log, "--out", hostile / "p.png"),
        "line 2 is not a trainer log record",
    )
    one_line(
        run(trainer_main, capsys, "plot", "--loss-curves", hostile / "complex.npy", "--out", hostile / "p.png"),
        "not UTF-8 text",
    )


OPTIONS = [
    (labeldist_main, ["precompute", "vectors", "X", "--workers", "100000000000000000000"], "--workers: must be"),
    (labeldist_main, ["precompute", "vectors", "X", "--dense-limit", "1e400"], "--dense-limit: expected a size"),
    (trainer_main, ["fit", "--features", "X", "--store", "s", "--out", "o", "--size", "100000000"], "--size: must"),
    (trainer_main, ["fit", "--features", "X", "--store", "s", "--out", "o", "--lr", "nan"], "--lr: must be"),
    (trainer_main, ["fit", "--features", "X", "--store", "s", "--out", "o", "--lr", "-1"], "--lr: must be"),
    (trainer_main, ["fit", "--features", "X", "--store", "s", "--out", "o", "--embedding-dim", "0"], "--embedding-dim"),
    (trainer_main, ["fit", "--features", "X", "--store", "s", "--out", "o", "--epochs", "-2"], "--epochs: must be"),
    (trainer_main, ["fit", "--features", "X", "--store", "s", "--out", "o", "--threads", "99999"], "--threads: must"),
    (trainer_main, ["fit", "--features", "X", "--store", "s", "--out", "o", "--momentum", "inf"], "--momentum: must"),
    (
        trainer_main,
        ["fit", "--images", "X", "--store", "s", "--out", "o", "--crop-scale", "0.9", "0.1"],
        "--crop-scale",
    ),
    (trainer_main, ["render", "X", "--out", "o", "--size", "100000"], "--size: must be an integer from 8 to 8192"),
    (trainer_main, ["render", "X", "--out", "o", "--workers", "0"], "--workers: must be"),
    (trainer_main, ["split", "X", "--out", "o", "--test-fraction", "1"], "--test-fraction: must be"),
    (trainer_main, ["demo-inputs", "X", "--out", "o", "--hide", "1"], "--hide: must be"),
    (
        trainer_main,
        ["eval", "--features", "X", "--store", "s", "--split", "x", "--out", "o", "--k-max", "0"],
        "--k-max",
    ),
]


@pytest.mark.parametrize("main, args, message", OPTIONS, ids=[" ".join(a[:1] + a[-2:]) for _, a, _ in OPTIONS])
def test_out_of_range_options_are_refused_before_any_work(main, args, message, capsys) -> None:
    one_line(run(main, capsys, *args), message)
