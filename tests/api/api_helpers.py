"""Constants and helpers shared by the API tests (a unique module name: tests/api is on sys.path)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from labeldist.api.settings import Settings
from labeldist.distances.pose import PoseDistance
from labeldist.labels.poses import Poses

REPO = Path(__file__).resolve().parents[2]
MPII_CSV = REPO / "data" / "mpii" / "mpii_valid_2958.csv"
ARTIFACTS = REPO / "test-artifacts"
N_ITEMS, K = 300, 20
TINY = 12  # fewer items than k: neighbour lists padded with -1
DENSE, KNN, TINY_STORE, INCOMPLETE = "pose-dense", "pose-knn", "pose-tiny", "pose-incomplete"


def make_settings(*, default_warm: bool = False, **values: object) -> Settings:
    """Settings with exactly these values and the defaults: none read from LABELDIST_* variables that the
    environment running the tests may set. Not warmed unless asked (``warm=True``, or ``default_warm=True`` for the
    service's own default): a warm-up loads labels and runs searches in a background thread, which would race with
    what a test looks at (labels not loaded for a refused request, the distances computed)."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("LABELDIST_")}
    if not default_warm:
        values.setdefault("warm", False)
    try:
        return Settings(**values)
    finally:
        os.environ.update(saved)


def reference(labels: Poses, i: int, j: int) -> np.float32:
    """The slow, independent distance of items i and j, rounded to float32 like stored values."""
    return np.float32(PoseDistance().reference(labels, i, labels, j))


def start_server(stores: Path, port: int, *, verbose: bool = False, **env: str) -> subprocess.Popen:
    """``labeldist serve`` on ``port``; ``verbose`` logs the service's progress messages too (a computation
    started, a store reloaded), which tests wait for."""
    # only the settings given here: none inherited from the environment the tests run in
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("LABELDIST_")}
    environ = {**inherited, "LABELDIST_ACCESS_LOG": "false", **env}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "labeldist.cli",
            *(["-v"] if verbose else []),
            "serve",
            "--stores",
            str(stores),
            "--port",
            str(port),
        ],
        cwd=REPO,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop_server(proc: subprocess.Popen) -> str:
    proc.terminate()
    try:
        out, _ = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate(timeout=15)
    return out
