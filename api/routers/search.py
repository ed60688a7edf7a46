"""``POST /v1/stores/{store}/search``: the exact nearest items of a new label, given in its kind's JSON form.

The store (:class:`~labeldist.api.serving.registry.ServedStore`) gives the labels and the distance, read through its
checks of the store on disk (:meth:`~labeldist.api.serving.registry.ServedStore.reading`); the label is read and
searched for by the
functions LocalSource uses too (:mod:`labeldist.view.search`), bounded here as every on-demand computation
(:mod:`labeldist.api.serving.compute`).
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from starlette.concurrency import run_in_threadpool

from labeldist.api.answers.encoding import json_response
from labeldist.api.answers.itemlabels import check_labels_available, check_labels_size, item_labels
from labeldist.api.answers.schemas import Search, SearchResult
from labeldist.api.deps import OPTIONAL_API_KEY, APIKey, StoreDep, compute_allowed
from labeldist.api.errors import BadParameter, NeedsAPIKey, TooLarge, error_responses
from labeldist.api.serving.compute import ClientGone, ComputeGuard, guard_for, run_cancellable, unguarded
from labeldist.api.serving.registry import ServedStore
from labeldist.distances.base import LabelDistance
from labeldist.kinds import distance_class
from labeldist.view.search import LabelRefused, not_searchable, read_query, search_cost_s, search_labels, searchable
from labeldist.view.search import SearchResult as Found

router = APIRouter(prefix="/v1/stores/{store}", tags=["search"])

#: 052475643.jpg#0 of data/mpii/mpii_valid_2958.csv, MPII's 16 joints in image pixels
POSE_PIXELS = [
    [317, 412],
    [318, 299],
    [290, 274],
    [353, 275],
    [403, 299],
    [394, 409],
    [322, 275],
    [327, 172],
    [329, 162],
    [347, 105],
    [296, 135],
    [281, 208],
    [296, 167],
    [358, 177],
    [387, 236],
    [392, 167],
]
EXAMPLES = {
    "captions": {
        "summary": "a caption set (caption stores)",
        "value": {"label": ["a dog catches a frisbee on the grass", "a brown dog jumping"], "k": 5},
    },
    "vector": {"summary": "a vector (vector stores)", "value": {"label": [0.5, 1.25, -3.0], "k": 5}},
    "labels": {
        "summary": "a vector, answered with each hit's label",
        "value": {"label": [0.5, 1.25, -3.0], "k": 5, "include_labels": True},
    },
    "pose": {
        "summary": "a pose on a store of image pixels (--normalization none): 16 joints, [x, y] or null",
        "value": {"label": POSE_PIXELS, "k": 5},
    },
    "pose_raw": {
        "summary": "a pose in image pixels with its centre and scale, on a store normalised center_scale "
        "(normalised as the store's poses were; a head store takes head, a box store box)",
        "value": {"label": {"joints": POSE_PIXELS, "center": [316, 246.43], "scale": 2.202294}, "k": 5},
    },
}


@router.post(
    "/search",
    response_model=SearchResult,
    responses=error_responses(400, 401, 403, 404, 413, 503),
    openapi_extra=OPTIONAL_API_KEY,
)
async def search(
    store: StoreDep,
    api_key: APIKey,
    request: Request,
    body: Annotated[Search, Body(openapi_examples=EXAMPLES)],
) -> Response:
    """The ``k`` nearest items of a new label, nearest first, exact: the label's distance to every item, computed on
    demand from the stored labels with the store's distance, pruned by the distance's lower bound where it has one
    (as the store's kNN lists were). Bounded as every on-demand computation (API key or loopback, the compute
    budget, the pool, cancelled when the client goes). 422 for a label the kind cannot read (the detail names what
    is wrong), or a kind that has no JSON form for its labels. A pose store normalised by the person's centre and
    scale (or head size, or box) takes a pose in image pixels with them, ``{"joints": [...], "center": [x, y],
    "scale": s}``, and normalises it as its poses were; a pose lying far outside its normalised poses (raw pixels
    sent as a list) is answered 422 saying what is needed.

    With ``"include_labels": true`` the answer also carries each hit's label (``labels``, in the kind's JSON
    form), so that no further request per hit is needed; 422 for a kind whose labels have no JSON form, before
    any work."""
    settings = request.app.state.settings  # not a dependency: see labeldist.api.deps.APIKey
    if body.k > settings.max_k:
        raise TooLarge(f"k={body.k} is over the limit of {settings.max_k} (LABELDIST_MAX_K)")
    if body.include_labels:
        check_labels_available(store, ("body", "include_labels"))
        await run_in_threadpool(check_labels_size, store, body.k, settings.max_label_bytes)
    allow = compute_allowed(settings, api_key)
    guard = guard_for(request.app.state)
    result = await run_cancellable(request.receive, guard, search_store, store, body.label, body.k, allow, guard)
    answer = {
        "indices": result.indices,
        "ids": store.ids[result.indices].tolist(),
        "distances": result.distances,
        "computed": result.computed,
    }
    if body.include_labels:
        answer["labels"] = await run_in_threadpool(item_labels, store, result.indices, settings.max_label_bytes)
    return json_response(answer)


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
) -> Found:
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
        try:  # the kind's parser, within the checks every kind gets (the JSON value, the distance's limits)
            query, labels, distance = read_query(kind, value, store.labels_and_distance)
        except LabelRefused as e:
            raise BadParameter(str(e), ("body", "label")) from None
        try:
            return search_labels(query, labels, distance, k, guard.check)
        except ClientGone:
            log.warning("%s: a search stopped: the client has gone", store.name)
            raise
