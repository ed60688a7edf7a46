"""``GET /healthz``: the process is up (stores are opened before it answers)."""

from __future__ import annotations

from fastapi import APIRouter

from labeldist.api.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    return Health()
