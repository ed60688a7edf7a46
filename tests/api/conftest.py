"""Fixtures of the API tests: small pose stores (dense, kNN-only, tiny, incomplete) in one session folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from labeldist.api.main import create_app
from labeldist.api.settings import Settings
from labeldist.distances.pose import PoseDistance
from labeldist.engine import precompute
from labeldist.labels.poses import Poses
from labeldist.store import build_manifest, create_store
from tests.api.api_helpers import (
    DENSE,
    INCOMPLETE,
    KNN,
    N_ITEMS,
    TINY,
    TINY_STORE,
    K,
    make_settings,
    start_server,
    stop_server,
)
from tests.conftest import write_store
from tests.processes import free_port, wait_healthy


@pytest.fixture(scope="session")
def pose_labels(mpii_poses: Poses) -> Poses:
    return mpii_poses.subset(slice(0, N_ITEMS))


@pytest.fixture(scope="session")
def stores_dir(tmp_path_factory: pytest.TempPathFactory, pose_labels: Poses, dask_client) -> Path:
    """A stores folder: two complete 300-item stores (dense + kNN, kNN only), a 12-item kNN-only store, an
    incomplete store (laid out, never published) and a folder that is no store. Computed on the session's
    Dask cluster (tests/conftest.py)."""
    root = tmp_path_factory.mktemp("stores")
    distance = PoseDistance()
    common = dict(dataset="mpii300", k=K, client=dask_client, progress=False)
    precompute(pose_labels, distance, root / DENSE, dense=True, **common)
    precompute(pose_labels, distance, root / KNN, dense=False, **common)
    # k over N - 1 is refused by precompute since 0.2; a store with padded lists (from an older labeldist, or
    # another tool) is still served, so it is laid out here with the engine's own parts
    write_store(
        root / TINY_STORE,
        pose_labels.subset(slice(0, TINY)),
        distance,
        dataset="mpii300",
        k=K,
        dense=False,
        block_rows=64,
    )
    manifest = build_manifest(
        dataset="mpii300", kind="pose", params=distance.params(), labels=pose_labels, k=K, dense=False, block_rows=64
    )
    create_store(str(root / INCOMPLETE), manifest, pose_labels)
    (root / "notes").mkdir()
    (root / "notes" / "README.txt").write_text("not a store\n")
    return root


@pytest.fixture(scope="session")
def settings(stores_dir: Path) -> Settings:
    return make_settings(stores=stores_dir)


@pytest.fixture(scope="session")
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture(scope="session")
def store_arrays(stores_dir: Path) -> dict[str, dict[str, np.ndarray]]:
    """What the stores hold, read straight with zarr (independent of the service)."""
    import zarr

    out = {}
    for name in (DENSE, KNN, TINY_STORE):
        g = zarr.open_group(str(stores_dir / name), mode="r")
        arrays = {
            "indices": g["knn/indices"][:],
            "distances": g["knn/distances"][:],
            "ids": np.array(g["ids"][:].tolist()),
        }
        if "dense" in g:
            arrays["dense"] = g["dense/distances"][:]
        out[name] = arrays
    return out


@pytest.fixture(scope="session")
def live_server(stores_dir: Path) -> Iterator[str]:
    """Base URL of `labeldist serve` over the session's stores, in a subprocess on 127.0.0.1."""
    port = free_port()
    proc = start_server(stores_dir, port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base)
        yield base
    finally:
        stop_server(proc)
