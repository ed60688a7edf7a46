"""A shortcut past FastAPI's routing, dependency and parameter machinery for the two requests a training job
sends most: ``GET .../items/{index}/neighbors[?k=K]`` and ``POST .../batches`` with a JSON body.

This pure-ASGI middleware answers a request itself only when it passes the route's schema, and then runs the
routes' own code (:func:`labeldist.api.routers.neighbors.check_neighbors`,
:func:`~labeldist.api.routers.neighbors.neighbors_answer`, :func:`labeldist.api.routers.batches.batches_response`),
so that its answers, errors included, are byte for byte the app's. :data:`ROUTE_INPUTS` lists what FastAPI solves
for each route (a test fails when a route gains an input). Everything else goes on to the FastAPI app unchanged.
``LABELDIST_FAST_PATH=false`` turns it off. docs/internals.md, "The service's fast path"; the figures are in
BENCHMARKS.md.
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

from pydantic import TypeAdapter
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from labeldist.api.answers.schemas import BatchesByAnchors, BatchesByCount
from labeldist.api.deps import compute_allowed
from labeldist.api.errors import APIError, api_error_handler, internal_error_handler
from labeldist.api.routers.batches import batches_response
from labeldist.api.routers.neighbors import check_neighbors, neighbors_answer
from labeldist.api.serving.compute import guard_for
from labeldist.api.serving.registry import ServedStore
from labeldist.view.minibatch import MAX_INDEX  # the largest index or k the routes' schemas accept

# canonical numbers only (no sign, no leading zero, no other digits than 0-9); others go to FastAPI
_NEIGHBORS = re.compile(r"/v1/stores/([^/]+)/items/(0|[1-9][0-9]{0,9})/neighbors")
_K = re.compile(rb"k=([1-9][0-9]{0,9})")
_BATCHES = re.compile(r"/v1/stores/([^/]+)/batches")
#: what FastAPI runs for each route this middleware answers: path, query and header parameters, the body, and
#: the dependencies by name. The fast path runs the same: tests/api/test_api_fastpath.py fails when a route
#: gains one that is not listed here, so that the shortcut never skips a check the route makes.
ROUTE_INPUTS = {
    ("GET", "/v1/stores/{store}/items/{index}/neighbors"): {
        "path:store",
        "path:index",
        "query:k",
        "query:include_labels",
        "depends:get_store",
    },
    ("POST", "/v1/stores/{store}/batches"): {
        "path:store",
        "query:format",
        "body:body",
        "depends:get_store",
        "depends:APIKeyHeader",
    },
}
#: the route's body, validated the way FastAPI validates it (python mode, on the parsed JSON)
_BATCHES_BODY: TypeAdapter[BatchesByAnchors | BatchesByCount] = TypeAdapter(BatchesByAnchors | BatchesByCount)


class FastPath:
    """Answers well-formed neighbour and batch requests of served stores itself; hands on all others.

    ``state``: the app's state (its ``registry`` and ``settings``), where the fast path sits in front of the app
    (:class:`labeldist.api.main.ServiceApp`: before Starlette's middleware stack, whose layers a request that this
    answers never needs); None: ``scope["app"].state``, as a middleware inside the app."""

    def __init__(self, app: ASGIApp, state: Any = None) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            method = scope["method"]
            if method == "GET":
                match = _NEIGHBORS.fullmatch(scope["path"])
                if match is not None and await self._neighbors(scope, send, match):
                    return
            elif method == "POST":
                match = _BATCHES.fullmatch(scope["path"])
                if match is not None and not scope["query_string"]:
                    receive = await self._batches(scope, receive, send, match)
                    if receive is None:
                        return
        await self.app(scope, receive, send)

    def _state(self, scope: Scope) -> Any:
        state = self.state if self.state is not None else getattr(scope.get("app"), "state", None)
        return state if state is not None and hasattr(state, "registry") else None

    async def _neighbors(self, scope: Scope, send: Send, match: re.Match[str]) -> bool:
        """Answer and return True, or return False having sent nothing."""
        state = self._state(scope)
        query = scope["query_string"]
        k_match = _K.fullmatch(query) if query else None
        if state is None or (query and k_match is None):
            return False
        store = state.registry.peek(match.group(1))  # a changed store: FastAPI's route reloads it
        if not isinstance(store, ServedStore):
            return False
        index = int(match.group(2))
        k = int(k_match.group(1)) if k_match is not None else None
        if index > MAX_INDEX or (k is not None and k > MAX_INDEX):  # the route's schema answers those (422)
            return False
        try:
            check_neighbors(store, state.settings, index, k)  # the route's own checks, not a copy of them
            response = await neighbors_answer(store, index, k)
        except APIError as exc:
            response = await api_error_handler(Request(scope), exc)
        except Exception as exc:
            await _internal_error(scope, send, exc)
        await response(scope, _no_receive, send)
        return True

    async def _batches(self, scope: Scope, receive: Receive, send: Send, match: re.Match[str]) -> Receive | None:
        """Answer and return None, or return the ``receive`` to hand on (the body read so far, then the rest)."""
        state = self._state(scope)
        if state is None:
            return receive
        store = state.registry.peek(match.group(1))  # a changed store: FastAPI's route reloads it
        if not isinstance(store, ServedStore):
            return receive
        content_type = length = key = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value
            elif name == b"content-length":
                length = value
            elif name == b"accept" and b"application/x-npz" in value:
                return receive
            elif name == b"x-api-key" and key is None:
                key = value.decode("latin-1")
        settings = state.settings
        if content_type != b"application/json" or length is None or not length.isdigit():
            return receive
        if int(length) > settings.max_body_bytes:
            return receive
        chunks: list[bytes] = []
        while True:  # at most Content-Length bytes: BodySizeLimit, outside, never raises on them
            message = await receive()
            if message["type"] != "http.request":  # the client went away: FastAPI sees the same
                return _replay(b"".join(chunks), receive, message)
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            parsed = _BATCHES_BODY.validate_python(json.loads(body))
        except Exception:  # not JSON, or not a valid body: FastAPI answers it (its 422 or 400)
            return _replay(body, receive)
        try:
            allow = compute_allowed(settings, key or None)
            response = await batches_response(store, settings, allow, parsed, False, guard_for(state), receive)
        except APIError as exc:
            response = await api_error_handler(Request(scope), exc)
        except Exception as exc:
            await _internal_error(scope, send, exc)
        await response(scope, _no_receive, send)
        return None


async def _internal_error(scope: Scope, send: Send, exc: Exception) -> NoReturn:
    """What Starlette's ServerErrorMiddleware does with the app's handler, for the fast path in front of it: the
    JSON 500 of :func:`~labeldist.api.errors.internal_error_handler`, then the exception raised again for the
    server to log with its traceback."""
    response = await internal_error_handler(Request(scope), exc)
    await response(scope, _no_receive, send)
    raise exc


def _replay(body: bytes, receive: Receive, then: Message | None = None) -> Receive:
    """A ``receive`` that gives the ``body`` read, whole, then ``then`` (the message that stopped the reading,
    if one did), then goes on with ``receive``."""
    queue: list[Message] = [{"type": "http.request", "body": body, "more_body": then is not None}]
    if then is not None:
        queue.append(then)

    async def replay() -> Message:
        return queue.pop(0) if queue else await receive()

    return replay


async def _no_receive() -> Message:  # a plain Response never reads
    raise RuntimeError("the fast path's answers do not read the request")
