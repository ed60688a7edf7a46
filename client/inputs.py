"""Per-item model inputs: what they are (:class:`Inputs`) and the error of inputs that cannot be made
(:class:`InputError`).

A module of its own below :mod:`labeldist.client.data` (whose streams make each item's inputs, a feature array
being :class:`~labeldist.client.data.FeatureInputs`) and :mod:`labeldist.client.loader` (whose worker processes
hand an InputError back to the training process), so that those two import it and not each other.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from labeldist.errors import LabeldistError


class InputError(LabeldistError, ValueError):
    """Inputs that do not fit the store or cannot be read; the message is one line naming the file."""


class Inputs(Protocol):
    """Per-item model inputs, indexed like the store (row ``i`` is store item ``i``)."""

    n_items: int

    def __call__(self, indices: np.ndarray) -> torch.Tensor:
        """Inputs of ``indices`` (any shape), as a float tensor of shape ``indices.shape + item shape``."""
        ...
