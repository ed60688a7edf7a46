"""Where a job runs (labeldist.core.clusters.ClusterSpec, labeldist.engine.runner.dask_client), without a job queue.

- The options' one rule: exclusive routes, worker counts, what a job waits for, the one-line errors of the command
  for a job queue this machine cannot use.
- A job on a scheduler with no workers waits for them, saying so in one line, and stops after ``--wait-timeout``
  with an error naming how many joined, the scheduler and what to check; a scheduler file that never comes is
  named as such.
- ``--scheduler-file``: a store made through the file a scheduler wrote equals one made through its address.
- A worker killed with a task in flight does not break the job: the scheduler runs its tasks again on the others
  (the tasks are idempotent), and the store equals one made without the kill. The kill is deterministic: a worker
  plugin kills its own process when the third block task starts executing, once.

tests/engine/test_slurm.py runs the job-queue route for real on a one-node SLURM.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import numpy as np
import pytest
from distributed.diagnostics.plugin import WorkerPlugin

from labeldist.core.clusters import DEFAULT_WAIT_TIMEOUT, ClusterSpec
from labeldist.store import StoreReader
from tests.cli.test_cli import run_cli
from tests.conftest import DATA

CSV = DATA / "mpii" / "mpii_valid_2958.csv"


@pytest.fixture
def small_csv(tmp_path):
    """The first 120 poses of the shipped MPII CSV."""
    path = tmp_path / "mpii_120.csv"
    path.write_text("\n".join(CSV.read_text().splitlines()[:121]) + "\n")
    return path


JOB = ["--k", "5", "--block-rows", "40", "--no-progress"]  # and always an --out in tmp_path: a job that stops
# after laying out its store must not leave it in the working folder


# ---------------------------------------------------------------- the rule
def test_what_each_route_waits_for() -> None:
    assert ClusterSpec().workers_to_wait_for is None  # a LocalCluster starts its workers before the job
    assert ClusterSpec(n_workers=2, min_workers=1).workers_to_wait_for == 1
    assert ClusterSpec(scheduler="tcp://h:8786").workers_to_wait_for == 1
    assert ClusterSpec(scheduler_file="s.json", min_workers=4).workers_to_wait_for == 4
    assert ClusterSpec().wait_timeout == DEFAULT_WAIT_TIMEOUT == 600


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"scheduler": "tcp://h:1", "cluster": "slurm", "n_workers": 2}, "--scheduler and --cluster exclude"),
        ({"scheduler": "tcp://h:1", "scheduler_file": "s.json"}, "--scheduler and --scheduler-file exclude"),
        ({"scheduler": "tcp://h:1", "n_workers": 2}, "--workers (n_workers) starts workers only on"),
        ({"scheduler_file": "s.json", "min_workers": 0}, "min_workers must be at least 1"),
        ({"n_workers": 2, "min_workers": 3}, "--min-workers 3 is more than the 2 workers"),
        ({"n_workers": 0}, "n_workers must be at least 1"),
        ({"wait_timeout": 0}, "wait_timeout must be"),
        ({"wait_timeout": float("inf")}, "wait_timeout must be"),
        ({"cluster": "condor", "n_workers": 1}, "cluster must be one of slurm, pbs, sge, lsf"),
    ],
)
def test_options_that_cannot_make_a_cluster_are_refused(options, message) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ClusterSpec(**options)


def test_the_older_keywords_and_a_spec_are_not_mixed() -> None:
    assert ClusterSpec.of(None, "tcp://h:1", None) == ClusterSpec(scheduler="tcp://h:1")
    with pytest.raises(ValueError, match="not both"):
        ClusterSpec.of(ClusterSpec(), "tcp://h:1", None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scheduler", "tcp://127.0.0.1:1", "--cluster", "slurm", "--workers", "2"], "--scheduler and --cluster"),
        (["--scheduler-file", "s.json", "--cluster", "slurm", "--workers", "2"], "--scheduler-file and --cluster"),
        (["--cluster", "slurm"], "--cluster slurm needs --workers N"),
    ],
)
def test_the_command_refuses_clashing_options_in_one_line(args, message, small_csv, tmp_path, capsys) -> None:
    rc, _, err = run_cli(capsys, "precompute", "pose", small_csv, "--out", tmp_path / "s", *args)
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("labeldist: error: ") and message in err, err
    assert not (tmp_path / "s").exists()


def test_a_job_queue_without_its_submit_command_is_one_line(small_csv, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, no qsub
    for queue, submit in [("slurm", "sbatch"), ("pbs", "qsub"), ("lsf", "bsub")]:
        rc, _, err = run_cli(
            capsys, "precompute", "pose", small_csv, "--out", tmp_path / "s", "--cluster", queue, "--workers", "2", *JOB
        )
        assert rc == 2
        assert err.count("\n") == 1 and f"--cluster {queue} submits the workers with {submit}, which is not on" in err


def test_a_job_queue_without_dask_jobqueue_is_one_line(small_csv, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)  # importlib finds no such package
    rc, _, err = run_cli(
        capsys, "precompute", "pose", small_csv, "--out", tmp_path / "s", "--cluster", "slurm", "--workers", "2", *JOB
    )
    assert rc == 2
    assert err.count("\n") == 1 and "needs the dask-jobqueue package, which is not installed" in err, err


# ---------------------------------------------------------------- waiting for workers
@pytest.fixture(scope="module")
def empty_scheduler():
    """A Dask scheduler that no worker ever joins (in this process)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster:
        yield cluster.scheduler_address


@pytest.mark.parametrize("min_workers", [None, 2])
def test_a_job_without_workers_stops_after_the_wait_timeout(
    empty_scheduler, min_workers, small_csv, tmp_path, capsys
) -> None:
    more = [] if min_workers is None else ["--min-workers", str(min_workers)]
    wanted = min_workers or 1
    args = ["--scheduler", empty_scheduler, "--wait-timeout", "1", *more, "--k", "5"]
    rc, _, err = run_cli(capsys, "precompute", "pose", small_csv, "--out", tmp_path / "s", *args)
    assert rc == 2
    waiting, error = err.splitlines()  # one line saying what it waits for, one the error
    assert waiting == f"waiting for {wanted} Dask worker{'s' * (wanted > 1)} on {empty_scheduler}: 0 joined; up to 1 s"
    assert error.startswith(f"labeldist: error: 0 of {wanted} Dask workers joined {empty_scheduler} in 1 s; check")
    assert "`dask worker` processes" in error and "--wait-timeout" in error and "--min-workers" in error
    rc, _, err = run_cli(capsys, "precompute", "pose", small_csv, "--out", tmp_path / "s", *args[:4], "--no-progress")
    assert rc == 2 and err.count("\n") == 1, "quiet: the error alone"


def test_an_unreachable_scheduler_is_one_line(small_csv, tmp_path, capsys) -> None:
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        rc, _, err = run_cli(
            capsys, "precompute", "pose", small_csv, "--out", tmp_path / "s", "--scheduler", "tcp://127.0.0.1:9",
            "--wait-timeout", "1", *JOB,
        )  # fmt: skip
    assert rc == 2
    assert err.count("\n") == 1 and "cannot reach the Dask scheduler at tcp://127.0.0.1:9 in 1 s" in err, err


def test_a_scheduler_file_that_never_comes_is_named(small_csv, tmp_path, capsys) -> None:
    missing = tmp_path / "scheduler.json"
    rc, _, err = run_cli(
        capsys,
        "precompute",
        "pose",
        small_csv,
        "--out",
        tmp_path / "s",
        "--scheduler-file",
        missing,
        "--wait-timeout",
        "0.5",
    )
    assert rc == 2
    assert err == (
        f"labeldist: error: {missing}: no scheduler file there after 0.5 s; start the scheduler with `dask scheduler "
        f"--scheduler-file {missing}` (on storage this host shares), or wait longer with --wait-timeout\n"
    )


def test_a_store_through_a_scheduler_file_equals_one_through_the_address(
    dask_client, small_csv, tmp_path, capsys
) -> None:
    scheduler_file = tmp_path / "scheduler.json"
    dask_client.write_scheduler_file(str(scheduler_file))
    assert json.loads(scheduler_file.read_text())["address"] == dask_client.scheduler.address
    by_file, by_address = tmp_path / "by-file", tmp_path / "by-address"
    rc, _, err = run_cli(
        capsys, "precompute", "pose", small_csv, "--out", by_file, "--scheduler-file", scheduler_file,
        "--min-workers", "2", *JOB,
    )  # fmt: skip
    assert rc == 0, err
    assert "waiting for" not in err  # both workers had joined: nothing to wait for, nothing said
    rc, _, err = run_cli(
        capsys, "precompute", "pose", small_csv, "--out", by_address, "--scheduler", dask_client.scheduler.address, *JOB
    )
    assert rc == 0, err
    assert_same_store(by_file, by_address)


def assert_same_store(a, b) -> None:
    """Equal ids, kNN lists and dense matrices."""
    one, other = StoreReader(str(a)), StoreReader(str(b))
    np.testing.assert_array_equal(one.ids, other.ids)
    for x, y in zip(one.knn(), other.knn()):
        np.testing.assert_array_equal(x, y)
    assert one.has_dense == other.has_dense
    if one.has_dense:
        np.testing.assert_array_equal(one.dense_rows(0, one.n_items), other.dense_rows(0, other.n_items))


# ---------------------------------------------------------------- a worker lost mid-job
class KillOnce(WorkerPlugin):
    """A worker plugin: the worker that starts the ``at``-th block task (counted across workers by files made
    with O_EXCL in ``folder``) kills its own process with SIGKILL, once; its nanny starts a new one."""

    name = "labeldist-test-kill-once"

    def __init__(self, folder: str, at: int) -> None:
        self.folder, self.at = folder, at

    def transition(self, key, start, finish, **kwargs) -> None:
        if finish != "executing" or not str(key).startswith("run_block_task"):
            return
        n = 1
        while True:
            try:
                os.close(os.open(os.path.join(self.folder, f"start-{n}"), os.O_CREAT | os.O_EXCL))
                break
            except FileExistsError:
                n += 1
        if n == self.at:
            os.close(os.open(os.path.join(self.folder, "killed"), os.O_CREAT | os.O_EXCL))
            os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.slow
def test_a_worker_killed_mid_job_does_not_break_it(mpii_poses, dask_client, tmp_path) -> None:
    from labeldist.distances.pose import PoseDistance
    from labeldist.engine import dask_client as make_client
    from labeldist.engine import precompute

    poses = mpii_poses.subset(slice(0, 300))
    common = dict(dataset="kill", k=10, block_rows=20, progress=False)  # 15 blocks
    precompute(poses, PoseDistance(), tmp_path / "reference", client=dask_client, **common)
    marks = tmp_path / "marks"
    marks.mkdir()
    with make_client(n_workers=2, quiet=True) as client:
        client.register_plugin(KillOnce(str(marks), at=3))
        result = precompute(poses, PoseDistance(), tmp_path / "killed", client=client, **common)
    assert (marks / "killed").exists(), "no worker was killed: the test did not test anything"
    assert result.blocks_computed == 15
    assert_same_store(tmp_path / "killed", tmp_path / "reference")
