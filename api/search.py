"""Search by label: the exact nearest items of a served store to a new label, given in its kind's JSON form
(``POST /v1/stores/{store}/search``, :mod:`labeldist.api.routers.search`).

The store (:class:`~labeldist.api.registry.ServedStore`) gives the labels and the distance, read through its checks
of the store on disk (:meth:`~labeldist.api.registry.ServedStore.refusing_damage`); the label's distances to the
items are computed here, on demand, bounded as every on-demand computation (:mod:`labeldist.api.compute`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from labeldist.api.compute import ClientGone, ComputeGuard, unguarded
from labeldist.api.errors import BadParameter, NeedsAPIKey
from labeldist.api.registry import ServedStore
from labeldist.kinds import check_block, distance_class, read_label
from labeldist.knn import pruned_topk, topk_rows
from labeldist.labels.base import LabelError, LabelSet
from labeldist.pairs import CHUNK_SECONDS, checked_block

log = logging.getLogger("labeldist.api")


@dataclass(frozen=True)
class SearchResult:
    """The nearest items of a label: indices (int32), distances (float32) nearest first, and how many exact
    distances were computed (fewer than the items where a lower bound ruled some out)."""

    indices: np.ndarray
    distances: np.ndarray
    computed: int


def searchable(labels_class: type) -> bool:
    """Whether a LabelSet class reads labels from JSON (overrides :meth:`LabelSet.from_json`): known from the class,
    before the budget is estimated or a label loaded. A subclass of one that does, and has no JSON form itself,
    declares LabelSet's own (as :class:`~labeldist.labels.sentences.Sentences` does); one that still refuses
    (NotImplementedError) is answered the same way, once its labels are loaded."""
    return getattr(labels_class.from_json, "__func__", None) is not LabelSet.from_json.__func__


def search_cost_s(distance_cls: Any, n_items: int) -> float:
    """Estimated seconds of one core for a label against ``n_items`` items: the whole row (what a search costs
    when no bound rules an item out), in chunks of :data:`~labeldist.pairs.CHUNK_SECONDS`, plus one call
    for the bound's second round, plus the label and the items prepared."""
    chunks = math.ceil(n_items * distance_cls.cost_per_pair_s / CHUNK_SECONDS) or 1
    return (
        (chunks + 1) * distance_cls.cost_per_call_s
        + n_items * distance_cls.cost_per_pair_s
        + (n_items + 1) * distance_cls.cost_per_item_s
    )


def search_labels(
    query: Any, labels: Any, distance: Any, k: int, check: Callable[[], None] = lambda: None
) -> SearchResult:
    """The exact ``k`` nearest of ``labels`` to the one label of ``query`` (see :func:`search_store`);
    ``check`` is called between chunks of about :data:`~labeldist.pairs.CHUNK_SECONDS` of estimated work."""
    n = len(labels)
    per_chunk = max(1, int(CHUNK_SECONDS / max(type(distance).cost_per_pair_s * len(query), 1e-12)))

    def row(cols: np.ndarray) -> np.ndarray:  # exact distances of the query to items ``cols`` (sorted, distinct)
        out = np.empty(cols.size, dtype=np.float64)
        for start in range(0, cols.size, per_chunk):
            check()
            part = cols[start : start + per_chunk]
            items = labels if part.size == n else labels.subset(part)
            out[start : start + part.size] = checked_block(distance, query, items)[0]
        return out

    check()
    lower = distance.lower_bound_block(query, labels)
    if lower is None:
        values = row(np.arange(n)).astype(np.float32)[None]
        indices, dists = topk_rows(values, k)
        return SearchResult(indices[0], dists[0], n)
    check_block(distance.kind, lower, 1, n, row_ids=query.ids, col_ids=labels.ids)
    indices, dists, computed = pruned_topk(lower, lambda r, c: row(c), k, exclude=None)
    return SearchResult(indices[0], dists[0], computed)


def search_store(
    store: ServedStore, value: Any, k: int, allow_compute: bool, guard: ComputeGuard | None = None
) -> SearchResult:
    """The exact ``k`` nearest items of ``store`` (at most its ``n_items``) to a new label given in its kind's JSON
    form (:meth:`~labeldist.labels.base.LabelSet.from_json`), nearest first, ties broken by index, on float32
    values as stored: the same selection as the store's kNN lists, with the same pruning where the distance
    has a lower bound (:func:`labeldist.knn.pruned_topk`), else the label against every item.

    Bounded as every on-demand computation: refused without the right to compute (NeedsAPIKey), over the
    budget (estimated from the kind's unit costs before the labels are loaded), run in a slot of the pool,
    stopped between chunks once the client has gone. A label the kind cannot read is a
    :class:`~labeldist.api.errors.BadParameter` (422) naming what is wrong, before any distance is computed.
    """
    cls = distance_class(store.manifest["kind"])
    if not searchable(cls.labels_class):
        raise BadParameter(
            f"search by label is not available for kind {store.manifest['kind']!r}: its labels have no JSON form",
            ("body", "label"),
        )
    if not allow_compute:
        raise NeedsAPIKey(
            f"a search of {store.name!r} computes the label's distance to every item on demand: "
            "send the API key in the X-API-Key header"
        )
    guard = guard or unguarded()
    k = min(k, store.n_items)
    guard.admit(search_cost_s(cls, store.n_items), f"a search of the {store.n_items} items of {store.name!r}")
    with guard.slot():
        labels, distance = store.labels_and_distance()
        try:  # the kind's parser, within the checks every kind gets (the JSON value, the distance's limits)
            query = read_label(value, labels, distance)
        except NotImplementedError:
            raise BadParameter(
                f"search by label is not available for kind {store.manifest['kind']!r}: its labels have no JSON form",
                ("body", "label"),
            ) from None
        except LabelError as e:
            raise BadParameter(str(e), ("body", "label")) from None
        try:
            return search_labels(query, labels, distance, k, guard.check)
        except ClientGone:
            log.warning("%s: a search stopped: the client has gone", store.name)
            raise
