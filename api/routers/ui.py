"""``GET /ui``: the neighbour browser, a static page (HTML + vanilla JS) over the v1 API."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from fastapi import APIRouter, HTTPException, Response

router = APIRouter(prefix="/ui", tags=["ui"], include_in_schema=False)

STATIC = Path(__file__).resolve().parent.parent / "static"
FILES = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}


@lru_cache
def _read(name: str) -> bytes:
    return (STATIC / name).read_bytes()


@router.get("")
async def page() -> Response:
    """The page; ``?store=NAME&item=INDEX`` opens an item."""
    return Response(_read("ui.html"), media_type="text/html; charset=utf-8")


@router.get("/{name}")
async def asset(name: str) -> Response:
    if name not in FILES:
        raise HTTPException(404, f"no file {name!r} in the UI")
    return Response(_read(name), media_type=FILES[name], headers={"Cache-Control": "no-cache"})
