"""``POST /v1/stores/{store}/distances``: distances of an anchor to items, or of index pairs."""

from __future__ import annotations

from typing import Annotated

import numpy as np
from fastapi import APIRouter, Body, Query, Request, Response

from labeldist.api.answers.encoding import NPZ_RESPONSE, Format, json_response, npz_response, wants_npz
from labeldist.api.answers.schemas import AnchorItems, Distances, Pairs
from labeldist.api.deps import OPTIONAL_API_KEY, APIKey, StoreDep, compute_allowed
from labeldist.api.errors import TooLarge, error_responses
from labeldist.api.serving.compute import guard_for, run_cancellable

router = APIRouter(prefix="/v1/stores/{store}", tags=["distances"])


@router.post(
    "/distances",
    response_model=Distances,
    responses={200: NPZ_RESPONSE, **error_responses(400, 401, 404, 413, 503)},
    openapi_extra=OPTIONAL_API_KEY,
)
async def distances(
    store: StoreDep,
    api_key: APIKey,
    request: Request,
    body: Annotated[
        AnchorItems | Pairs,
        Body(
            openapi_examples={
                "anchor": {"summary": "an anchor and items", "value": {"anchor": 0, "items": [1, 2, 3]}},
                "pairs": {"summary": "index pairs", "value": {"pairs": [[0, 1], [2, 3]]}},
            }
        ),
    ],
    format: Annotated[Format | None, Query(description="json (default) or npz")] = None,
) -> Response:
    """Distances in the order asked: from the dense matrix or the kNN lists where they hold the pair, else
    computed on demand from the stored labels (and cached). Needs the API key when one is set and a pair
    must be computed."""
    settings = request.app.state.settings  # not a dependency: see labeldist.api.deps.APIKey
    allow_compute = compute_allowed(settings, api_key)
    if isinstance(body, AnchorItems):
        if len(body.items) > settings.max_items:
            raise TooLarge(f"{len(body.items)} items is over the limit of {settings.max_items} (LABELDIST_MAX_ITEMS)")
        j = np.asarray(body.items, dtype=np.int64)
        i = np.full(j.shape, body.anchor, dtype=np.int64)
        store.check_index(body.anchor, "anchor")
    else:
        if len(body.pairs) > settings.max_items:
            raise TooLarge(f"{len(body.pairs)} pairs is over the limit of {settings.max_items} (LABELDIST_MAX_ITEMS)")
        i, j = np.asarray(body.pairs, dtype=np.int64).reshape(-1, 2).T
    store.check_index(i)
    store.check_index(j)
    if store.in_memory(i):  # cached dense rows: answered right here
        values, computed = store.distances(i, j, allow_compute)
    else:  # disk reads or distances computed on demand: in a worker thread, off the event loop, bounded
        guard = guard_for(request.app.state)
        values, computed = await run_cancellable(request.receive, guard, store.distances, i, j, allow_compute, guard)
    if wants_npz(request, format):
        return npz_response({"distances": values, "computed": np.int64(computed)})
    return json_response({"distances": values, "computed": computed})
