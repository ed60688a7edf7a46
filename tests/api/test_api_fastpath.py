"""api/routers/fastpath.py: the same answers, byte for byte, as the FastAPI routes, for well-formed requests (which it
answers) and for every other request (which it hands on, body included)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import labeldist.api.routers.batches
import labeldist.api.routers.fastpath
import labeldist.api.routers.neighbors
from labeldist.api.main import create_app
from labeldist.api.routers.fastpath import FastPath
from tests.api.api_helpers import DENSE, INCOMPLETE, KNN, N_ITEMS, TINY_STORE, K, make_settings

NB = "/v1/stores/{}/items/{}/neighbors"
#: well-formed GET paths: answered by the fast path
FAST_GETS = [
    *(NB.format(s, i) + q for s in (DENSE, KNN, TINY_STORE) for i in (0, 7, 11) for q in ("", "?k=1", f"?k={K}")),
    NB.format(DENSE, N_ITEMS - 1) + "?k=3",
]
#: every other GET: handed on to FastAPI
SLOW_GETS = [
    NB.format(DENSE, N_ITEMS),  # 404
    NB.format(TINY_STORE, 12),
    NB.format(DENSE, "-1"),  # 422
    NB.format(DENSE, "007"),  # not canonical: FastAPI answers (item 7)
    NB.format(DENSE, "+7"),
    NB.format(DENSE, 2**31),
    NB.format(DENSE, 5) + "?k=0",
    NB.format(DENSE, 5) + f"?k={K + 1}",  # more than the store's k: 422
    NB.format(DENSE, 5) + "?k=1001",  # over LABELDIST_MAX_K: 413
    NB.format(DENSE, 5) + "?k=abc",
    NB.format(DENSE, 5) + "?k=05",
    NB.format(DENSE, 5) + "?k=3&k=4",
    NB.format(DENSE, 5) + "?k=3&other=1",
    NB.format(DENSE, 5) + "/",  # a redirect
    NB.format(INCOMPLETE, 5),  # 503
    NB.format("nope", 5),  # 404
    NB.format("notes", 5),  # a folder that is no store
    "/healthz",
]


def _batch(**body: Any) -> dict[str, Any]:
    return {"size": 20, "neighbors": 4, "seed": 11, **body}


JSON = {"content-type": "application/json"}
#: POST requests to .../batches: (store, query, headers, body bytes)
POSTS: list[tuple[str, str, dict[str, str], bytes]] = [
    *((s, "", JSON, json.dumps(_batch(anchors=[0, 7, N_ITEMS - 1])).encode()) for s in (DENSE, KNN)),
    *((s, "", JSON, json.dumps(_batch(count=3, pairwise=True)).encode()) for s in (DENSE, KNN)),
    (TINY_STORE, "", JSON, json.dumps({"anchors": [2], "size": 12, "neighbors": 11, "seed": 1}).encode()),
    (DENSE, "", JSON, json.dumps(_batch(anchors=[N_ITEMS])).encode()),  # 404 from the shared code
    (DENSE, "", JSON, json.dumps(_batch(anchors=[1], size=2000)).encode()),  # 413 from the shared code
    (DENSE, "", JSON, json.dumps(_batch(anchors=[1], neighbors=25)).encode()),  # 422 from the shared code
    (DENSE, "", JSON, json.dumps(_batch(anchors=[1], extra=1)).encode()),  # not valid: FastAPI's 422
    (DENSE, "", JSON, json.dumps(_batch(anchors=[1], count=2)).encode()),
    (DENSE, "", JSON, json.dumps(_batch(anchors=["1"])).encode()),
    (DENSE, "", JSON, json.dumps(_batch(anchors=[1], seed=True)).encode()),
    (DENSE, "", JSON, b"[1, 2"),  # not JSON
    (DENSE, "", JSON, b"\xff\xfe"),
    (DENSE, "", JSON, b""),
    (DENSE, "", JSON, b"[" * 100_000 + b"]" * 100_000),  # too deep for json.loads
    (DENSE, "", {"content-type": "text/plain"}, json.dumps(_batch(anchors=[1])).encode()),
    (DENSE, "", {"content-type": "application/json; charset=utf-8"}, json.dumps(_batch(anchors=[1])).encode()),
    (DENSE, "?format=json", JSON, json.dumps(_batch(anchors=[1])).encode()),
    (DENSE, "", {**JSON, "accept": "application/x-npz"}, json.dumps(_batch(anchors=[1])).encode()),
    (INCOMPLETE, "", JSON, json.dumps(_batch(anchors=[1])).encode()),
    ("nope", "", JSON, json.dumps(_batch(anchors=[1])).encode()),
]


def _answer(r: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    return r.status_code, sorted(r.headers.items()), r.content


@pytest.fixture(scope="module")
def pair(stores_dir: Path) -> Iterator[tuple[TestClient, TestClient]]:
    """Two apps over the same stores: with the fast path (the default) and without."""
    with TestClient(create_app(make_settings(stores=stores_dir))) as fast:
        with TestClient(create_app(make_settings(stores=stores_dir, fast_path=False))) as slow:
            yield fast, slow


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the answers the fast path built (the routes call their own module's functions)."""
    calls: list[str] = []
    for name in ("neighbors_answer", "batches_response"):
        original = getattr(labeldist.api.routers.fastpath, name)

        def wrapped(*args: Any, _name: str = name, _original: Any = original) -> Any:
            calls.append(_name)
            return _original(*args)

        monkeypatch.setattr(labeldist.api.routers.fastpath, name, wrapped)
    return calls


def test_neighbors_answers_are_the_routes(pair: tuple[TestClient, TestClient], spy: list[str]) -> None:
    fast, slow = pair
    for path in FAST_GETS + SLOW_GETS:
        spy.clear()
        got = _answer(fast.get(path, follow_redirects=False))
        want = _answer(slow.get(path, follow_redirects=False))
        assert got == want, path
        assert spy == (["neighbors_answer"] if path in FAST_GETS else []), path
        assert want[0] == 200 or path not in FAST_GETS, path


def test_batches_answers_are_the_routes(pair: tuple[TestClient, TestClient], spy: list[str]) -> None:
    fast, slow = pair
    answered = 0
    for store, query, headers, body in POSTS:
        spy.clear()
        url = f"/v1/stores/{store}/batches{query}"
        got = _answer(fast.post(url, content=body, headers=headers))
        want = _answer(slow.post(url, content=body, headers=headers))
        assert got == want, (store, query, headers, body[:80])
        answered += spy == ["batches_response"]
    assert answered == 8, "the well-formed JSON bodies, those the shared code refuses included"


def test_api_key_is_read_like_the_route(stores_dir: Path, spy: list[str]) -> None:
    """A kNN-only store computes pairs for a pairwise matrix: 401 without the key, 200 with it."""
    body = json.dumps(_batch(anchors=[3], pairwise=True)).encode()
    answers = []
    for fast_path in (True, False):
        settings = make_settings(stores=stores_dir, api_key="s3cret", pair_cache_entries=0, fast_path=fast_path)
        with TestClient(create_app(settings)) as c:
            url = f"/v1/stores/{KNN}/batches"
            keys = ({}, {"x-api-key": "wrong"}, {"x-api-key": ""}, {"x-api-key": "s3cret"})
            answers.append([_answer(c.post(url, content=body, headers={**JSON, **key})) for key in keys])
    assert answers[0] == answers[1]
    assert [status for status, _, _ in answers[0]] == [401, 401, 401, 200]
    assert spy == ["batches_response"] * 4


def test_a_body_read_is_handed_on_whole() -> None:
    """A request the fast path reads but does not answer reaches the app with every message, in order."""
    seen: list[dict[str, Any]] = []

    async def app(scope: dict, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            seen.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                return

    class State:
        store = labeldist.api.routers.fastpath.ServedStore.__new__(labeldist.api.routers.fastpath.ServedStore)
        registry = type("R", (), {"peek": lambda self, name: {"s": State.store}.get(name)})()
        settings = make_settings()

    def scope() -> dict[str, Any]:
        headers = [(b"content-type", b"application/json"), (b"content-length", b"7")]
        return {
            "type": "http",
            "method": "POST",
            "path": "/v1/stores/s/batches",
            "query_string": b"",
            "headers": headers,
            "root_path": "",
            "app": type("A", (), {"state": State})(),
        }

    def run(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen.clear()
        queue = list(messages)

        async def receive() -> dict[str, Any]:
            return queue.pop(0)

        async def send(message: dict[str, Any]) -> None:
            raise AssertionError("nothing is sent")

        asyncio.run(FastPath(app)(scope(), receive, send))
        return seen

    chunks = [
        {"type": "http.request", "body": b"[1,", "more_body": True},
        {"type": "http.request", "body": b" 2, 3]", "more_body": False},
    ]
    assert run(chunks) == [{"type": "http.request", "body": b"[1, 2, 3]", "more_body": False}]
    gone = [chunks[0], {"type": "http.disconnect"}]
    assert run(gone) == [{"type": "http.request", "body": b"[1,", "more_body": True}, {"type": "http.disconnect"}]


def _route_inputs(dependant: Any, out: set[str]) -> set[str]:
    """Everything FastAPI solves for a route: its parameters by kind and its dependencies by name, recursively."""
    for kind in ("path", "query", "header", "cookie", "body"):
        out.update(f"{kind}:{p.alias}" for p in getattr(dependant, f"{kind}_params"))
    for sub in dependant.dependencies:
        out.add(f"depends:{getattr(sub.call, '__name__', None) or type(sub.call).__name__}")
        _route_inputs(sub, out)
    return out


def test_the_fast_path_knows_every_input_of_the_routes_it_answers() -> None:
    """A dependency added to a route (a rate limit, an auth check) must be run by the fast path too: this fails
    until :data:`labeldist.api.routers.fastpath.ROUTE_INPUTS` lists it, i.e. until someone has looked at the fast
    path."""
    from labeldist.api.routers import batches, neighbors

    routes = {
        (method, r.path): r
        for router in (neighbors.router, batches.router)
        for r in router.routes
        for method in r.methods
    }
    for key, expected in labeldist.api.routers.fastpath.ROUTE_INPUTS.items():
        assert _route_inputs(routes[key].dependant, set()) == expected, key


@pytest.mark.parametrize("route", ["neighbors", "batches"])
def test_an_unexpected_error_is_answered_as_the_app_answers_it(
    stores_dir: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    """A bug under the fast path (which sits in front of Starlette's ServerErrorMiddleware): the same JSON 500 as
    the app's, saying nothing of it, and the exception raised again for the server to log."""

    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug, with a secret path /srv/x")

    name = "neighbors_answer" if route == "neighbors" else "batches_response"
    monkeypatch.setattr(labeldist.api.routers.fastpath, name, boom)
    monkeypatch.setattr(
        labeldist.api.routers.neighbors if route == "neighbors" else labeldist.api.routers.batches, name, boom
    )

    def request(c: TestClient) -> Any:
        if route == "neighbors":
            return c.get(NB.format(DENSE, 3))
        return c.post(f"/v1/stores/{DENSE}/batches", content=json.dumps(_batch(anchors=[3])).encode(), headers=JSON)

    answers = []
    for fast_path in (True, False):
        app = create_app(make_settings(stores=stores_dir, fast_path=fast_path))
        with TestClient(app, raise_server_exceptions=False) as c:
            answers.append(_answer(request(c)))
        with TestClient(app) as c, pytest.raises(RuntimeError, match="a bug"):
            request(c)
    assert answers[0] == answers[1]
    status, _, content = answers[0]
    assert status == 500 and json.loads(content)["detail"].startswith("internal error") and b"/srv/x" not in content
