"""Fixtures of the client tests: a stores folder with a dense and a kNN-only pose store, and ``labeldist serve``
over it on 127.0.0.1 (to compare the in-process source with the service)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import Service

REPO = Path(__file__).resolve().parents[2]
DENSE = "mpii300-pose"  # 300 items, dense matrix + k = 20
KNN = "mpii200-knn"  # 200 items, kNN lists only (k = 10): other distances are computed from the labels


def build_pose_store(url: str, n_items: int, *, k: int, dense: bool, block_rows: int = 100) -> None:
    """A pose store of the first ``n_items`` MPII poses (normalised by centre and scale), written block by block in
    this process by the engine's own task function (no Dask cluster to start: faster)."""
    from labeldist.distances.pose import PoseDistance
    from labeldist.engine.blocks import compute_block
    from labeldist.labels.pose_files import read_mpii_csv
    from labeldist.store import build_manifest, create_store, n_blocks, publish

    labels = read_mpii_csv(REPO / "data" / "mpii" / "mpii_valid_2958.csv", normalization="center_scale")
    labels = labels.subset(slice(0, n_items))
    distance = PoseDistance()
    manifest = build_manifest(
        dataset=f"mpii{n_items}",
        kind="pose",
        params=distance.params(),
        labels=labels,
        k=k,
        dense=dense,
        block_rows=block_rows,
    )
    create_store(url, manifest, labels)
    for block in range(n_blocks(n_items, block_rows)):
        compute_block(block, labels=labels, distance=distance, url=url, k=k, block_rows=block_rows, dense=dense)
    publish(url)


@pytest.fixture(scope="session")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("client-stores")
    build_pose_store(str(root / DENSE), 300, k=20, dense=True)
    build_pose_store(str(root / KNN), 200, k=10, dense=False)
    return root


@pytest.fixture(scope="session")
def service(stores: Path) -> Iterator[str]:
    """``labeldist serve`` over ``stores`` in a subprocess on a free port; the base URL once /healthz answers."""
    with Service(stores) as running:
        yield running.url
