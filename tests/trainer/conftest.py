"""Fixtures of the trainer tests: a small pose store and a real ``labeldist serve`` on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
STORE = "mpii300-pose"
N_ITEMS = 300
STARTUP_TIMEOUT = 90.0  # a busy 2-core machine can take a while to import the app


@pytest.fixture(scope="session")
def pose_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stores folder with one dense 300-item MPII pose store (poses normalised by centre and scale), written
    block by block in this process by the engine's own task function (no Dask cluster to start: faster)."""
    from labeldist.distances.pose import PoseDistance
    from labeldist.engine import compute_block
    from labeldist.labels.poses import read_mpii_csv
    from labeldist.store import build_manifest, create_store, n_blocks, publish

    root = tmp_path_factory.mktemp("trainer-stores")
    labels = read_mpii_csv(REPO / "data" / "mpii" / "mpii_valid_2958.csv", normalization="center_scale")
    labels = labels.subset(slice(0, N_ITEMS))
    distance, url, rows = PoseDistance(), str(root / STORE), 100
    manifest = build_manifest(dataset="mpii300", kind="pose", params=distance.params(), labels=labels, k=20,
                              dense=True, block_rows=rows)  # fmt: skip
    create_store(url, manifest, labels)
    for block in range(n_blocks(N_ITEMS, rows)):
        compute_block(block, labels=labels, distance=distance, url=url, k=20, block_rows=rows, dense=True)
    publish(url)
    return root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def service(pose_store: Path) -> Iterator[str]:
    """``labeldist serve`` in a subprocess on a free port; the base URL once /healthz answers."""
    port = _free_port()
    env = {**os.environ, "LABELDIST_ACCESS_LOG": "false"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "labeldist.cli", "serve", "--stores", str(pose_store), "--host", "127.0.0.1",
         "--port", str(port)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"labeldist serve exited with {proc.returncode}:\n{proc.stdout.read()}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"labeldist serve at {url} not healthy after {STARTUP_TIMEOUT} s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate(timeout=15)
