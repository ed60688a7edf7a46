"""The one minibatch type: made from the service's parts, read as anchors and items, moved to torch tensors whether
it holds NumPy arrays (``batches()``) or tensors and inputs of its own kind (a stream's step)."""

from __future__ import annotations

import numpy as np
import torch

from labeldist.client import Minibatch


def test_from_parts_puts_each_anchor_before_its_items() -> None:
    mb = Minibatch.from_parts(np.array([4, 9]), np.array([[1, 2], [3, 5]]), np.ones((2, 2)), seed=7)
    assert mb.indices.tolist() == [[4, 1, 2], [9, 3, 5]] and mb.indices.dtype == np.int64
    assert mb.anchors.tolist() == [4, 9] and mb.items.tolist() == [[1, 2], [3, 5]] and len(mb) == 2
    assert mb.distances.dtype == np.float32 and mb.pairwise is None and mb.seed == 7 and mb.inputs is None


def test_to_makes_numpy_arrays_tensors_and_keeps_the_rest() -> None:
    mb = Minibatch.from_parts(np.array([0]), np.array([[1, 2]]), np.array([[0.5, 0.25]]), np.zeros((1, 3, 3)))
    moved = mb.to("cpu")
    assert all(isinstance(t, torch.Tensor) for t in (moved.indices, moved.distances, moved.pairwise))
    assert moved.indices.tolist() == [[0, 1, 2]] and moved.distances.tolist() == [[0.5, 0.25]]

    class Packed:  # inputs that behave as a tensor without being one (the trainer's packed image files)
        def to(self, device, non_blocking=False):
            return ("moved", str(device))

    step = Minibatch(torch.arange(3)[None], torch.ones(1, 2), inputs=Packed())
    assert step.to("cpu").inputs == ("moved", "cpu")
