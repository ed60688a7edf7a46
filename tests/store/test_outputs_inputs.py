"""No command's output is one of its inputs (``labeldist.store.outputs.check_not_inputs``): each output path, and
each part it would replace, is compared with every input the command reads, by identity (device and inode) as well
as by resolved name, and refused in one line naming both before anything is written or moved. An ``--overwrite``
that meets what it may not replace (a link, something labeldist did not make) refuses before it moves anything.

Before: ``labeldist split own/train.csv --out own --overwrite`` replaced its input by its own train part (and said
"another split" without ``--overwrite``); ``split st/va --out spo --overwrite`` over a linked ``spo/train`` moved the
link aside to ``spo/.train.replaced``, failed with "cannot call rmtree on a symbolic link" and built no test part;
``precompute --overwrite`` and ``append`` removed a label file that lay inside the store they replace."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from labeldist.cli import main
from labeldist.distances.vectors import VectorDistance
from labeldist.labels.vectors import Vectors
from tests.conftest import run_main, write_store


def labeldist(capsys, *args) -> tuple[int, str]:
    """Exit status and stderr of ``labeldist ARGS`` in this process."""
    return run_main(main, capsys, *args)


def refused(result: tuple[int, str], *words: str) -> str:
    rc, err = result
    lines = [line for line in err.splitlines() if "warning" not in line]
    assert rc == 2 and len(lines) == 1 and all(w in lines[0] for w in words), err
    return lines[0]


def tree(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder``: a file's bytes, a link's target (never followed)."""
    found: dict[str, bytes | str] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                found[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                found[rel] = path.read_bytes()
            else:
                found[rel] = "dir"
    return found


def csv_file(path: Path, n: int = 80) -> Path:
    path.write_text("id,x,y\n" + "".join(f"p{i},{i},{2 * i}\n" for i in range(n)))
    return path


def small_store(path: Path, n: int = 30, seed: int = 0, dense: bool = True) -> Path:
    values = np.random.default_rng(seed).normal(size=(n, 3)).astype(np.float32)
    labels = Vectors([f"v{i}" for i in range(n)], values)
    return write_store(path, labels, VectorDistance(), dataset=path.name, k=4, dense=dense, block_rows=16)


# ---------------------------------------------------------------- the one comparison
def test_the_comparison_by_name_identity_and_containment(tmp_path) -> None:
    from labeldist.store.outputs import OutputError, check_not_inputs

    data = tmp_path / "data"
    data.mkdir()
    labels = csv_file(data / "labels.csv")
    hard = tmp_path / "hard.csv"
    os.link(labels, hard)
    soft = tmp_path / "soft.csv"
    soft.symlink_to(labels)
    inputs = [("the label file", labels)]
    for out in (labels, data / "." / "labels.csv", hard, soft):  # the same file by name, by inode, through a link
        with pytest.raises(OutputError) as e:
            check_not_inputs([out], inputs)
        assert str(out) in str(e.value) and str(labels) in str(e.value) and "the label file" in str(e.value)
    check_not_inputs([tmp_path / "other.csv", data / "other.csv"], inputs)  # beside it: allowed
    with pytest.raises(OutputError, match="holds the label file"):  # a folder replaced whole holds the input
        check_not_inputs([], inputs, replaced=[data])
    check_not_inputs([data], inputs)  # a folder written into, not replaced: its other files stay
    with pytest.raises(OutputError, match="inside the images folder"):  # written into a folder the command reads
        check_not_inputs([data / "eval.json"], [("the images folder", data)])
    check_not_inputs([tmp_path / "x"], [("the features", None)])  # an input not given


def test_what_is_at_a_path(tmp_path) -> None:
    from labeldist.store.outputs import what_is

    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to(tmp_path / "f")
    os.mkfifo(tmp_path / "p")
    store = small_store(tmp_path / "s")
    assert what_is(tmp_path / "f") == "a file"
    assert what_is(tmp_path / "d") == "a folder"
    assert what_is(tmp_path / "l") == f"a symbolic link to {tmp_path / 'f'}"
    assert what_is(tmp_path / "p") == "a FIFO"
    assert what_is(store) == "a labeldist store"
    assert what_is(tmp_path / "none") == "nothing"


# ---------------------------------------------------------------- split: a label file
@pytest.mark.parametrize("overwrite", [False, True])
def test_split_never_replaces_the_label_file_it_splits(tmp_path, capsys, overwrite) -> None:
    own = tmp_path / "own"
    own.mkdir()
    source = csv_file(own / "train.csv")
    before = tree(own)
    flag = ["--overwrite"] if overwrite else []
    line = refused(labeldist(capsys, "split", source, "--out", own, *flag), f"{source}", "the label file being split")
    assert "another split" not in line and "a file" in line
    assert tree(own) == before  # nothing written: not the test part either, nor split.json


def test_split_never_replaces_its_input_by_the_other_part(tmp_path, capsys) -> None:
    own = tmp_path / "own"
    own.mkdir()
    source = own / "test.npy"
    np.save(source, np.arange(160, dtype=np.float64).reshape(80, 2))
    before = tree(own)
    refused(labeldist(capsys, "split", source, "--out", own, "--overwrite"), str(source), "the label file")
    assert tree(own) == before


def test_split_knows_its_input_under_another_name(tmp_path, capsys) -> None:
    """A hard link and a link to the input are the input: refused by identity, not by name."""
    source = csv_file(tmp_path / "labels.csv")
    out = tmp_path / "out"
    out.mkdir()
    os.link(source, out / "train.csv")
    before = source.read_bytes()
    refused(labeldist(capsys, "split", source, "--out", out, "--overwrite"), str(out / "train.csv"), str(source))
    assert source.read_bytes() == before and not (out / "test.csv").exists()


# ---------------------------------------------------------------- split: a store over what it may not replace
def test_split_overwrite_refuses_a_linked_part_before_moving_anything(tmp_path, capsys) -> None:
    store = small_store(tmp_path / "st" / "va")
    other = small_store(tmp_path / "other", n=20, seed=1)
    out = tmp_path / "spo"
    out.mkdir()
    (out / "train").symlink_to(other)
    before, theirs = tree(out), tree(other)
    line = refused(
        labeldist(capsys, "split", store, "--out", out, "--overwrite"), str(out / "train"), "a symbolic link"
    )
    assert str(other) in line and "rmtree" not in line
    assert tree(out) == before and tree(other) == theirs  # the link in place, no .train.replaced, no test part
    # the same again: the same refusal, not a staging folder labeldist "did not make"
    assert refused(labeldist(capsys, "split", store, "--out", out, "--overwrite"), str(out / "train")) == line
    (out / "train").unlink()
    assert labeldist(capsys, "split", store, "--out", out, "--overwrite")[0] == 0
    assert sorted(os.listdir(out)) == ["split.json", "test", "train"]


@pytest.mark.parametrize("planted", ["file", "folder"])
def test_split_refuses_what_it_did_not_make_before_building_a_part(tmp_path, capsys, planted) -> None:
    store = small_store(tmp_path / "va")
    out = tmp_path / "spo"
    out.mkdir()
    if planted == "file":
        (out / "test").write_text("mine")
    else:
        (out / "test").mkdir()
        (out / "test" / "notes.txt").write_text("mine")
    before = tree(out)
    what = "a file" if planted == "file" else "a folder"
    refused(labeldist(capsys, "split", store, "--out", out, "--overwrite"), str(out / "test"), what)
    assert tree(out) == before  # the train part not built either


# ---------------------------------------------------------------- precompute and append: a store replaced whole
def test_precompute_overwrite_never_removes_its_label_file(tmp_path, capsys) -> None:
    store = small_store(tmp_path / "st")
    labels = store / "x.npy"
    np.save(labels, np.arange(20.0).reshape(10, 2))
    before = tree(store)
    refused(
        labeldist(capsys, "precompute", "vectors", labels, "--out", store, "--overwrite", "--k", "3"),
        str(store),
        str(labels),
        "the label file",
    )
    assert tree(store) == before


def test_append_never_removes_its_label_file(tmp_path, capsys) -> None:
    store = small_store(tmp_path / "st", dense=False)
    labels = store / "more.npy"
    np.save(labels, np.arange(30.0, dtype=np.float32).reshape(10, 3))
    before = tree(store)
    refused(labeldist(capsys, "append", store, labels), str(store), str(labels), "the label file")
    assert tree(store) == before
