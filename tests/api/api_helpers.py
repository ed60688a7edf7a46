"""Constants and helpers shared by the API tests (a unique module name: tests/api is on sys.path)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from api.settings import Settings
from labeldist.distances.pose import PoseDistance
from labeldist.labels.poses import Poses

REPO = Path(__file__).resolve().parents[2]
MPII_CSV = REPO / "data" / "mpii" / "mpii_valid_2958.csv"
ARTIFACTS = REPO / "test-artifacts"
N_ITEMS, K = 300, 20
TINY = 12  # fewer items than k: neighbour lists padded with -1
DENSE, KNN, TINY_STORE, INCOMPLETE = "pose-dense", "pose-knn", "pose-tiny", "pose-incomplete"


def make_settings(**values: object) -> Settings:
    """Settings with exactly these values and the defaults: none read from LABELDIST_* variables that the
    environment running the tests may set."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("LABELDIST_")}
    try:
        return Settings(**values)
    finally:
        os.environ.update(saved)


def reference(labels: Poses, i: int, j: int) -> np.float32:
    """The slow, independent distance of items i and j, rounded to float32 like stored values."""
    return np.float32(PoseDistance().reference(labels, i, labels, j))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STARTUP_TIMEOUT = 60.0


def start_server(stores: Path, port: int, **env: str) -> subprocess.Popen:
    # only the settings given here: none inherited from the environment the tests run in
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("LABELDIST_")}
    environ = {**inherited, "LABELDIST_ACCESS_LOG": "false", **env}
    return subprocess.Popen(
        [sys.executable, "-m", "labeldist.cli", "serve", "--stores", str(stores), "--port", str(port)],
        cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def wait_healthy(proc: subprocess.Popen, base: str, timeout: float = STARTUP_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{proc.stdout.read()}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"server at {base} not healthy after {timeout} s")


def stop_server(proc: subprocess.Popen) -> str:
    proc.terminate()
    try:
        out, _ = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate(timeout=15)
    return out
