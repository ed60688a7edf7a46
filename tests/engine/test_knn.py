import numpy as np
import pytest

from labeldist.core.knn import topk_rows


def _oracle(d, k, exclude):
    """Stable argsort per row: ties broken by index, the excluded column dropped."""
    out = []
    for r, row in enumerate(d):
        order = [int(j) for j in np.argsort(np.where(np.isnan(row), np.inf, row), kind="stable") if j != exclude[r]]
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


def _points(n, seed):
    return np.random.default_rng(seed).normal(size=(n, 3))


@pytest.mark.parametrize("k", [1, 4, 10])
def test_pruned_topk_equals_brute_force(k):
    """Exact Euclidean kNN with the first coordinate's gap as the lower bound (|x0 - y0| <= ||x - y||)."""
    from labeldist.core.knn import pruned_topk

    x = _points(200, k)
    rows = np.arange(40, 60)
    full = np.linalg.norm(x[rows, None] - x[None], axis=2)
    lower = np.abs(x[rows, None, 0] - x[None, :, 0])
    calls = []

    def exact(r, c):
        calls.append(len(r))
        return np.linalg.norm(x[rows[r]] - x[c], axis=1)

    idx, dist, count = pruned_topk(lower, exact, k, exclude=rows)
    ref_idx, ref_dist = topk_rows(full.astype(np.float32), k, exclude=rows)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_array_equal(dist, ref_dist)
    assert count == sum(calls) < 20 * 199  # the bound ruled some pairs out


def test_pruned_topk_keeps_ties_broken_by_index():
    from labeldist.core.knn import pruned_topk

    values = np.array([[0.0, 1.0, 1.0, 1.0, 2.0, 1.0]])
    idx, _, _ = pruned_topk(np.zeros_like(values), lambda r, c: values[r, c], 3, exclude=np.array([0]))
    assert idx.tolist() == [[1, 2, 3]]


def test_rerank_keeps_the_k_nearest_candidates_and_certifies_only_what_the_bound_proves():
    from labeldist.core.knn import rerank_topk

    cand = np.array([[3, 0, 5, 1], [2, 0, 1, 3], [0, 1, 2, 3]])
    exact = np.array([[1.0, 2.0, 1.0, 0.0], [0.5, 0.5, 0.7, 9.0], [1.0, 2.0, 3.0, 4.0]])
    lower = np.array([2.5, 0.7, 3.0])
    idx, dist, ok = rerank_topk(cand, exact, lower, 2, exclude=np.array([1, 9, 2]))
    assert idx.tolist() == [[3, 5], [0, 2], [0, 1]]  # row 0: item 1 is the row's own; ties broken by index
    np.testing.assert_array_equal(dist, np.array([[1, 1], [0.5, 0.5], [1, 2]], dtype=np.float32))
    # row 1: an item outside the candidates may sit at 0.7 > 0.5: certified; row 0: at 2.5 > 1
    assert ok.tolist() == [True, True, True]
    # a bound equal to the k-th value: an outside item could tie it with a lower index, so not certified
    _, _, ok = rerank_topk(cand, exact, np.array([1.0, 0.5, 2.0]), 2, exclude=np.array([1, 9, 2]))
    assert ok.tolist() == [False, False, False]
    # a bound a hair above the k-th value that rounds down to it in float32: not certified either
    _, _, ok = rerank_topk(cand[:1], exact[:1], np.array([1.0 + 1e-12]), 2, exclude=None)
    assert ok.tolist() == [False]


def test_rerank_pads_and_refuses_rows_with_too_few_candidates():
    from labeldist.core.knn import rerank_topk

    idx, dist, ok = rerank_topk(np.array([[4, -1, 0]]), np.array([[2.0, 0.0, 1.0]]), np.array([np.inf]), 3, None)
    assert idx.tolist() == [[0, 4, -1]] and np.isinf(dist[0, 2]) and ok.tolist() == [False]


@pytest.mark.parametrize("seed", range(4))
def test_largest_candidates_hold_every_column_that_can_reach_the_kth(seed):
    """Against a brute force: every column whose exact product is at least the row's k-th exact product (ties
    included) is a candidate, on quantised unit rows full of ties, over several chunks."""
    from labeldist.core.knn import largest_candidates

    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(size=(700, 6)) * 2) / 2  # coarse values: many equal products
    x[~x.any(axis=1), 0] = 1.0
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x32 = x.astype(np.float32)
    rows = np.arange(0, 700, 7)
    k = 9
    r, c, v, sigma = largest_candidates(x32[rows], x32, k, radius=1e-5, skip=rows, chunk=128)
    exact = x32[rows].astype(np.float64) @ x32.astype(np.float64).T
    exact[np.arange(len(rows)), rows] = -np.inf
    kth = -np.partition(-exact, k - 1, axis=1)[:, k - 1]
    for i in range(len(rows)):
        mine = set(c[r == i].tolist())
        assert set(np.flatnonzero(exact[i] >= kth[i] - 1e-12).tolist()) <= mine
        assert rows[i] not in mine
        assert sigma[i] <= kth[i] + 1e-5
    np.testing.assert_allclose(v, exact[r, c], atol=1e-5)


def test_bounded_candidates_keep_every_column_whose_interval_reaches_the_kth():
    from labeldist.core.knn import bounded_candidates

    rng = np.random.default_rng(7)
    center = rng.uniform(size=(20, 300))
    radius = rng.uniform(0, 0.05, size=(20, 300))
    center[3, :] = 0.5  # one row all tied
    chunks = [(s, center[:, s : s + 64], radius[:, s : s + 64]) for s in range(0, 300, 64)]
    r, c, lo, tau = bounded_candidates(chunks, 20, 5)
    hi = center + radius
    want_tau = np.partition(hi, 4, axis=1)[:, 4]
    np.testing.assert_allclose(tau, want_tau)
    for i in range(20):
        want = np.flatnonzero(center[i] - radius[i] <= want_tau[i])
        assert sorted(c[r == i].tolist()) == want.tolist()
    assert (r == 3).sum() == 300


def test_kth_per_row_against_a_sort():
    from labeldist.core.knn import kth_per_row

    rng = np.random.default_rng(3)
    rows = rng.integers(0, 30, size=2000)
    values = rng.integers(0, 50, size=2000).astype(np.float64)
    got = kth_per_row(rows, values, 31, 40)
    for i in range(31):
        mine = np.sort(values[rows == i])
        assert got[i] == (mine[39] if len(mine) >= 40 else np.inf)


@pytest.mark.parametrize("k", [1, 5, 12])
def test_cascaded_topk_equals_brute_force_with_a_solver_that_gives_up(k):
    """Euclidean kNN in 4-D through two bounds, |x0 - y0| <= ||(x0, x1) - (y0, y1)|| <= ||x - y||, with an exact
    function that answers just above the limit where the distance is above it (as a solver that stops early)."""
    from labeldist.core.cascade import cascaded_topk

    x = np.random.default_rng(k).normal(size=(300, 4))
    rows = np.arange(100, 130)
    full = np.linalg.norm(x[rows, None] - x[None], axis=2)
    cheap = np.abs(x[rows, None, 0] - x[None, :, 0]).astype(np.float32) * np.float32(1 - 1e-6)
    tight_calls, exact_calls = [], []

    def tight(r, c):
        tight_calls.append(len(r))
        return np.linalg.norm(x[rows[r], :2] - x[c, :2], axis=1)

    def exact(r, c, limits):
        exact_calls.append(len(r))
        d = np.linalg.norm(x[rows[r]] - x[c], axis=1)
        return np.where(d <= limits, d, np.nextafter(limits, np.inf))

    idx, dist, computed, refined, _ = cascaded_topk(cheap, tight, exact, k, exclude=rows)
    ref_idx, ref_dist = topk_rows(full.astype(np.float32), k, exclude=rows)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_array_equal(dist, ref_dist)
    assert computed == sum(exact_calls) < 30 * 299 and refined == sum(tight_calls) < 30 * 299


@pytest.mark.parametrize("k", [1, 7, 20])
def test_cascaded_topk_through_several_bounds_computes_little_more_than_its_floor(k):
    """Euclidean kNN in 6-D through bounds made of the first coordinates (3 for the cheap one, then 4 and 5): lists
    equal brute force; each tighter bound is computed for fewer pairs; the exact distances computed are at least
    those whose tightest bound is at most the row's k-th distance (the floor of any search with that bound), and
    at most the seed's k and a round (``step``) more a row; fewer than with the 4-coordinate bound alone."""
    from labeldist.core.cascade import cascaded_topk

    x = np.random.default_rng(k).normal(size=(400, 6))
    rows = np.arange(50, 90)
    full = np.linalg.norm(x[rows, None] - x[None], axis=2)

    def cheap():
        return np.linalg.norm(x[rows, None, :3] - x[None, :, :3], axis=2).astype(np.float32) * np.float32(1 - 1e-6)

    calls = {4: 0, 5: 0}

    def bound(dims):
        def f(r, c):
            calls[dims] += len(r)
            return np.linalg.norm(x[rows[r], :dims] - x[c, :dims], axis=1)

        return f

    def exact(r, c, limits):
        return np.linalg.norm(x[rows[r]] - x[c], axis=1)

    idx, dist, computed, refined, _ = cascaded_topk(cheap(), [bound(4), bound(5)], exact, k, exclude=rows)
    ref_idx, ref_dist = topk_rows(full.astype(np.float32), k, exclude=rows)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_array_equal(dist, ref_dist)
    assert refined == sum(calls.values()) and calls[4] > calls[5]
    tightest = np.linalg.norm(x[rows, None, :5] - x[None, :, :5], axis=2)
    tightest[np.arange(len(rows)), rows] = np.inf
    kth = np.sort(np.where(np.arange(400)[None] == rows[:, None], np.inf, full), axis=1)[:, k - 1]
    floor = int((tightest <= kth[:, None]).sum())
    assert floor <= computed <= floor + (k + max(1, k // 8)) * len(rows)
    one_bound = cascaded_topk(cheap(), bound(4), exact, k, exclude=rows)
    np.testing.assert_array_equal(one_bound[0], ref_idx)
    assert computed < one_bound[2]


@pytest.mark.parametrize("k", [1, 9])
def test_cascaded_topk_takes_known_distances_without_computing_them(k):
    """Euclidean kNN in 4-D through one bound, with a solver that stops early above the limit (at a lower bound).
    Given back half of what a first search learned (exact values and the bounds it stopped at) and exact values it
    never needed: the same lists, no known exact pair asked of the exact function, fewer computed; what it learns is
    exact where it says so and a lower bound elsewhere, and holds none of what it was given."""
    from labeldist.core.cascade import KnownPairs, cascaded_topk

    x = np.random.default_rng(k).normal(size=(300, 4))
    rows = np.arange(100, 140)
    full = np.linalg.norm(x[rows, None] - x[None], axis=2)
    asked: list[np.ndarray] = []

    def cheap():
        return np.abs(x[rows, None, 0] - x[None, :, 0]).astype(np.float32) * np.float32(1 - 1e-6)

    def tight(r, c):
        return np.linalg.norm(x[rows[r], :2] - x[c, :2], axis=1)

    def exact(r, c, limits):
        asked.append(r * 300 + c)
        d = full[r, c]
        return np.where(d <= limits, d, np.nextafter(limits, np.inf))

    def check(learned):
        truth = full[learned.rows, learned.cols]
        sure = learned.exact
        np.testing.assert_array_equal(learned.values[sure], truth[sure].astype(np.float32))
        assert (learned.values[~sure] <= truth[~sure]).all()

    first = cascaded_topk(cheap(), tight, exact, k, exclude=rows)
    check(first.learned)
    assert first.computed == len(first.learned.rows) and not first.learned.exact.all()  # some stopped early
    half = np.random.default_rng(0).permutation(first.computed)[: first.computed // 2]
    far_r, far_c = np.arange(40), np.argsort(full, axis=1)[:, -1]  # each row's farthest item: never needed
    never = KnownPairs(far_r, far_c, full[far_r, far_c].astype(np.float32), np.ones(40, bool))
    known = KnownPairs.joined([first.learned.taken(half), never])
    asked.clear()
    again = cascaded_topk(cheap(), tight, exact, k, exclude=rows, known=known)
    np.testing.assert_array_equal(again.indices, first.indices)
    np.testing.assert_array_equal(again.distances, first.distances)
    keys = known.rows * 300 + known.cols
    assert not np.isin(np.concatenate(asked), keys[known.exact]).any() and again.computed == sum(map(len, asked))
    assert again.computed <= first.computed - len(half) // 2
    check(again.learned)
    assert not np.isin(again.learned.rows * 300 + again.learned.cols, keys[known.exact]).any()


def test_cascaded_topk_keeps_ties_broken_by_index_and_pads_short_rows():
    from labeldist.core.cascade import cascaded_topk

    values = np.array([[0.0, 1.0, 1.0, 1.0, 2.0, 1.0]])
    idx, dist, _, _, _ = cascaded_topk(
        np.zeros((1, 6), np.float32), lambda r, c: np.zeros(len(r)), lambda r, c, lim: values[r, c], 3, np.array([0])
    )
    assert idx.tolist() == [[1, 2, 3]] and dist.tolist() == [[1.0, 1.0, 1.0]]
    idx, dist, _, _, _ = cascaded_topk(
        np.zeros((1, 3), np.float32), lambda r, c: np.zeros(len(r)), lambda r, c, lim: values[r, c], 4, np.array([0])
    )
    assert idx.tolist() == [[1, 2, -1, -1]] and np.isinf(dist[0, 2:]).all()


def test_smallest_entries_holds_at_least_the_count_asked_for():
    from labeldist.core.cascade import smallest_entries

    values = np.random.default_rng(3).random((20, 5000)).astype(np.float32)
    values[3, :] = np.inf  # a row with nothing finite
    rows, cols = smallest_entries(values, 40)
    counts = np.bincount(rows, minlength=20)
    assert counts[3] == 0 and (np.delete(counts, 3) >= 40).all() and (counts < 200).all()
    for r in (0, 7):  # each row's entries are its smallest
        mine = cols[rows == r]
        assert values[r, mine].max() <= np.sort(values[r])[len(mine) - 1]
