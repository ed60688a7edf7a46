"""The engine's symmetric dense mode: upper triangle computed once in phase 1, mirrored in phase 2.

Two distances, both on the session's 2-worker LocalCluster (``tests.conftest.dask_client``):

- ``LopsidedPose``, a probe for the engine logic: the pose distance scaled up by 1e-3 when the row pose's joint
  sum exceeds the column pose's, so that d(a, b) != d(b, a) on purpose. Declared symmetric, its store must hold
  in both triangles the value computed with the lower index as the row: the store shows which side was
  computed, and a mirroring the wrong way round or a full computation fails.
- the real caption-set WMD on 100 COCO images (GloVe vectors), against brute force ``block(labels, labels)``.

Resume is simulated by running the phase tasks (``compute_upper``, ``compute_mirrored``) in this process for
some blocks of a fresh store, as a killed job leaves it, then rerunning ``precompute``: the result must equal a
clean run array by array.
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from labeldist.distances.caption_sets import CaptionSetWMD
from labeldist.distances.pose import PoseDistance
from labeldist.engine import precompute
from labeldist.engine.blocks import compute_mirrored, compute_upper, mirror_square
from labeldist.labels.captions import read_captions
from labeldist.store import (
    StoreError,
    StoreMismatchError,
    StoreReader,
    block_range,
    build_manifest,
    create_store,
    drop_work,
    n_blocks,
    read_manifest,
)
from tests.conftest import DATA, check_store

TOY_K, TOY_ROWS = 20, 32  # 150 poses: blocks of 32, the last one 22
WMD_K, WMD_ROWS = 20, 24  # 100 images: blocks of 24, the last one 4


class LopsidedPose(PoseDistance):
    """Not a distance: a probe whose (a, b) and (b, a) values differ, declared symmetric (see module docstring)."""

    symmetric = True

    def block(self, rows, cols):
        d = super().block(rows, cols)
        return d * (1.0 + 1e-3 * (_joint_sum(rows)[:, None] > _joint_sum(cols)[None, :]))


def _joint_sum(poses) -> np.ndarray:
    return np.where(poses.present[..., None], poses.xy, 0.0).sum(axis=(1, 2))


def _upper_mirrored(full: np.ndarray) -> np.ndarray:
    """What a symmetric store must hold: entry (i, j) as computed with row min(i, j), column max(i, j)."""
    i, j = np.indices(full.shape)
    return np.where(i <= j, full, full.T)


def _stable_knn(dense: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k nearest by a stable argsort of the row itself, the item left out (the contract's oracle)."""
    idx = np.array([[j for j in np.argsort(row, kind="stable") if j != i][:k] for i, row in enumerate(dense)])
    return idx, np.take_along_axis(dense, idx, axis=1)


def _arrays(url: str) -> dict[str, np.ndarray]:
    g = zarr.open_group(url, mode="r")
    names = ("ids", "knn/indices", "knn/distances", "dense/distances", "progress/blocks", "progress/exact_pairs")
    return {name: g[name][:] for name in names}


def _members(url: str) -> list[str]:
    return sorted(name for name, _ in zarr.open_group(url, mode="r").members(max_depth=None))


def _exact_pairs(n: int, block_rows: int) -> list[int]:
    starts = [block_range(b, n, block_rows) for b in range(n_blocks(n, block_rows))]
    return [(stop - start) * (n - start) for start, stop in starts]


@pytest.fixture(scope="module")
def poses(mpii_poses):
    return mpii_poses.subset(slice(0, 150))


@pytest.fixture(scope="module")
def coco100():
    return read_captions(DATA / "coco" / "coco_karpathy_test.json").subset(slice(300, 400))


@pytest.fixture(scope="module")
def cases(poses, coco100, dask_client, tmp_path_factory):
    """name -> (labels, distance, k, block_rows, url of a clean symmetric run, its PrecomputeResult)."""
    out = {}
    for name, labels, distance, k, rows in (
        ("toy", poses, LopsidedPose(), TOY_K, TOY_ROWS),
        ("caption_wmd", coco100, CaptionSetWMD(), WMD_K, WMD_ROWS),
    ):
        url = str(tmp_path_factory.mktemp("symmetric") / name)
        result = precompute(
            labels, distance, url, dataset=name, k=k, block_rows=rows, client=dask_client, progress=False
        )
        out[name] = (labels, distance, k, rows, url, result)
    return out


def test_the_probe_is_asymmetric(poses):
    full = LopsidedPose().block(poses, poses).astype(np.float32)
    assert (full != full.T).mean() > 0.3  # else the toy tests below could not tell the triangles apart


def test_toy_store_holds_the_upper_triangle_mirrored(cases, poses):
    _, distance, k, rows, url, result = cases["toy"]
    assert result.symmetric and result.upper_computed == result.blocks_computed == result.blocks_total == 5
    dense = StoreReader(url).dense_rows(0, len(poses))
    full = distance.block(poses, poses).astype(np.float32)
    np.testing.assert_array_equal(dense, _upper_mirrored(full))
    indices, distances = StoreReader(url).knn()
    expected_idx, expected_dist = _stable_knn(dense, k)
    np.testing.assert_array_equal(indices, expected_idx)
    np.testing.assert_array_equal(distances, expected_dist)


@pytest.mark.parametrize("name", ["toy", "caption_wmd"])
def test_symmetric_store_is_symmetric_complete_and_passes_the_checker(cases, name):
    labels, _, _, rows, url, _ = cases[name]
    dense = StoreReader(url).dense_rows(0, len(labels))
    np.testing.assert_array_equal(dense, dense.T)
    assert not np.isnan(dense).any()
    man = read_manifest(url)
    assert man["symmetric"] is True and man["complete"] is True
    # each block computed its upper strip only: N - start pairs per row
    exact = zarr.open_group(url, mode="r")["progress/exact_pairs"][:]
    assert exact.tolist() == _exact_pairs(len(labels), rows)
    # the work arrays are gone: a finished store has the plain layout
    members = _members(url)
    assert "work" not in members and "progress/upper" not in members
    assert {"ids", "knn/indices", "knn/distances", "dense/distances", "progress/blocks"} <= set(members)
    assert "ok" in check_store(url)


def test_caption_wmd_store_equals_brute_force(cases, coco100):
    _, distance, k, _, url, _ = cases["caption_wmd"]
    reader = StoreReader(url)
    dense = reader.dense_rows(0, len(coco100))
    brute = distance.block(coco100, coco100).astype(np.float32)
    np.testing.assert_allclose(dense, brute, rtol=1e-6, atol=0)
    indices, distances = reader.knn()
    expected_idx, expected_dist = _stable_knn(dense, k)  # exactly the stable top-k of its own dense rows
    np.testing.assert_array_equal(indices, expected_idx)
    np.testing.assert_array_equal(distances, expected_dist)


def _fresh_store(url: str, labels, distance, k: int, block_rows: int) -> None:
    """An empty symmetric store, as ``precompute`` lays it out before submitting any task."""
    man = build_manifest(
        dataset="resume",
        kind=distance.kind,
        params=distance.params(),
        labels=labels,
        k=k,
        dense=True,
        block_rows=block_rows,
        symmetric=True,
    )
    create_store(url, man, labels)


def _upper(url, labels, distance, rows, blocks):
    for b in blocks:
        compute_upper(b, labels=labels, distance=distance, url=url, block_rows=rows)


def _mirrored(url, labels, k, rows, blocks):
    for b in blocks:
        compute_mirrored(b, n_items=len(labels), url=url, k=k, block_rows=rows)


# (phase-1 blocks done, phase-2 blocks done, work arrays dropped) at the simulated kill
STOPS = {
    "in phase 1": ([0, 0, 3], [], False),  # block 0 twice: a retried task writes the same strip
    "in phase 2": ([0, 1, 2, 3, 4], [1, 4, 4], False),
    "after dropping the work": ([0, 1, 2, 3, 4], [0, 1, 2, 3, 4], True),
}


@pytest.mark.parametrize("stop", list(STOPS))
@pytest.mark.parametrize("name", ["toy", "caption_wmd"])
def test_interrupted_run_resumes_to_the_clean_store(cases, name, stop, dask_client, tmp_path):
    labels, distance, k, rows, clean, _ = cases[name]
    upper, mirrored, dropped = STOPS[stop]
    url = str(tmp_path / "resumed")
    _fresh_store(url, labels, distance, k, rows)
    _upper(url, labels, distance, rows, upper)
    _mirrored(url, labels, k, rows, mirrored)
    if dropped:
        drop_work(url)
    assert read_manifest(url)["complete"] is False

    result = precompute(
        labels, distance, url, dataset="resume", k=k, block_rows=rows, client=dask_client, progress=False
    )
    total = n_blocks(len(labels), rows)
    assert result.upper_computed == total - len(set(upper) | set(mirrored))
    assert result.blocks_computed == total - len(set(mirrored))
    a, b = _arrays(url), _arrays(clean)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert _members(url) == _members(clean)
    ma, mb = read_manifest(url), read_manifest(clean)
    for man in (ma, mb):
        man.pop("created"), man.pop("dataset")
    assert ma == mb
    check_store(url)


def test_phase_2_refuses_to_read_strips_not_written(poses, tmp_path):
    url = str(tmp_path / "early")
    distance = LopsidedPose()
    _fresh_store(url, poses, distance, TOY_K, TOY_ROWS)
    _upper(url, poses, distance, TOY_ROWS, [0, 2])
    with pytest.raises(StoreError, match=r"row block 2 needs the upper strips of blocks 0\.\.2"):
        _mirrored(url, poses, TOY_K, TOY_ROWS, [2])
    _mirrored(url, poses, TOY_K, TOY_ROWS, [0])  # block 0 needs its own strip only


def test_a_store_begun_in_the_plain_mode_is_not_finished_in_the_symmetric_one(coco100, dask_client, tmp_path):
    url = str(tmp_path / "plain")
    man = build_manifest(
        dataset="d",
        kind="caption_wmd",
        params=CaptionSetWMD().params(),
        labels=coco100,
        k=5,
        dense=True,
        block_rows=WMD_ROWS,
    )
    create_store(url, man, coco100)
    with pytest.raises(StoreMismatchError, match="symmetric: store has None, asked True"):
        precompute(coco100, CaptionSetWMD(), url, dataset="d", k=5, block_rows=WMD_ROWS, client=dask_client)


def test_knn_only_stores_ignore_the_symmetric_mode(poses, dask_client, tmp_path):
    result = precompute(
        poses,
        LopsidedPose(),
        tmp_path / "knn",
        dataset="toy",
        k=TOY_K,
        dense=False,
        block_rows=TOY_ROWS,
        client=dask_client,
        progress=False,
    )
    assert not result.symmetric and result.upper_computed == 0
    assert "symmetric" not in result.manifest
    assert "progress/upper" not in _members(result.url)


def test_mirror_square_copies_the_upper_triangle_and_keeps_the_diagonal():
    strip = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = mirror_square(strip)
    np.testing.assert_array_equal(out[:, :3], [[0, 1, 2], [1, 5, 6], [2, 6, 10]])
    np.testing.assert_array_equal(out[:, 3], strip[:, 3])
    assert strip[1, 0] == 4  # the input is left as it was
