import numpy as np
import pytest

from labeldist.distances.layout import LayoutMIoU, miou_distance_pair, miou_distances
from labeldist.kinds import distance_class
from labeldist.labels.layouts import LayoutMaps
from labeldist.labels.lsun_rooms import generate_layouts
from labeldist.testing import DistanceSuite


def _generated(n_per_type: int = 6, height: int = 24, width: int = 36) -> LayoutMaps:
    """Generated maps of several types (so every surface, the left wall included, occurs), non-square."""
    parts = [generate_layouts(n_per_type, layout_type=t, height=height, width=width, seed=t) for t in (5, 0, 4, 9)]
    return LayoutMaps(np.concatenate([p.ids for p in parts]), np.concatenate([p.maps for p in parts]))


def _random(n: int = 22, height: int = 9, width: int = 13, seed: int = 0) -> LayoutMaps:
    """Noise maps with unlabelled pixels, absent surfaces, and one map with no labelled pixel at all."""
    rng = np.random.default_rng(seed)
    maps = rng.integers(0, 6, size=(n, height, width), dtype=np.uint8)
    maps[3][maps[3] == 4] = 0  # surface 4 absent
    maps[5] = 0  # nothing labelled
    maps[6] = np.where(rng.random((height, width)) < 0.9, 0, maps[6])  # mostly unlabelled
    return LayoutMaps(np.array([f"r{i}" for i in range(n)]), maps)


class TestLayoutOnGeneratedMaps(DistanceSuite):
    @pytest.fixture
    def distance(self):
        return LayoutMIoU()

    @pytest.fixture
    def labels(self):
        return _generated()


class TestLayoutOnRandomMaps(DistanceSuite):
    @pytest.fixture
    def distance(self):
        return LayoutMIoU()

    @pytest.fixture
    def labels(self):
        return _random()


@pytest.mark.parametrize("labels", [_generated(), _random()], ids=["generated", "random"])
def test_block_equals_reference_on_uneven_blocks(labels):
    d = LayoutMIoU()
    rows, cols = labels.subset(np.arange(1, 8)), labels.subset(np.arange(len(labels) - 1, 4, -1))
    block = d.block(rows, cols)
    assert block.shape == (7, len(labels) - 5)
    ref = np.array([[d.reference(rows, i, cols, j) for j in range(len(cols))] for i in range(len(rows))])
    np.testing.assert_allclose(block, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("labels", [_generated(), _random()], ids=["generated", "random"])
def test_range_symmetry_and_self_distance(labels):
    full = LayoutMIoU().block(labels, labels)
    assert ((full >= 0) & (full <= 1)).all()
    np.testing.assert_array_equal(full, full.T)
    np.testing.assert_array_equal(np.diag(full), 0.0)
    off = full[~np.eye(len(labels), dtype=bool)]
    assert (off > 0).mean() > 0.9  # distinct maps are mostly at a positive distance


def test_symmetric_and_general_paths_agree():
    # block(x, x) computes the upper triangle and mirrors it; a permuted block computes every entry.
    labels = _generated()
    d = LayoutMIoU()
    full = d.block(labels, labels)
    perm = np.random.default_rng(1).permutation(len(labels))
    np.testing.assert_allclose(d.block(labels, labels.subset(perm)), full[:, perm], rtol=0, atol=1e-12)


def test_pairs_equal_block_entries():
    labels = _random()
    rng = np.random.default_rng(3)
    i, j = rng.integers(0, len(labels), 300), rng.integers(0, len(labels), 300)
    full = LayoutMIoU().block(labels, labels)
    np.testing.assert_allclose(LayoutMIoU().pairs(labels, i, j), full[i, j], rtol=0, atol=1e-12)


def test_hand_computed_half_splits():
    # a: floor (1) on the left half, middle wall (2) on the right half of a 4 x 4 map.
    # b: floor on the top half, middle wall on the bottom half.
    # Floor: a ∩ b is the top-left quadrant, 4 pixels; a ∪ b is 8 + 8 - 4 = 12 pixels; IoU = 1/3.
    # Wall: the bottom-right quadrant, also 4 / 12 = 1/3. mIoU = 1/3, distance = 2/3.
    a = np.array([[1, 1, 2, 2]] * 4)
    b = np.array([[1] * 4] * 2 + [[2] * 4] * 2)
    # c: like b but the bottom half is right wall (3): floor IoU 1/3, wall 2 (only in a) IoU 0,
    # wall 3 (only in c) IoU 0: mIoU = 1/9, distance 8/9.
    c = np.where(b == 2, 3, b)
    labels = LayoutMaps(np.array(["a", "b", "c"]), np.stack([a, b, c]))
    d = LayoutMIoU().block(labels, labels)
    assert d[0, 1] == pytest.approx(2 / 3)
    assert d[0, 2] == pytest.approx(8 / 9)
    # b vs c: floor identical (IoU 1), walls 2 and 3 disjoint (IoU 0 each): mIoU 1/3.
    assert d[1, 2] == pytest.approx(2 / 3)
    assert LayoutMIoU().reference(labels, 0, labels, 2) == pytest.approx(8 / 9)


def test_unlabelled_pixels_are_in_no_surface():
    # a labels only its left column (floor); b is all floor. Floor: 4 / 16 = 1/4, the only surface present.
    a = np.zeros((4, 4), dtype=np.uint8)
    a[:, 0] = 1
    b = np.ones((4, 4), dtype=np.uint8)
    assert miou_distances(a[None], b[None])[0, 0] == pytest.approx(3 / 4)
    assert miou_distance_pair(a, b) == pytest.approx(3 / 4)


def test_maps_without_labelled_pixels():
    empty, full = np.zeros((1, 3, 3), np.uint8), np.ones((1, 3, 3), np.uint8)
    assert miou_distances(empty, empty)[0, 0] == 0.0  # nothing to compare: identical
    assert miou_distances(empty, full)[0, 0] == 1.0  # the floor of one map has no overlap in the other
    assert miou_distance_pair(empty[0], empty[0]) == 0.0
    assert miou_distance_pair(empty[0], full[0]) == 1.0


def test_bad_inputs_fail_loudly():
    small, large = LayoutMaps(np.array(["a"]), np.ones((1, 4, 4))), LayoutMaps(np.array(["b"]), np.ones((1, 4, 5)))
    with pytest.raises(ValueError, match="one size"):
        LayoutMIoU().block(small, large)
    six = LayoutMaps(np.array(["a"]), np.full((1, 2, 2), 6), n_classes=6)
    with pytest.raises(ValueError, match="label value 6 .* exceeds n_classes=5"):
        LayoutMIoU().block(six, six)
    assert LayoutMIoU(n_classes=6).block(six, six)[0, 0] == 0.0
    with pytest.raises(ValueError, match="n_classes"):
        LayoutMIoU(n_classes=0)


def test_registered_under_its_kind():
    assert distance_class("layout_miou") is LayoutMIoU
    assert LayoutMIoU.kind == "layout_miou" and LayoutMIoU.labels_class is LayoutMaps
    assert LayoutMIoU(n_classes=4).params() == {"n_classes": 4}


def test_docstring_example():
    import doctest

    import labeldist.distances.layout as module

    result = doctest.testmod(module)
    assert result.attempted >= 3 and result.failed == 0
