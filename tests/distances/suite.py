"""One test suite every label distance inherits (like zarr's StoreTests): subclass and provide fixtures.

A subclass defines ``distance`` (a LabelDistance) and ``labels`` (a LabelSet of at least ~20 items) fixtures.
"""

from __future__ import annotations

import numpy as np
import pytest


class DistanceSuite:
    rtol = 1e-9
    atol = 1e-9

    def test_block_shape_and_dtype(self, distance, labels):
        d = distance.block(labels.subset(slice(0, 7)), labels.subset(slice(3, 15)))
        assert d.shape == (7, 12)
        assert d.dtype == np.float64

    def test_symmetric(self, distance, labels):
        d = distance.block(labels, labels)
        np.testing.assert_allclose(d, d.T, rtol=self.rtol, atol=self.atol)

    def test_zero_self_distance(self, distance, labels):
        d = distance.block(labels, labels)
        np.testing.assert_allclose(np.diag(d), 0.0, atol=self.atol)

    def test_non_negative(self, distance, labels):
        d = distance.block(labels, labels)
        assert (d[np.isfinite(d)] >= -self.atol).all()
        assert not np.isnan(d).any()

    def test_block_equals_reference(self, distance, labels):
        rng = np.random.default_rng(0)
        n = len(labels)
        rows = rng.choice(n, size=min(n, 12), replace=False)
        cols = rng.choice(n, size=min(n, 15), replace=False)
        d = distance.block(labels.subset(rows), labels.subset(cols))
        ref = np.array([[distance.reference(labels, i, labels, j) for j in cols] for i in rows])
        np.testing.assert_allclose(d, ref, rtol=max(self.rtol, 1e-12), atol=self.atol)

    def test_blocks_tile_the_full_matrix(self, distance, labels):
        """Uneven row/column blocks glue back into the full matrix (what the engine relies on)."""
        n = len(labels)
        full = distance.block(labels, labels)
        cuts = [0, 3, 10, n]
        for a, b in zip(cuts, cuts[1:]):
            for c, e in zip(cuts, cuts[1:]):
                part = distance.block(labels.subset(slice(a, b)), labels.subset(slice(c, e)))
                np.testing.assert_allclose(part, full[a:b, c:e], rtol=self.rtol, atol=self.atol)

    def test_params_rebuild_the_distance(self, distance, labels):
        again = type(distance)(**distance.params())
        sub = labels.subset(slice(0, 5))
        np.testing.assert_array_equal(again.block(sub, sub), distance.block(sub, sub))

    def test_labels_round_trip_through_arrays(self, distance, labels):
        again = type(labels).from_arrays(labels.ids, labels.to_arrays())
        assert again.sha256() == labels.sha256()
        np.testing.assert_array_equal(distance.block(again, again), distance.block(labels, labels))

    def test_unknown_params_are_refused(self, distance):
        with pytest.raises(TypeError):
            type(distance)(**distance.params(), not_a_parameter=1)
