"""``POST /v1/stores/{store}/search``: the exact nearest items of a new label, given in its kind's JSON form."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request, Response
from starlette.concurrency import run_in_threadpool

from labeldist.api.compute import guard_for, run_cancellable
from labeldist.api.deps import OPTIONAL_API_KEY, APIKey, StoreDep, compute_allowed
from labeldist.api.encoding import json_response
from labeldist.api.errors import TooLarge, error_responses
from labeldist.api.itemlabels import check_labels_available, check_labels_size, item_labels
from labeldist.api.schemas import Search, SearchResult
from labeldist.api.search import search_store

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
