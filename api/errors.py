"""Errors the service answers with: each maps to an HTTP status and carries a ``detail`` for the client."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse


class APIError(Exception):
    """An error answered as ``{"detail": ...}`` with ``status_code``."""

    status_code = 400

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class NotFound(APIError):
    status_code = 404


class BadParameter(APIError):
    """A parameter the schema allows but this store cannot take (e.g. k over the store's k): answered 422 in
    the shape of FastAPI's validation errors, so that every 422 reads alike."""

    status_code = 422

    def __init__(self, detail: str, loc: tuple[str, ...], value: object = None) -> None:
        super().__init__(detail)
        self.loc, self.value = loc, value


class TooLarge(APIError):
    status_code = 413


class Unavailable(APIError):
    status_code = 503


class NeedsAPIKey(APIError):
    status_code = 401


async def api_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, APIError)
    headers = {"WWW-Authenticate": "X-API-Key"} if isinstance(exc, NeedsAPIKey) else None
    if isinstance(exc, BadParameter):
        error = {"type": "value_error", "loc": list(exc.loc), "msg": exc.detail, "input": exc.value}
        return JSONResponse({"detail": [error]}, status_code=exc.status_code)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)


def error_responses(*codes: int) -> dict[int | str, dict[str, object]]:
    """``responses=`` entries documenting the given error codes with a ``{"detail": str}`` body."""
    from api.schemas import ErrorDetail

    text = {
        400: "the body cannot be read (not UTF-8, or a bad Content-Length)",
        401: "computing distances on demand needs the API key (X-API-Key header)",
        404: "unknown store or item",
        413: "request too large (over a configured limit)",
        503: "store not complete (still being written, or abandoned), or corrupted on disk",
    }
    return {code: {"model": ErrorDetail, "description": text[code]} for code in codes}
