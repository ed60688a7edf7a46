"""The one minibatch type of labeldist: what ``batches()`` answers (a :class:`~labeldist.client.store.Store`,
:class:`~labeldist.client.local.LocalSource` or :class:`~labeldist.client.http.LabelDistClient`), what a
:class:`~labeldist.client.data.MinibatchStream` yields, and what the pytorch-metric-learning helpers
(:func:`~labeldist.client.pml.pml_labels`, :func:`~labeldist.client.pml.pml_triplets`) take.

This module imports neither torch nor httpx: ``batches()`` answers NumPy arrays, a stream's steps hold torch tensors
(and the items' inputs), and :meth:`Minibatch.to` turns either into tensors on a device.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np


@dataclass
class Minibatch:
    """Minibatches for dense triplet mining: in each, an anchor, then its items, with their label distances.

    A minibatch is an anchor, its ``neighbors`` nearest items in label space and random others (Kim et al.,
    CVPR 2019, "Deep Metric Learning Beyond Binary Supervision", §3.2); ``B`` minibatches of ``n`` members each
    travel together.

    Parameters
    ----------
    indices : array of shape (B, n), int64
        Store indices of each minibatch's members, the anchor first, then its items nearest first.
    distances : array of shape (B, n - 1), float32
        Label distance from each minibatch's anchor to each of its items (``indices[:, 1:]``).
    pairwise : array of shape (B, n, n), float32, optional
        Label distances among each minibatch's members, anchor first (asked with ``pairwise=True``), else None.
    inputs : tensor of shape (B, n, ...), optional
        Each member's input (features, an image): set by a :class:`~labeldist.client.data.MinibatchStream`, None in
        what ``batches()`` answers.
    seed : int, optional
        The seed the minibatches were drawn with (a request without one draws one and says which here).

    Examples
    --------
    >>> mb = Minibatch(np.array([[7, 3, 9, 4]]), np.array([[0.5, 0.1, 0.9]], dtype=np.float32))
    >>> len(mb), mb.anchors.tolist(), mb.items.tolist()
    (1, [7], [[3, 9, 4]])
    """

    indices: Any
    distances: Any
    pairwise: Any = None
    inputs: Any = None
    seed: int | None = None

    @classmethod
    def from_parts(
        cls,
        anchors: np.ndarray,
        items: np.ndarray,
        distances: np.ndarray,
        pairwise: np.ndarray | None = None,
        seed: int | None = None,
    ) -> Minibatch:
        """Minibatches from their anchors ``(B,)`` and items ``(B, n - 1)``, as the service and the store's
        assembly hand them out.

        Parameters
        ----------
        anchors : ndarray of shape (B,)
            Each minibatch's anchor.
        items : ndarray of shape (B, n - 1)
            Each minibatch's items, nearest first.
        distances : ndarray of shape (B, n - 1)
            Label distances from the anchor to each item.
        pairwise : ndarray of shape (B, n, n), optional
            Label distances among the members.
        seed : int, optional
            The seed they were drawn with.

        Returns
        -------
        Minibatch
            ``indices`` int64, ``distances`` and ``pairwise`` float32.
        """
        anchors = np.asarray(anchors, dtype=np.int64).reshape(-1)
        items = np.asarray(items, dtype=np.int64).reshape(len(anchors), -1)
        return cls(
            indices=np.concatenate([anchors[:, None], items], axis=1),
            distances=np.asarray(distances, dtype=np.float32).reshape(items.shape),
            pairwise=None if pairwise is None else np.asarray(pairwise, dtype=np.float32),
            seed=None if seed is None else int(seed),
        )

    @property
    def anchors(self) -> Any:
        """Each minibatch's anchor, shape (B,): ``indices[:, 0]``."""
        return self.indices[:, 0]

    @property
    def items(self) -> Any:
        """Each minibatch's items, shape (B, n - 1), nearest first: ``indices[:, 1:]``."""
        return self.indices[:, 1:]

    @property
    def members(self) -> Any:
        """Each minibatch's anchor then its items, shape (B, n): the same array as :attr:`indices`."""
        return self.indices

    def __len__(self) -> int:
        """The number of minibatches, B."""
        return int(self.indices.shape[0])

    def pin_memory(self) -> Minibatch:
        """The same minibatches as torch tensors in page-locked memory (what a DataLoader with ``pin_memory=True``
        calls).

        Returns
        -------
        Minibatch
        """
        return self._map(lambda t: t.pin_memory())

    def to(self, device: Any) -> Minibatch:
        """The same minibatches as torch tensors on ``device`` (pinned memory and non-blocking copies to a GPU, so
        that the copy overlaps with compute).

        Parameters
        ----------
        device : torch.device or str
            Where to put them, e.g. ``"cuda"`` or ``"cpu"``.

        Returns
        -------
        Minibatch
        """
        import torch

        cuda = torch.device(device).type == "cuda"

        def move(t: torch.Tensor) -> torch.Tensor:
            if not cuda:
                return t.to(device)
            return (t if t.is_pinned() else t.pin_memory()).to(device, non_blocking=True)

        return self._map(move)

    def _map(self, fn: Any) -> Minibatch:
        import torch

        def each(value: Any) -> Any:
            # NumPy arrays (what batches() answers) become tensors; a tensor, or inputs that behave as one (the
            # trainer's packed image files: pin_memory, is_pinned, to), go as they are
            if value is None:
                return None
            return fn(torch.as_tensor(value) if isinstance(value, np.ndarray) else value)

        return replace(
            self,
            indices=each(self.indices),
            distances=each(self.distances),
            pairwise=each(self.pairwise),
            inputs=each(self.inputs),
        )
