"""Angles in degrees as labels, compared on the circle: a minimal labeldist plugin kind.

.. math:: d(a, b) = \\min(|a - b| \\bmod 360,\\; 360 - |a - b| \\bmod 360)
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.distances.base import LabelDistance
from labeldist.kinds import Kind
from labeldist.labels.base import LabelError, LabelSet


class Angles(LabelSet):
    """N angles in degrees, ids ``0 .. N-1`` (the line numbers of the file, blank lines aside)."""

    label_type = "angles"

    def __init__(self, ids: np.ndarray, degrees: np.ndarray) -> None:
        super().__init__(ids)
        self.degrees = np.asarray(degrees, dtype=np.float64).reshape(-1)
        if len(self.degrees) != len(self.ids) or not np.isfinite(self.degrees).all():
            raise LabelError(f"need {len(self.ids)} finite angles, got {self.degrees[:5]}...")

    def subset(self, index):
        return Angles(self.ids[index], self.degrees[index])

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"degrees": self.degrees}

    @classmethod
    def from_arrays(cls, ids: np.ndarray, arrays: dict[str, np.ndarray]) -> Angles:
        return cls(ids, arrays["degrees"])

    @classmethod
    def from_json(cls, value: object, *, like: LabelSet) -> Angles:
        """An angle in degrees (a JSON number): what ``POST /v1/stores/{store}/search`` takes."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise LabelError(f"an angle is a finite number of degrees, got {value!r}")
        return cls(np.array(["query"]), np.array([float(value)]))


class CircularDistance(LabelDistance):
    """The shorter way round the circle between two angles, in degrees."""

    kind = "angles"
    labels_class = Angles
    symmetric = True

    def params(self) -> dict[str, Any]:
        return {}

    def block(self, rows: Angles, cols: Angles) -> np.ndarray:
        gap = np.abs(rows.degrees[:, None] - cols.degrees[None, :]) % 360.0
        return np.minimum(gap, 360.0 - gap)

    def reference(self, a: Angles, i: int, b: Angles, j: int) -> float:
        gap = math.fmod(abs(float(a.degrees[i]) - float(b.degrees[j])), 360.0)
        return min(gap, 360.0 - gap)


def read_angles(path: str | Path) -> Angles:
    """One angle in degrees per line; blank lines are skipped; anything else is refused naming its line."""
    values = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                values.append(float(line))
            except ValueError:
                raise LabelError(f"{path}, line {n}: {line.strip()!r} is not an angle in degrees") from None
    return Angles(np.arange(len(values)).astype(str), np.array(values))


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="a text file, one angle in degrees per line")


def _load(args: argparse.Namespace) -> tuple[Angles, CircularDistance, str]:
    return read_angles(args.input), CircularDistance(), args.dataset or Path(args.input).stem


KIND = Kind(
    name="angles",
    distance="labeldist_angles:CircularDistance",
    command="angles",
    help="angles in degrees, compared on the circle",
    add_arguments=_arguments,
    load=_load,
)
