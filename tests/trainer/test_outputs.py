"""The trainer's commands write where the user names by one rule (``labeldist.store.outputs``): an existing file is
refused without ``--overwrite``, and with it only a regular file outside any store is replaced; nothing is written
inside a store; each refusal is one line, exit 2 (RELIABILITY.md, "The fourth adversarial run").

Before: ``trainer eval --out``, ``trainer plot --out`` and ``trainer demo-inputs --out`` replaced any file silently
(a link's target included), and every trainer command would write its files inside a store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from labeldist.trainer.cli import main
from tests.conftest import run_main
from tests.trainer.conftest import N_ITEMS, STORE


def trainer(capsys, *args) -> tuple[int, str]:
    """Exit status and stderr of ``trainer ARGS`` in this process."""
    return run_main(main, capsys, *args)


def refused(result: tuple[int, str], message: str) -> None:
    rc, err = result
    assert rc == 2 and err.count("\n") == 1 and message in err, err


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_demo_inputs_refuse_other_inputs_and_keep_the_same(pose_store, tmp_path, capsys) -> None:
    store, out = pose_store / STORE, tmp_path / "x.npy"
    assert trainer(capsys, "demo-inputs", store, "--out", out)[0] == 0
    first = out.read_bytes()
    inode = out.stat().st_ino
    assert trainer(capsys, "demo-inputs", store, "--out", out)[0] == 0  # the same inputs: kept, not rewritten
    assert out.stat().st_ino == inode and out.read_bytes() == first
    refused(trainer(capsys, "demo-inputs", store, "--out", out, "--seed", "1"), f"{out}: exists; give --overwrite")
    assert out.read_bytes() == first
    assert trainer(capsys, "demo-inputs", store, "--out", out, "--seed", "1", "--overwrite")[0] == 0
    assert np.load(out).shape[0] == N_ITEMS and out.read_bytes() != first


def test_a_link_is_never_replaced_and_a_store_never_written_into(pose_store, tmp_path, capsys) -> None:
    store = pose_store / STORE
    precious = tmp_path / "precious.npy"
    precious.write_bytes(b"mine")
    link = tmp_path / "link.npy"
    link.symlink_to(precious)
    before = _tree(store)
    refused(
        trainer(capsys, "demo-inputs", store, "--out", link, "--overwrite"),
        f"{link}: a symbolic link; --overwrite replaces regular files only",
    )
    for out in (store / "x.npy", store / "labels" / "x.npy"):
        refused(trainer(capsys, "demo-inputs", store, "--out", out), f"{out}: inside the labeldist store {store}")
    refused(
        trainer(capsys, "render", store, "--out", store / "renders", "--size", "32", "--items", "4"),
        f"{store / 'renders'}: inside the labeldist store {store}",
    )
    assert precious.read_bytes() == b"mine" and _tree(store) == before


def test_fit_refuses_a_run_folder_inside_a_store(pose_store, features, capsys) -> None:
    store = pose_store / STORE
    before = _tree(store)
    refused(
        trainer(
            capsys,
            *("fit", "--stores", pose_store, "--store", STORE, "--features", features, "--out", store / "run"),
            *("--max-steps", "1", "--no-progress"),
        ),
        f"{store / 'run'}: inside the labeldist store {store}",
    )
    assert _tree(store) == before


def test_plot_refuses_an_existing_figure_without_overwrite(tmp_path, capsys) -> None:
    curves = {"k": [1, 2, 3], "ndcg": [0.5, 0.6, 0.7], "mean_label_distance": [1.0, 1.2, 1.3]}
    result = tmp_path / "eval.json"
    result.write_text(json.dumps({**curves, "label": "a", "summary": {}}))
    out = tmp_path / "fig.png"
    out.write_bytes(b"an older figure")
    refused(trainer(capsys, "plot", result, "--out", out), f"{out}: exists; give --overwrite to replace it")
    assert out.read_bytes() == b"an older figure"
    assert trainer(capsys, "plot", result, "--out", out, "--overwrite")[0] == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]


def test_eval_refuses_an_existing_result_before_evaluating(pose_store, features, tmp_path, capsys) -> None:
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"queries": [0, 1], "gallery": list(range(2, 40))}))
    out = tmp_path / "eval.json"
    out.write_text("{}")
    args = ("eval", "--stores", pose_store, "--store", STORE, "--features", features, "--split", split)
    refused(trainer(capsys, *args, "--out", out, "--no-progress"), f"{out}: exists; give --overwrite")
    assert out.read_text() == "{}"
    assert trainer(capsys, *args, "--out", out, "--no-progress", "--overwrite")[0] == 0
    assert json.loads(out.read_text())["summary"]
    # the fifth adversarial run: --plot x.txt was matplotlib's ValueError, after the whole evaluation
    fresh, plot = tmp_path / "fresh.json", tmp_path / "x.txt"
    refused(
        trainer(capsys, *args, "--out", fresh, "--plot", plot, "--no-progress"),
        f"{plot}: a plot cannot be written as .txt; name a file ending in ",
    )
    assert not fresh.exists() and not plot.exists()


@pytest.mark.parametrize("command", ["demo-inputs", "eval", "plot"])
def test_overwrite_is_in_the_help(command, capsys) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--overwrite" in capsys.readouterr().out


def test_a_folder_that_takes_no_file_is_one_line_naming_the_file(pose_store, capsys) -> None:
    """A read-only folder cannot be made when tests run as root (CI does); /proc takes no new file from anyone,
    which is the same refusal met at the same place: the error names the file asked for, not the hidden one
    written beside it."""
    out = Path("/proc/labeldist-test-output.npy")
    refused(trainer(capsys, "demo-inputs", pose_store / STORE, "--out", out), f"{out}: cannot write there")
    from labeldist.cli import main as labeldist_main

    assert labeldist_main(["export", str(pose_store / STORE), "--out", str(out.with_suffix(".csv"))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out.with_suffix('.csv')}: cannot write there" in err, err
