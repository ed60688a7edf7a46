"""``GET /v1/stores``, ``GET /v1/stores/{store}`` and ``GET /v1/stores/{store}/ids``: the stores served, their
manifests, and the id of every item (what a client maps to its own files, such as images)."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import APIRouter

from labeldist.api.answers.schemas import StoreIds, StoreInfo, StoreList
from labeldist.api.deps import RegistryDep, StoreDep
from labeldist.api.errors import error_responses

router = APIRouter(prefix="/v1/stores", tags=["stores"])


@router.get("", response_model=StoreList)
async def list_stores(registry: RegistryDep) -> dict[str, Any]:
    """Every store of the stores folder as it is now (new folders included, removed ones gone): manifest + ``name``
    + ``digest``; incomplete ones with ``available: false``."""
    stores = await anyio.to_thread.run_sync(registry.refresh_all)  # may open new or changed stores
    return {"stores": [store.info() for store in stores]}


@router.get("/{store}", response_model=StoreInfo, responses=error_responses(404, 503))
async def get_store(store: StoreDep) -> dict[str, Any]:
    """One store's manifest + ``name``."""
    return store.info()


@router.get("/{store}/ids", response_model=StoreIds, responses=error_responses(404, 503))
async def get_ids(store: StoreDep) -> dict[str, Any]:
    """The id of every item, in index order (item ``i`` is ``ids[i]``)."""
    return {"n_items": len(store.ids), "ids": [str(i) for i in store.ids]}
