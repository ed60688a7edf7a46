"""Fixtures of the system tests: the MPII pose job they all run, its reference store, a real Dask cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from labeldist.store import read_manifest
from labeldist.store import store_arrays as all_arrays
from tests.conftest import DATA, write_store
from tests.processes import Cluster

CSV = str(DATA / "mpii" / "mpii_valid_2958.csv")
K, BLOCK_ROWS = 30, 16  # small blocks: ~185 tasks, so that a job can be hit by a fault half-way
#: the precompute command every system test runs (plus --out and --scheduler)
JOB = ["precompute", "pose", CSV, "--k", str(K), "--block-rows", str(BLOCK_ROWS), "--no-progress"]


def store_arrays(url: str | Path) -> dict[str, np.ndarray]:
    """Every array of a store, by path, read whole."""
    return {path: array[...] for path, array in all_arrays(str(url))}


def assert_same_store(url: str | Path, expected: str | Path) -> None:
    """Same arrays, bit for bit, and the same manifest but for its creation time."""
    a, b = store_arrays(url), store_arrays(expected)
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    ma, mb = read_manifest(str(url)), read_manifest(str(expected))
    ma.pop("created"), mb.pop("created")
    assert ma == mb and ma["complete"] is True


@pytest.fixture(scope="session")
def reference_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job's store written in this process, block by block, by the engine's own task function (no Dask):
    what every cluster run, faulted or not, must end up equal to."""
    from labeldist.distances.pose import PoseDistance
    from labeldist.labels.pose_files import read_mpii_csv

    url = tmp_path_factory.mktemp("reference") / "mpii-pose"
    return write_store(
        url, read_mpii_csv(CSV), PoseDistance(), dataset="mpii_valid_2958", k=K, dense=True, block_rows=BLOCK_ROWS
    )


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A fresh scheduler and two worker processes (a test may kill some of them)."""
    c = Cluster(n_workers=2)
    try:
        yield c
    finally:
        c.close()
