"""One minibatch request assembled from an opened store, step by step: the request checked (:func:`batch_request`),
the anchors drawn (:func:`draw_anchors`), each anchor's items drawn by the one rule (:mod:`labeldist.view.drawing`:
its nearest, then random others; Kim et al., CVPR 2019, §3.2), the anchor-to-item distances and, when asked, each
minibatch's matrix (:func:`fill_distances`); :func:`assemble` runs them all.

The service (``POST /v1/stores/{store}/batches``) and :meth:`LocalSource.batches <labeldist.client.LocalSource>` run
these same steps over a :class:`~labeldist.view.storeview.StoreView`, so the same seed gives the same minibatches and
a request either refuses is refused with the same words (:class:`~labeldist.view.drawing.DrawRefused`, naming the
field). What differs is theirs: the service answers a refusal 422 (an unknown anchor 404, through the view's
``check_index``), runs the steps that read from disk in a worker thread and passes ``compute`` (its pair cache, API
key and compute budget); LocalSource raises RequestRejected and computes what is not stored in its own process.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np

import labeldist.view.drawing as rule
from labeldist.errors import UsageError
from labeldist.view.drawing import DrawRefused
from labeldist.view.storeview import ComputePairs, StoreView

#: the largest seed a request takes (JSON-safe); a missing seed is drawn below it
MAX_SEED = 2**53 - 1
#: the largest item index a request takes (the service's schema: a 32-bit signed index)
MAX_INDEX = 2**31 - 1


@dataclass(frozen=True)
class BatchRequest:
    """A checked minibatch request (:func:`batch_request`): ``anchors`` given (int64) or ``count`` to draw, the
    minibatch ``size`` (the anchor and ``size - 1`` items), how many of those are the anchor's nearest
    (``neighbors``), whether each minibatch's matrix is asked (``pairwise``), the ``seed`` (drawn when none was
    given), and the ``pool`` or ``exclude`` its members are drawn from (int64), as given."""

    anchors: np.ndarray | None
    count: int | None
    size: int
    neighbors: int
    pairwise: bool
    seed: int
    pool: np.ndarray | None = None
    exclude: np.ndarray | None = None


def batch_request(
    *,
    anchors: Any = None,
    count: int | None = None,
    size: int = 32,
    neighbors: int = 0,
    pairwise: bool = False,
    seed: int | None = None,
    pool: Any = None,
    exclude: Any = None,
) -> BatchRequest:
    """The request checked for what does not depend on the store: exactly one of ``anchors`` and ``count``
    (:class:`~labeldist.errors.UsageError`: a caller's mistake, which the service's schema cannot let through);
    ``seed`` in ``0..MAX_SEED`` (None: one drawn at random); ``anchors``, ``pool`` and ``exclude`` item indices
    (integers, not a mask: :func:`~labeldist.view.drawing.item_indices`), those of a pool at least 0.
    :class:`~labeldist.view.drawing.DrawRefused` names the field at fault. What depends on the store (the size
    against its items, neighbours against its k, indices past its last item) is checked by :func:`draw_anchors`.

    >>> batch_request(count=2, size=8, neighbors=3, seed=1, exclude=[4, 1]).exclude.tolist()
    [4, 1]
    >>> batch_request(count=2, seed=-1)
    Traceback (most recent call last):
    ...
    labeldist.view.drawing.DrawRefused: seed=-1 must lie in 0..9007199254740991
    """
    if (anchors is None) == (count is None):
        raise UsageError("give exactly one of anchors= and count=")
    if seed is not None and not 0 <= int(seed) <= MAX_SEED:
        raise DrawRefused(f"seed={seed} must lie in 0..{MAX_SEED}", "seed", seed)
    arrays = {
        name: None if given is None else rule.item_indices(given, name)
        for name, given in (("anchors", anchors), ("pool", pool), ("exclude", exclude))
    }
    for name in ("pool", "exclude"):
        given = arrays[name]
        if given is not None and (given < 0).any():
            raise DrawRefused(f"{name} indices must be >= 0, got {int(np.min(given))}", name)
    return BatchRequest(
        anchors=arrays["anchors"],
        count=None if count is None else int(count),
        size=int(size),
        neighbors=int(neighbors),
        pairwise=bool(pairwise),
        seed=secrets.randbits(53) if seed is None else int(seed),
        pool=arrays["pool"],
        exclude=arrays["exclude"],
    )


@dataclass
class BatchSet:
    """Minibatches being assembled: the anchors, then their items, then the distances."""

    anchors: np.ndarray  # (B,) int64
    items: np.ndarray  # (B, size - 1) int64: nearest first, then random others ((B, 0) until drawn)
    distances: np.ndarray | None = None  # (B, size - 1) float32, anchor to item
    pairwise: np.ndarray | None = None  # (B, size, size) float32, anchor first
    computed: int = 0  # distinct pairs computed on demand for these minibatches
    pool: np.ndarray | None = None  # sorted distinct items every member is drawn from; None: the whole store
    drawn_computed: int = 0  # distinct pairs computed to rank a pool's items where an anchor's kNN list ran out

    @property
    def members(self) -> np.ndarray:
        """(B, size): each minibatch's anchor, then its items."""
        return np.concatenate([self.anchors[:, None], self.items], axis=1)


def draw_anchors(view: StoreView, request: BatchRequest) -> tuple[BatchSet, np.random.Generator]:
    """The anchors of the minibatches and the generator that then draws their items (:func:`draw_items`), by the
    rule (:func:`labeldist.view.drawing.draw_anchors`): :class:`~labeldist.view.drawing.DrawRefused` for what does
    not fit the store, the view's ``check_index`` error for an anchor that is no item of it. Reads nothing from
    disk."""
    drawn, allowed, rng = rule.draw_anchors(
        view.n_items,
        view.k,
        anchors=request.anchors,
        count=request.count,
        size=request.size,
        neighbors=request.neighbors,
        seed=request.seed,
        pool=request.pool,
        exclude=request.exclude,
        check_anchors=lambda given: view.check_index(given, "anchor"),
    )
    return BatchSet(drawn, np.empty((len(drawn), 0), dtype=np.int64), pool=allowed), rng


def draw_items(
    view: StoreView,
    batches: BatchSet,
    rng: np.random.Generator,
    request: BatchRequest,
    compute: ComputePairs | None = None,
) -> BatchSet:
    """The items of each anchor's minibatch by the rule (:func:`labeldist.view.drawing.draw_batch_items`), the kNN
    lists read through the view's row cache. With a pool, where an anchor's list runs out the pool's other items
    are ranked by their distances to the anchor, stored or from ``compute`` (:meth:`StoreView.lookup
    <labeldist.view.storeview.StoreView.lookup>`). Draws once: a batch set that has its items is left as it is, so
    a step stopped part way (for a compute slot) may be run again."""
    if batches.items.shape[1] == request.size - 1:
        return batches
    computed = 0

    def anchor_row(anchor: int, items: np.ndarray) -> np.ndarray:
        nonlocal computed
        values, more = view.lookup(np.full(items.size, anchor, dtype=np.int64), items, compute)
        computed += more
        return values

    batches.items = rule.draw_batch_items(
        rng,
        view.knn,
        batches.anchors,
        size=request.size,
        neighbors=request.neighbors,
        pool=batches.pool,
        distances=anchor_row,
    )
    batches.drawn_computed = computed
    return batches


def fill_distances(
    view: StoreView, batches: BatchSet, request: BatchRequest, compute: ComputePairs | None = None
) -> BatchSet:
    """The anchor-to-item distances of drawn minibatches and, when the request asks, each one's matrix (anchor
    first, symmetric, zero diagonal): stored, else from ``compute`` (one budget for both)."""
    b, m = batches.items.shape
    distances, computed = view.lookup(np.repeat(batches.anchors, m), batches.items.ravel(), compute)
    batches.distances = distances.reshape(b, m)
    if request.pairwise:
        batches.pairwise, more = view.matrices(batches.members, compute)
        computed += more
    batches.computed = batches.drawn_computed + computed
    return batches


def draw_and_fill(
    view: StoreView,
    batches: BatchSet,
    rng: np.random.Generator,
    request: BatchRequest,
    compute: ComputePairs | None = None,
) -> BatchSet:
    """:func:`draw_items` then :func:`fill_distances`: what follows the anchors. Safe to run again from the start
    (the items are drawn once)."""
    draw_items(view, batches, rng, request, compute)
    return fill_distances(view, batches, request, compute)


def assemble(view: StoreView, request: BatchRequest, compute: ComputePairs | None = None) -> BatchSet:
    """The minibatches ``request`` asks of ``view``, every step in this thread: anchors, items, distances."""
    batches, rng = draw_anchors(view, request)
    return draw_and_fill(view, batches, rng, request, compute)
