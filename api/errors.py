"""Errors the service answers with: each maps to an HTTP status and carries a ``detail`` for the client.

Every error the app answers is JSON with a ``detail``: its own errors (:class:`APIError`), FastAPI's validation
errors (422, made JSON-safe by :func:`validation_error_handler`), Starlette's 404/405, the body limits of
:mod:`labeldist.api.middleware` (400, 408, 413) and, for anything unexpected, a 500 (:func:`internal_error_handler`).
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from labeldist.errors import LabeldistError

#: the ``detail`` of a 500: nothing of the exception itself, which may name files or values of the server
INTERNAL_ERROR = "internal error: the server could not answer this request (its log has the details)"


class APIError(LabeldistError):
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


class ComputeDisabled(APIError):
    """Distances must be computed on demand, and the service does not compute: it serves off loopback with no
    API key (:attr:`labeldist.api.settings.Settings.compute_disabled`). No key the client sends can help: 403, not
    401."""

    status_code = 403


def json_safe(value: Any) -> Any:
    """``value`` with what JSON cannot hold replaced: a non-finite float by its JavaScript spelling as a string
    ("NaN", "Infinity", "-Infinity", the tokens a client sends for them), bytes by their UTF-8 text (undecodable
    bytes as U+FFFD). Error bodies echo what the client sent, and Starlette's JSONResponse refuses non-finite
    numbers (and FastAPI's encoder invalid UTF-8): unhandled, either turns an answer to a bad request into a 500."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {json_safe(k) if isinstance(k, (bytes, float)) else k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def compute_disabled_detail(host: str, asked: str) -> str:
    """Why a request that needs on-demand computing is refused off loopback, and how to enable it."""
    return (
        f"{asked}, but computing distances on demand is disabled: the service listens on {host}, not a loopback "
        "address, and has no API key. To enable it, set LABELDIST_API_KEY on the server and send the key as "
        "X-API-Key"
    )


async def api_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, APIError)
    headers = {"WWW-Authenticate": "X-API-Key"} if isinstance(exc, NeedsAPIKey) else getattr(exc, "headers", None)
    if isinstance(exc, NeedsAPIKey):
        settings = getattr(request.app.state, "settings", None)
        if settings is not None and settings.compute_disabled:  # no key to send: say why, and what enables it
            asked = exc.detail.partition(": send the API key")[0]  # what the store said was asked
            detail = compute_disabled_detail(settings.host, asked)
            return JSONResponse({"detail": detail}, status_code=ComputeDisabled.status_code)
    if isinstance(exc, BadParameter):
        error = {"type": "value_error", "loc": list(exc.loc), "msg": exc.detail, "input": json_safe(exc.value)}
        return JSONResponse({"detail": [error]}, status_code=exc.status_code)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)


async def validation_error_handler(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422, with every ``input`` and ``ctx`` JSON-safe (:func:`json_safe`). FastAPI's own handler echoes
    the input as sent: ``{"anchor": NaN}`` or ``{"size": 1e309}`` (which Python reads as infinity), or a body of
    invalid UTF-8 sent as text, made its answer fail to encode and the client got a plain-text 500. Made safe
    before FastAPI's encoder (which cannot decode such bytes) and after it (which may make non-finite floats)."""
    assert isinstance(exc, RequestValidationError)
    errors = json_safe(jsonable_encoder(json_safe(exc.errors())))
    return JSONResponse({"detail": errors}, status_code=422)


async def internal_error_handler(request: Request, exc: Exception) -> JSONResponse:
    """A JSON 500 for any unexpected exception (Starlette's own answer is plain text). Starlette's
    ServerErrorMiddleware sends it, then re-raises the exception for the server to log: uvicorn logs it once,
    with its traceback, so this handler logs nothing itself."""
    from labeldist.kinds import KindError

    if isinstance(exc, KindError):  # a kind's distance (a plugin's) misbehaved: say which, the client cannot help
        return JSONResponse({"detail": f"{INTERNAL_ERROR}: {exc}"}, status_code=500)
    return JSONResponse({"detail": INTERNAL_ERROR}, status_code=500)


def error_responses(*codes: int) -> dict[int | str, dict[str, object]]:
    """``responses=`` entries documenting the given error codes with a ``{"detail": str}`` body."""
    from labeldist.api.answers.schemas import ErrorDetail

    text = {
        400: "the body cannot be read (not UTF-8, or a bad Content-Length)",
        401: "computing distances on demand needs the API key (X-API-Key header)",
        403: "computing distances on demand is disabled: served off loopback with no API key (LABELDIST_API_KEY)",
        404: "unknown store or item",
        408: "the request body did not arrive in time (LABELDIST_BODY_TIMEOUT_S)",
        413: "request too large (over a configured limit)",
        503: "store not complete (still being written, or abandoned), or corrupted on disk",
    }
    return {code: {"model": ErrorDetail, "description": text[code]} for code in codes}
