"""A cluster that cannot run the job stops in one line (labeldist.engine.runner):

- a scheduler whose only worker dies for good mid-job (a real ``dask scheduler`` and one ``dask worker`` without a
  nanny, which a worker plugin kills at its first block task): the job's scattered inputs die with it, each task
  submitted again is cancelled again, and after the last resubmission the job stops naming the block, the worker
  lost and what to do, where a FutureCancelledError traceback ended it;
- ``--wait-timeout`` is the wait, whatever the cause: an unreachable scheduler is given up after it, not after
  distributed's connect timeout (30 s by default; 600 s here, so that the old way fails the test's bound).

The commands run as processes, each bounded by a generous timeout so that a hang fails instead of blocking.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from distributed.diagnostics.plugin import WorkerPlugin

from tests.conftest import DATA
from tests.processes import REPO, STARTUP_TIMEOUT, free_port, kill, spawn

#: a command that hangs runs until this, then fails the test
BOUND = 300
CSV = DATA / "mpii" / "mpii_valid_2958.csv"


def command(*args: object, **env: str) -> subprocess.CompletedProcess:
    """``labeldist ARGS`` to its end, at most :data:`BOUND` seconds (TimeoutExpired fails the test)."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("LABELDIST_")}
    return subprocess.run(
        [sys.executable, "-m", "labeldist.cli", *map(str, args)],
        cwd=REPO,
        env={**inherited, **env},
        capture_output=True,
        text=True,
        timeout=BOUND,
    )


class KillAtFirstBlock(WorkerPlugin):
    """A worker plugin: the worker kills its own process (SIGKILL) as its first block task starts executing,
    leaving a file named ``killed`` in ``folder`` first (the test's proof that it did)."""

    name = "labeldist-test-kill-at-first-block"

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def transition(self, key, start, finish, **kwargs) -> None:
        if finish == "executing" and str(key).startswith("run_block_task"):
            os.close(os.open(os.path.join(self.folder, "killed"), os.O_CREAT | os.O_EXCL))
            os.kill(os.getpid(), signal.SIGKILL)


@pytest.fixture
def one_worker_for_good():
    """A ``dask scheduler`` and one ``dask worker --no-nanny`` (nothing restarts it): the scheduler's address."""
    from distributed import Client

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = spawn(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"])
    worker = spawn(
        ["distributed.cli.dask_worker", address, "--host", "127.0.0.1", "--nthreads", "1", "--no-nanny",
         "--no-dashboard"],
        output=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with Client(address, timeout=STARTUP_TIMEOUT) as client:
            client.wait_for_workers(1, timeout=STARTUP_TIMEOUT)
        yield address
    finally:
        kill(worker)
        kill(scheduler)


def test_a_cluster_that_loses_its_only_worker_stops_in_one_line(one_worker_for_good, tmp_path: Path) -> None:
    from distributed import Client

    small = tmp_path / "poses.csv"
    small.write_text("\n".join(CSV.read_text().splitlines()[:121]) + "\n")
    marks = tmp_path / "marks"
    marks.mkdir()
    with Client(one_worker_for_good, timeout=STARTUP_TIMEOUT) as client:
        client.register_plugin(KillAtFirstBlock(str(marks)))
        worker = next(iter(client.scheduler_info()["workers"]))
    args = ("precompute", "pose", small, "--out", tmp_path / "s", "--scheduler", one_worker_for_good)
    done = command(*args, "--k", "5", "--block-rows", "40", "--no-progress", "--wait-timeout", "60")
    assert (marks / "killed").exists(), "the worker was not killed: the test tested nothing"
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    last = done.stderr.splitlines()[-1]
    assert last.startswith("labeldist: error: block "), last
    assert "cancelled by the cluster after 8 tasks were submitted again" in last, last
    assert f"the cluster lost 1 of the 1 worker the job began with ({worker}) and has 0 now" in last, last
    assert "run the same command again once the cluster has workers" in last, last


def test_the_wait_timeout_bounds_an_unreachable_scheduler(tmp_path: Path) -> None:
    """distributed's own connect timeout is set to 600 s: the job gives up after its --wait-timeout of 2 s."""
    address = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    done = command(
        "precompute", "pose", CSV, "--out", tmp_path / "s", "--scheduler", address, "--wait-timeout", "2",
        DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="600s",
    )  # fmt: skip
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert lines[-1].startswith(f"labeldist: error: cannot reach the Dask scheduler at {address} in 2 s"), lines
