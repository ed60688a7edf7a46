"""Exact caption-set kNN (Kim et al., CVPR 2019, Eq. 13) through the real engine, against brute force.

Both tests run ``precompute`` on the session's 2-worker LocalCluster (``tests.conftest.dask_client``, made by
the engine's own ``dask_client(n_workers=2)``). The kNN-only path is ``CaptionSetWMD.knn_block``: the image-word
bound for every pair, the caption-level bound for the pairs it leaves, exact values (``pairs_within``) for the pairs
both leave; brute force is
``CaptionSetWMD.block`` on the anchor rows against every image, cast to float32 as the store keeps it, then a
stable argsort with the anchor itself left out (ties broken by index).
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from labeldist.distances.caption_sets import CaptionSetWMD
from labeldist.engine import precompute
from labeldist.labels.captions import read_captions
from labeldist.store import StoreReader
from tests.conftest import DATA, check_store

K = 100


@pytest.fixture(scope="module")
def coco():
    return read_captions(DATA / "coco" / "coco_karpathy_test.json")


def _brute_force(labels, anchors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    rows = CaptionSetWMD().block(labels.subset(anchors), labels).astype(np.float32)
    indices = np.array([[j for j in np.argsort(row, kind="stable") if j != a][:k] for a, row in zip(anchors, rows)])
    return indices, np.take_along_axis(rows, indices, axis=1)


def test_pruned_knn_of_1000_images_equals_brute_force(coco, dask_client, tmp_path):
    labels = coco.subset(np.random.default_rng(0).choice(len(coco), 1000, replace=False))
    out = tmp_path / "coco1000"
    result = precompute(
        labels, CaptionSetWMD(), out, dataset="coco1000", k=K, dense=False, client=dask_client, progress=False
    )
    assert result.blocks_computed == result.blocks_total
    indices, distances = StoreReader(str(out)).knn()
    # anchors from every row block, the first and last rows included
    anchors = np.unique(np.concatenate([[0, 255, 256, 999], np.random.default_rng(1).choice(1000, 8, replace=False)]))
    expected_idx, expected_dist = _brute_force(labels, anchors, K)
    np.testing.assert_array_equal(indices[anchors], expected_idx)
    np.testing.assert_array_equal(distances[anchors], expected_dist)
    exact_pairs = zarr.open_group(str(out), mode="r")["progress/exact_pairs"][:]
    assert exact_pairs.sum() < 0.5 * 1000 * 999  # pruning did its job (about a quarter at k = 100, N = 1,000)
    assert "ok" in check_store(out)


def test_dense_store_of_200_images_equals_block(coco, dask_client, tmp_path):
    labels = coco.subset(slice(300, 500))
    out = tmp_path / "coco200"
    precompute(
        labels,
        CaptionSetWMD(),
        out,
        dataset="coco200",
        k=20,
        dense=True,
        client=dask_client,
        block_rows=64,
        progress=False,
    )
    assert "ok" in check_store(out)
    reader = StoreReader(str(out))
    dense = CaptionSetWMD().block(labels, labels).astype(np.float32)
    np.testing.assert_array_equal(reader.dense_rows(0, 200), dense)
    indices, distances = reader.knn()
    expected_idx, expected_dist = _brute_force(labels, np.arange(200), 20)
    np.testing.assert_array_equal(indices, expected_idx)
    np.testing.assert_array_equal(distances, expected_dist)


def test_blocks_pass_exact_pairs_to_those_after_them(coco, dask_client, tmp_path):
    """The job passes each finished block's exact pairs to the blocks not yet started (labeldist.engine.exchange):
    every list equals the one each block finds alone (``knn_block``, itself equal to whole rows above), and the
    store's count of exact pairs is below the sum of the blocks' counts alone."""
    labels = coco.subset(np.random.default_rng(2).choice(len(coco), 500, replace=False))
    out = tmp_path / "coco500"
    precompute(
        labels,
        CaptionSetWMD(),
        out,
        dataset="c500",
        k=50,
        dense=False,
        client=dask_client,
        block_rows=40,
        progress=False,
    )
    indices, distances = StoreReader(str(out)).knn()
    alone = [CaptionSetWMD().knn_block(labels, start, min(start + 40, 500), 50) for start in range(0, 500, 40)]
    np.testing.assert_array_equal(indices, np.concatenate([a[0] for a in alone]))
    np.testing.assert_array_equal(distances, np.concatenate([a[1] for a in alone]))
    shared = zarr.open_group(str(out), mode="r")["progress/exact_pairs"][:]
    assert shared.sum() < 0.9 * sum(a[2] for a in alone), (shared.tolist(), [a[2] for a in alone])
    assert "ok" in check_store(out)
