"""The test suite every label distance passes, for your own distances too (like zarr's ``StoreTests``).

:class:`DistanceSuite` runs on every built-in distance and on the example plugin ``examples/labeldist-angles``.
Subclass it in a ``Test...`` class and provide two pytest fixtures: ``distance`` (the
:class:`~labeldist.distances.base.LabelDistance` under test) and ``labels`` (a
:class:`~labeldist.labels.base.LabelSet` of at least 15 labels, with the awkward cases of your kind). Its checks: a
block's shape and dtype, symmetry (to the last bit where the distance shares exact pairs), zero self-distance, no
negative or NaN value, a block equal to ``distance.reference`` pair by pair, uneven blocks tiling the whole matrix,
``params()`` rebuilding the distance, labels round-tripping through their arrays, unknown parameters refused;
``rtol`` and ``atol`` (1e-9) are the tolerances. docs/internals.md, "The distance test suite", says what each
checks and how to adapt it; the example is docs/guide.md, "Testing your distance with labeldist.testing". Needs
pytest (the ``[dev]`` extra, or pytest itself); ``import labeldist`` never imports this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

try:
    import pytest
except ImportError:  # pytest is the [dev] extra's, not a dependency of labeldist
    raise ImportError(
        "labeldist.testing needs pytest, which is not installed: pip install 'labeldist[dev]' (or pytest)"
    ) from None

if TYPE_CHECKING:
    from labeldist.distances.base import LabelDistance
    from labeldist.labels.base import LabelSet

__all__ = ["DistanceSuite"]


class DistanceSuite:
    """The checks every label distance passes (module docstring): subclass it and provide the ``distance`` and
    ``labels`` fixtures."""

    #: relative and absolute tolerance of every comparison of distances
    rtol = 1e-9
    atol = 1e-9

    def test_block_shape_and_dtype(self, distance: LabelDistance, labels: LabelSet) -> None:
        d = distance.block(labels.subset(slice(0, 7)), labels.subset(slice(3, 15)))
        assert d.shape == (7, 12)
        assert d.dtype == np.float64

    def test_symmetric(self, distance: LabelDistance, labels: LabelSet) -> None:
        d = distance.block(labels, labels)
        if distance.shares_exact_pairs:  # its kNN search takes a pair's value from the reverse pair
            np.testing.assert_array_equal(d, d.T)
        np.testing.assert_allclose(d, d.T, rtol=self.rtol, atol=self.atol)

    def test_zero_self_distance(self, distance: LabelDistance, labels: LabelSet) -> None:
        d = distance.block(labels, labels)
        np.testing.assert_allclose(np.diag(d), 0.0, atol=self.atol)

    def test_non_negative(self, distance: LabelDistance, labels: LabelSet) -> None:
        d = distance.block(labels, labels)
        assert (d[np.isfinite(d)] >= -self.atol).all()
        assert not np.isnan(d).any()

    def test_block_equals_reference(self, distance: LabelDistance, labels: LabelSet) -> None:
        rng = np.random.default_rng(0)
        n = len(labels)
        rows = rng.choice(n, size=min(n, 12), replace=False)
        cols = rng.choice(n, size=min(n, 15), replace=False)
        d = distance.block(labels.subset(rows), labels.subset(cols))
        ref = np.array([[distance.reference(labels, i, labels, j) for j in cols] for i in rows])
        np.testing.assert_allclose(d, ref, rtol=max(self.rtol, 1e-12), atol=self.atol)

    def test_blocks_tile_the_full_matrix(self, distance: LabelDistance, labels: LabelSet) -> None:
        """Uneven row/column blocks glue back into the full matrix (what the engine relies on)."""
        n = len(labels)
        full = distance.block(labels, labels)
        cuts = [0, 3, 10, n]
        for a, b in zip(cuts, cuts[1:]):
            for c, e in zip(cuts, cuts[1:]):
                part = distance.block(labels.subset(slice(a, b)), labels.subset(slice(c, e)))
                np.testing.assert_allclose(part, full[a:b, c:e], rtol=self.rtol, atol=self.atol)

    def test_params_rebuild_the_distance(self, distance: LabelDistance, labels: LabelSet) -> None:
        again = type(distance)(**distance.params())
        sub = labels.subset(slice(0, 5))
        np.testing.assert_array_equal(again.block(sub, sub), distance.block(sub, sub))

    def test_labels_round_trip_through_arrays(self, distance: LabelDistance, labels: LabelSet) -> None:
        again = type(labels).from_arrays(labels.ids, labels.to_arrays())
        assert again.sha256() == labels.sha256()
        np.testing.assert_array_equal(distance.block(again, again), distance.block(labels, labels))

    def test_unknown_params_are_refused(self, distance: LabelDistance) -> None:
        with pytest.raises(TypeError):
            type(distance)(**distance.params(), not_a_parameter=1)
