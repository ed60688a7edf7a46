"""Minibatches in the form pytorch-metric-learning (PML) losses and miners take: class labels, or triplets.

A labeldist minibatch has no classes: an anchor, its items and their label distances (Kim et al., CVPR 2019, §3.2).
:func:`pml_labels` gives class labels by the binary rule of Kim et al.'s baselines (:func:`binary_split`: the anchor
and its ``positives`` label-nearest items share the anchor's store index as class, every other item is a class of
its own); :func:`pml_triplets` gives triplets ``(a, p, n)`` with ``p`` nearer ``a`` than ``n`` in label space (all
of them, or with ``positives`` the binary miner's). Rows are those of the step flattened: row ``b * n + j`` of
``model(step.inputs.flatten(0, 1))`` is item ``j`` of minibatch ``b`` (item ``j`` with the default
``batches_per_step=1``). Triplets never mix minibatches; labels do (an item in two minibatches of one step is one
class), so keep ``batches_per_step=1`` or call the loss once per minibatch when that matters. An example:
docs/training.md, "Train with your own code".
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from labeldist.client.minibatch import Minibatch
from labeldist.errors import UsageError


def binary_split(distances: torch.Tensor, positives: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The binary rule of every binary baseline: the positives and negatives of one minibatch's anchor.

    The ``positives`` items nearest the anchor in label space are its positives (ties broken by position), the
    other items its negatives. The trainer's binary baselines (``labeldist.trainer.losses``) split by this
    function.

    Parameters
    ----------
    distances : torch.Tensor
        ``(m,)``: the label distances from the anchor (row 0 of the minibatch) to its items (rows ``1..m``).
    positives : int
        How many of the label-nearest items are positives.

    Returns
    -------
    positive_rows : torch.Tensor
        The rows (``1..m``) of the positives, nearest first.
    negative_rows : torch.Tensor
        The rows of the negatives, nearest first.

    Examples
    --------
    >>> [rows.tolist() for rows in binary_split(torch.tensor([0.5, 0.1, 0.9]), 1)]
    [[2], [1, 3]]
    """
    order = torch.argsort(distances, stable=True) + 1
    return order[:positives], order[positives:]


def check_positives(positives: int, m: int) -> None:
    """ValueError unless ``positives`` leaves at least one negative among a minibatch's ``m`` items."""
    if not 0 < positives < m:
        raise UsageError(f"positives={positives} must lie in 1..{m - 1} (batch items - 1)")


def _parts(minibatch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """indices (B, n), distances (B, n - 1), pairwise (B, n, n) or None, of a :class:`Minibatch` (or of one
    minibatch with 1-d indices and distances); a UsageError in one line for anything else."""
    if not isinstance(minibatch, Minibatch):
        raise UsageError(
            f"expected a labeldist Minibatch (what Store.batches(), LocalSource.batches(), LabelDistClient.batches() "
            f"answer, or a MinibatchStream step), got {type(minibatch).__name__}"
        )
    indices, distances = torch.as_tensor(minibatch.indices), torch.as_tensor(minibatch.distances)
    pairwise = getattr(minibatch, "pairwise", None)
    pairwise = None if pairwise is None else torch.as_tensor(pairwise)
    if distances.dim() == 1:
        indices, distances = indices[None], distances[None]
        pairwise = None if pairwise is None else pairwise[None]
    if indices.dim() != 2 or distances.shape != (indices.shape[0], indices.shape[1] - 1):
        raise UsageError(
            f"a minibatch has indices (B, n) and distances (B, n - 1), got {tuple(indices.shape)} "
            f"and {tuple(distances.shape)}"
        )
    return indices, distances, pairwise


def pml_labels(minibatch: Any, positives: int) -> torch.Tensor:
    """Class labels of a step's rows, for PML losses and miners that take ``labels``.

    In each minibatch the anchor and its ``positives`` label-nearest items (:func:`binary_split`) are the class of
    the anchor's store index, every other item the class of its own store index (the rule of the trainer's
    ``neighbourhood_classes``). Rows are those of the step flattened (see the module's docstring).

    Parameters
    ----------
    minibatch : Minibatch
        A step of a ``MinibatchStream``, or the answer of ``batches()``: indices ``(B, n)`` and distances
        ``(B, n - 1)``, or one minibatch with 1-d indices and distances.
    positives : int
        How many label-nearest items share the anchor's class, in ``1..n - 2``.

    Returns
    -------
    torch.Tensor
        ``(B * n,)`` int64 class labels.

    Raises
    ------
    UsageError
        When ``minibatch`` is not a labeldist ``Minibatch``.
    ValueError
        When ``positives`` leaves no negative, or the shapes do not match.

    Examples
    --------
    >>> pml_labels(Minibatch(torch.tensor([7, 3, 9, 4]), torch.tensor([0.5, 0.1, 0.9])), 2).tolist()
    [7, 7, 7, 4]
    """
    indices, distances, _ = _parts(minibatch)
    check_positives(positives, distances.shape[1])
    anchor_class = indices[:, :1].to(torch.long).expand(-1, positives)
    labels = indices.to(torch.long).clone()
    nearest = torch.argsort(distances, dim=1, stable=True)[:, :positives] + 1
    labels.scatter_(1, nearest.to(labels.device), anchor_class)
    return labels.reshape(-1)


def pml_triplets(
    minibatch: Any, positives: int | None = None, *, anchors: Literal["first", "all"] = "first"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PML's ``indices_tuple`` ``(a, p, n)`` of triplets ordered by label distance: ``d(a, p) < d(a, n)``.

    ``positives=None`` (dense triplets): every pair of items ``p, n`` of the anchor's minibatch whose label
    distances from it differ, the nearer one as ``p`` (items at equal label distance make no triplet).
    ``positives=k`` (the binary miner of Kim et al.'s baselines, the trainer's ``binary_triplets``): ``p`` among the
    anchor's ``k`` label-nearest items and ``n`` among the rest (:func:`binary_split`, ties broken by position).

    ``anchors="first"``: the minibatch's anchor only (its distances are ``minibatch.distances``). ``anchors="all"``:
    every item of the minibatch in turn, against the others, by the minibatch's pairwise label distances (a stream
    made with ``pairwise=True``).

    Triplets come minibatch by minibatch, anchor by anchor, then positive by positive nearest first, and for each
    its negatives nearest first.

    Parameters
    ----------
    minibatch : Minibatch
        A step of a ``MinibatchStream``, or the answer of ``batches()`` (see :func:`pml_labels`).
    positives : int or None
        None: dense triplets; ``k``: the binary miner's, ``p`` among the ``k`` label-nearest items.
    anchors : {"first", "all"}
        The minibatch's anchor only, or every item in turn (needs the pairwise label distances).

    Returns
    -------
    a, p, n : torch.Tensor
        Three int64 tensors of the same length: the rows of the step (see the module's docstring) of each
        triplet's anchor, positive and negative.

    Raises
    ------
    UsageError
        When ``minibatch`` is not a labeldist ``Minibatch``.
    ValueError
        When ``positives`` leaves no negative, ``anchors`` is unknown, or ``anchors="all"`` has no pairwise
        distances.

    Examples
    --------
    >>> a, p, n = pml_triplets(Minibatch(torch.arange(4), torch.tensor([0.5, 0.1, 0.9])))
    >>> list(zip(a.tolist(), p.tolist(), n.tolist()))
    [(0, 2, 1), (0, 2, 3), (0, 1, 3)]
    """
    indices, distances, pairwise = _parts(minibatch)
    b, n = indices.shape
    device = distances.device
    if anchors == "first":
        anchor_rows = torch.zeros(1, dtype=torch.long, device=device)
        candidates = torch.arange(1, n, device=device)[None]  # (A, m)
        d = distances[:, None, :]  # (B, A, m)
    elif anchors == "all":
        if pairwise is None:
            raise UsageError(
                'anchors="all" needs the minibatch\'s pairwise label distances (a stream with pairwise=True)'
            )
        anchor_rows = torch.arange(n, device=device)
        others = torch.arange(n, device=device).expand(n, n)
        candidates = others[~torch.eye(n, dtype=torch.bool, device=device)].reshape(n, n - 1)
        d = pairwise.to(device)[:, anchor_rows[:, None], candidates]
    else:
        raise UsageError(f'anchors must be "first" or "all", got {anchors!r}')
    m = candidates.shape[1]
    if positives is not None:
        check_positives(positives, m)
    order = torch.argsort(d, dim=-1, stable=True)
    if positives is None:
        ds = torch.gather(d, -1, order)
        mask = ds[..., :, None] < ds[..., None, :]  # sorted: only i < j can hold
    else:
        mask = torch.zeros((b, len(anchor_rows), m, m), dtype=torch.bool, device=device)
        mask[..., :positives, positives:] = True
    tb, ta, ti, tj = mask.nonzero(as_tuple=True)
    offset = tb * n
    p = candidates[ta, order[tb, ta, ti]]
    neg = candidates[ta, order[tb, ta, tj]]
    return offset + anchor_rows[ta], offset + p, offset + neg
