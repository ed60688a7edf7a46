"""The Dask engine against plain in-memory computation, on a real distributed cluster."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from labeldist.distances.pose import PoseDistance
from labeldist.engine import precompute
from labeldist.engine.blocks import block_kernel
from labeldist.store import StoreError, StoreIncompleteError, StoreMismatchError, StoreReader, create_store, publish
from labeldist.view.stored import stored_distance, stored_labels
from tests.conftest import check_store


@pytest.fixture(scope="module")
def poses(mpii_poses):
    return mpii_poses.subset(slice(0, 301))


@pytest.fixture(scope="module")
def in_memory(poses):
    """The same matrix computed plainly: one NumPy call, no blocks, no Dask, float32 as stored."""
    return PoseDistance().block(poses, poses).astype(np.float32)


@pytest.fixture(scope="module")
def store(poses, dask_client, tmp_path_factory):
    out = tmp_path_factory.mktemp("engine") / "poses"
    # 301 rows in blocks of 70: four full blocks and an uneven last one of 21.
    result = precompute(poses, PoseDistance(), out, dataset="mpii301", k=25, block_rows=70, client=dask_client)
    assert result.blocks_total == 5 and result.blocks_computed == 5 and not result.reused
    return out


def test_dask_result_equals_in_memory_numpy(store, in_memory):
    reader = StoreReader(str(store))
    np.testing.assert_array_equal(reader.dense_rows(0, reader.n_items), in_memory)


def test_chunks_follow_the_row_blocks(store):
    group = zarr.open_group(str(store), mode="r")
    assert group["dense/distances"].shards == (70, 301)  # N < 512: one tile spans the row
    assert group["knn/indices"].chunks == (70, 25)


def test_every_knn_row_is_the_stable_argsort_of_its_dense_row(store, in_memory):
    indices, distances = StoreReader(str(store)).knn()
    n = len(in_memory)
    for i in range(n):
        order = [j for j in np.argsort(in_memory[i], kind="stable") if j != i][:25]
        assert indices[i].tolist() == order, f"row {i}"
        np.testing.assert_array_equal(distances[i], in_memory[i, order])
    assert not (indices == np.arange(n)[:, None]).any()


def test_store_passes_the_contract_checker(store):
    assert "ok" in check_store(store)


def test_manifest_records_every_parameter(store, poses):
    man = StoreReader(str(store)).manifest
    assert man["kind"] == "pose" and man["params"] == {"metric": "euclidean", "missing": "rescale"}
    assert man["n_items"] == 301 and man["k"] == 25 and man["labels_sha256"] == poses.sha256()
    assert man["complete"] is True


def test_stored_labels_recompute_the_stored_distances(store):
    reader = StoreReader(str(store))
    labels, distance = stored_labels(reader), stored_distance(reader)
    np.testing.assert_array_equal(
        distance.block(labels.subset(slice(0, 5)), labels).astype(np.float32), reader.dense_rows(0, 5)
    )


def test_rerun_reuses_the_finished_store(store, poses, dask_client):
    result = precompute(poses, PoseDistance(), store, dataset="mpii301", k=25, block_rows=70, client=dask_client)
    assert result.reused and result.blocks_computed == 0


def test_other_parameters_at_the_output_are_refused_and_leave_it_intact(store, poses, dask_client):
    before = StoreReader(str(store)).manifest
    with pytest.raises(StoreMismatchError, match="params: store has .*'euclidean'.*asked .*'sqeuclidean'"):
        precompute(
            poses, PoseDistance(metric="sqeuclidean"), store, dataset="mpii301", k=25, block_rows=70, client=dask_client
        )
    with pytest.raises(StoreMismatchError, match="the labels differ"):
        precompute(
            poses.subset(slice(0, 300)),
            PoseDistance(),
            store,
            dataset="mpii301",
            k=25,
            block_rows=70,
            client=dask_client,
        )
    assert StoreReader(str(store)).manifest == before


def test_knn_only_store_equals_the_dense_store_lists(store, poses, dask_client, tmp_path):
    result = precompute(
        poses, PoseDistance(), tmp_path / "knn", dataset="mpii301", k=25, dense=False, block_rows=64, client=dask_client
    )
    a, b = StoreReader(result.url), StoreReader(str(store))
    assert not a.has_dense
    for x, y in zip(a.knn(), b.knn()):
        np.testing.assert_array_equal(x, y)
    check_store(result.url)


def test_remote_scheduler_address_and_fsspec_url(poses, dask_client, tmp_path, in_memory):
    """`--scheduler tcp://...` path: a Client connecting by address; output given as an fsspec URL."""
    url = f"file://{tmp_path}/remote"
    result = precompute(
        poses, PoseDistance(), url, dataset="mpii301", k=10, block_rows=128, scheduler=dask_client.scheduler.address
    )
    assert result.blocks_computed == 3
    np.testing.assert_array_equal(StoreReader(url).dense_rows(0, 301), in_memory)
    # a complete store there is not replaced in place (docs/cluster.md): refused before anything is written
    before = sorted(p.name for p in (tmp_path / "remote").rglob("*"))
    with pytest.raises(StoreError, match="cannot do atomically; write the new store under another name"):
        precompute(poses.subset(slice(0, 50)), PoseDistance(), url, dataset="other", k=5, overwrite=True)
    assert sorted(p.name for p in (tmp_path / "remote").rglob("*")) == before
    np.testing.assert_array_equal(StoreReader(url).dense_rows(0, 301), in_memory)


def test_store_is_not_readable_as_complete_before_publish(poses, tmp_path):
    from labeldist.store import build_manifest

    url = str(tmp_path / "half")
    man = build_manifest(
        dataset="d", kind="pose", params=PoseDistance().params(), labels=poses, k=5, dense=True, block_rows=100
    )
    create_store(url, man, poses)
    with pytest.raises(StoreIncompleteError, match="not complete"):
        StoreReader(url)
    with pytest.raises(StoreIncompleteError, match=r"row blocks \[0, 1, 2, 3\] are not written"):
        publish(url)


def test_block_kernel_excludes_self_and_pads(poses):
    rows, idx, dist = block_kernel(poses.subset(slice(0, 4)), PoseDistance(), 1, 3, k=5)
    assert rows.shape == (2, 4) and rows.dtype == np.float32
    assert idx.tolist()[0][3:] == [-1, -1] and 1 not in idx[0] and 2 not in idx[1]


class CountedPrepare(PoseDistance):
    """The pose distance with a ``prepare`` hook that counts its calls (kind and numbers unchanged)."""

    calls = 0

    def prepare(self, labels):
        type(self).calls += 1


def test_prepare_runs_once_per_job_that_computes_and_never_for_a_reused_store(poses, dask_client, tmp_path):
    CountedPrepare.calls = 0
    out = tmp_path / "poses"
    first = precompute(poses, CountedPrepare(), out, dataset="mpii301", k=25, block_rows=70, client=dask_client)
    assert first.blocks_computed == 5 and CountedPrepare.calls == 1  # once in the driver, not once per block
    again = precompute(poses, CountedPrepare(), out, dataset="mpii301", k=25, block_rows=70, client=dask_client)
    assert again.reused and CountedPrepare.calls == 1


def test_a_dense_matrix_over_the_limit_is_refused_before_anything_is_written(poses, tmp_path):
    from labeldist.core.dense import DENSE_LIMIT, check_dense_size

    out = tmp_path / "big"
    limit = 4 * len(poses) ** 2 - 1  # one byte short of the 301 x 301 float32 matrix
    with pytest.raises(ValueError) as refused:
        precompute(poses, PoseDistance(), out, dataset="mpii301", k=5, dense_limit=limit)  # no cluster is started
    message = str(refused.value)
    assert "301 items" in message and "353.91 kiB" in message and "--knn-only" in message and "--dense-limit" in message
    assert not out.exists() and list(tmp_path.iterdir()) == []  # nothing written, not even a lock
    check_dense_size(len(poses), 4 * len(poses) ** 2)  # exactly at the limit: built
    check_dense_size(16_384, DENSE_LIMIT)  # the default, 1 GiB: 16,384 items
    with pytest.raises(ValueError, match=r"16,385 items .* 1.00 GiB, over the dense limit of 1.00 GiB"):
        check_dense_size(16_385, DENSE_LIMIT)
