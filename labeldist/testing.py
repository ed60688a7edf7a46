"""The test suite every label distance passes, for your own distances too (like zarr's ``StoreTests``).

:class:`DistanceSuite` is the suite labeldist runs on each of its built-in distances (pose, vectors, layout, caption
WMD, sentence relevance) and on the example plugin ``examples/labeldist-angles``. A plugin author subclasses it in a
pytest test module, gives it a distance and some labels, and pytest runs every check on them.

What it checks, on the ``labels`` it is given (blocks are ``distance.block(rows, cols)``):

- ``test_block_shape_and_dtype``: a block of 7 rows and 12 columns is a float64 array of shape (7, 12);
- ``test_symmetric``: the block of the labels against themselves equals its transpose;
- ``test_zero_self_distance``: its diagonal is 0 (every label is at distance 0 from itself);
- ``test_non_negative``: no distance is negative or NaN (``inf`` is allowed: "infinitely far");
- ``test_block_equals_reference``: a block of 12 rows and 15 columns drawn at random equals ``distance.reference``
  (the slow, plain formula, the oracle of ``labeldist verify``) pair by pair;
- ``test_blocks_tile_the_full_matrix``: blocks of uneven rows and columns glue back into the whole matrix, as the
  engine computes a store block by block;
- ``test_params_rebuild_the_distance``: ``type(distance)(**distance.params())`` gives the same numbers (a store
  records ``params()`` and rebuilds its distance from them);
- ``test_labels_round_trip_through_arrays``: ``from_arrays(ids, to_arrays())`` rebuilds labels with the same
  ``sha256()`` and the same distances (a store writes the arrays and reads them back);
- ``test_unknown_params_are_refused``: the constructor raises TypeError on a parameter it does not know.

How to use it: subclass :class:`DistanceSuite` in a class named ``Test...`` and provide two pytest fixtures (in the
class, or in the module or a ``conftest.py``):

- ``distance``: the :class:`~labeldist.distances.base.LabelDistance` under test;
- ``labels``: a :class:`~labeldist.labels.base.LabelSet` of at least 15 labels, of the type the distance compares.
  Include the awkward cases of your kind (a duplicate label, a missing value, the edges of its range).

Class attributes ``rtol`` and ``atol`` (both 1e-9) are the tolerances of every comparison of distances; raise them
in a subclass for a kernel that is not that close to its reference (a float32 model, a product-form formula). The
suite assumes a symmetric distance with ``d(a, a) = 0``: for one that is not, override the check that does not apply
in the subclass (``def test_symmetric(self): pytest.skip("not symmetric")``). Parametrize the ``distance`` fixture
(``@pytest.fixture(params=...)``) to run the suite under every setting of a distance.

Example, from ``tests/test_angles.py`` of the plugin ``examples/labeldist-angles``::

    import numpy as np
    import pytest
    from labeldist_angles import Angles, CircularDistance

    from labeldist.testing import DistanceSuite


    class TestCircularDistance(DistanceSuite):
        @pytest.fixture
        def distance(self):
            return CircularDistance()

        @pytest.fixture
        def labels(self):
            degrees = np.array([0, 10, 350, 180, 185, 359.5, 720, -90, 90, 45, 10, 0.25, 300, 1e4, 271, 5])
            return Angles(np.arange(len(degrees)).astype(str), degrees)

Run it with ``pytest``. This module needs pytest, which ``pip install labeldist`` does not install: it is in the
``[dev]`` extra (``pip install 'labeldist[dev]'``), or install pytest itself. ``import labeldist`` never imports
this module.
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
