"""``POST /v1/stores/{store}/batches``: ready-made minibatches for training."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Body, Query, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive

from labeldist.api.answers.encoding import NPZ_RESPONSE, Format, json_response, npz_response, wants_npz
from labeldist.api.answers.schemas import Batches, BatchesByAnchors, BatchesByCount
from labeldist.api.deps import OPTIONAL_API_KEY, APIKey, StoreDep, compute_allowed
from labeldist.api.errors import BadParameter, TooLarge, error_responses
from labeldist.api.serving.compute import ComputeGuard, guard_for, run_cancellable
from labeldist.api.serving.registry import ServedStore
from labeldist.api.settings import Settings
from labeldist.view.drawing import DrawRefused
from labeldist.view.minibatch import BatchSet, batch_request, draw_anchors, draw_and_fill, draw_items, fill_distances

router = APIRouter(prefix="/v1/stores/{store}", tags=["batches"])
#: answers with more values than this are encoded in a worker thread, so the event loop keeps serving others
BIG_ANSWER = 200_000

EXAMPLES = {
    "anchors": {
        "summary": "given anchors",
        "value": {"anchors": [0, 7], "size": 8, "neighbors": 3, "pairwise": True, "seed": 1},
    },
    "count": {"summary": "random anchors", "value": {"count": 4, "size": 32, "neighbors": 5, "seed": 1}},
    "pool": {
        "summary": "held-out items never in a batch",
        "value": {"count": 2, "size": 8, "neighbors": 3, "exclude": [1, 4, 9, 16, 25], "seed": 1},
    },
}


@router.post(
    "/batches",
    response_model=Batches,
    responses={200: NPZ_RESPONSE, **error_responses(400, 401, 404, 413, 503)},
    openapi_extra=OPTIONAL_API_KEY,
)
async def batches(
    store: StoreDep,
    api_key: APIKey,
    request: Request,
    body: Annotated[BatchesByAnchors | BatchesByCount, Body(openapi_examples=EXAMPLES)],
    format: Annotated[Format | None, Query(description="json (default) or npz")] = None,
) -> Response:
    """One batch per anchor: the anchor, its ``neighbors`` nearest, then random others drawn without
    replacement (``size - 1`` items, never the anchor), the anchor-to-item distances, and with ``pairwise``
    the batch's full matrix, anchor first.

    With ``pool`` (or ``exclude``, its complement) every member of every batch is an item of the pool: the
    anchors, their nearest within the pool, the random others. 422 names the field for a pool that names no
    item of the store, misses a given anchor, or holds fewer than ``size`` items.

    The ``.npz`` answer (``?format=npz`` or ``Accept: application/x-npz``) holds ``anchors`` (B,),
    ``items`` (B, size - 1), ``distances`` (B, size - 1) float32, ``pairwise`` (B, size, size) float32 when
    asked, ``seed`` and ``computed``.
    """
    settings = request.app.state.settings  # not a dependency: see labeldist.api.deps.APIKey
    allow = compute_allowed(settings, api_key)
    guard = guard_for(request.app.state)
    return await batches_response(store, settings, allow, body, wants_npz(request, format), guard, request.receive)


def check_limits(body: BatchesByAnchors | BatchesByCount, settings: Settings) -> None:
    """413 for a request over the service's limits: batches, size, pairwise values."""
    n_batches = len(body.anchors) if isinstance(body, BatchesByAnchors) else body.count
    if n_batches > settings.max_batches:
        raise TooLarge(f"{n_batches} batches is over the limit of {settings.max_batches} (LABELDIST_MAX_BATCHES)")
    if body.size > settings.max_batch_size:
        raise TooLarge(f"size={body.size} is over the limit of {settings.max_batch_size} (LABELDIST_MAX_BATCH_SIZE)")
    if body.pairwise and n_batches * body.size**2 > settings.max_pairwise_values:
        raise TooLarge(
            f"{n_batches} pairwise matrices of {body.size}x{body.size} is over the limit of "
            f"{settings.max_pairwise_values} values (LABELDIST_MAX_PAIRWISE_VALUES)"
        )


async def answer(store: ServedStore, result: BatchSet, seed: int, npz: bool) -> Response:
    """Drawn and filled batches as the answer: a NumPy archive (``npz``) or JSON, encoded in a worker thread when
    large."""
    big = result.items.size + (0 if result.pairwise is None else result.pairwise.size) > BIG_ANSWER
    if npz:
        arrays = {
            "anchors": result.anchors,
            "items": result.items,
            "distances": result.distances,
            "seed": np.uint64(seed),
            "computed": np.int64(result.computed),
        }
        if result.pairwise is not None:
            arrays["pairwise"] = result.pairwise
        return await run_in_threadpool(npz_response, arrays) if big else npz_response(arrays)
    ids = store.ids
    out: list[dict[str, Any]] = [
        {
            "anchor": anchor,
            "anchor_id": str(ids[anchor]),
            "items": result.items[t],
            "ids": ids[result.items[t]].tolist(),
            "distances": result.distances[t],
            "pairwise": None if result.pairwise is None else result.pairwise[t],
        }
        for t, anchor in enumerate(result.anchors.tolist())
    ]
    payload = {"batches": out, "seed": seed, "computed": result.computed}
    return await run_in_threadpool(json_response, payload) if big else json_response(payload)


async def batches_response(
    store: ServedStore,
    settings: Settings,
    allow_compute: bool,
    body: BatchesByAnchors | BatchesByCount,
    npz: bool,
    guard: ComputeGuard,
    receive: Receive,
) -> Response:
    """The answer to a valid ``body``, JSON or (``npz``) a NumPy archive; also sent by
    :mod:`labeldist.api.routers.fastpath`.
    The minibatches are assembled by the steps LocalSource runs too (:mod:`labeldist.view.minibatch`); what they
    refuse is a 422 naming the field, an anchor that is no item of the store a 404. Raises
    :class:`~labeldist.api.errors.APIError` (413 over a limit or the compute budget, 422, 404, 401 needs the key,
    503 compute pool busy). ``receive`` (the body already read) tells when the client has gone."""
    check_limits(body, settings)
    with refused_as_422():
        asked = batch_request(
            anchors=body.anchors if isinstance(body, BatchesByAnchors) else None,
            count=body.count if isinstance(body, BatchesByCount) else None,
            size=body.size,
            neighbors=body.neighbors,
            pairwise=body.pairwise,
            seed=body.seed,
            pool=body.pool,
            exclude=body.exclude,
        )
        result, rng = draw_anchors(store, asked)
    compute = store.compute_for(allow_compute, guard)
    # kNN lists to read from disk, or a pool's items to rank where a list runs out: all in a worker thread
    if asked.neighbors and (result.pool is not None or not store.knn.holds(result.anchors)):
        await run_cancellable(receive, guard, draw_and_fill, store, result, rng, asked, compute)
    else:
        draw_items(store, result, rng, asked, compute)
        needed = result.members if asked.pairwise else result.anchors
        if store.in_memory(needed):  # cached dense rows: a few NumPy gathers, answered right here
            fill_distances(store, result, asked, store.compute_for(allow_compute))
        else:  # disk reads or distances computed on demand: in a worker thread, off the event loop
            await run_cancellable(receive, guard, fill_distances, store, result, asked, compute)
    return await answer(store, result, asked.seed, npz)


@contextlib.contextmanager
def refused_as_422() -> Iterator[None]:
    """A request the minibatch steps refuse, answered 422 in the shape of FastAPI's validation errors, naming the
    body's field."""
    try:
        yield
    except DrawRefused as e:
        raise BadParameter(str(e), ("body", e.field), e.value) from None
