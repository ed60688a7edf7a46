"""Search by label: the exact nearest items of a served store to a new label, given in its kind's JSON form
(``POST /v1/stores/{store}/search``, :mod:`labeldist.api.routers.search`).

The store (:class:`~labeldist.api.registry.ServedStore`) gives the labels and the distance, read through its checks
of the store on disk (:meth:`~labeldist.api.registry.ServedStore.reading`); the label's distances to the
items are computed here, on demand, bounded as every on-demand computation (:mod:`labeldist.api.compute`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from labeldist.api.compute import ClientGone, ComputeGuard, unguarded
from labeldist.api.errors import BadParameter, NeedsAPIKey
from labeldist.api.registry import ServedStore
from labeldist.distances.base import LabelDistance
from labeldist.kinds import distance_class, read_label
from labeldist.labels.base import LabelError
from labeldist.view.search import SearchResult, not_searchable, search_cost_s, search_labels, searchable

log = logging.getLogger("labeldist.api")


def estimate_search(store: ServedStore, cls: Any, label_bytes: int = 0) -> float:
    """The estimated seconds of a search of ``store`` by a label of ``label_bytes`` bytes (its JSON form): the
    distance's own estimate where its class gives one (:meth:`~labeldist.distances.base.LabelDistance.search_cost_s`:
    it knows what it holds of the store's labels, which are loaded first, no distance computed), else
    :func:`search_cost_s` from the kind's unit costs; plus the label's length at the kind's
    ``cost_per_label_byte_s``."""
    length = label_bytes * cls.cost_per_label_byte_s
    if cls.search_cost_s is LabelDistance.search_cost_s:
        return search_cost_s(cls, store.n_items) + length
    labels, distance = store.labels_and_distance()
    own = distance.search_cost_s(labels)
    return (search_cost_s(cls, store.n_items) if own is None else own) + length


def search_store(
    store: ServedStore, value: Any, k: int, allow_compute: bool, guard: ComputeGuard | None = None
) -> SearchResult:
    """The exact ``k`` nearest items of ``store`` (at most its ``n_items``) to a new label given in its kind's JSON
    form (:meth:`~labeldist.labels.base.LabelSet.from_json`), nearest first, ties broken by index, on float32
    values as stored: the same selection as the store's kNN lists, with the same pruning where the distance
    has a lower bound (:func:`labeldist.core.knn.pruned_topk`), else the label against every item.

    Bounded as every on-demand computation: refused without the right to compute (NeedsAPIKey), over the
    budget (estimated from the kind's unit costs before the labels are loaded), run in a slot of the pool,
    stopped between chunks once the client has gone. A label the kind cannot read is a
    :class:`~labeldist.api.errors.BadParameter` (422) naming what is wrong, before any distance is computed.
    """
    kind = store.manifest["kind"]
    if not searchable(kind):
        raise BadParameter(not_searchable(kind), ("body", "label"))
    if not allow_compute:
        raise NeedsAPIKey(
            f"a search of {store.name!r} computes the label's distance to every item on demand: "
            "send the API key in the X-API-Key header"
        )
    guard = guard or unguarded()
    k = min(k, store.n_items)
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))  # a lone one is 422 later
    guard.admit(
        estimate_search(store, distance_class(kind), size),
        f"a search of the {store.n_items} items of {store.name!r} by a label of {size:,} bytes",
    )
    with guard.slot():
        labels, distance = store.labels_and_distance()
        try:  # the kind's parser, within the checks every kind gets (the JSON value, the distance's limits)
            query = read_label(value, labels, distance)
        except NotImplementedError:
            raise BadParameter(not_searchable(kind), ("body", "label")) from None
        except LabelError as e:
            raise BadParameter(str(e), ("body", "label")) from None
        try:
            return search_labels(query, labels, distance, k, guard.check)
        except ClientGone:
            log.warning("%s: a search stopped: the client has gone", store.name)
            raise
