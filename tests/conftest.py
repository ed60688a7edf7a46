"""Shared fixtures: the repository's data, the store checker of the contract, a real Dask cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
# The contract's own checker lives in ../shared; the repo keeps an identical copy for a clone without it.
_SHARED_CHECKER = ROOT.parent / "shared" / "tools" / "check_store.py"
CHECK_STORE = _SHARED_CHECKER if _SHARED_CHECKER.exists() else ROOT / "tools" / "check_store.py"


def check_store(path: str | Path) -> str:
    """Run the contract checker on a store; return its output, failing the test if the store fails."""
    proc = subprocess.run([sys.executable, str(CHECK_STORE), str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="session")
def mpii_poses():
    from labeldist.labels.poses import read_mpii_csv

    return read_mpii_csv(DATA / "mpii" / "mpii_valid_2958.csv")


@pytest.fixture(scope="session")
def dask_client():
    """A real distributed LocalCluster with two single-threaded worker processes, shared by the session."""
    from labeldist.engine import dask_client as make_client

    with make_client(n_workers=2) as client:
        yield client
