"""``GET /v1/stores`` and ``GET /v1/stores/{store}``: the stores served, and their manifests."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import RegistryDep, StoreDep
from api.errors import error_responses
from api.schemas import StoreInfo, StoreList

router = APIRouter(prefix="/v1/stores", tags=["stores"])


@router.get("", response_model=StoreList)
async def list_stores(registry: RegistryDep) -> dict[str, Any]:
    """Every store of the stores folder: manifest + ``name``; incomplete ones with ``available: false``."""
    return {"stores": [store.info() for store in registry.stores.values()]}


@router.get("/{store}", response_model=StoreInfo, responses=error_responses(404, 503))
async def get_store(store: StoreDep) -> dict[str, Any]:
    """One store's manifest + ``name``."""
    return store.info()
