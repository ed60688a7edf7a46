"""``labeldist serve``: run the app with uvicorn, with uvicorn's own 400s answered as JSON."""

from __future__ import annotations

import copy
import importlib.util
import json
import logging
import os
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from labeldist.api.settings import get_settings

log = logging.getLogger("labeldist.api")


def _invalid_request_body(msg: str) -> bytes:
    """The JSON body of the 400 that uvicorn answers itself, for a request it cannot parse."""
    detail = f"{msg.rstrip('.')}: the request line, a header, the Content-Length or the chunked encoding is malformed"
    return json.dumps({"detail": detail}, separators=(",", ":")).encode()  # as the app's JSONResponse writes it


# A request uvicorn cannot parse (a bad request line or header, a Content-Length that is no number, broken
# chunked encoding) never reaches the app: uvicorn answers 400 itself, in plain text, from send_400_response of
# its protocol class. That method is not a public hook, but a protocol class is a uvicorn setting (Config.http):
# these subclasses answer the same 400 as JSON. tests/api/test_api_bodies.py checks both against a real uvicorn,
# so an upgrade that renames the method fails there. uvicorn's other own answers are not shaped, and do not
# happen here: its 503 needs limit_concurrency, which is not set; its plain 500 is sent only when the app fails
# to start an answer, which the app's catch-all handler prevents; its WebSocket 403 is turned off (ws="none").
class JSONErrorsH11(H11Protocol):
    """uvicorn's h11 protocol, with its 400 for an unparsable request as JSON."""

    def send_400_response(self, msg: str) -> None:
        body = _invalid_request_body(msg)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event))
        self.transport.close()


if importlib.util.find_spec("httptools") is not None:  # what uvicorn's http="auto" picks when installed
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class JSONErrorsHttpTools(HttpToolsProtocol):
        """uvicorn's httptools protocol, with its 400 for an unparsable request as JSON."""

        def send_400_response(self, msg: str) -> None:
            body = _invalid_request_body(msg)
            content = [b"HTTP/1.1 400 Bad Request\r\n"]
            for name, value in self.server_state.default_headers:
                content += [name, b": ", value, b"\r\n"]
            content += [
                b"content-type: application/json\r\n",
                b"content-length: %d\r\n" % len(body),
                b"connection: close\r\n",
                b"\r\n",
                body,
            ]
            self.transport.write(b"".join(content))
            self.transport.close()

    HTTP_PROTOCOL = "labeldist.api.server:JSONErrorsHttpTools"
else:
    HTTP_PROTOCOL = "labeldist.api.server:JSONErrorsH11"


def _warn_compute_disabled(host: str) -> None:
    """State at start-up what serving off loopback with no API key means: no on-demand computing at all
    (:attr:`labeldist.api.settings.Settings.compute_disabled`), rather than computing for anyone who reaches the
    port."""
    log.warning(
        "serving on %s, not a loopback address, with no API key: computing distances on demand is DISABLED "
        "(requests that need it are answered 403; stored distances are served). Set LABELDIST_API_KEY to enable "
        "it for clients that send the key as X-API-Key",
        host,
    )


def serve(
    stores_dir: str | None = None,
    host: str | None = None,
    port: int | None = None,
    workers: int | None = None,
    warm: bool | None = None,
) -> int:
    """Serve the stores of ``stores_dir`` on ``host:port`` until interrupted; arguments left None come from
    the ``LABELDIST_*`` settings (``warm``: load every store's labels and models at start-up, the default; False:
    on first need). Returns the exit status."""
    import uvicorn

    # Through the environment, so that every worker process (LABELDIST_WORKERS > 1) gets the same settings.
    named = (("STORES", stores_dir), ("HOST", host), ("PORT", port), ("WORKERS", workers), ("WARM", warm))
    for name, value in named:
        if value is not None:
            os.environ[f"LABELDIST_{name}"] = str(value)
    get_settings.cache_clear()
    settings = get_settings()
    if not settings.stores.is_dir():
        log.warning("stores folder %s does not exist: no store will be served", settings.stores)
    if settings.compute_disabled:
        _warn_compute_disabled(settings.host)
    uvicorn.run(
        "labeldist.api.main:create_app",
        factory=True,
        http=HTTP_PROTOCOL,
        # No WebSocket route: an Upgrade request is answered by the app as plain HTTP (JSON), where uvicorn's
        # WebSocket support would reject it with an empty text/plain 403 (uvicorn logs "Unsupported upgrade
        # request" and, misleadingly, that no WebSocket library is installed).
        ws="none",
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        timeout_worker_healthcheck=settings.worker_healthcheck_s,
        access_log=settings.access_log,
        log_level="info",
        log_config=log_config(),
    )
    return 0


def log_config() -> dict[str, Any]:
    """uvicorn's logging configuration, with labeldist's own loggers at INFO on its console handler, in every
    worker process: what the service loads and how long it took (a store's labels, a sentence model) is said
    where its requests are."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["labeldist"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config
