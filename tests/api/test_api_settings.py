"""Settings from LABELDIST_* environment variables, and the app built from them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from api.settings import Settings, get_settings
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


def test_serve_hands_workers_and_the_worker_healthcheck_to_uvicorn(
    clean_settings: pytest.MonkeyPatch, stores_dir: Path
) -> None:
    """``labeldist serve`` hands the setting to uvicorn (whose 5 s default kills a worker busy in GIL-holding code)."""
    import uvicorn

    from api.server import serve

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
