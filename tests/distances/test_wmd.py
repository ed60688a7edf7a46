"""The WMD kernel against POT's ``emd2`` and gensim's ``wmdistance`` on real COCO caption pairs."""

import warnings

import numpy as np
import ot
import pytest
from gensim.models import KeyedVectors
from scipy.spatial.distance import cdist

import labeldist.distances.wmd as wmd_module
from labeldist.distances.nbow import nbow, unit_rows
from labeldist.distances.transport import _emd_oriented, emd_pot, emd_small, emd_workspace, transpose_first
from labeldist.distances.wmd import wmd, wmd_many, wmd_pairs
from labeldist.distances.wmd_bounds import (
    centroids,
    euclidean_lower_bounds,
    reduction_bound,
    rwmd,
    rwmd_cost,
    rwmd_linear_many,
    rwmd_many,
    wcd,
    wcd_many,
)
from labeldist.labels.captions import read_captions
from tests.conftest import DATA

N_PAIRS = 600


@pytest.fixture(scope="module")
def coco():
    return read_captions(DATA / "coco" / "coco_karpathy_test.json")


@pytest.fixture(scope="module")
def texts(coco):
    """Flat tokens, offsets and unit vectors of every caption (gensim's default ``norm=True``)."""
    return coco.tokens, coco.token_offsets, unit_rows(coco.vectors)


@pytest.fixture(scope="module")
def pairs(coco):
    rng = np.random.default_rng(42)
    i = rng.integers(0, coco.n_captions, N_PAIRS)
    j = rng.integers(0, coco.n_captions, N_PAIRS)
    j[:20] = i[:20]  # a few identical captions
    return i, j


def _bag(tokens, offsets, vectors, k):
    ids, counts = np.unique(tokens[offsets[k] : offsets[k + 1]], return_counts=True)
    return vectors[ids].astype(np.float64), counts / counts.sum()


def _pot(tokens, offsets, vectors, k, l):
    (x, dx), (y, dy) = _bag(tokens, offsets, vectors, k), _bag(tokens, offsets, vectors, l)
    # scipy's cdist, as gensim: POT's ot.dist(metric="euclidean") expands |x|^2 + |y|^2 - 2xy and loses
    # about 1e-8 to cancellation, more than the agreement asked for here
    return ot.emd2(dx, dy, cdist(x, y))


def _max_rel_err(ours, theirs):
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    return float(np.max(np.abs(ours - theirs) / np.maximum(np.abs(theirs), 1e-12)))


def test_pairs_equal_pot_emd2_on_real_captions(texts, pairs):
    i, j = pairs
    ours = wmd_pairs(*texts, *texts, i, j)
    ref = [_pot(*texts, k, l) for k, l in zip(i, j)]
    assert _max_rel_err(ours, ref) <= 1e-6
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-12)  # in fact far closer than asked


def test_equal_gensim_wmdistance_on_real_captions(coco, pairs):
    """gensim built from the same GloVe arrays: ``KeyedVectors.add_vectors`` with the set's vocabulary and its
    float32 vectors (what the set stores: the GloVe rows). gensim normalises each vector on its own, so a
    table of just these words gives the same unit vectors as the full 400,000-word table."""
    kv = KeyedVectors(vector_size=coco.vectors.shape[1])
    kv.add_vectors(coco.vocab.tolist(), coco.vectors)
    i, j = pairs
    tokens, offsets = coco.tokens, coco.token_offsets
    ours = wmd_pairs(tokens, offsets, unit_rows(coco.vectors), tokens, offsets, unit_rows(coco.vectors), i, j)
    theirs = [kv.wmdistance(coco.caption_words(k), coco.caption_words(l)) for k, l in zip(i, j)]
    assert np.isfinite(theirs).all()
    assert _max_rel_err(ours, theirs) <= 1e-6


def test_matrix_agrees_with_listed_pairs_and_is_symmetric(coco):
    sub_a, sub_b = coco.subset(slice(0, 12)), coco.subset(slice(200, 220))
    a = (sub_a.tokens, sub_a.token_offsets, unit_rows(sub_a.vectors))
    b = (sub_b.tokens, sub_b.token_offsets, unit_rows(sub_b.vectors))
    m = wmd_many(*a, *b)
    assert m.shape == (sub_a.n_captions, sub_b.n_captions)
    ii, jj = np.meshgrid(np.arange(m.shape[0]), np.arange(m.shape[1]), indexing="ij")
    np.testing.assert_allclose(wmd_pairs(*a, *b, ii.ravel(), jj.ravel()), m.ravel(), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(wmd_many(*b, *a), m.T)  # the same float from either side (emd_small)
    assert (m >= 0).all()
    sq = wmd_many(*a, *a)
    np.testing.assert_allclose(np.diag(sq), 0.0, atol=1e-12)


def test_the_cost_from_either_side_is_the_same_float(texts, pairs):
    """The transport is solved in one orientation (``transpose_first``), so WMD(x, y) and WMD(y, x) are the same
    float: on real caption pairs, and on random problems of equal sizes with equal weights (where the order falls
    to the costs), POT's fallback too. Solved as given, enough transposed problems round differently to show."""
    tok, off, vec = texts
    i, j = pairs
    np.testing.assert_array_equal(
        wmd_pairs(tok, off, vec, tok, off, vec, i, j), wmd_pairs(tok, off, vec, tok, off, vec, j, i)
    )
    rng = np.random.default_rng(5)
    ws = emd_workspace(9, 9)
    as_given = 0
    for t in range(3000):
        m = int(rng.integers(2, 9))
        n = m if t % 2 else int(rng.integers(1, 9))
        a = np.full(m, 1 / m) if t % 4 == 1 else rng.dirichlet(np.ones(m))
        b = np.full(n, 1 / n) if t % 4 == 1 else rng.dirichlet(np.ones(n))
        cost = cdist(rng.normal(size=(m, 3)), rng.normal(size=(n, 3)))
        there, back = emd_small(cost, m, n, a, b, ws), emd_small(cost.T.copy(), n, m, b, a, ws)
        assert there == back and emd_pot(cost, a, b) == emd_pot(cost.T.copy(), b, a)
        assert transpose_first(cost, m, n, a, b) != transpose_first(cost.T.copy(), n, m, b, a)
        as_given += _emd_oriented(cost, m, n, a, b, ws) != _emd_oriented(cost.T.copy(), n, m, b, a, ws)
    assert as_given > 0


def test_sides_may_use_different_vector_tables(texts, pairs):
    tok, off, vec = texts
    perm = np.random.default_rng(0).permutation(len(vec))
    # the same words in another row order: B's ids point into the permuted table
    inverse = np.argsort(perm)
    i, j = pairs
    same = wmd_pairs(tok, off, vec, tok, off, vec, i, j)
    other = wmd_pairs(tok, off, vec, inverse[tok], off, vec[perm], i, j)
    np.testing.assert_allclose(other, same, rtol=1e-12, atol=1e-15)


def test_exact_on_random_degenerate_problems():
    """Ties, repeated points, equal and zero weights, sizes up to 20 x 20, against POT's network simplex."""
    rng = np.random.default_rng(7)
    errs = []
    for t in range(1500):
        m, n = rng.integers(1, 21, 2)
        x = rng.normal(size=(m, 3))
        y = rng.normal(size=(n, 3))
        if t % 3 == 0:
            y[: min(m, n)] = x[: min(m, n)]  # shared words: zero costs
        if t % 5 == 0:
            x, y = np.round(x), np.round(y)  # many equal costs
        cx = np.ones(m) if t % 7 == 0 else rng.integers(1, 4, m).astype(float)
        cy = np.ones(n) if t % 7 == 0 else rng.integers(1, 4, n).astype(float)
        if t % 11 == 0:  # zero weights (allowed by wmd(); nBOW never has them)
            cx[rng.integers(0, m)] = 0
            cx[0] += cx.sum() == 0
        dx, dy = cx / cx.sum(), cy / cy.sum()
        ref = ot.emd2(dx, dy, cdist(x, y))
        errs.append(abs(wmd(x, dx, y, dy) - ref) / max(ref, 1e-12))
    assert max(errs) <= 1e-9


def test_lower_bounds_never_exceed_the_exact_value(texts, pairs):
    tok, off, vec = texts
    i, j = pairs
    exact = wmd_pairs(tok, off, vec, tok, off, vec, i, j)
    sel_a = np.unique(i[:40])
    sel_b = np.unique(j[:40])
    m = wmd_many(*_select(tok, off, sel_a), vec, *_select(tok, off, sel_b), vec)
    for bound in (rwmd_many, wcd_many):
        lb = bound(*_select(tok, off, sel_a), vec, *_select(tok, off, sel_b), vec)
        assert lb.shape == m.shape
        assert (lb <= m * (1 + 1e-12) + 1e-15).all()
        assert (lb >= 0).all()
    # the one-pair functions agree with the batched ones
    for k, l, e in zip(i[:100], j[:100], exact[:100]):
        (x, dx), (y, dy) = _bag(tok, off, vec, k), _bag(tok, off, vec, l)
        assert wcd(x, dx, y, dy) <= e * (1 + 1e-12) + 1e-15
        assert rwmd(x, dx, y, dy) <= e * (1 + 1e-12) + 1e-15
        assert wmd(x, dx, y, dy) == pytest.approx(e, rel=1e-12, abs=1e-15)


def _select(tok, off, which):
    lengths = off[which + 1] - off[which]
    new = np.concatenate([[0], np.cumsum(lengths)])
    flat = np.concatenate([np.arange(off[w], off[w + 1]) for w in which])
    return tok[flat], new


def _slow_reduction_bound(cost, a, b):
    """The Hungarian reductions by NumPy: row minima then column minima of what is left, and the other order."""
    u = cost.min(axis=1)
    first = a @ u + b @ (cost - u[:, None]).min(axis=0)
    v = cost.min(axis=0)
    second = b @ v + a @ (cost - v[None, :]).min(axis=1)
    return max(first, second)


def test_reduction_bound_lies_between_rwmd_and_pot(texts, pairs):
    """On real caption pairs, the relaxed WMD <= the reduction bound <= POT's exact transport cost, the bound equal
    to a NumPy computation of the same reductions; above the relaxed WMD on some pairs (words sharing a nearest
    word), equal to the exact cost on two words sent to one."""
    tok, off, vec = texts
    i, j = pairs
    above = 0
    for k, l in zip(i[:300], j[:300]):
        (x, dx), (y, dy) = _bag(tok, off, vec, k), _bag(tok, off, vec, l)
        cost = cdist(x, y)
        m, n = cost.shape
        ours = reduction_bound(cost, m, n, dx, dy, np.empty(m), np.empty(n))
        relaxed = rwmd_cost(cost, m, n, dx, dy)
        exact = ot.emd2(dx, dy, cost)
        assert relaxed <= ours * (1 + 1e-12) + 1e-15 and ours <= exact * (1 + 1e-12) + 1e-15
        assert ours == pytest.approx(_slow_reduction_bound(cost, dx, dy), rel=1e-12, abs=1e-15)
        above += ours > relaxed * (1 + 1e-9)
    assert above > 10
    # {man, person} -> {man, dog}: both words' nearest is "man"; the relaxed WMD lets both go there
    cost = np.array([[0.0, 0.8], [0.3, 0.9]])
    half = np.array([0.5, 0.5])
    assert rwmd_cost(cost, 2, 2, half, half) == pytest.approx(0.4)
    assert reduction_bound(cost, 2, 2, half, half, np.empty(2), np.empty(2)) == pytest.approx(0.45)
    assert ot.emd2(half, half, cost) == pytest.approx(0.45)


def test_rwmd_does_not_dominate_wcd():
    """Kusner et al. show RWMD is usually tighter; it is not always: take the larger of the two."""
    x, dx = np.array([[0.0], [10.0]]), np.array([0.5, 0.5])
    y, dy = np.array([[0.0], [10.0]]), np.array([0.9, 0.1])
    assert wcd(x, dx, y, dy) > rwmd(x, dx, y, dy)
    assert wcd(x, dx, y, dy) == pytest.approx(wmd(x, dx, y, dy))


def test_nbow_weights_are_counts_over_length():
    tokens = np.array([5, 1, 5, 2, 2, 2, 9])
    offsets = np.array([0, 3, 7])
    ids, w, off = nbow(tokens, offsets)
    for t in range(2):
        seg = tokens[offsets[t] : offsets[t + 1]]
        expect_ids, counts = np.unique(seg, return_counts=True)
        assert ids[off[t] : off[t + 1]].tolist() == expect_ids.tolist()
        np.testing.assert_allclose(w[off[t] : off[t + 1]], counts / len(seg))
    c = centroids(tokens, offsets, np.arange(10.0)[:, None])
    np.testing.assert_allclose(c[:, 0], [np.mean(tokens[:3]), np.mean(tokens[3:])])


def test_unit_rows_matches_gensim_normalisation(coco):
    kv = KeyedVectors(vector_size=coco.vectors.shape[1])
    kv.add_vectors(coco.vocab.tolist(), coco.vectors)
    np.testing.assert_array_equal(unit_rows(coco.vectors), kv.get_normed_vectors())


def test_bad_input_fails_loudly():
    vec = np.eye(3)
    with pytest.raises(ValueError, match="text 1 has no tokens"):
        wmd_many(np.array([0, 1]), np.array([0, 2, 2]), vec, np.array([0]), np.array([0, 1]), vec)
    with pytest.raises(ValueError, match="dx must be non-negative weights summing to 1"):
        wmd(vec[:2], np.array([0.5, 0.6]), vec[:1], np.array([1.0]))
    with pytest.raises(ValueError, match="outside"):
        wmd_pairs(np.array([0]), np.array([0, 1]), vec, np.array([0]), np.array([0, 1]), vec, [1], [0])


def test_unfinished_problems_fall_back_to_pot_with_a_warning(monkeypatch, texts):
    tok, off, vec = texts
    sel = np.arange(30)
    a = (*_select(tok, off, sel), vec)
    expected = wmd_many(*a, *a)
    real = wmd_module.each_pair

    def failing(*args):
        out = real(*args)
        out[::3, ::2] = np.nan  # as if the solver had hit its iteration cap
        return out

    monkeypatch.setattr(wmd_module, "each_pair", failing)
    with pytest.warns(RuntimeWarning, match="iteration cap"):
        got = wmd_many(*a, *a)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monkeypatch.setattr(wmd_module, "each_pair", real)
        wmd_many(*a, *a)  # no warning when the solver finishes


@pytest.mark.parametrize("normalize", [True, False])
def test_euclidean_lower_bounds_never_exceed_the_distances(coco, normalize):
    """BLAS expansion |x|^2 + |y|^2 - 2xy minus its rounding slack, against the difference form (cdist), on the
    GloVe rows of the set, on near-duplicates (worst cancellation) and on exact duplicates (0)."""
    vec = (unit_rows(coco.vectors) if normalize else coco.vectors).astype(np.float64)
    rng = np.random.default_rng(1)
    x = vec[rng.choice(len(vec), 300, replace=False)]
    y = np.concatenate([vec[rng.choice(len(vec), 200, replace=False)], x[:50], x[50:100] * (1 + 1e-7), x[:50] + 1e-9])
    exact = cdist(x, y)
    for dtype in (np.float64, np.float32):
        lb = euclidean_lower_bounds(x, y, dtype)
        assert lb.dtype == dtype and lb.shape == exact.shape
        assert (lb.astype(np.float64) <= exact).all()
        far = exact > 1e-3
        np.testing.assert_allclose(lb[far], exact[far], rtol=1e-6)  # a tight bound where words differ
    assert (euclidean_lower_bounds(x[:50], x[:50]).diagonal() == 0).all()
    with pytest.raises(ValueError, match="dtype"):
        euclidean_lower_bounds(x, y, np.float16)


def test_linear_rwmd_equals_rwmd_and_bounds_wmd(texts, pairs):
    """Atasu et al.'s linear-complexity RWMD: the same values as the per-pair RWMD (up to the rounding slack of
    its word distances), never above it nor above the exact WMD."""
    tok, off, vec = texts
    i, j = pairs
    a = (*_select(tok, off, np.unique(i[:60])), vec)
    b = (*_select(tok, off, np.unique(j[:80])), vec)
    lin, per_pair, exact = rwmd_linear_many(*a, *b), rwmd_many(*a, *b), wmd_many(*a, *b)
    assert lin.shape == per_pair.shape == exact.shape
    np.testing.assert_allclose(lin, per_pair, rtol=1e-9, atol=1e-12)
    assert (lin <= per_pair * (1 + 1e-12) + 1e-15).all()
    assert (lin <= exact * (1 + 1e-12) + 1e-15).all()
    np.testing.assert_allclose(np.diag(rwmd_linear_many(*a, *a)), 0.0, atol=1e-12)
