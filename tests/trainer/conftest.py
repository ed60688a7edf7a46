"""Fixtures of the trainer tests: a small pose store and a real ``labeldist serve`` on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import Service

REPO = Path(__file__).resolve().parents[2]
STORE = "mpii300-pose"
N_ITEMS = 300


@pytest.fixture(scope="session")
def pose_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stores folder with one dense 300-item MPII pose store (poses normalised by centre and scale), written
    block by block in this process by the engine's own task function (no Dask cluster to start: faster)."""
    from labeldist.distances.pose import PoseDistance
    from labeldist.engine.blocks import compute_block
    from labeldist.labels.pose_files import read_mpii_csv
    from labeldist.store import build_manifest, create_store, n_blocks, publish

    root = tmp_path_factory.mktemp("trainer-stores")
    labels = read_mpii_csv(REPO / "data" / "mpii" / "mpii_valid_2958.csv", normalization="center_scale")
    labels = labels.subset(slice(0, N_ITEMS))
    distance, url, rows = PoseDistance(), str(root / STORE), 100
    manifest = build_manifest(
        dataset="mpii300", kind="pose", params=distance.params(), labels=labels, k=20, dense=True, block_rows=rows
    )
    create_store(url, manifest, labels)
    for block in range(n_blocks(N_ITEMS, rows)):
        compute_block(block, labels=labels, distance=distance, url=url, k=20, block_rows=rows, dense=True)
    publish(url)
    return root


@pytest.fixture(scope="session")
def features(pose_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo inputs of the pose store (trainer/inputs/demo_inputs.py, seed 0) as a .npy file: an MLP's features."""
    import numpy as np

    from labeldist.trainer.inputs.demo_inputs import pose_inputs

    path = tmp_path_factory.mktemp("features") / "mpii300.npy"
    np.save(path, pose_inputs(str(pose_store / STORE), seed=0))
    return path


@pytest.fixture(scope="session")
def service(pose_store: Path) -> Iterator[str]:
    """``labeldist serve`` in a subprocess on a free port; the base URL once /healthz answers."""
    with Service(pose_store) as running:
        yield running.url
