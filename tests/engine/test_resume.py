"""A precompute killed for real (SIGKILL to the command and its Dask workers) resumes where it stopped."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr

from labeldist.store import StoreIncompleteError, StoreReader, blocks_done, read_manifest
from tests.conftest import DATA, check_store

CSV = str(DATA / "mpii" / "mpii_valid_2958.csv")
# Small blocks make a job of ~185 tasks: long enough to be killed mid-way, short enough for a test.
ARGS = ["precompute", "pose", CSV, "--k", "30", "--block-rows", "16", "--workers", "1", "--no-progress"]


def _labeldist(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "labeldist.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kw,
    )


def _arrays(url: str) -> dict[str, np.ndarray]:
    g = zarr.open_group(url, mode="r")
    return {name: g[name][:] for name in ("ids", "knn/indices", "knn/distances", "dense/distances")}


@pytest.mark.slow
def test_killed_job_resumes_and_equals_an_uninterrupted_run(tmp_path):
    clean, killed = str(tmp_path / "clean"), str(tmp_path / "killed")

    proc = _labeldist(*ARGS, "--out", killed)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if os.path.exists(os.path.join(killed, "progress", "blocks", "zarr.json")) and blocks_done(killed).sum() >= 3:
            break
        assert proc.poll() is None, "the job ended before it could be killed: " + proc.stderr.read()
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the command and every worker process it started
    proc.wait()
    done_at_kill = int(blocks_done(killed).sum())
    total = blocks_done(killed).size
    assert 0 < done_at_kill < total, f"{done_at_kill} of {total} blocks done at the kill"

    # Killed mid-way, the store must not pass as complete, to the reader or to the contract checker.
    assert read_manifest(killed)["complete"] is False
    with pytest.raises(StoreIncompleteError):
        StoreReader(killed)

    resumed = _labeldist(*ARGS, "--out", killed)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    computed = int(re.search(r"(\d+) of (\d+) blocks computed", out).group(1))
    assert computed == total - done_at_kill  # the blocks finished before the kill were not computed again

    uninterrupted = _labeldist(*ARGS, "--out", clean)
    out, err = uninterrupted.communicate(timeout=300)
    assert uninterrupted.returncode == 0, err
    assert f"{total} of {total} blocks computed" in out

    a, b = _arrays(killed), _arrays(clean)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    ma, mb = read_manifest(killed), read_manifest(clean)
    ma.pop("created"), mb.pop("created")
    assert ma == mb
    check_store(killed)
