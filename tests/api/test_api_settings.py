"""Settings from LABELDIST_* environment variables, and the app built from them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from labeldist.api.main import create_app
from labeldist.api.settings import Settings, get_settings
from tests.api.api_helpers import DENSE, KNN, make_settings


@pytest.fixture
def clean_settings(monkeypatch: pytest.MonkeyPatch):
    for name in [k for k in os.environ if k.startswith("LABELDIST_")]:
        monkeypatch.delenv(name)
    get_settings.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()


def test_defaults(clean_settings: pytest.MonkeyPatch) -> None:
    s = Settings()
    assert (s.stores, s.host, s.port, s.api_key, s.workers) == (Path("stores"), "127.0.0.1", 8000, None, 1)
    assert s.max_items >= 1000 and s.max_k >= 100 and s.max_body_bytes >= 100_000


def test_environment_overrides(clean_settings: pytest.MonkeyPatch, stores_dir: Path) -> None:
    clean_settings.setenv("LABELDIST_STORES", str(stores_dir))
    clean_settings.setenv("LABELDIST_MAX_K", "5")
    clean_settings.setenv("LABELDIST_API_KEY", "s3cret-key")
    s = get_settings()
    assert s.stores == stores_dir and s.max_k == 5 and s.api_key.get_secret_value() == "s3cret-key"
    assert get_settings() is s, "read once"
    assert "s3cret-key" not in repr(s), "the key is not printed"
    with TestClient(create_app()) as client:  # no settings given: get_settings()
        assert {x["name"] for x in client.get("/v1/stores").json()["stores"]} >= {DENSE, KNN}
        assert client.get(f"/v1/stores/{DENSE}/items/0/neighbors", params={"k": 6}).status_code == 413


def test_bad_environment_value(clean_settings: pytest.MonkeyPatch) -> None:
    clean_settings.setenv("LABELDIST_PORT", "eighty")
    with pytest.raises(ValueError, match="port"):
        Settings()


def test_zero_dense_cache_still_answers(stores_dir: Path, store_arrays: dict) -> None:
    import numpy as np

    with TestClient(create_app(make_settings(stores=stores_dir, dense_cache_mb=0, pair_cache_entries=0))) as client:
        for _ in range(2):
            body = client.post(f"/v1/stores/{DENSE}/distances", json={"anchor": 250, "items": [1, 2, 3]}).json()
            assert np.array_equal(np.float32(body["distances"]), store_arrays[DENSE]["dense"][250, [1, 2, 3]])


@pytest.mark.parametrize("store", [DENSE, KNN])
def test_zero_knn_cache_reads_every_list_from_disk_and_answers_the_same(
    stores_dir: Path, store_arrays: dict, client: TestClient, store: str
) -> None:
    """LABELDIST_KNN_CACHE_MB=0: no row block of the kNN lists kept; neighbour lists and batches (drawn and filled in
    a worker thread, since the anchors' lists are not in memory) equal the cached service's, draw for draw."""
    import numpy as np

    arrays = store_arrays[store]
    with TestClient(create_app(make_settings(stores=stores_dir, knn_cache_mb=0))) as uncached:
        for index in (0, 255, 256, 299):  # the stores' lists are chunked by row block, 256 rows
            body = uncached.get(f"/v1/stores/{store}/items/{index}/neighbors").json()
            assert body["indices"] == arrays["indices"][index].tolist()
            assert np.array_equal(np.float32(body["distances"]), arrays["distances"][index])
        for batch in (
            {"anchors": [3, 3, 290], "size": 30, "neighbors": 5, "pairwise": True, "seed": 4},
            {"count": 5, "size": 12, "neighbors": 2, "seed": 9},
        ):
            got = uncached.post(f"/v1/stores/{store}/batches", json=batch)
            want = client.post(f"/v1/stores/{store}/batches", json=batch)
            assert got.status_code == want.status_code == 200
            assert got.json()["batches"] == want.json()["batches"]  # ("computed" depends on what each pair cache holds)
        served = uncached.app.state.registry.get(store)
        assert len(served.knn.cache) == 0 and served.knn.cache.reads > 0


def test_serve_hands_workers_and_the_worker_healthcheck_to_uvicorn(
    clean_settings: pytest.MonkeyPatch, stores_dir: Path
) -> None:
    """``labeldist serve`` hands the setting to uvicorn (whose 5 s default kills a worker busy in GIL-holding code)."""
    import uvicorn

    from labeldist.api.server import serve

    seen: dict = {}
    clean_settings.setattr(uvicorn, "run", lambda *a, **kw: seen.update(kw))  # capture: no server started
    clean_settings.setenv("LABELDIST_WORKER_HEALTHCHECK_S", "77")
    clean_settings.setenv("LABELDIST_STORES", str(stores_dir))  # serve() writes settings into os.environ
    clean_settings.setenv("LABELDIST_WORKERS", "1")
    assert serve(workers=3) == 0
    assert seen["timeout_worker_healthcheck"] == 77 and seen["workers"] == 3
    assert Settings().worker_healthcheck_s == 77
    clean_settings.delenv("LABELDIST_WORKER_HEALTHCHECK_S")
    assert Settings().worker_healthcheck_s > 5


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.53", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LocalHost", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.20", False),
        ("10.0.0.7", False),
        ("fe80::1", False),
        ("myhost.example.org", False),
    ],
)
def test_on_loopback(host: str, loopback: bool) -> None:
    """Only a loopback address (or the name localhost) counts: any other name may resolve off this machine."""
    settings = make_settings(host=host)
    assert settings.on_loopback is loopback
    assert settings.compute_disabled is not loopback, "no API key: on-demand computing only on loopback"
    assert make_settings(host=host, api_key="k").compute_disabled is False, "a key enables it anywhere"


def test_compute_allowed_off_loopback_needs_a_key() -> None:
    from labeldist.api.deps import compute_allowed

    assert compute_allowed(make_settings(host="127.0.0.1"), None)
    assert not compute_allowed(make_settings(host="0.0.0.0"), None)
    assert not compute_allowed(make_settings(host="192.168.1.20"), "anything")
    keyed = make_settings(host="0.0.0.0", api_key="s3cret")
    assert compute_allowed(keyed, "s3cret") and not compute_allowed(keyed, "wrong") and not compute_allowed(keyed, None)


def test_body_timeout(clean_settings: pytest.MonkeyPatch) -> None:
    assert 1 <= Settings().body_timeout_s <= 60
    clean_settings.setenv("LABELDIST_BODY_TIMEOUT_S", "2.5")
    assert Settings().body_timeout_s == 2.5
    clean_settings.setenv("LABELDIST_BODY_TIMEOUT_S", "0")
    with pytest.raises(ValueError, match="body_timeout_s"):
        Settings()


def _serve_log(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stores: Path, **env: str) -> str:
    """What ``labeldist serve`` logs before starting uvicorn (uvicorn.run replaced: nothing is bound)."""
    import logging

    import uvicorn

    from labeldist.api.server import serve

    seen: dict = {}
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.update(kw))
    monkeypatch.setenv("LABELDIST_STORES", str(stores))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="labeldist.api"):
        assert serve() == 0
    assert seen["host"] == env.get("LABELDIST_HOST", "127.0.0.1")
    return caplog.text


def test_serve_states_that_computing_is_disabled_off_loopback_without_a_key(
    clean_settings: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stores_dir: Path
) -> None:
    text = _serve_log(clean_settings, caplog, stores_dir, LABELDIST_HOST="0.0.0.0")
    assert "computing distances on demand is DISABLED" in text and "Set LABELDIST_API_KEY" in text
    assert "0.0.0.0" in text
    for env in ({"LABELDIST_HOST": "0.0.0.0", "LABELDIST_API_KEY": "k"}, {"LABELDIST_HOST": "127.0.0.1"}):
        clean_settings.delenv("LABELDIST_API_KEY", raising=False)
        assert "DISABLED" not in _serve_log(clean_settings, caplog, stores_dir, **env), env


def test_serve_shapes_uvicorns_own_400s(clean_settings: pytest.MonkeyPatch, stores_dir: Path) -> None:
    """uvicorn gets a protocol class of api/server.py, which answers its 400s as JSON (tests/api/test_api_bodies.py
    checks the answers against a real uvicorn)."""
    import uvicorn
    from uvicorn.importer import import_from_string

    from labeldist.api.server import serve

    seen: dict = {}
    clean_settings.setattr(uvicorn, "run", lambda *a, **kw: seen.update(kw))
    clean_settings.setenv("LABELDIST_STORES", str(stores_dir))
    assert serve() == 0
    assert seen["ws"] == "none", "no WebSocket route: uvicorn must not answer a handshake itself"
    protocol = import_from_string(seen["http"])
    assert "send_400_response" in vars(protocol), "overrides uvicorn's plain-text 400"
    assert any("send_400_response" in vars(base) for base in protocol.__mro__[1:]), "uvicorn still has the method"
