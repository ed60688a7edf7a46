"""Dependencies of the routers, as ``Annotated`` aliases.

All are ``async``: they only look things up, and a sync dependency would cost a thread hop per request.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any

from fastapi import Depends, Path, Request, Security
from fastapi.security import APIKeyHeader

from api.registry import ServedStore, StoreRegistry
from api.settings import Settings

_api_key_header = APIKeyHeader(
    name="X-API-Key",
    auto_error=False,
    description="needed only for distances that are not stored and must be computed, when the service has "
    "an API key (LABELDIST_API_KEY)",
)


async def get_app_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_registry(request: Request) -> StoreRegistry:
    return request.app.state.registry


#: ``openapi_extra`` of routes that may compute: the API key is optional (FastAPI lists the scheme as required)
OPTIONAL_API_KEY: dict[str, Any] = {"security": [{}]}

SettingsDep = Annotated[Settings, Depends(get_app_settings)]
RegistryDep = Annotated[StoreRegistry, Depends(get_registry)]


async def get_store(request: Request, store: Annotated[str, Path(description="store name")]) -> ServedStore:
    """The served store named in the path: 404 when unknown, 503 when not complete."""
    # request.app.state directly rather than through RegistryDep: one dependency less on the hottest path
    return request.app.state.registry.get(store)


async def get_compute_allowed(settings: SettingsDep, key: Annotated[str | None, Security(_api_key_header)]) -> bool:
    """Whether this request may compute distances on demand: always without an API key set, else only with
    the right key."""
    if settings.api_key is None:
        return True
    return key is not None and secrets.compare_digest(key.encode(), settings.api_key.get_secret_value().encode())


StoreDep = Annotated[ServedStore, Depends(get_store)]
ComputeAllowedDep = Annotated[bool, Depends(get_compute_allowed)]
