"""Dependencies of the routers, as ``Annotated`` aliases.

All are ``async``: they only look things up, and a sync dependency would cost a thread hop per request. The hot
routes (neighbours, distances, batches) take few of them: they read the settings from ``request.app.state``.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, Path, Request, Security
from fastapi.security import APIKeyHeader

from labeldist.api.serving.registry import STALE, ServedStore, StoreRegistry
from labeldist.api.settings import Settings

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
    """The served store named in the path, as it is on disk now: 404 when unknown, 503 when not complete. A store
    whose folder changed (rebuilt, new, removed) is opened again in a worker thread, off the event loop."""
    # request.app.state directly rather than through RegistryDep: one dependency less on the hottest path
    registry: StoreRegistry = request.app.state.registry
    entry = registry.peek(store)
    if entry is STALE:
        entry = await anyio.to_thread.run_sync(registry.current, store)
    return registry.served(store, entry)  # type: ignore[arg-type]


def compute_allowed(settings: Settings, key: str | None) -> bool:
    """Whether a request sending API key ``key`` may compute distances on demand: with an API key set, only with
    the right key; without one, only when serving on loopback. Off loopback anyone who reaches the port could make
    the service compute (:attr:`Settings.compute_disabled`; :func:`labeldist.api.errors.api_error_handler` answers
    403)."""
    if settings.api_key is None:
        return settings.on_loopback
    return key is not None and secrets.compare_digest(key.encode(), settings.api_key.get_secret_value().encode())


StoreDep = Annotated[ServedStore, Depends(get_store)]
#: the X-API-Key header of a route that may compute (documented as the API's security scheme); pass it to
#: :func:`compute_allowed` with the settings. (A parameter rather than a dependency that looks the settings up
#: itself: each dependency FastAPI solves costs some 5-20 us a request, on the routes that serve minibatches.)
APIKey = Annotated[str | None, Security(_api_key_header)]
