"""The trainer's long jobs write a log a file can hold: off a terminal, plain progress lines (no carriage-return
bar), here at every update (``LABELDIST_PROGRESS_EVERY=0``) so that the count of lines is the count of updates.

``trainer fit`` runs as a real command with its stderr redirected to a file (a 600-step run once left one line of
600 overwritten bar updates there); ``eval`` and ``render`` run in this process, stderr captured (not a terminal)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from labeldist.core.progress import EVERY_ENV
from tests.trainer.conftest import REPO, STORE


def counts(text: str, prefix: str, total: int, units: str) -> list[int]:
    """The done counts of the plain lines of the job ``prefix``, after checking there is no carriage return."""
    assert "\r" not in text, repr(text[:500])
    pattern = re.compile(rf"{re.escape(prefix)}: (\d+)/{total} {units} \(")
    return [int(m.group(1)) for line in text.splitlines() if (m := pattern.match(line))]


def test_a_redirected_trainer_fit_log_has_a_plain_line_per_step(pose_store: Path, features: Path, tmp_path) -> None:
    run, log = tmp_path / "run", tmp_path / "fit.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LABELDIST_")} | {EVERY_ENV: "0"}
    with open(log, "w") as err:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "labeldist.trainer.cli",
                "fit",
                "--stores",
                str(pose_store),
                "--store",
                STORE,
                "--features",
                str(features),
                "--out",
                str(run),
                "--loss",
                "log_ratio",
                "--size",
                "40",
                "--embedding-dim",
                "16",
                "--hidden",
                "32",
                "--max-steps",
                "12",
                "--threads",
                "1",
                "--json",
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            timeout=600,
        )
    text = log.read_text()
    assert proc.returncode == 0, text
    assert counts(text, "fit log_ratio", 12, "steps") == [*range(13), 12], text  # first line, one a step, the last
    lines = [line for line in text.splitlines() if line.startswith("fit log_ratio: ")]
    assert all(line.count("fit log_ratio") == 1 for line in lines)  # never several updates on one line
    assert all(re.search(r"steps/s|s/step", line) and "loss=" in line for line in lines[1:]), text
    assert ", done in " in lines[-1], text
    # the run's own log is as before: a row a step
    rows = [line for line in (run / "log.jsonl").read_text().splitlines() if '"event": "step"' in line]
    assert len(rows) == 12
    # a run over --stores records that folder, not the service URL it never used (before: "url": the default)
    start = json.loads((run / "log.jsonl").read_text().splitlines()[0])
    assert start["config"]["url"] is None and start["config"]["stores"] == str(pose_store.resolve())
    # and nothing a library writes to a redirected stream carries a carriage return (a bar meant for a terminal)
    assert "\r" not in text, [line for line in text.splitlines() if "\r" in line][:3]


def test_eval_shows_the_label_distances_it_fetches(
    pose_store: Path, features: Path, tmp_path, capsys, monkeypatch
) -> None:
    from labeldist.trainer.cli import main

    monkeypatch.setenv(EVERY_ENV, "0")
    queries = list(range(0, 300, 5))
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"queries": queries, "gallery": sorted(set(range(300)) - set(queries))}))
    args = [
        "eval",
        "--stores",
        str(pose_store),
        "--store",
        STORE,
        "--features",
        str(features),
        "--split",
        str(split),
        "--k-max",
        "10",
        "--json",
    ]
    assert main([*args, "--out", str(tmp_path / "shown.json")]) == 0
    err = capsys.readouterr().err
    # 240 gallery items: 41 queries a request (10,000 pairs), so two requests
    assert counts(err, "eval: label distances", 60, "queries") == [0, 41, 60, 60], err
    assert ", done in " in err.splitlines()[-1]
    assert main([*args, "--out", str(tmp_path / "quiet.json"), "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
    shown, quiet = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("shown", "quiet"))
    assert shown["summary"] == quiet["summary"]


@pytest.mark.parametrize("progress", [True, False])
def test_render_shows_its_images_as_plain_lines(pose_store: Path, tmp_path, capsys, monkeypatch, progress) -> None:
    from labeldist.trainer.render.base import CHUNK, render_store

    monkeypatch.setenv(EVERY_ENV, "0")
    render_store(pose_store / STORE, tmp_path / "img", size=32, workers=1, items=4 * CHUNK, progress=progress)
    err = capsys.readouterr().err
    if progress:
        assert counts(err, "render pose", 4 * CHUNK, "images") == [0, 32, 64, 96, 128, 128], err
        assert ", done in " in err.splitlines()[-1]
    else:
        assert err == ""
