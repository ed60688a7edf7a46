"""Label readers and label types: one module per label kind."""

from labeldist.labels.base import LabelError, LabelSet

__all__ = ["LabelError", "LabelSet"]
