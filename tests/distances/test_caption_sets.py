"""The caption-set WMD (Kim et al., CVPR 2019, Eq. 13) on real COCO captions."""

import json
import pickle

import numpy as np
import ot
import pytest
from scipy.spatial.distance import cdist

import labeldist.distances.caption_sets as caption_sets_module
from labeldist.distances.caption_sets import CaptionSetWMD, caption_set_distance
from labeldist.distances.wmd_bounds import rwmd_many
from labeldist.kinds import distance_class
from labeldist.labels.captions import CaptionSets, caption_sets_from_texts, read_captions
from labeldist.testing import DistanceSuite
from tests.conftest import DATA


@pytest.fixture(scope="module")
def coco():
    return read_captions(DATA / "coco" / "coco_karpathy_test.json")


@pytest.fixture(scope="module")
def raw():
    return json.loads((DATA / "coco" / "coco_karpathy_test.json").read_text(encoding="utf-8"))


@pytest.fixture
def labels(coco):
    # 20 images, two of them with 6 captions
    six = np.flatnonzero(np.diff(coco.caption_offsets) > 5)[:2]
    return coco.subset(np.concatenate([np.arange(18), six]))


class TestCaptionSetWMD(DistanceSuite):
    @pytest.fixture
    def distance(self):
        return CaptionSetWMD()


class TestCaptionSetWMDRawVectors(DistanceSuite):
    @pytest.fixture
    def distance(self):
        return CaptionSetWMD(normalize=False)


def _slow_w(a, i, b, j, normalize=True):
    """Eq. 13 with a plain double loop over caption pairs, POT for each WMD."""

    def bag(s, k):
        ids, counts = np.unique(s.tokens[s.token_offsets[k] : s.token_offsets[k + 1]], return_counts=True)
        v = s.vectors[ids].astype(np.float32)
        if normalize:
            v = v / np.linalg.norm(v, axis=1, keepdims=True)  # gensim's float32 normalisation
        return v.astype(np.float64), counts / counts.sum()

    xs = [bag(a, k) for k in range(a.caption_offsets[i], a.caption_offsets[i + 1])]
    ys = [bag(b, k) for k in range(b.caption_offsets[j], b.caption_offsets[j + 1])]
    d = np.array([[ot.emd2(dx, dy, cdist(x, y)) for (y, dy) in ys] for (x, dx) in xs])
    total = 0.0
    for r in range(len(xs)):
        total += min(d[r, c] for c in range(len(ys)))
    for c in range(len(ys)):
        total += min(d[r, c] for r in range(len(xs)))
    return total


@pytest.mark.parametrize("normalize", [True, False])
def test_block_equals_a_slow_loop_on_random_images(coco, normalize):
    rng = np.random.default_rng(3)
    rows = coco.subset(rng.choice(len(coco), 9, replace=False))
    cols = coco.subset(rng.choice(len(coco), 11, replace=False))
    got = CaptionSetWMD(normalize=normalize).block(rows, cols)
    ref = np.array([[_slow_w(rows, i, cols, j, normalize) for j in range(len(cols))] for i in range(len(rows))])
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)
    assert (got > 0).all()  # random images never share all their captions


def test_sets_with_different_vocabularies_are_compatible(coco, raw):
    """Two sets read separately (their local vocabularies differ) give the distances of one joint set."""
    a = caption_sets_from_texts([str(i) for i in range(10)], [raw[i]["caption"] for i in range(10)])
    b = caption_sets_from_texts([str(i) for i in range(6, 16)], [raw[i]["caption"] for i in range(6, 16)])
    assert not np.array_equal(a.vocab, b.vocab)
    d = CaptionSetWMD()
    np.testing.assert_allclose(
        d.block(a, b), d.block(coco.subset(slice(0, 10)), coco.subset(slice(6, 16))), rtol=1e-12, atol=1e-12
    )
    assert d.reference(a, 7, b, 1) == pytest.approx(0.0, abs=1e-12)  # the same image (raw[7]) on both sides
    assert d.block(a, b)[7, 1] == pytest.approx(0.0, abs=1e-12)


def test_lower_bound_never_exceeds_the_exact_value(coco):
    rng = np.random.default_rng(5)
    rows = coco.subset(rng.choice(len(coco), 25, replace=False))
    cols = coco.subset(rng.choice(len(coco), 40, replace=False))
    d = CaptionSetWMD()
    exact = d.block(rows, cols)
    lb = d.lower_bound_block(rows, cols)
    assert lb.shape == exact.shape == (25, 40)
    assert (lb <= exact).all()
    assert (lb[exact > 0] > 0).all()  # informative: positive wherever W is
    both = coco.subset(np.arange(12))
    assert (d.lower_bound_block(both, both) <= d.block(both, both)).all()
    np.testing.assert_allclose(np.diag(d.lower_bound_block(both, both)), 0.0, atol=1e-12)


def test_caption_set_distance_on_hand_listed_images():
    m = np.random.default_rng(0).random((5, 6))
    rows, cols = np.array([0, 2, 5]), np.array([0, 1, 4, 6])
    got = caption_set_distance(m, rows, cols)
    for i in range(2):
        for j in range(3):
            block = m[rows[i] : rows[i + 1], cols[j] : cols[j + 1]]
            expected = sum(min(r) for r in block.tolist()) + sum(min(c) for c in block.T.tolist())
            assert got[i, j] == pytest.approx(expected)


def test_chunked_block_equals_one_chunk(coco, monkeypatch):
    rows, cols = coco.subset(slice(0, 13)), coco.subset(slice(100, 130))
    whole = CaptionSetWMD().block(rows, cols)
    monkeypatch.setattr(caption_sets_module, "_CHUNK_PAIRS", 1)  # one row image per chunk
    np.testing.assert_array_equal(CaptionSetWMD().block(rows, cols), whole)


def test_repeated_captions_are_computed_once_and_right(raw):
    caps = raw[0]["caption"]
    sets = caption_sets_from_texts(["a", "b", "c"], [caps, caps[:2] + caps[:2], [caps[0]]])
    d = CaptionSetWMD()
    got = d.block(sets, sets)
    ref = np.array([[d.reference(sets, i, sets, j) for j in range(3)] for i in range(3)])
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.diag(got), 0.0, atol=1e-12)


def test_empty_blocks(coco):
    d = CaptionSetWMD()
    assert d.block(coco.subset(slice(0, 0)), coco.subset(slice(0, 3))).shape == (0, 3)
    assert d.lower_bound_block(coco.subset(slice(0, 3)), coco.subset(slice(0, 0))).shape == (3, 0)


def test_registered_kind_and_params():
    assert distance_class("caption_wmd") is CaptionSetWMD
    assert CaptionSetWMD.labels_class is CaptionSets
    assert json.loads(json.dumps(CaptionSetWMD().params())) == {"normalize": True}
    with pytest.raises(ValueError, match="normalize must be a bool"):
        CaptionSetWMD(normalize="yes")


def test_wrong_labels_fail_loudly(coco):
    from labeldist.labels.base import LabelSet

    class Other(LabelSet):
        label_type = "other"

        def subset(self, index):
            return self

        def to_arrays(self):
            return {}

        @classmethod
        def from_arrays(cls, ids, arrays):
            return cls(ids)

    with pytest.raises(TypeError, match="caption_wmd needs CaptionSets, got Other for cols"):
        CaptionSetWMD().block(coco.subset(slice(0, 2)), Other(np.array(["x"])))
    arrays = coco.subset(slice(0, 2)).to_arrays()
    arrays["vectors"] = arrays["vectors"][:, :10]
    short = CaptionSets.from_arrays(coco.ids[:2], arrays)
    with pytest.raises(ValueError, match="word vectors differ in size: 50 .rows. vs 10 .cols."):
        CaptionSetWMD().block(coco.subset(slice(0, 2)), short)


def _pair_grid(coco, n_rows, n_cols, seed):
    """Random row and column images (the two 6-caption images among the rows) and every pair between them."""
    rng = np.random.default_rng(seed)
    six = np.flatnonzero(np.diff(coco.caption_offsets) > 5)[:2]
    rows = np.concatenate([rng.choice(len(coco), n_rows - 2, replace=False), six])
    cols = np.concatenate([rng.choice(len(coco), n_cols - 3, replace=False), rows[:2], six[:1]])
    i, j = np.meshgrid(rows, cols, indexing="ij")
    return rows, cols, i.ravel(), j.ravel()


@pytest.mark.parametrize("normalize", [True, False])
def test_pairs_equal_block_to_the_last_bit_and_the_reference(coco, normalize):
    rows, cols, i, j = _pair_grid(coco, 10, 60, seed=11)
    d = CaptionSetWMD(normalize=normalize)
    got = d.pairs(coco, i, j)
    block = d.block(coco.subset(rows), coco.subset(cols))
    np.testing.assert_array_equal(got, block.ravel())  # same caption WMDs, same order of additions
    np.testing.assert_array_equal(got, d._pairs_plain(coco, i, j))  # skipping caption WMDs changes nothing
    np.testing.assert_array_equal(block, d._block_plain(coco.subset(rows), coco.subset(cols)))
    some = np.random.default_rng(0).choice(len(i), 15, replace=False)
    ref = [d.reference(coco, a, coco, b) for a, b in zip(i[some], j[some])]
    np.testing.assert_allclose(got[some], ref, rtol=1e-9, atol=1e-12)
    same = i == j
    assert same.sum() >= 3 and (got[same] == 0).all()


def test_w_from_either_image_is_the_same_float(coco):
    """W(i, j) and W(j, i) to the last bit, by pairs and by blocks (each caption WMD solved in one orientation, Eq.
    13's two sums added in either order): what lets a kNN search take a pair's value from the reverse pair."""
    d = CaptionSetWMD()
    rng = np.random.default_rng(21)
    i, j = rng.integers(0, len(coco), 2000), rng.integers(0, len(coco), 2000)
    np.testing.assert_array_equal(d.pairs(coco, i, j), d.pairs(coco, j, i))
    a, b = coco.subset(rng.choice(len(coco), 12, replace=False)), coco.subset(rng.choice(len(coco), 40, replace=False))
    np.testing.assert_array_equal(d.block(a, b), d.block(b, a).T)


def test_pairs_in_any_order_and_chunk(coco, monkeypatch):
    rows, cols, i, j = _pair_grid(coco, 6, 30, seed=12)
    d = CaptionSetWMD()
    whole = d.pairs(coco, i, j)
    perm = np.random.default_rng(0).permutation(len(i))
    np.testing.assert_array_equal(d.pairs(coco, i[perm], j[perm]), whole[perm])
    monkeypatch.setattr(caption_sets_module, "_PAIRS_CHUNK", 7)  # the plain path's wmd_pairs calls
    np.testing.assert_array_equal(d._pairs_plain(coco, i, j), whole)
    assert d.pairs(coco, np.array([], dtype=int), np.array([], dtype=int)).shape == (0,)
    with pytest.raises(ValueError, match="equal length"):
        d.pairs(coco, i[:3], j[:2])
    with pytest.raises(IndexError, match="outside"):
        d.pairs(coco, np.array([0]), np.array([len(coco)]))


def test_unfinished_caption_problems_fall_back_to_the_plain_path(coco, monkeypatch):
    """A NaN from the compiled kernels (the small solver gave up) is recomputed the plain way (POT fallback)."""
    rows, cols, i, j = _pair_grid(coco, 4, 10, seed=13)
    d = CaptionSetWMD()
    pairs, block = d.pairs(coco, i, j), d.block(coco.subset(rows), coco.subset(cols))
    real_pairs, real_block = caption_sets_module.pairs_w, caption_sets_module.block_w

    def failing_pairs(*args):
        out, n = real_pairs(*args)
        out[::3] = np.nan
        return out, n

    def failing_block(*args):
        out, n = real_block(*args)
        out[::2, ::3] = np.nan
        return out, n

    monkeypatch.setattr(caption_sets_module, "pairs_w", failing_pairs)
    monkeypatch.setattr(caption_sets_module, "block_w", failing_block)
    np.testing.assert_array_equal(d.pairs(coco, i, j), pairs)
    np.testing.assert_array_equal(d.block(coco.subset(rows), coco.subset(cols)), block)


@pytest.mark.parametrize("normalize", [True, False])
def test_lower_bound_on_hundreds_of_pairs_and_against_all_images(coco, normalize):
    """The linear-complexity bound against exact W: a full block, the pairs it ranks nearest (where a wrong
    bound would cost a neighbour) and random pairs; and as tight as Eq. 13 over the per-pair RWMD."""
    d = CaptionSetWMD(normalize=normalize)
    rng = np.random.default_rng(17)
    rows = rng.choice(len(coco), 12, replace=False)
    lb = d.lower_bound_block(coco.subset(rows), coco)  # against all 5,000 images
    assert lb.shape == (12, len(coco))
    near = np.argsort(lb, axis=1)[:, :40]
    i = np.concatenate([np.repeat(rows, 40), rng.choice(rows, 300)])
    j = np.concatenate([near.ravel(), rng.choice(len(coco), 300)])
    exact = d.pairs(coco, i, j)
    row_of = {int(r): k for k, r in enumerate(rows)}
    bound = lb[[row_of[int(a)] for a in i], j]
    assert (bound <= exact).all()
    assert np.median(bound[exact > 0] / exact[exact > 0]) > 0.9  # tight: about 0.95 on COCO
    np.testing.assert_array_equal(lb[np.arange(12), rows], 0.0)
    # a full block against its exact values, and against Eq. 13 over the per-pair RWMD
    cols = rng.choice(len(coco), 150, replace=False)
    sub_r, sub_c = coco.subset(rows), coco.subset(cols)
    lb = d.lower_bound_block(sub_r, sub_c)
    assert (lb <= d.block(sub_r, sub_c)).all()
    rwmd = d._reduce(sub_r, sub_c, rwmd_many)
    assert (lb <= rwmd).all()
    np.testing.assert_allclose(lb, rwmd, rtol=1e-6)  # float32 word tables cost at most ~1e-7


def test_lower_bound_in_row_chunks_and_the_old_bound(coco, monkeypatch):
    rows, cols = coco.subset(slice(0, 30)), coco.subset(slice(1000, 1100))
    d = CaptionSetWMD()
    whole = d.lower_bound_block(rows, cols)
    monkeypatch.setattr(caption_sets_module, "_LB_CHUNK_BYTES", 1)  # one row image per chunk
    chunked = d.lower_bound_block(rows, cols)
    np.testing.assert_allclose(chunked, whole, rtol=1e-6)
    old = d._lower_bound_pairwise(rows, cols)  # max(RWMD, WCD) per caption pair
    exact = d.block(rows, cols)
    assert (chunked <= exact).all() and (old <= exact).all()
    assert np.mean(whole >= old * (1 - 1e-6)) > 0.99  # WCD rarely adds anything


def test_preprocessing_cache_is_bounded_and_not_pickled(coco):
    d = CaptionSetWMD()
    sets = [coco.subset(slice(10 * k, 10 * k + 10)) for k in range(6)]
    values = [d.pairs(s, np.arange(10), np.arange(10)[::-1]) for s in sets]
    assert len(d._cache) == caption_sets_module._CACHE_ENTRIES
    again = pickle.loads(pickle.dumps(d))
    assert len(again._cache) == 0 and again.params() == d.params()
    for s, v in zip(sets, values):
        np.testing.assert_array_equal(again.pairs(s, np.arange(10), np.arange(10)[::-1]), v)
    # a set freed and another built in its place (possibly at the same id) is not confused with it
    for k in range(3):
        s = coco.subset(slice(100 * k, 100 * k + 10))
        np.testing.assert_array_equal(
            d.pairs(s, np.arange(10), np.zeros(10, int)), d._pairs_plain(s, np.arange(10), np.zeros(10, int))
        )
        del s


# ------------------------------------------------------------------ the kNN search's bounds and exact values
def _slow_image_word_bound(d, labels, i, j):
    """B(X, Y) of labeldist.distances.caption_bounds by loops: each caption word's weight times its distance to
    the nearest word of any caption of the other image, both ways (scipy's cdist for the word distances)."""
    b = d._prepared(labels).bags(labels)
    total = 0.0
    for a, other in ((i, j), (j, i)):
        words = b.ids[b.offsets[labels.caption_offsets[other]] : b.offsets[labels.caption_offsets[other + 1]]]
        for x in range(labels.caption_offsets[a], labels.caption_offsets[a + 1]):
            mine = slice(b.offsets[x], b.offsets[x + 1])
            nearest = cdist(b.vectors[b.ids[mine]], b.vectors[np.unique(words)]).min(axis=1)
            total += float(b.weights[mine] @ nearest)
    return total


def _slow_reduction_bound(d, labels, i, j):
    """Eq. 13 over each caption pair's Hungarian reductions (rows then columns, and the other order, the larger), by
    NumPy on scipy's cdist of the words."""
    b = d._prepared(labels).bags(labels)
    co = labels.caption_offsets
    m = np.empty((co[i + 1] - co[i], co[j + 1] - co[j]))
    for x in range(co[i], co[i + 1]):
        for y in range(co[j], co[j + 1]):
            ex, ey = slice(b.offsets[x], b.offsets[x + 1]), slice(b.offsets[y], b.offsets[y + 1])
            cost, wx, wy = cdist(b.vectors[b.ids[ex]], b.vectors[b.ids[ey]]), b.weights[ex], b.weights[ey]
            u, v = cost.min(axis=1), cost.min(axis=0)
            m[x - co[i], y - co[j]] = max(
                wx @ u + wy @ (cost - u[:, None]).min(axis=0), wy @ v + wx @ (cost - v[None, :]).min(axis=1)
            )
    return m.min(axis=1).sum() + m.min(axis=0).sum()


@pytest.mark.parametrize("normalize", [True, False])
def test_the_search_bounds_are_ordered_below_the_exact_value(coco, normalize):
    """image-word bound <= caption-level bound <= reduction bound <= W on a block of 16 rows against 5,000 images,
    near pairs and random ones; the caption-level bound of the search equals lower_bound_block's, the image-word
    bound a slow loop's, the reduction bound NumPy's reductions of each caption pair's cost matrix."""
    from labeldist.distances.caption_bounds import (
        chunk_tables,
        image_word_bounds,
        pair_set_reduction,
        pair_set_rwmd,
    )

    d = CaptionSetWMD(normalize=normalize)
    b, words = d._prepared(coco).bags(coco), d._prepared(coco).image_words(coco)
    i0, i1 = 2000, 2016
    tables = chunk_tables(b, words, b.local, coco.caption_offsets, i0, i1, b.vectors)
    cheap = image_word_bounds(tables, words)
    assert cheap.shape == (16, len(coco)) and cheap.dtype == np.float32
    rng = np.random.default_rng(5)
    near = np.argsort(cheap, axis=1)[:, :30]
    r = np.concatenate([np.repeat(np.arange(16), 30), rng.integers(0, 16, 200)])
    c = np.concatenate([near.ravel(), rng.integers(0, len(coco), 200)])
    tight = pair_set_rwmd(tables, b, coco.caption_offsets, r, c)
    exact = d.pairs(coco, r + i0, c)
    tighter = pair_set_reduction(tables, b, coco.caption_offsets, r, c)
    assert (cheap[r, c] <= tight).all() and (tight <= tighter * (1 + 1e-9)).all() and (tighter <= exact).all()
    assert np.median(tight[exact > 0] / exact[exact > 0]) > 0.9
    assert np.mean(tighter > tight * (1 + 1e-6)) > 0.3
    for t in rng.choice(len(r), 6, replace=False):
        assert tighter[t] == pytest.approx(_slow_reduction_bound(d, coco, r[t] + i0, c[t]), rel=2e-6)
    old = d.lower_bound_block(coco.subset(slice(i0, i1)), coco)[r, c]
    np.testing.assert_allclose(tight, old, rtol=2e-6)
    for t in rng.choice(len(r), 12, replace=False):
        assert cheap[r[t], c[t]] == pytest.approx(_slow_image_word_bound(d, coco, r[t] + i0, c[t]), rel=2e-6)
    np.testing.assert_array_equal(cheap[np.arange(16), np.arange(i0, i1)], 0.0)


def test_pairs_within_a_limit_are_exact_below_it_and_above_it_otherwise(coco):
    d = CaptionSetWMD()
    rng = np.random.default_rng(8)
    i, j = rng.integers(0, len(coco), 400), rng.integers(0, len(coco), 400)
    exact = d.pairs(coco, i, j)
    limits = np.quantile(exact, 0.3) * rng.uniform(0.8, 1.2, 400)
    within = d.pairs_within(coco, i, j, limits)
    below = exact <= limits
    np.testing.assert_array_equal(within[below], exact[below])
    assert (within[~below] > limits[~below]).all() and (within[~below] <= exact[~below] * (1 + 1e-9)).all()
    assert (within[~below] < exact[~below]).any()  # some pairs were given up before their last caption WMD


def test_knn_block_equals_whole_rows(coco, monkeypatch):
    """The search (cheap bound, caption-level bound, exact W) against whole exact rows, in row chunks of one
    image too; fewer exact values than the row."""
    from labeldist.core.knn import topk_rows

    labels = coco.subset(slice(0, 700))
    d = CaptionSetWMD()
    rows = d.block(labels.subset(slice(40, 60)), labels).astype(np.float32)
    expected = topk_rows(rows, 25, exclude=np.arange(40, 60))
    indices, dists, computed = d.knn_block(labels, 40, 60, 25)
    np.testing.assert_array_equal(indices, expected[0])
    np.testing.assert_array_equal(dists, expected[1])
    assert computed < 0.3 * 20 * 699
    monkeypatch.setattr(caption_sets_module, "_LB_CHUNK_BYTES", 1)  # one row image per chunk
    chunked = CaptionSetWMD().knn_block(labels, 40, 60, 25)
    np.testing.assert_array_equal(chunked[0], expected[0])
    np.testing.assert_array_equal(chunked[1], expected[1])
    assert chunked[2] < computed  # a later chunk took the reverse of the pairs the earlier ones computed


def test_a_block_given_the_pairs_of_another_computes_fewer_and_finds_the_same(coco):
    """knn_block_shared: block B given the reverse of what block A learned (rows in B) finds its whole rows' lists,
    computes fewer, never one whose W it was given; what each block learned is W as pairs() has it, or a bound."""
    from labeldist.core.cascade import KnownPairs
    from labeldist.core.knn import topk_rows

    labels = coco.subset(slice(0, 700))
    d = CaptionSetWMD()
    _, _, _, made_a = d.knn_block_shared(labels, 0, 60, 25, KnownPairs.empty())
    _check_learned(d, labels, made_a)
    alone = d.knn_block(labels, 60, 120, 25)
    to_b = made_a.taken((made_a.cols >= 60) & (made_a.cols < 120)).reversed()
    assert len(to_b.rows) > 50
    indices, dists, computed, made_b = d.knn_block_shared(labels, 60, 120, 25, to_b)
    expected = topk_rows(d.block(labels.subset(slice(60, 120)), labels).astype(np.float32), 25, np.arange(60, 120))
    np.testing.assert_array_equal(indices, expected[0])
    np.testing.assert_array_equal(dists, expected[1])
    np.testing.assert_array_equal(alone[0], expected[0])
    assert len(made_b.rows) == computed < alone[2]
    given = to_b.taken(to_b.exact)  # a pair given as a lower bound may still need its exact W
    assert not np.isin(made_b.rows * 700 + made_b.cols, given.rows * 700 + given.cols).any()
    _check_learned(d, labels, made_b)


def _check_learned(d, labels, learned):
    """What a search learned: W as pairs() has it where it says exact, else a lower bound of W; some of each."""
    w = d.pairs(labels, learned.rows, learned.cols)
    sure = learned.exact
    np.testing.assert_array_equal(learned.values[sure], w[sure].astype(np.float32))
    assert (learned.values[~sure] <= w[~sure]).all() and 0 < sure.sum() < len(sure)
