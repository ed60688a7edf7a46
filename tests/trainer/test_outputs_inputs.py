"""The trainer's commands never write over what they read (``labeldist.store.outputs.check_not_inputs``): each
output (``--out``, ``--plot``, a run's files, a render's index and record) is compared with every input (features,
split, checkpoint, weights, images, the store, the render a frame comes from) by resolved name and by device and
inode; refused in one line naming both, before anything is read, written or removed. ``trainer render
--overwrite`` checks what it would replace before it removes anything.

Before: ``trainer eval --features f.npy --out f.npy --overwrite`` replaced the features by the results (and
``--split s.json --out s.json`` the split); ``trainer fit --weights run/checkpoint.pt --out run --overwrite``
removed the weights it was to start from; ``trainer render --overwrite`` over a non-UTF-8 ``index.csv`` or
``render.json`` was a UnicodeDecodeError traceback, and over a linked ``index.csv`` replaced the link."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from labeldist.trainer.cli import main
from tests.conftest import run_main
from tests.trainer.conftest import STORE

RENDER = ("--size", "32", "--items", "4", "--workers", "1", "--no-progress")


def trainer(capsys, *args) -> tuple[int, str]:
    """Exit status and stderr of ``trainer ARGS`` in this process."""
    return run_main(main, capsys, *args)


def refused(result: tuple[int, str], *words: str) -> str:
    rc, err = result
    assert rc == 2 and err.count("\n") == 1 and all(w in err for w in words), err
    return err


def tree(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder``: a file's bytes, a link's target (never followed)."""
    found: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        found[rel] = "-> " + os.readlink(path) if path.is_symlink() else path.read_bytes() if path.is_file() else "dir"
    return found


@pytest.fixture
def mine(features, tmp_path) -> tuple[Path, Path]:
    """A copy of the features and a split of the pose store: inputs a test may see replaced."""
    copy = tmp_path / "f.npy"
    shutil.copyfile(features, copy)
    split = tmp_path / "s.json"
    split.write_text(json.dumps({"queries": [0, 1], "gallery": list(range(2, 40))}))
    return copy, split


def _eval(pose_store, features, split, out):
    return ("eval", "--stores", pose_store, "--store", STORE, "--features", features, "--split", split, "--out", out)


@pytest.mark.parametrize("which", ["features", "split"])
def test_eval_never_writes_its_results_over_an_input(pose_store, mine, capsys, which) -> None:
    features, split = mine
    target = features if which == "features" else split
    before = target.read_bytes()
    refused(
        trainer(capsys, *_eval(pose_store, features, split, target), "--overwrite", "--no-progress"),
        f"{target}: that is the --{which} ({target}, a file)",
    )
    assert target.read_bytes() == before


def test_eval_knows_an_input_by_its_inode(pose_store, mine, tmp_path, capsys) -> None:
    features, split = mine
    hard = tmp_path / "results.json"
    os.link(features, hard)
    refused(
        trainer(capsys, *_eval(pose_store, features, split, hard), "--overwrite", "--no-progress"),
        str(hard),
        str(features),
    )
    plot = tmp_path / "plot.png"
    plot.symlink_to(split)
    refused(
        trainer(capsys, *_eval(pose_store, features, split, tmp_path / "e.json"), "--plot", plot, "--overwrite"),
        str(plot),
        "the --split",
    )
    assert not (tmp_path / "e.json").exists()


def test_fit_overwrite_never_removes_the_weights_it_starts_from(pose_store, tmp_path, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.pt").write_bytes(b"the weights of an earlier run")
    (run / "log.jsonl").write_text("{}\n")
    (tmp_path / "images").mkdir()
    before = tree(run)
    result = trainer(
        capsys,
        *("fit", "--stores", pose_store, "--store", STORE, "--images", tmp_path / "images"),
        *("--weights", run / "checkpoint.pt", "--out", run, "--overwrite", "--max-steps", "1", "--no-progress"),
    )
    assert tree(run) == before  # the checkpoint and log of the run, both kept
    refused(result, f"{run / 'checkpoint.pt'}: that is the --weights")


def test_fit_never_writes_its_run_into_its_images(pose_store, tmp_path, capsys) -> None:
    images = tmp_path / "images"
    images.mkdir()
    refused(
        trainer(
            capsys,
            *("fit", "--stores", pose_store, "--store", STORE, "--images", images, "--out", images / "run"),
            *("--max-steps", "1", "--no-progress"),
        ),
        f"{images / 'run'}: inside the --images folder {images}",
    )
    assert not (images / "run").exists()


# ---------------------------------------------------------------- render
def test_render_never_renders_over_the_render_it_takes_its_frame_from(pose_store, tmp_path, capsys) -> None:
    store, out = pose_store / STORE, tmp_path / "train"
    assert trainer(capsys, "render", store, "--out", out, *RENDER)[0] == 0
    before = tree(out)
    refused(
        trainer(capsys, "render", store, "--out", out, "--frame-from", out, "--seed", "1", "--overwrite", *RENDER),
        f"{out}: that is the --frame-from render ({out}, a folder)",
    )
    assert tree(out) == before


@pytest.mark.parametrize("overwrite", [False, True])
def test_render_over_a_record_that_is_not_utf8(pose_store, tmp_path, capsys, overwrite) -> None:
    store, out = pose_store / STORE, tmp_path / "r"
    assert trainer(capsys, "render", store, "--out", out, *RENDER)[0] == 0
    (out / "render.json").write_bytes(b'{"version": "\xff\xfe"}')
    flag = ["--overwrite"] if overwrite else []
    rc, err = trainer(capsys, "render", store, "--out", out, "--seed", "1", *flag, *RENDER)
    if overwrite:  # a record no render can be read from is replaced, as --overwrite asks
        assert rc == 0 and json.loads((out / "render.json").read_text())["seed"] == 1, err
    else:
        refused((rc, err), f"{out / 'render.json'}: not a render's record (not UTF-8 text)", "--overwrite")


def test_render_overwrite_refuses_an_index_it_cannot_read_before_removing_anything(
    pose_store, tmp_path, capsys
) -> None:
    store, out = pose_store / STORE, tmp_path / "r"
    assert trainer(capsys, "render", store, "--out", out, *RENDER)[0] == 0
    (out / "index.csv").write_bytes(b"id,path\n\xe9t\xe9,x.png\n")
    before = tree(out)
    refused(
        trainer(capsys, "render", store, "--out", out, "--seed", "1", "--overwrite", *RENDER),
        f"{out / 'index.csv'}: not a render's index (not UTF-8 text)",
    )
    assert tree(out) == before


def test_render_overwrite_never_replaces_a_linked_index(pose_store, tmp_path, capsys) -> None:
    store, out = pose_store / STORE, tmp_path / "r"
    assert trainer(capsys, "render", store, "--out", out, *RENDER)[0] == 0
    theirs = tmp_path / "theirs.csv"
    theirs.write_bytes((out / "index.csv").read_bytes())
    (out / "index.csv").unlink()
    (out / "index.csv").symlink_to(theirs)
    before, kept = tree(out), theirs.read_bytes()
    refused(
        trainer(capsys, "render", store, "--out", out, "--seed", "1", "--overwrite", *RENDER),
        f"{out / 'index.csv'}: a symbolic link to {theirs}",
        "regular files only",
    )
    assert tree(out) == before and theirs.read_bytes() == kept
