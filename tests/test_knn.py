import numpy as np
import pytest

from labeldist.knn import topk_rows


def _oracle(d, k, exclude):
    """Stable argsort per row: ties broken by index, the excluded column dropped."""
    out = []
    for r, row in enumerate(d):
        order = [
            int(j) for j in np.argsort(np.where(np.isnan(row), np.inf, row), kind="stable") if j != exclude[r]
        ]
        out.append(order[:k])
    return out


@pytest.mark.parametrize("k", [1, 5, 17, 39])
def test_topk_equals_stable_argsort_with_many_ties(k):
    rng = np.random.default_rng(k)
    d = rng.integers(0, 6, size=(30, 40)).astype(np.float32)  # few distinct values: ties everywhere
    exclude = rng.integers(0, 40, size=30)
    idx, dist = topk_rows(d, k, exclude=exclude)
    assert idx.dtype == np.int32 and idx.shape == (30, k)
    for r, expected in enumerate(_oracle(d, k, exclude)):
        assert idx[r].tolist() == expected
        np.testing.assert_array_equal(dist[r], d[r, expected])


def test_k_beyond_n_pads_with_minus_one_and_inf():
    d = np.array([[0.0, 2.0, 1.0], [2.0, 0.0, 3.0], [1.0, 3.0, 0.0]])
    idx, dist = topk_rows(d, 4, exclude=np.arange(3))
    assert idx.tolist() == [[2, 1, -1, -1], [0, 2, -1, -1], [0, 1, -1, -1]]
    assert np.isinf(dist[:, 2:]).all()


def test_nan_sorts_last_and_infinite_values_are_kept_in_order():
    d = np.array([[np.nan, 0.0, np.inf, 1.0]])
    idx, _ = topk_rows(d, 3, exclude=np.array([1]))
    assert idx.tolist() == [[3, 0, 2]]


def test_without_exclusion_the_item_itself_may_appear():
    d = np.array([[0.0, 1.0, 0.5]])
    assert topk_rows(d, 2)[0].tolist() == [[0, 2]]
