"""A pure-ASGI limit on request bodies: over ``max_bytes`` is answered 413 before the body is parsed."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodySizeLimit:
    """413 for a request whose Content-Length, or whose streamed body, is over ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

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
        received = 0

        async def limited() -> Message:  # a chunked body has no Content-Length: count as it arrives
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise HTTPException(413, self._detail(received))
            return message

        await self.app(scope, limited, send)

    def _detail(self, size: int) -> str:
        return f"request body of {size} bytes is over the limit of {self.max_bytes} (LABELDIST_MAX_BODY_BYTES)"


async def _answer(send: Send, status: int, detail: str) -> None:
    import json

    body = json.dumps({"detail": detail}).encode()
    headers: list[Any] = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
