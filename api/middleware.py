"""A pure-ASGI guard on request bodies: over ``max_bytes`` is answered 413 before the body is parsed, and a body
not complete ``timeout_s`` after the request began is answered 408 and its connection closed."""

from __future__ import annotations

from collections.abc import Mapping

import anyio
from fastapi import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from labeldist.errors import LabeldistError


class BodyRefused(LabeldistError, HTTPException):
    """A body refused while it is read: over the size limit (413), or not complete by the deadline (408).

    Raised from the ``receive`` that :class:`BodySizeLimit` hands on. An ``HTTPException``, so that FastAPI's body
    reading re-raises it as it is (it turns any other exception from ``receive`` into a 400) and its
    ExceptionMiddleware answers it as JSON. Where it comes out of the app unanswered, as from the fast path
    (api/routers/fastpath.py reads bodies outside that middleware), :class:`BodySizeLimit` answers it itself: either way
    the client gets the same JSON ``{"detail": ...}``, never Starlette's plain-text 500.
    """

    def __init__(self, status_code: int, detail: str, close: bool = False) -> None:
        # Connection: close makes uvicorn close the connection once answered, rather than wait for the rest
        super().__init__(status_code, detail, headers={"Connection": "close"} if close else None)


class BodySizeLimit:
    """413 for a request whose Content-Length, or whose streamed body, is over ``max_bytes``; 408 (and the
    connection closed) for a body not complete ``timeout_s`` seconds after the request reached the app."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float = 10.0) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    await _answer(send, 400, "Content-Length is not a number")
                    return
                if length > self.max_bytes:
                    await _answer(send, 413, self._detail(length))
                    return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, self._guarded(receive), watched)
        except BodyRefused as exc:  # not answered inside (the fast path): answered here, if still possible
            if started:
                raise
            await _answer(send, exc.status_code, exc.detail, exc.headers)

    def _guarded(self, receive: Receive) -> Receive:
        """``receive`` with the limits: each wait for the body bounded by what is left of the deadline, the bytes
        counted as they arrive (a chunked body has no Content-Length). Once the body is complete, later calls (a
        response waiting for the client to disconnect) go straight to ``receive``, with no deadline."""
        deadline = anyio.current_time() + self.timeout_s
        received = 0
        complete = False

        async def guarded() -> Message:
            nonlocal received, complete
            if complete:
                return await receive()
            with anyio.move_on_after(deadline - anyio.current_time()):
                message = await receive()
                if message["type"] != "http.request":  # the client went away
                    complete = True
                    return message
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyRefused(413, self._detail(received))
                complete = not message.get("more_body", False)
                return message
            raise BodyRefused(408, self._late(received), close=True)

        return guarded

    def _detail(self, size: int) -> str:
        return f"request body of {size} bytes is over the limit of {self.max_bytes} (LABELDIST_MAX_BODY_BYTES)"

    def _late(self, received: int) -> str:
        return (
            f"request body not complete after {self.timeout_s:g} s ({received} bytes received): the connection is "
            "closed (LABELDIST_BODY_TIMEOUT_S)"
        )


async def _answer(send: Send, status: int, detail: str, headers: Mapping[str, str] | None = None) -> None:
    """Answer ``{"detail": detail}`` as the app's handlers do (the same JSONResponse: the same bytes)."""
    response = JSONResponse({"detail": detail}, status_code=status, headers=headers)
    await send({"type": "http.response.start", "status": status, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})
