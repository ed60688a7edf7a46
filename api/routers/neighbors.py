"""Items of a store: ``GET .../items/{index}/neighbors`` (kNN lists) and ``GET .../items/{index}/label``."""

from __future__ import annotations

from typing import Annotated

import numpy as np
from fastapi import APIRouter, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from labeldist.api.answers.encoding import json_response
from labeldist.api.answers.itemlabels import check_labels_available, check_labels_size, item_labels, labels_loaded
from labeldist.api.answers.labelview import render_label
from labeldist.api.answers.schemas import LabelView, Neighbors
from labeldist.api.deps import StoreDep
from labeldist.api.errors import BadParameter, TooLarge, error_responses
from labeldist.api.serving.registry import ServedStore
from labeldist.api.settings import Settings
from labeldist.view.minibatch import MAX_INDEX

router = APIRouter(prefix="/v1/stores/{store}/items", tags=["items"])

IndexPath = Annotated[int, Path(ge=0, le=MAX_INDEX, description="item index (row of the store)")]


@router.get("/{index}/neighbors", response_model=Neighbors, responses=error_responses(404, 413, 503))
async def neighbors(
    request: Request,
    store: StoreDep,
    index: IndexPath,
    k: Annotated[int | None, Query(ge=1, description="how many, nearest first (default: all the store has)")] = None,
    include_labels: Annotated[
        bool,
        Query(
            description="also answer the item's label (label) and its neighbours' (labels), each in its "
            "kind's JSON form; 422 for a kind whose labels have none"
        ),
    ] = False,
) -> Response:
    """The item's ``k`` nearest neighbours, nearest first, from the store's exact kNN lists; with
    ``include_labels=true`` also the item's label and its neighbours' labels."""
    check_neighbors(
        store, request.app.state.settings, index, k
    )  # settings not a dependency: see labeldist.api.deps.APIKey
    if not include_labels:
        return await neighbors_answer(store, index, k)
    check_labels_available(store, ("query", "include_labels"))
    return await neighbors_answer(store, index, k, request.app.state.settings.max_label_bytes)


def check_neighbors(store: ServedStore, settings: Settings, index: int, k: int | None) -> None:
    """What a neighbours request must pass beyond its schema (run by the route and by
    :mod:`labeldist.api.routers.fastpath`):
    413 for ``k`` over the service's limit, 404 for an index out of the store, 422 for ``k`` over the store's."""
    if k is not None and k > settings.max_k:
        raise TooLarge(f"k={k} is over the limit of {settings.max_k} (LABELDIST_MAX_K)")
    store.check_index(index)
    if k is not None and k > store.k:
        raise BadParameter(
            f"k={k} is more than the store's k={store.k} (the length of its neighbour lists)", ("query", "k"), k
        )


async def neighbors_answer(store: ServedStore, index: int, k: int | None, label_limit: int | None = None) -> Response:
    """:func:`neighbors_response`, right here when the item's kNN list (and, asked for, the labels) is in memory,
    else in a worker thread (read from disk, off the event loop); also awaited by
    :mod:`labeldist.api.routers.fastpath`."""
    if store.knn.holds(index) and (label_limit is None or labels_loaded(store)):
        return neighbors_response(store, index, k, label_limit)
    return await run_in_threadpool(neighbors_response, store, index, k, label_limit)


def neighbors_response(store: ServedStore, index: int, k: int | None, label_limit: int | None = None) -> Response:
    """The answer for a valid item ``index`` and ``k`` (at most the store's; None: all it has); with a
    ``label_limit`` (bytes), also the labels of the item and its neighbours (the kind has a JSON form: checked by
    the route), 413 before any is made when they would pass it. Also sent by :mod:`labeldist.api.routers.fastpath`."""
    include_labels = label_limit is not None
    if include_labels:
        check_labels_size(store, (store.k if k is None else k) + 1, label_limit)
    indices, distances = store.neighbors(index, store.k if k is None else k)
    answer = {
        "index": index,
        "id": str(store.ids[index]),
        "indices": indices,
        "ids": store.ids[indices].tolist(),
        "distances": distances,
    }
    if include_labels:
        own, *theirs = item_labels(store, [index, *np.asarray(indices).tolist()], label_limit)
        answer.update(label=own, labels=theirs)
    return json_response(answer)


@router.get("/{index}/label", response_model=LabelView, responses=error_responses(404, 503))
def label(store: StoreDep, index: IndexPath) -> LabelView:
    """The item's label rendered for display: a pose's joints and bones, a map as a PNG data URL, texts."""
    store.check_index(index)
    return render_label(
        store.manifest.get("kind", ""), store.label_arrays(), store.n_items, index, str(store.ids[index])
    )
