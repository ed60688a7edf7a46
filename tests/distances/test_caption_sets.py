"""The caption-set WMD (Kim et al., CVPR 2019, Eq. 13) on real COCO captions."""

import json

import numpy as np
import ot
import pytest
from scipy.spatial.distance import cdist

import labeldist.distances.caption_sets as caption_sets_module
from labeldist.distances.caption_sets import CaptionSetWMD, caption_set_distance
from labeldist.kinds import distance_class
from labeldist.labels.captions import CaptionSets, caption_sets_from_texts, read_captions
from tests.conftest import DATA
from tests.distances.suite import DistanceSuite


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
