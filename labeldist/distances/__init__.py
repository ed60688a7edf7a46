"""Label distances: one module per distance, each a small kernel on blocks of labels."""

from labeldist.distances.base import LabelDistance

__all__ = ["LabelDistance"]
