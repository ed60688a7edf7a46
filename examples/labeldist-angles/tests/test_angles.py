"""The plugin's tests: labeldist's shared suite of every distance (:mod:`labeldist.testing`) on the circular
distance, and what is particular to angles. ``pip install -e .`` (into labeldist's environment, with pytest: the
``labeldist[dev]`` extra), then ``pytest`` in this folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from labeldist_angles import Angles, CircularDistance, read_angles

from labeldist.labels.base import LabelError
from labeldist.testing import DistanceSuite


class TestCircularDistance(DistanceSuite):
    @pytest.fixture
    def distance(self) -> CircularDistance:
        return CircularDistance()

    @pytest.fixture
    def labels(self) -> Angles:
        # both sides of 0°, the same angle written three ways (0, 720, and 10 twice), negative and large angles
        degrees = np.array([0, 10, 350, 180, 185, 359.5, 720, -90, 90, 45, 10, 0.25, 300, 1e4, 271, 5])
        return Angles(np.arange(len(degrees)).astype(str), degrees)


def test_the_shorter_way_round() -> None:
    a = Angles(np.array(["a", "b", "c", "d"]), np.array([350.0, 10.0, 180.0, -90.0]))
    d = CircularDistance().block(a, a)
    assert d[0, 1] == 20.0  # not 340
    assert d[1, 2] == 170.0 and d[0, 2] == 170.0
    assert d[2, 3] == 90.0 and d[3, 0] == 80.0  # -90° is 270°


def test_a_line_that_is_not_an_angle_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("350\n\n10\nnorth\n")
    with pytest.raises(LabelError, match=r"a\.txt, line 4: 'north' is not an angle in degrees"):
        read_angles(tmp_path / "a.txt")
