"""``POST /v1/stores/{store}/search``: the exact nearest items of a new label, given in its kind's JSON form."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request, Response
from labeldist.api.compute import guard_for, run_cancellable
from labeldist.api.deps import OPTIONAL_API_KEY, APIKey, StoreDep, compute_allowed
from labeldist.api.encoding import json_response
from labeldist.api.errors import TooLarge, error_responses
from labeldist.api.itemlabels import check_labels_available, item_labels
from labeldist.api.schemas import Search, SearchResult
from starlette.concurrency import run_in_threadpool

router = APIRouter(prefix="/v1/stores/{store}", tags=["search"])

EXAMPLES = {
    "captions": {"summary": "a caption set (caption stores)",
                 "value": {"label": ["a dog catches a frisbee on the grass", "a brown dog jumping"], "k": 5}},
    "vector": {"summary": "a vector (vector stores)", "value": {"label": [0.5, 1.25, -3.0], "k": 5}},
    "labels": {"summary": "a vector, answered with each hit's label",
               "value": {"label": [0.5, 1.25, -3.0], "k": 5, "include_labels": True}},
    "pose": {"summary": "a pose (pose stores): 16 joints, [x, y] or null",
             "value": {"label": [[620, 394], [616, 269], [573, 185], [647, 188], [661, 221], [656, 231],
                                 [610, 187], [647, 176], [637, 189], [695, 108], [606, 217], [553, 161],
                                 [601, 167], [692, 185], [693, 240], [688, 313]], "k": 5}},
}  # fmt: skip


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
    is wrong), or a kind that has no JSON form for its labels.

    With ``"include_labels": true`` the answer also carries each hit's label (``labels``, in the kind's JSON
    form), so that no further request per hit is needed; 422 for a kind whose labels have no JSON form, before
    any work."""
    settings = request.app.state.settings  # not a dependency: see labeldist.api.deps.APIKey
    if body.k > settings.max_k:
        raise TooLarge(f"k={body.k} is over the limit of {settings.max_k} (LABELDIST_MAX_K)")
    if body.include_labels:
        check_labels_available(store, ("body", "include_labels"))
    allow = compute_allowed(settings, api_key)
    guard = guard_for(request.app.state)
    result = await run_cancellable(request.receive, guard, store.search, body.label, body.k, allow, guard)
    answer = {
        "indices": result.indices,
        "ids": store.ids[result.indices].tolist(),
        "distances": result.distances,
        "computed": result.computed,
    }  # fmt: skip
    if body.include_labels:
        answer["labels"] = await run_in_threadpool(item_labels, store, result.indices)
    return json_response(answer)
