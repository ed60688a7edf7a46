"""The HTTP client: retries with backoff, clear errors, .npz decoding (against httpx.MockTransport), and a
service that is not there at all (a real refused connection)."""

from __future__ import annotations

import io
import json
import socket

import httpx
import numpy as np
import pytest

from labeldist.client.http import LabelDistClient, RequestRejected, ServiceUnavailable, StoreNotFound


def npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def client_for(handler) -> LabelDistClient:
    return LabelDistClient("http://svc.test:1", retries=3, backoff=0.0, transport=httpx.MockTransport(handler))


def test_retries_5xx_then_answers() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) < 3:
            return httpx.Response(503, json={"detail": "busy"})
        return httpx.Response(200, json={"status": "ok"})

    assert client_for(handler).health() == {"status": "ok"}
    assert calls == ["/healthz"] * 3


def test_gives_up_after_the_retries_naming_the_url_and_the_last_answer() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(502, json={"detail": "bad gateway"})

    with pytest.raises(ServiceUnavailable, match=r"http://svc.test:1 .*4 attempts.*HTTP 502: bad gateway"):
        client_for(handler).stores()
    assert len(calls) == 4


def test_backoff_doubles_between_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr("labeldist.client.http.time.sleep", waits.append)

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client = LabelDistClient("http://svc.test:1", retries=3, backoff=0.5, transport=httpx.MockTransport(handler))
    with pytest.raises(ServiceUnavailable, match="ConnectError"):
        client.health()
    assert waits == [0.5, 1.0, 2.0]


def test_service_down_raises_service_unavailable_naming_the_url() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with LabelDistClient(f"http://127.0.0.1:{port}", retries=1, backoff=0.0, timeout=2.0) as client:
        with pytest.raises(ServiceUnavailable, match=f"http://127.0.0.1:{port}.*labeldist serve"):
            client.health()


def test_unknown_store_passes_the_404_detail_on_without_retrying() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(404, json={"detail": "no store 'nope'; known: mpii-pose"})

    with pytest.raises(StoreNotFound, match="no store 'nope'; known: mpii-pose") as info:
        client_for(handler).store("nope")
    assert info.value.status == 404 and info.value.detail == "no store 'nope'; known: mpii-pose"
    assert len(calls) == 1


def test_bad_parameters_raise_request_rejected_with_the_detail() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"detail": [{"msg": "neighbors=9 does not fit"}]})

    with pytest.raises(RequestRejected, match="HTTP 422.*neighbors=9 does not fit") as info:
        client_for(handler).batches("s", count=1, size=4, neighbors=9)
    assert info.value.status == 422


def test_batches_sends_the_v1_body_and_decodes_the_npz_answer() -> None:
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["body"], seen["format"] = request.read(), request.url.params.get("format")
        body = npz(
            anchors=np.array([4, 7]),
            items=np.array([[1, 2, 3], [0, 5, 6]]),
            distances=np.array([[0.5, np.inf, 2.0], [1.0, 1.5, 3.0]], dtype=np.float32),
            pairwise=np.zeros((2, 4, 4), dtype=np.float32),
            seed=np.uint64(11),
            computed=np.int64(0),
        )
        return httpx.Response(200, content=body, headers={"content-type": "application/x-npz"})

    got = client_for(handler).batches("mpii-pose", anchors=[4, 7], size=4, neighbors=1, pairwise=True, seed=11)
    assert json.loads(seen["body"]) == {"size": 4, "neighbors": 1, "pairwise": True, "anchors": [4, 7], "seed": 11}
    assert seen["format"] == "npz"
    assert got.members.tolist() == [[4, 1, 2, 3], [7, 0, 5, 6]]
    assert np.isinf(got.distances[0, 1]) and got.pairwise is not None and got.pairwise.shape == (2, 4, 4)
    assert got.seed == 11 and len(got) == 2


def test_batches_needs_exactly_one_of_anchors_and_count() -> None:
    client = client_for(lambda r: httpx.Response(200))
    with pytest.raises(ValueError, match="exactly one"):
        client.batches("s", size=4)
    with pytest.raises(ValueError, match="exactly one"):
        client.batches("s", anchors=[1], count=1, size=4)


def test_neighbors_reads_null_distances_as_infinity() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.params["k"] == "2"
        return httpx.Response(
            200, json={"index": 3, "id": "x", "indices": [5, 1], "ids": ["a", "b"], "distances": [0.25, None]}
        )

    idx, dist = client_for(handler).neighbors("s", 3, k=2)
    assert idx.tolist() == [5, 1] and dist[0] == np.float32(0.25) and np.isinf(dist[1])
