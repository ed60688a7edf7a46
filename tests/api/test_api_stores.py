"""GET /healthz, GET /v1/stores, GET /v1/stores/{store}."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from labeldist.store import read_manifest
from tests.api.api_helpers import DENSE, INCOMPLETE, KNN, N_ITEMS, TINY_STORE, K


def test_healthz(client: TestClient) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_list_stores_names_every_store_folder_and_only_those(client: TestClient) -> None:
    r = client.get("/v1/stores")
    assert r.status_code == 200
    stores = {s["name"]: s for s in r.json()["stores"]}
    assert set(stores) == {DENSE, KNN, TINY_STORE, INCOMPLETE}  # "notes" is no store
    assert [stores[n]["available"] for n in (DENSE, KNN, TINY_STORE)] == [True, True, True]
    assert stores[INCOMPLETE]["available"] is False
    assert stores[INCOMPLETE]["complete"] is False
    assert "not complete" in stores[INCOMPLETE]["detail"]


def test_listed_manifests_are_the_stores_manifests(client: TestClient, stores_dir: Path) -> None:
    for s in client.get("/v1/stores").json()["stores"]:
        manifest = read_manifest(str(stores_dir / s["name"]))
        assert manifest is not None
        assert {k: s[k] for k in manifest} == manifest


def test_get_store(client: TestClient, stores_dir: Path) -> None:
    r = client.get(f"/v1/stores/{DENSE}")
    assert r.status_code == 200
    body = r.json()
    assert body["name"] == DENSE
    assert body["n_items"] == N_ITEMS and body["k"] == K and body["kind"] == "pose" and body["complete"] is True
    assert body["has_dense"] is True
    assert client.get(f"/v1/stores/{KNN}").json()["has_dense"] is False
    assert {k: body[k] for k in read_manifest(str(stores_dir / DENSE))} == read_manifest(str(stores_dir / DENSE))


def test_openapi_schema_lists_the_v1_endpoints(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert set(paths) >= {
        "/healthz",
        "/v1/stores",
        "/v1/stores/{store}",
        "/v1/stores/{store}/items/{index}/neighbors",
        "/v1/stores/{store}/items/{index}/label",
        "/v1/stores/{store}/distances",
        "/v1/stores/{store}/batches",
    }
    assert "application/x-npz" in paths["/v1/stores/{store}/batches"]["post"]["responses"]["200"]["content"]
