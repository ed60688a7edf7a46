"""The engine on a cluster whose machines share storage (docs/cluster.md).

A real ``dask scheduler`` and two ``dask worker`` processes, each started in a working folder of its own with its own
``LABELDIST_CACHE`` (as on separate hosts: nothing relative resolves the same way on two of them), and a client, in
a third folder, that runs ``labeldist precompute --scheduler`` with a relative ``--out``. The shared storage is a
folder every process reaches at the same absolute path (an NFS mount in production). The store must land at the
client's path (its link resolved), not in a worker's folder, and equal a store computed in one process; an
``append`` to it from the cluster must equal a precompute of both files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from labeldist.store import StoreReader
from tests.conftest import DATA
from tests.processes import STARTUP_TIMEOUT, free_port, kill, spawn

CSV = DATA / "mpii" / "mpii_valid_2958.csv"
pytestmark = pytest.mark.slow


def _start(args: list[str], cwd: Path, **env: str) -> subprocess.Popen:
    return spawn(args, cwd=cwd, output=subprocess.DEVNULL, **env)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """A scheduler and two workers, each in its own working folder with its own LABELDIST_CACHE."""
    from distributed import Client

    root = tmp_path_factory.mktemp("hosts")
    address = f"tcp://127.0.0.1:{free_port()}"
    port = address.rsplit(":", 1)[1]
    procs = [
        _start(
            ["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", port, "--no-dashboard"],
            _folder(root / "scheduler-host"),
        )
    ]
    for name in ("host-a", "host-b"):
        home = _folder(root / name)
        worker = ["distributed.cli.dask_worker", address, "--host", "127.0.0.1", "--nworkers", "1", "--nthreads", "1"]
        procs.append(_start([*worker, "--no-dashboard", "--name", name], home, LABELDIST_CACHE=str(home / "cache")))
    try:
        with Client(address, timeout=STARTUP_TIMEOUT) as client:
            client.wait_for_workers(2, timeout=STARTUP_TIMEOUT)
            yield address, root
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill(proc, signal.SIGTERM)


def _folder(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def _labeldist(cwd: Path, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "labeldist.cli", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def _rows(path: Path, start: int, stop: int) -> Path:
    with open(CSV) as f:
        lines = [next(f) for _ in range(stop + 1)]
    path.write_text(lines[0] + "".join(lines[1 + start : 1 + stop]))
    return path


def test_a_precompute_on_the_cluster_lands_on_shared_storage_and_equals_one_process(cluster, tmp_path) -> None:
    address, hosts = cluster
    shared = _folder(tmp_path / "shared")  # the one path every host mounts
    client_home = _folder(tmp_path / "client-host")
    first, more = _rows(shared / "first.csv", 0, 400), _rows(shared / "more.csv", 400, 460)
    job = ["--k", "10", "--block-rows", "50", "--no-progress", "--normalization", "center_scale"]
    os.symlink(shared, client_home / "shared")  # the client names it relative to its own folder
    made = _labeldist(client_home, "precompute", "pose", first, "--out", "shared/poses", "--scheduler", address, *job)
    assert made.returncode == 0, made.stderr
    assert (shared / "poses" / "zarr.json").is_file()
    assert not any((hosts / name / "shared").exists() for name in ("host-a", "host-b", "scheduler-host"))
    alone = _labeldist(tmp_path, "precompute", "pose", first, "--out", tmp_path / "alone", "--workers", "1", *job)
    assert alone.returncode == 0, alone.stderr
    on_cluster, in_one = StoreReader(str(shared / "poses")), StoreReader(str(tmp_path / "alone"))
    for a, b in zip(on_cluster.knn(), in_one.knn()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(on_cluster.dense_rows(0, 400), in_one.dense_rows(0, 400))

    grown = _labeldist(client_home, "append", "shared/poses", more, "--scheduler", address, "--no-progress")
    assert grown.returncode == 0, grown.stderr
    both = _rows(tmp_path / "both.csv", 0, 460)
    whole = _labeldist(tmp_path, "precompute", "pose", both, "--out", tmp_path / "whole", "--workers", "1", *job)
    assert whole.returncode == 0, whole.stderr
    for a, b in zip(StoreReader(str(shared / "poses")).knn(), StoreReader(str(tmp_path / "whole")).knn()):
        np.testing.assert_array_equal(a, b)
