"""One test per error path: status code and ``detail`` (docs/http-api.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from labeldist.api.main import create_app
from labeldist.distances.pose import PoseDistance
from labeldist.engine.blocks import compute_block
from labeldist.labels.poses import Poses
from labeldist.store import build_manifest, create_store, publish
from tests.api.api_helpers import DENSE, INCOMPLETE, KNN, N_ITEMS, make_settings

NEIGHBORS = "/v1/stores/{}/items/{}/neighbors"
JSON = {"content-type": "application/json"}


# ---------------------------------------------------------------- 404
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/stores/nope", None),
        ("GET", NEIGHBORS.format("nope", 0), None),
        ("GET", "/v1/stores/nope/items/0/label", None),
        ("POST", "/v1/stores/nope/distances", {"anchor": 0, "items": [1]}),
        ("POST", "/v1/stores/nope/batches", {"anchors": [0], "size": 4}),
    ],
)
def test_404_unknown_store(client: TestClient, method: str, path: str, body: dict | None) -> None:
    r = client.request(method, path, json=body)
    assert r.status_code == 404
    assert r.json()["detail"] == f"unknown store 'nope'; known: {DENSE}, {INCOMPLETE}, {KNN}, pose-tiny"


def test_404_unknown_item(client: TestClient) -> None:
    r = client.get(NEIGHBORS.format(DENSE, N_ITEMS))
    assert r.status_code == 404
    assert r.json()["detail"] == f"store '{DENSE}' has no item {N_ITEMS} (items are 0..{N_ITEMS - 1})"


def test_404_unknown_item_label(client: TestClient) -> None:
    r = client.get(f"/v1/stores/{DENSE}/items/{N_ITEMS + 5}/label")
    assert r.status_code == 404
    assert f"has no item {N_ITEMS + 5}" in r.json()["detail"]


def test_404_unknown_item_in_distances(client: TestClient) -> None:
    r = client.post(f"/v1/stores/{KNN}/distances", json={"anchor": 0, "items": [1, 2, 10**6]})
    assert r.status_code == 404
    assert r.json()["detail"] == f"store '{KNN}' has no item 1000000 (items are 0..{N_ITEMS - 1})"
    r = client.post(f"/v1/stores/{KNN}/distances", json={"anchor": N_ITEMS, "items": [1]})
    assert r.status_code == 404
    assert r.json()["detail"].startswith(f"store '{KNN}' has no anchor {N_ITEMS}")
    r = client.post(f"/v1/stores/{KNN}/distances", json={"pairs": [[0, 1], [N_ITEMS, 2]]})
    assert r.status_code == 404
    assert f"has no item {N_ITEMS}" in r.json()["detail"]


def test_404_unknown_anchor_in_batches(client: TestClient) -> None:
    r = client.post(f"/v1/stores/{DENSE}/batches", json={"anchors": [3, N_ITEMS + 1], "size": 4})
    assert r.status_code == 404
    assert r.json()["detail"] == f"store '{DENSE}' has no anchor {N_ITEMS + 1} (items are 0..{N_ITEMS - 1})"


def test_404_unknown_route(client: TestClient) -> None:
    r = client.get("/v2/stores")
    assert r.status_code == 404
    assert r.json()["detail"] == "Not Found"


# ---------------------------------------------------------------- 422
def _locs(r) -> list[list]:
    return [e["loc"] for e in r.json()["detail"]]


def test_422_bad_query_parameter(client: TestClient) -> None:
    r = client.get(NEIGHBORS.format(DENSE, 0), params={"k": 0})
    assert r.status_code == 422
    assert _locs(r) == [["query", "k"]]
    assert r.json()["detail"][0]["msg"] == "Input should be greater than or equal to 1"
    r = client.get(NEIGHBORS.format(DENSE, 0), params={"k": "ten"})
    assert r.status_code == 422 and _locs(r) == [["query", "k"]]


def test_422_bad_path_parameter(client: TestClient) -> None:
    r = client.get(NEIGHBORS.format(DENSE, -1))
    assert r.status_code == 422
    assert _locs(r) == [["path", "index"]]


def test_422_k_over_the_stores_k(client: TestClient) -> None:
    r = client.get(NEIGHBORS.format(DENSE, 0), params={"k": 21})
    assert r.status_code == 422
    assert _locs(r) == [["query", "k"]]
    assert r.json()["detail"][0]["msg"] == "k=21 is more than the store's k=20 (the length of its neighbour lists)"


def test_422_distances_body_must_be_one_form(client: TestClient) -> None:
    for body in ({"anchor": 0, "items": [1], "pairs": [[0, 1]]}, {"anchor": 0}, {"pairs": [[0, 1, 2]]}, {}):
        r = client.post(f"/v1/stores/{DENSE}/distances", json=body)
        assert r.status_code == 422, body
        assert isinstance(r.json()["detail"], list) and r.json()["detail"], body


def test_422_distances_body_not_json(client: TestClient) -> None:
    r = client.post(f"/v1/stores/{DENSE}/distances", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["type"] == "json_invalid"


def test_422_batches_neighbors_do_not_fit(client: TestClient) -> None:
    r = client.post(f"/v1/stores/{DENSE}/batches", json={"anchors": [0], "size": 4, "neighbors": 4})
    assert r.status_code == 422
    assert _locs(r) == [["body", "neighbors"]]
    assert r.json()["detail"][0]["msg"] == "neighbors=4 does not fit in a batch of size=4 (at most size - 1)"


def test_422_batches_neighbors_over_k(client: TestClient) -> None:
    r = client.post(f"/v1/stores/{DENSE}/batches", json={"anchors": [0], "size": 64, "neighbors": 21})
    assert r.status_code == 422
    assert _locs(r) == [["body", "neighbors"]]
    assert r.json()["detail"][0]["msg"] == "neighbors=21 is more than the store's k=20"


def test_422_batches_size_over_the_stores_items(client: TestClient) -> None:
    r = client.post("/v1/stores/pose-tiny/batches", json={"count": 1, "size": 13})
    assert r.status_code == 422
    assert _locs(r) == [["body", "size"]]
    assert r.json()["detail"][0]["msg"] == "size=13 is more than the store's 12 items"


def test_422_batches_both_anchors_and_count(client: TestClient) -> None:
    r = client.post(f"/v1/stores/{DENSE}/batches", json={"anchors": [0], "count": 2, "size": 4})
    assert r.status_code == 422
    assert {"extra_forbidden"} <= {e["type"] for e in r.json()["detail"]}


def test_422_unknown_format(client: TestClient) -> None:
    r = client.post(f"/v1/stores/{DENSE}/distances?format=xml", json={"anchor": 0, "items": [1]})
    assert r.status_code == 422
    assert _locs(r) == [["query", "format"]]


# ---------------------------------------------------------------- 413
@pytest.fixture(scope="module")
def small_limits(stores_dir: Path) -> Iterator[TestClient]:
    limits = make_settings(
        stores=stores_dir,
        max_items=50,
        max_k=10,
        max_batches=3,
        max_batch_size=40,
        max_pairwise_values=3000,
        max_body_bytes=4096,
    )
    with TestClient(create_app(limits)) as c:
        yield c


def test_413_too_many_items(small_limits: TestClient) -> None:
    r = small_limits.post(f"/v1/stores/{DENSE}/distances", json={"anchor": 0, "items": list(range(51))})
    assert r.status_code == 413
    assert r.json()["detail"] == "51 items is over the limit of 50 (LABELDIST_MAX_ITEMS)"
    r = small_limits.post(f"/v1/stores/{DENSE}/distances", json={"pairs": [[0, 1]] * 51})
    assert r.status_code == 413
    assert r.json()["detail"] == "51 pairs is over the limit of 50 (LABELDIST_MAX_ITEMS)"


def test_413_k_over_max_k(small_limits: TestClient) -> None:
    r = small_limits.get(NEIGHBORS.format(DENSE, 0), params={"k": 11})
    assert r.status_code == 413
    assert r.json()["detail"] == "k=11 is over the limit of 10 (LABELDIST_MAX_K)"


def test_413_too_many_batches(small_limits: TestClient) -> None:
    r = small_limits.post(f"/v1/stores/{DENSE}/batches", json={"count": 4, "size": 8})
    assert r.status_code == 413
    assert r.json()["detail"] == "4 batches is over the limit of 3 (LABELDIST_MAX_BATCHES)"
    r = small_limits.post(f"/v1/stores/{DENSE}/batches", json={"anchors": [0, 1, 2, 3], "size": 8})
    assert r.status_code == 413


def test_413_batch_too_large(small_limits: TestClient) -> None:
    r = small_limits.post(f"/v1/stores/{DENSE}/batches", json={"count": 1, "size": 41})
    assert r.status_code == 413
    assert r.json()["detail"] == "size=41 is over the limit of 40 (LABELDIST_MAX_BATCH_SIZE)"
    r = small_limits.post(f"/v1/stores/{DENSE}/batches", json={"count": 2, "size": 40, "pairwise": True})
    assert r.status_code == 413
    assert r.json()["detail"] == (
        "2 pairwise matrices of 40x40 is over the limit of 3000 values (LABELDIST_MAX_PAIRWISE_VALUES)"
    )


def test_413_body_too_large(small_limits: TestClient) -> None:
    body = b'{"anchor": 0, "items": [' + b", ".join([b"1"] * 3000) + b"]}"
    r = small_limits.post(f"/v1/stores/{DENSE}/distances", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert (
        r.json()["detail"] == f"request body of {len(body)} bytes is over the limit of 4096 (LABELDIST_MAX_BODY_BYTES)"
    )


def test_413_streamed_body_too_large(small_limits: TestClient) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is counted as the body arrives
        yield b'{"anchor": 0, "items": ['
        for _ in range(100):
            yield b"1, " * 20
        yield b"1]}"

    r = small_limits.post(
        f"/v1/stores/{DENSE}/distances", content=chunks(), headers={"content-type": "application/json"}
    )
    assert r.status_code == 413
    assert "is over the limit of 4096 (LABELDIST_MAX_BODY_BYTES)" in r.json()["detail"]


# ---------------------------------------------------------------- 503
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", f"/v1/stores/{INCOMPLETE}", None),
        ("GET", NEIGHBORS.format(INCOMPLETE, 0), None),
        ("GET", f"/v1/stores/{INCOMPLETE}/items/0/label", None),
        ("POST", f"/v1/stores/{INCOMPLETE}/distances", {"anchor": 0, "items": [1]}),
        ("POST", f"/v1/stores/{INCOMPLETE}/batches", {"count": 1, "size": 4}),
    ],
)
def test_503_incomplete_store(client: TestClient, method: str, path: str, body: dict | None) -> None:
    r = client.request(method, path, json=body)
    assert r.status_code == 503
    assert r.json()["detail"].startswith(f"store '{INCOMPLETE}' is not complete (still being written, or abandoned)")


def test_incomplete_store_is_served_once_published(tmp_path: Path, pose_labels: Poses) -> None:
    """Publishing rewrites the store's root metadata: the next request sees the change and serves the store."""
    labels = pose_labels.subset(slice(0, 40))
    url = str(tmp_path / "late")
    manifest = build_manifest(
        dataset="late", kind="pose", params=PoseDistance().params(), labels=labels, k=5, dense=False, block_rows=20
    )
    create_store(url, manifest, labels)
    with TestClient(create_app(make_settings(stores=tmp_path))) as c:
        assert c.get(NEIGHBORS.format("late", 0)).status_code == 503
        compute_block(0, labels=labels, distance=PoseDistance(), url=url, k=5, block_rows=20, dense=False)
        assert c.get(NEIGHBORS.format("late", 0)).status_code == 503  # half written: still not served
        compute_block(1, labels=labels, distance=PoseDistance(), url=url, k=5, block_rows=20, dense=False)
        publish(url)
        r = c.get(NEIGHBORS.format("late", 0), params={"k": 5})
        assert r.status_code == 200
        assert len(r.json()["indices"]) == 5
        assert [s["available"] for s in c.get("/v1/stores").json()["stores"]] == [True]


def test_missing_stores_folder_serves_nothing(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(stores=tmp_path / "absent"))) as c:
        assert c.get("/v1/stores").json() == {"stores": []}
        assert c.get("/healthz").status_code == 200


# ---------------------------------------------------------------- 401: computing needs the API key when set
@pytest.fixture(scope="module")
def keyed(stores_dir: Path) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(stores=stores_dir, api_key="s3cret", pair_cache_entries=0))) as c:
        yield c


def _unstored_pair(store_arrays: dict, anchor: int = 0) -> int:
    arrays = store_arrays[KNN]
    listed = set(arrays["indices"][anchor].tolist())
    return next(j for j in range(1, N_ITEMS) if j not in listed and anchor not in arrays["indices"][j])


def test_401_computing_without_the_api_key(keyed: TestClient, store_arrays: dict) -> None:
    j = _unstored_pair(store_arrays)
    r = keyed.post(f"/v1/stores/{KNN}/distances", json={"anchor": 0, "items": [j]})
    assert r.status_code == 401
    assert r.json()["detail"] == (
        f"1 distance(s) asked are not stored in '{KNN}' and must be computed on demand: "
        "send the API key in the X-API-Key header"
    )
    r = keyed.post(f"/v1/stores/{KNN}/distances", json={"anchor": 0, "items": [j]}, headers={"X-API-Key": "wrong"})
    assert r.status_code == 401


def test_api_key_not_needed_for_stored_distances(keyed: TestClient, store_arrays: dict) -> None:
    j = int(store_arrays[KNN]["indices"][0, 3])
    r = keyed.post(f"/v1/stores/{KNN}/distances", json={"anchor": 0, "items": [j]})
    assert r.status_code == 200
    assert np.float32(r.json()["distances"][0]) == store_arrays[KNN]["distances"][0, 3]
    r = keyed.post(f"/v1/stores/{DENSE}/batches", json={"count": 2, "size": 16, "pairwise": True})
    assert r.status_code == 200


def test_api_key_allows_computing(keyed: TestClient, store_arrays: dict, pose_labels: Poses) -> None:
    j = _unstored_pair(store_arrays)
    r = keyed.post(f"/v1/stores/{KNN}/distances", json={"anchor": 0, "items": [j]}, headers={"X-API-Key": "s3cret"})
    assert r.status_code == 200
    assert r.json()["computed"] == 1
    np.testing.assert_allclose(
        np.float32(r.json()["distances"][0]), PoseDistance().reference(pose_labels, 0, pose_labels, j), rtol=1e-6
    )


# ---------------------------------------------------------------- 403: no computing off loopback without a key
@pytest.fixture(scope="module", params=[True, False], ids=["fast_path", "no_fast_path"])
def off_loopback(request: pytest.FixtureRequest, stores_dir: Path) -> Iterator[TestClient]:
    """The app as served on 0.0.0.0 with no API key (in-process: nothing is bound)."""
    settings = make_settings(stores=stores_dir, host="0.0.0.0", pair_cache_entries=0, fast_path=request.param)
    with TestClient(create_app(settings)) as c:
        yield c


def test_403_computing_off_loopback_without_an_api_key(off_loopback: TestClient, store_arrays: dict) -> None:
    j = _unstored_pair(store_arrays)
    for headers in ({}, {"X-API-Key": "anything"}):  # no key the client sends can enable it
        r = off_loopback.post(f"/v1/stores/{KNN}/distances", json={"anchor": 0, "items": [j]}, headers=headers)
        assert r.status_code == 403
        detail = r.json()["detail"]
        assert detail.startswith(f"1 distance(s) asked are not stored in '{KNN}' and must be computed on demand")
        assert "disabled" in detail and "0.0.0.0" in detail and "set LABELDIST_API_KEY" in detail
    r = off_loopback.post(f"/v1/stores/{KNN}/batches", json={"count": 2, "size": 16, "pairwise": True, "seed": 1})
    assert r.status_code == 403 and "LABELDIST_API_KEY" in r.json()["detail"]


def test_stored_distances_are_served_off_loopback_without_an_api_key(
    off_loopback: TestClient, store_arrays: dict
) -> None:
    j = int(store_arrays[KNN]["indices"][0, 3])
    r = off_loopback.post(f"/v1/stores/{KNN}/distances", json={"anchor": 0, "items": [j]})
    assert r.status_code == 200
    assert np.float32(r.json()["distances"][0]) == store_arrays[KNN]["distances"][0, 3]
    r = off_loopback.post(f"/v1/stores/{DENSE}/batches", json={"count": 2, "size": 16, "pairwise": True})
    assert r.status_code == 200 and r.json()["computed"] == 0


def test_an_api_key_enables_computing_off_loopback(stores_dir: Path, store_arrays: dict) -> None:
    j = _unstored_pair(store_arrays)
    settings = make_settings(stores=stores_dir, host="0.0.0.0", api_key="s3cret", pair_cache_entries=0)
    with TestClient(create_app(settings)) as c:
        body = {"anchor": 0, "items": [j]}
        assert c.post(f"/v1/stores/{KNN}/distances", json=body).status_code == 401
        r = c.post(f"/v1/stores/{KNN}/distances", json=body, headers={"X-API-Key": "s3cret"})
        assert r.status_code == 200 and r.json()["computed"] == 1


# ---------------------------------------------------------------- every error is JSON with a detail
def test_405_unknown_method_is_json(client: TestClient) -> None:
    for method, path in (("DELETE", "/v1/stores"), ("PUT", f"/v1/stores/{DENSE}/distances")):
        r = client.request(method, path)
        assert r.status_code == 405
        assert r.headers["content-type"] == "application/json" and r.json()["detail"] == "Method Not Allowed"


def _failing_app(stores_dir: Path):
    app = create_app(make_settings(stores=stores_dir))

    async def boom() -> None:
        raise RuntimeError("a bug, with a secret path /srv/x")

    app.add_api_route("/boom", boom)
    return app


def test_500_unexpected_error_is_json_and_says_nothing_of_it(stores_dir: Path) -> None:
    with TestClient(_failing_app(stores_dir), raise_server_exceptions=False) as c:
        r = c.get("/boom")
    assert r.status_code == 500
    assert r.headers["content-type"] == "application/json"
    assert r.json()["detail"].startswith("internal error") and "/srv/x" not in r.text


def test_an_unexpected_error_still_reaches_the_server(stores_dir: Path) -> None:
    """After answering, the exception goes on to the server, which logs it (once, with its traceback)."""
    with TestClient(_failing_app(stores_dir)) as c, pytest.raises(RuntimeError, match="a bug"):
        c.get("/boom")


@pytest.mark.parametrize("route", ["distances", "batches"])
def test_bad_bodies_are_json_4xx(client: TestClient, route: str) -> None:
    """Malformed JSON, invalid UTF-8 (sent as JSON or as text), a wrong or missing content type, a Content-Length
    that is no number: each a 4xx with a JSON ``detail``, never a 500 (invalid UTF-8 sent as text was one)."""
    path = f"/v1/stores/{DENSE}/{route}"
    valid = b'{"anchor": 0, "items": [1]}' if route == "distances" else b'{"count": 1, "size": 4}'
    cases = [
        (b"{not json", {"content-type": "application/json"}, 422),
        (b'{"anchor": "\xff\xfe"}', {"content-type": "application/json"}, 400),
        (b"\xff\xfe{", {"content-type": "text/plain"}, 422),
        (valid, {"content-type": "text/plain"}, 422),
        (valid, {}, 422),
        (valid, {"content-type": "application/json", "content-length": "abc"}, 400),
    ]
    for body, headers, status in cases:
        r = client.post(path, content=body, headers=headers)
        assert r.status_code == status, (body, headers, r.text)
        assert r.headers["content-type"] == "application/json" and r.json()["detail"], (body, headers)
    r = client.post(path, content=b"\xff\xfe{", headers={"content-type": "text/plain"})
    assert "\ufffd\ufffd{" in {e["input"] for e in r.json()["detail"]}, "undecodable bytes echoed as U+FFFD"


def test_a_bad_parameter_with_a_non_finite_value_is_json() -> None:
    """BadParameter echoes the value it refuses: a non-finite one as its string, in standard JSON."""
    import asyncio
    import json

    from starlette.requests import Request

    from labeldist.api.errors import BadParameter, api_error_handler

    request = Request({"type": "http", "method": "POST", "path": "/", "headers": []})
    for value, echoed in ((float("nan"), "NaN"), (float("inf"), "Infinity"), (-float("inf"), "-Infinity")):
        response = asyncio.run(api_error_handler(request, BadParameter("bad size", ("body", "size"), value)))
        assert response.status_code == 422
        error = json.loads(response.body, parse_constant=lambda token: pytest.fail(f"not JSON: {token}"))["detail"][0]
        assert error == {"type": "value_error", "loc": ["body", "size"], "msg": "bad size", "input": echoed}


def test_json_safe_replaces_only_what_json_cannot_hold() -> None:
    from labeldist.api.errors import json_safe

    value = {"a": [1, 2.5, float("nan"), (float("inf"), -float("inf"))], "b": b"ok\xff", "c": None, "d": "NaN"}
    assert json_safe(value) == {"a": [1, 2.5, "NaN", ["Infinity", "-Infinity"]], "b": "ok\ufffd", "c": None, "d": "NaN"}
