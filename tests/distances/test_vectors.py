"""The vectors kind's exact kNN search by FAISS: the lists of ``scipy.spatial.distance.cdist``, the oracle,
under every metric FAISS searches (euclidean, sqeuclidean, cosine: the kind offers no inner-product metric), on data
where FAISS's float32 is enough and on data where it is not (ties, a large common offset), which the search must
then compute whole. And the shared suite of every distance (:class:`labeldist.testing.DistanceSuite`) under each of
the kind's metrics."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from labeldist.distances.vectors import FAISS_METRICS, MARGIN, METRICS, VectorDistance
from labeldist.labels.vectors import Vectors
from labeldist.testing import DistanceSuite

N, D, K = 300, 8, 10


def _labels(data: str) -> Vectors:
    rng = np.random.default_rng(7)
    if data == "normal":
        values = rng.normal(size=(N, D))
        values[5] = values[2]  # a duplicate and a near one: distance 0 and 1e-9
        values[6] = values[2] + 1e-9
    elif data == "offset":  # far from the origin: float32 keeps few digits of each coordinate
        values = 1e4 + rng.normal(size=(N, D))
    else:  # small integers: exact ties everywhere, across FAISS's margin
        values = rng.integers(1, 3, size=(N, D)).astype(float)
    return Vectors(np.array([f"v{i}" for i in range(N)]), values)


def _oracle(values: np.ndarray, metric: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cdist's k nearest of ``rows`` on float32 values, the item itself left out, ties broken by index."""
    full = cdist(values[rows], values, metric).astype(np.float32)
    full[np.arange(len(rows)), rows] = np.inf
    order = np.argsort(full, axis=1, kind="stable")[:, :K]
    return order, np.take_along_axis(full, order, 1)


@pytest.mark.parametrize("data", ["normal", "offset", "ties"])
@pytest.mark.parametrize("metric", FAISS_METRICS)
def test_faiss_lists_equal_cdist(metric: str, data: str) -> None:
    labels = _labels(data)
    distance = VectorDistance(metric)
    for start, stop in [(0, N), (0, 130), (130, N)]:  # one block, and two uneven ones
        rows = np.arange(start, stop)
        indices, dists, n_exact = distance.knn_block(labels, start, stop, K)
        expected, expected_dists = _oracle(labels.values, metric, rows)
        assert indices.dtype == np.int32 and dists.dtype == np.float32 and indices.shape == (len(rows), K)
        np.testing.assert_allclose(dists, expected_dists, rtol=2.5e-7, atol=1e-12)
        # indices equal except among items at the same distance (a tie, to float32's last bit)
        full = cdist(labels.values[rows], labels.values, metric)
        differ = indices != expected
        at = np.take_along_axis(full, indices.astype(np.int64), 1)
        np.testing.assert_allclose(at[differ], np.take_along_axis(full, expected, 1)[differ], rtol=2.5e-7, atol=0)
        assert not (indices == rows[:, None]).any()
        candidates = len(rows) * (K + 1 + MARGIN)
        if data == "ties":  # ties across the margin: rows computed whole
            assert n_exact > candidates
    if data == "normal":
        assert n_exact == candidates  # every row certified from FAISS's candidates alone


def test_the_index_built_in_chunks_gives_the_same_lists(monkeypatch) -> None:
    import labeldist.distances.vectors as vectors

    for metric in FAISS_METRICS:
        whole = VectorDistance(metric).knn_block(_labels("offset"), 0, N, K)
        monkeypatch.setattr(vectors, "INDEX_CHUNK", 70)  # 300 rows: four full chunks and one of 20
        chunked = VectorDistance(metric).knn_block(_labels("offset"), 0, N, K)  # new labels: a new index
        monkeypatch.undo()
        for a, b in zip(whole, chunked):
            np.testing.assert_array_equal(a, b)


def test_exact_ties_are_broken_by_index() -> None:
    labels = _labels("ties")
    indices, _, _ = VectorDistance("euclidean").knn_block(labels, 0, N, K)
    expected, _ = _oracle(labels.values, "euclidean", np.arange(N))
    assert indices.tolist() == expected.tolist()  # integer data: cdist and the re-rank agree to the bit


def test_other_metrics_have_no_search() -> None:
    labels = _labels("normal")
    for metric in ("cityblock", "chebyshev"):
        assert VectorDistance(metric).knn_block(labels, 0, 10, K) is None
        assert VectorDistance(metric).knn_block_rows(labels) is None
    assert VectorDistance("cosine").knn_block_rows(labels) == N  # the whole set in one FAISS block


def test_one_faiss_thread_per_task_in_a_dask_worker(dask_client) -> None:
    from labeldist.core.threads import thread_budget
    from labeldist.engine.runner import run_block_task, worker_threads

    assert worker_threads() is None and thread_budget() is None  # in this process: FAISS's own default
    # labeldist's LocalCluster: single-threaded workers, whose nanny sets OMP_NUM_THREADS=1; a task the engine runs
    # gives its kernel that budget
    assert dask_client.gather(dask_client.map(lambda _: worker_threads(), range(4), pure=False)) == [1] * 4
    budgets = dask_client.map(run_block_task, range(4), task=lambda _: thread_budget(), pure=False)
    assert dask_client.gather(budgets) == [1] * 4


def _suite_labels(data: str) -> Vectors:
    """24 labels for the suite: normal vectors with a duplicate and a near one, the same far from the origin (where
    the matrix-product form cancels and pairs are recomputed by ``cdist``), or scalars (ages, D = 1)."""
    rng = np.random.default_rng(3)
    if data == "scalars":
        values = rng.uniform(18, 90, size=(24, 1))
    else:
        values = rng.normal(size=(24, 6)) + (1e4 if data == "offset" else 0.0)
    values[5] = values[2]
    values[6] = values[2] + 1e-9
    return Vectors(np.array([f"v{i}" for i in range(24)]), values)


class TestVectorDistance(DistanceSuite):
    """The suite under every metric (euclidean, sqeuclidean, cosine, cityblock, chebyshev), on each set of labels."""

    @pytest.fixture(params=METRICS)
    def distance(self, request: pytest.FixtureRequest) -> VectorDistance:
        return VectorDistance(request.param)

    @pytest.fixture(params=["normal", "offset", "scalars"])
    def labels(self, request: pytest.FixtureRequest) -> Vectors:
        return _suite_labels(request.param)
