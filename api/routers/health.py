"""``GET /healthz``: the process is up (stores are opened before it answers). ``GET /readyz``: every store is ready
to answer without loading anything first: once the service has warmed its stores up (the default), at once with
``--no-warm``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from labeldist.api.answers.schemas import Health, Ready

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    return Health()


@router.get(
    "/readyz",
    response_model=Ready,
    responses={503: {"description": "still warming up: how far it is, in `detail`"}},
)
async def readyz(request: Request) -> Ready | JSONResponse:
    """200 once every store the service warms up (``LABELDIST_WARM``, the default) is loaded, at once without it;
    503 before."""
    state = request.app.state.warmup
    if not state.done:
        return JSONResponse({"detail": state.progress()}, status_code=503, headers={"Retry-After": "1"})
    return Ready(warmed=sorted(state.warmed), failed=state.failed)
