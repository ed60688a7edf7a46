"""Assembles the FastAPI app of HTTP API v1: settings, stores opened in lifespan, routers, error handling.

python -m uvicorn --factory labeldist.api.main:create_app      # or: labeldist serve --stores stores
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from labeldist import __version__
from labeldist.api.docs_assets import NO_CDN_DOCS, add_offline_docs
from labeldist.api.errors import APIError, api_error_handler, internal_error_handler, validation_error_handler
from labeldist.api.middleware import BodySizeLimit
from labeldist.api.routers import batches, distances, health, neighbors, search, stores, ui
from labeldist.api.routers.fastpath import FastPath
from labeldist.api.serving.compute import ComputePool
from labeldist.api.serving.registry import StoreRegistry
from labeldist.api.serving.warmup import Warmup, start_warmup
from labeldist.api.settings import Settings, get_settings

DESCRIPTION = """Label distances of labeldist stores: neighbour lists, distance look-ups, ready-made minibatches for
deep metric learning, and the nearest items of a new label (search). Every error answers JSON
`{"detail": ...}`: 400 unreadable body, 401 API key needed, 403 computing on demand disabled (off
loopback with no API key), 404 unknown store or item, 408 body too slow, 413 over a limit, 422 bad
parameters (non-finite numbers echoed as strings), 503 store not complete, 500 an internal error.
The neighbour browser is at [/ui](/ui)."""


class ServiceApp(FastAPI):
    """The FastAPI app with two pure-ASGI layers in front of Starlette's middleware stack: the body limits
    (:class:`~labeldist.api.middleware.BodySizeLimit`), then the fast path
    (:class:`~labeldist.api.routers.fastpath.FastPath`,
    ``settings.fast_path``). A request the fast path answers passes no other layer: the stack's error,
    telemetry and body-limit middlewares cost more than the answer itself (BENCHMARKS.md, "The service's layers").
    """

    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        front: ASGIApp = self._stack
        if settings.fast_path:
            front = FastPath(front, state=self.state)
        self._front = BodySizeLimit(front, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["app"] = self  # as Starlette sets it: the error handlers read the app's settings through the request
        await self._front(scope, receive, send)

    async def _stack(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The app serving the stores of ``settings.stores`` (default: :func:`get_settings`)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        registry = StoreRegistry(settings)
        await anyio.to_thread.run_sync(registry.open_all)
        app.state.registry = registry
        app.state.warmup = await anyio.to_thread.run_sync(start_warmup, registry) if settings.warm else Warmup()
        yield

    # docs_url=None, redoc_url=None: add_offline_docs serves /docs and /redoc from an installed package, not a CDN
    app = ServiceApp(
        settings, title="labeldist", version=__version__, description=DESCRIPTION, lifespan=lifespan, **NO_CDN_DOCS
    )
    app.state.settings = settings
    app.state.compute_pool = ComputePool(settings.compute_workers, settings.compute_queue_s)
    app.add_exception_handler(APIError, api_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(Exception, internal_error_handler)  # Starlette's ServerErrorMiddleware: the last resort
    for module in (health, stores, neighbors, distances, batches, search, ui):
        app.include_router(module.router)
    add_offline_docs(app)
    return app
