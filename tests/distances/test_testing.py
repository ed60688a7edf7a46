"""labeldist.testing, the public suite of every distance: each check fails on a distance that breaks what it checks,
and the module needs pytest, which ``import labeldist`` never does (pytest is the [dev] extra's)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from labeldist.distances.vectors import VectorDistance
from labeldist.labels.vectors import Vectors
from labeldist.testing import DistanceSuite


class _Shifted(VectorDistance):
    """Every distance one more: a label is not at distance 0 from itself."""

    def block(self, rows, cols):
        return super().block(rows, cols) + 1.0


class _OneWay(VectorDistance):
    """Farther from a lower id to a higher one than back."""

    def block(self, rows, cols):
        return super().block(rows, cols) * np.where(rows.ids[:, None] < cols.ids[None, :], 2.0, 1.0)


class _Float32(VectorDistance):
    def block(self, rows, cols):
        return super().block(rows, cols).astype(np.float32)


class _Loose(VectorDistance):
    """Takes any parameter, and forgets the metric it was given in its params."""

    def __init__(self, metric: str = "euclidean", **ignored: object) -> None:
        super().__init__(metric)

    def params(self):
        return {}


class _OffTheReference(VectorDistance):
    def reference(self, a, i, b, j):
        return super().reference(a, i, b, j) * (1 + 1e-6)


@pytest.fixture
def labels() -> Vectors:
    values = np.random.default_rng(0).normal(size=(20, 4))
    return Vectors(np.array([f"v{i:02d}" for i in range(20)]), values)


def test_a_correct_distance_passes_every_check(labels: Vectors) -> None:
    suite, distance = DistanceSuite(), VectorDistance("cityblock")
    checks = [name for name in dir(DistanceSuite) if name.startswith("test_")]
    assert len(checks) == 9
    for name in checks:
        if name == "test_unknown_params_are_refused":
            suite.test_unknown_params_are_refused(distance)
        else:
            getattr(suite, name)(distance, labels)


@pytest.mark.parametrize(
    ("distance", "check"),
    [
        (_Shifted(), "test_zero_self_distance"),
        (_OneWay(), "test_symmetric"),
        (_Float32(), "test_block_shape_and_dtype"),
        (_OffTheReference(), "test_block_equals_reference"),
        (_Loose("cityblock"), "test_params_rebuild_the_distance"),
    ],
    ids=["not-zero-on-itself", "not-symmetric", "float32", "off-the-reference", "params-lose-the-metric"],
)
def test_each_check_fails_on_a_distance_that_breaks_it(distance: VectorDistance, check: str, labels: Vectors) -> None:
    with pytest.raises(AssertionError):
        getattr(DistanceSuite(), check)(distance, labels)


def test_unknown_parameters_must_be_refused() -> None:
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        DistanceSuite().test_unknown_params_are_refused(_Loose())


def test_without_pytest_the_import_fails_in_one_line_and_labeldist_does_not_need_it() -> None:
    code = (
        "import sys; sys.modules['pytest'] = None\n"  # as where pytest is not installed
        "import labeldist, labeldist.kinds, labeldist.distances.vectors, labeldist.labels.vectors\n"
        "print('imported')\n"
        "import labeldist.testing\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == "imported\n", done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "ImportError: labeldist.testing needs pytest, which is not installed: pip install 'labeldist[dev]' (or pytest)"
    )
