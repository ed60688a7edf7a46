"""A precompute that succeeds says nothing but its progress and its result: no warning from the shutdown of its Dask
LocalCluster. A nanny gives its worker process 4 s to exit and then kills it with a WARNING ("Worker process still
alive after 4.0 seconds, killing"), which a busy machine's workers hit; here every worker process is held at its exit
(a ``sitecustomize`` on the workers' path: an exit hook that never returns in a child process), so that the nanny
has to kill it on every run, not only on a loaded machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA, ROOT

CSV = DATA / "mpii" / "mpii_valid_2958.csv"

#: an exit hook that never returns, in child processes only (the workers; not the command itself), and a file
#: saying it was reached
LINGER = """
import atexit, multiprocessing, os, threading

def _linger():
    if multiprocessing.parent_process() is not None:
        open(os.path.join(os.environ["LINGER_MARKS"], str(os.getpid())), "w").close()
        threading.Event().wait()

atexit.register(_linger)
"""


def precompute(tmp_path: Path, *, linger: bool) -> subprocess.CompletedProcess[str]:
    small = tmp_path / "mpii_60.csv"
    small.write_text("\n".join(CSV.read_text().splitlines()[:61]) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LABELDIST_")}
    if linger:
        hooks, marks = tmp_path / "hooks", tmp_path / "marks"
        hooks.mkdir()
        marks.mkdir()
        (hooks / "sitecustomize.py").write_text(LINGER)
        env |= {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(hooks), env.get("PYTHONPATH")])),
            "LINGER_MARKS": str(marks),
        }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "labeldist.cli",
            "precompute",
            "pose",
            str(small),
            "--k",
            "5",
            "--workers",
            "2",
            "--out",
            str(tmp_path / "store"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize("linger", [False, True], ids=["plain", "workers-slow-to-exit"])
def test_a_successful_precompute_prints_no_warning(tmp_path: Path, linger: bool) -> None:
    done = precompute(tmp_path, linger=linger)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{tmp_path / 'store'}: complete, 60 items, k=5, dense=True; 1 of 1 blocks computed"
    for word in ("WARNING", "Warning", "killing", "closing", "Traceback", "Error"):
        assert word not in done.stderr, done.stderr
    said = [line for line in done.stderr.splitlines() if line]
    assert said[0].startswith("Dask dashboard: http://"), done.stderr
    assert all(line.startswith("pose") for line in said[1:]), done.stderr  # progress only
    if linger:  # the hook held every worker at its exit: each one had to be killed
        assert len(os.listdir(tmp_path / "marks")) == 2
