"""Request bodies the service must refuse cleanly, in-process and through a real uvicorn on 127.0.0.1.

- Non-finite numbers (NaN, Infinity, -Infinity, 1e309, -1e309) anywhere in a JSON body: a 422 whose JSON never
  holds a non-finite number (FastAPI's handler echoed them, failed to encode them, and answered a plain 500).
- Bodies that never finish arriving: a 408 and the connection closed, on the fast path and through FastAPI's
  routes; a body that trickles in but completes in time is answered as usual.
- Requests uvicorn cannot parse: its own 400, as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from labeldist.api.main import create_app
from tests.api.api_helpers import DENSE, KNN, make_settings
from tests.processes import Service, free_port

#: seconds a socket waits for the server: generous, the machine may be busy; no assertion is timed tighter
WAIT = 30.0
#: the live server's body deadline: short, so that the tests are quick, yet far above the trickle below
BODY_TIMEOUT_S = 3.0

#: (route, body, a field it names, how the field's non-finite value is echoed): each value in each numeric field
NON_FINITE = [
    ("distances", '{"anchor": NaN, "items": [1]}', "anchor", "NaN"),
    ("distances", '{"anchor": 0, "items": [1, Infinity]}', "items", "Infinity"),
    ("distances", '{"pairs": [[0, -Infinity]]}', "pairs", "-Infinity"),
    ("distances", '{"anchor": 1e309, "items": [1]}', "anchor", "Infinity"),
    ("distances", '{"pairs": [[-1e309, 1]]}', "pairs", "-Infinity"),
    ("batches", '{"count": 2, "size": 1e309}', "size", "Infinity"),
    ("batches", '{"count":2,"size":8,"seed":Infinity}', "seed", "Infinity"),
    ("batches", '{"count": NaN, "size": 4}', "count", "NaN"),
    ("batches", '{"count": -1e309, "size": 4}', "count", "-Infinity"),
    ("batches", '{"anchors": [0, -Infinity], "size": 4}', "anchors", "-Infinity"),
    ("batches", '{"count": 2, "size": 4, "seed": -1e309}', "seed", "-Infinity"),
    ("batches", '{"count": 2, "size": 4, "neighbors": NaN}', "neighbors", "NaN"),
]


def strict_json(data: bytes) -> object:
    """``data`` parsed as standard JSON: NaN, Infinity and -Infinity, which Python's json accepts, refused."""

    def refuse(token: str) -> None:
        raise ValueError(f"not JSON: {token}")

    return json.loads(data, parse_constant=refuse)


def check_non_finite_answer(status: int, content_type: str, data: bytes, field: str, echoed: str) -> None:
    """A 422 in standard JSON, naming ``field`` and echoing its value as the string ``echoed``."""
    assert status == 422, data
    assert content_type.startswith("application/json")
    errors = strict_json(data)["detail"]
    assert isinstance(errors, list) and errors
    assert any(field in e["loc"] for e in errors), errors
    assert any(field in e["loc"] and echoed in json.dumps(e["input"]) for e in errors), errors


# ---------------------------------------------------------------- in-process
@pytest.fixture(scope="module", params=[True, False], ids=["fast_path", "no_fast_path"])
def app_client(request: pytest.FixtureRequest, stores_dir: Path) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(stores=stores_dir, fast_path=request.param))) as c:
        yield c


@pytest.mark.parametrize(("route", "body", "field", "echoed"), NON_FINITE)
def test_non_finite_json_is_a_422_in_process(
    app_client: TestClient, route: str, body: str, field: str, echoed: str
) -> None:
    r = app_client.post(f"/v1/stores/{DENSE}/{route}", content=body, headers={"content-type": "application/json"})
    check_non_finite_answer(r.status_code, r.headers["content-type"], r.content, field, echoed)


def test_a_body_that_stops_arriving_is_a_408_at_the_asgi_level() -> None:
    """BodySizeLimit alone, around an app that reads the body and catches nothing (as the fast path does):
    the 408 is answered by the middleware itself, with Connection: close."""
    import anyio

    from labeldist.api.middleware import BodySizeLimit

    async def reader(scope, receive, send) -> None:  # reads to the end, then would answer 200
        while (await receive()).get("more_body", False):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"read"})

    async def run() -> list[dict]:
        parts = [{"type": "http.request", "body": b'{"count"', "more_body": True}]

        async def receive() -> dict:
            if parts:
                return parts.pop(0)
            await anyio.sleep_forever()  # the client sends nothing more

        sent: list[dict] = []

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "headers": [(b"content-length", b"20")]}
        with anyio.fail_after(WAIT):
            await BodySizeLimit(reader, max_bytes=1 << 20, timeout_s=0.2)(scope, receive, send)
        return sent

    start, body = anyio.run(run)
    assert start["status"] == 408
    assert (b"connection", b"close") in start["headers"]
    assert "not complete after 0.2 s (8 bytes received)" in strict_json(body["body"])["detail"]


# ---------------------------------------------------------------- through a real uvicorn
class Running:
    """A started server whose output is read as it comes: a pipe nobody reads fills up (a traceback or two) and
    then blocks the server's event loop, which stops answering."""

    def __init__(self, service: Service) -> None:
        self.service = service.start()
        assert service.proc is not None and service.proc.stdout is not None
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self.lines.extend, args=(service.proc.stdout,), daemon=True)
        self.reader.start()

    def stop(self) -> str:
        """Stop the server (SIGTERM to its session) and return everything it logged."""
        proc = self.service.proc
        assert proc is not None
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=WAIT * 2)
        self.reader.join(WAIT)  # to the end of its output
        return "".join(self.lines)


@pytest.fixture(scope="module")
def server(stores_dir: Path) -> Iterator[Service]:
    """``labeldist serve`` on 127.0.0.1 with a short body deadline."""
    running = Running(Service(stores_dir, LABELDIST_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S)))
    try:
        yield running.service
    finally:
        running.stop()


def exchange(
    port: int, parts: list[bytes], gap: float = 0.0, wait_close: bool = True
) -> tuple[int, dict[str, str], bytes, bool]:
    """Send ``parts`` to 127.0.0.1:``port`` (the first with the request head) ``gap`` seconds apart, then send
    nothing more. Returns the status, headers and body of the answer, and whether the server then closed the
    connection (False if it was still open ``WAIT`` seconds later, or if not ``wait_close``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        for n, part in enumerate(parts):
            if n:
                time.sleep(gap)
            sock.sendall(part)
        data = b""
        try:
            while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
                data += chunk
        except TimeoutError:
            pytest.fail(f"no answer within {WAIT} s")
        head, _, body = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {name.strip().lower(): value.strip() for name, value in (line.split(":", 1) for line in lines)}
        while len(body) < int(headers.get("content-length", 0)) and (chunk := sock.recv(65536)):
            body += chunk
        try:
            closed = wait_close and sock.recv(1) == b""
        except TimeoutError:
            closed = False
    return int(status_line.split()[1]), headers, body, closed


def request_head(path: str, length: int | None, content_type: str = "application/json", close: bool = False) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Type: {content_type}"]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_non_finite_json_is_a_422_through_uvicorn_and_nothing_is_logged(stores_dir: Path) -> None:
    """The issue's seven cases and more, each on a real server: a JSON 422 each time, and no traceback logged."""
    running = Running(Service(stores_dir))
    try:
        answers = []
        for route, body, field, echoed in NON_FINITE:
            request = request_head(f"/v1/stores/{DENSE}/{route}", len(body), close=True) + body.encode()
            status, headers, data, _ = exchange(running.service.port, [request])
            answers.append((status, headers.get("content-type", ""), data, field, echoed))
    finally:
        log = running.stop()
    for answer in answers:
        check_non_finite_answer(*answer)
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log


@pytest.mark.parametrize(
    ("path", "chunked"),
    [
        (f"/v1/stores/{DENSE}/batches", False),
        (f"/v1/stores/{KNN}/distances", False),
        (f"/v1/stores/{DENSE}/distances", True),
    ],
    ids=["batches-fast-path", "distances-route", "chunked-route"],
)
def test_a_body_that_stops_arriving_is_a_408_and_the_connection_closed(
    server: Service, path: str, chunked: bool
) -> None:
    """Headers and part of the body, then nothing: a JSON 408 once the deadline has passed, then the server
    closes the connection. With a Content-Length, the batches request is read by the fast path (api/routers/fastpath.py,
    outside FastAPI's exception handling); the others by FastAPI's route."""
    body = b'{"count": 2, "size": 8}' if "batches" in path else b'{"anchor": 0, "items": [1, 2, 3]}'
    part = body[:9]
    if chunked:
        head, sent = request_head(path, None), b"%x\r\n%s\r\n" % (len(part), part)
    else:
        head, sent = request_head(path, len(body)), part
    began = time.monotonic()
    status, headers, data, closed = exchange(server.port, [head, sent], gap=0.05)
    assert status == 408, data
    assert headers["content-type"].startswith("application/json")
    detail = strict_json(data)["detail"]
    assert f"not complete after {BODY_TIMEOUT_S:g} s" in detail and "LABELDIST_BODY_TIMEOUT_S" in detail
    assert headers.get("connection") == "close"
    assert closed, "the server closed the connection"
    assert time.monotonic() - began >= BODY_TIMEOUT_S * 0.9, "not before the deadline"


@pytest.mark.parametrize(
    "path", [f"/v1/stores/{DENSE}/batches", f"/v1/stores/{KNN}/distances"], ids=["batches-fast-path", "distances-route"]
)
def test_a_body_that_trickles_in_before_the_deadline_is_answered(server: Service, path: str) -> None:
    """Six pieces 60 ms apart (a third of a second, against a deadline of several): answered 200 as usual."""
    body = b'{"count": 2, "size": 8, "seed": 5}' if "batches" in path else b'{"anchor": 0, "items": [1, 2, 3]}'
    pieces = [body[i : i + 6] for i in range(0, len(body), 6)]
    status, headers, data, _ = exchange(server.port, [request_head(path, len(body), close=True), *pieces], gap=0.06)
    assert status == 200, data
    answer = strict_json(data)
    if "batches" in path:
        assert answer["seed"] == 5 and len(answer["batches"]) == 2
    else:
        assert len(answer["distances"]) == 3


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"NOT AN HTTP REQUEST\r\n\r\n",
        b"POST /v1/stores HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header Name: 1\r\n\r\n",
    ],
    ids=["request-line", "content-length", "header-name"],
)
def test_uvicorns_own_400_is_json(server: Service, request_bytes: bytes) -> None:
    """Requests that uvicorn cannot parse never reach the app: its own 400, shaped as JSON by api/server.py."""
    status, headers, data, closed = exchange(server.port, [request_bytes])
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert strict_json(data)["detail"].startswith("Invalid HTTP request received")
    assert closed


def test_the_other_bad_bodies_are_json_through_uvicorn(server: Service) -> None:
    """Malformed JSON, invalid UTF-8 (as JSON and as text), a wrong content type, an unknown route and method:
    a 4xx with a JSON ``detail`` each, as the real server answers them."""
    path = f"/v1/stores/{DENSE}/distances"
    cases = [
        (b"{not json", "application/json", 422),
        (b'{"anchor": "\xff\xfe"}', "application/json", 400),
        (b"\xff\xfe{", "text/plain", 422),
        (b'{"anchor": 0, "items": [1]}', "text/plain", 422),
    ]
    for body, content_type, expected in cases:
        status, headers, data, _ = exchange(server.port, [request_head(path, len(body), content_type, True) + body])
        assert status == expected, (body, data)
        assert headers["content-type"] == "application/json" and strict_json(data)["detail"], (body, data)
    wrong = [
        b"DELETE /v1/stores HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /v2/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ]
    for request_bytes, expected in zip(wrong, (405, 404)):
        status, headers, data, _ = exchange(server.port, [request_bytes])
        assert status == expected and headers["content-type"] == "application/json" and strict_json(data)["detail"]


def test_a_websocket_handshake_is_answered_by_the_app_as_json(server: Service) -> None:
    """The service has no WebSocket route: a handshake is answered as the plain HTTP request it also is, by the
    app, in JSON (uvicorn's WebSocket support answered an empty text/plain 403)."""
    upgrade = (
        "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    )
    for path, expected in (("/v1/stores/nope", 404), (f"/v1/stores/{DENSE}", 200)):
        request = f"GET {path} HTTP/1.1\r\nHost: x\r\n{upgrade}\r\n".encode()
        status, headers, data, _ = exchange(server.port, [request], wait_close=False)
        assert status == expected and headers["content-type"] == "application/json", data
        assert strict_json(data)


@contextlib.contextmanager
def uvicorn_in_thread(app: object, http: object, lifespan: str = "off") -> Iterator[int]:
    """A real uvicorn serving ``app`` on 127.0.0.1 with protocol class ``http``, in a thread; yields its port.
    uvicorn leaves the logging alone (log_config=None): its records reach pytest's caplog."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, http=http, ws="none", lifespan=lifespan, log_config=None, access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + WAIT * 2
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.05)
        yield port
    finally:
        server.should_exit = True
        thread.join(WAIT)


@pytest.mark.parametrize("protocol", ["JSONErrorsH11", "JSONErrorsHttpTools"])
def test_both_protocol_classes_answer_uvicorns_400_as_json(protocol: str) -> None:
    """The h11 class too (uvicorn's choice where httptools is missing), each in a real uvicorn in a thread."""
    import importlib.util

    import labeldist.api.server

    if protocol == "JSONErrorsHttpTools" and importlib.util.find_spec("httptools") is None:
        pytest.skip("httptools is not installed: uvicorn runs h11")

    async def app(scope, receive, send) -> None:  # the 400 is sent before any app is called
        raise AssertionError("an unparsable request reached the app")

    with uvicorn_in_thread(app, getattr(labeldist.api.server, protocol)) as port:
        status, headers, data, closed = exchange(port, [b"NOT AN HTTP REQUEST\r\n\r\n"])
    assert status == 400 and headers["content-type"] == "application/json" and closed
    assert "Invalid HTTP request received" in strict_json(data)["detail"]


def test_an_unexpected_error_is_a_json_500_logged_once(stores_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Through a real uvicorn: a route that fails unexpectedly is answered a JSON 500 that tells nothing of the
    exception, and the traceback is logged once (by uvicorn; the app's handler logs nothing)."""
    import logging

    from labeldist.api.server import HTTP_PROTOCOL

    app = create_app(make_settings(stores=stores_dir))

    async def boom() -> None:
        raise RuntimeError("a bug, with a secret path /srv/x")

    app.add_api_route("/boom", boom)
    with caplog.at_level(logging.INFO), uvicorn_in_thread(app, HTTP_PROTOCOL, lifespan="on") as port:
        request = b"GET /boom HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        status, headers, data, closed = exchange(port, [request])
    assert status == 500 and headers["content-type"] == "application/json" and closed
    assert strict_json(data)["detail"].startswith("internal error") and b"/srv/x" not in data
    failures = [r for r in caplog.records if r.exc_info and "a bug" in str(r.exc_info[1])]
    assert len(failures) == 1, [r.getMessage() for r in caplog.records]
    assert failures[0].name == "uvicorn.error"
