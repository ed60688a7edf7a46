"""Long first calls say so, or are done before the first request: by default (``LABELDIST_WARM``, ``labeldist serve``
with or without ``--warm``) the service loads every store's labels and a sentence store's model at start-up, in the
background, and ``GET /readyz`` answers 503 (saying how far it is) until then, while ``GET /healthz`` answers 200 as
soon as the stores are open; ``--no-warm`` (``LABELDIST_WARM=false``) loads them on first need, ready at once.
``LocalSource`` says on stderr what a first search loads and how long it took, once, and ``warm()`` does it up
front. Real stores: COCO captions as sentences scored by the packaged all-MiniLM-L6-v2, MPII poses."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from labeldist.api.main import create_app
from labeldist.api.serving.warmup import Warmup
from labeldist.client import LocalSource
from labeldist.distances.pose import PoseDistance
from labeldist.distances.sts import SentenceRelevance
from labeldist.labels.pose_files import read_mpii_csv
from labeldist.labels.sentences import read_caption_sentences
from labeldist.sts.onnx_backend import load_onnx_encoder
from tests.api.api_helpers import MPII_CSV, REPO, make_settings
from tests.conftest import write_store
from tests.logs import LogFollower, wait_until

COCO = REPO / "data" / "coco" / "coco_karpathy_test.json"
#: generous: the warm-up loads torch and a model on a loaded 2-core machine
READY_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("warm") / "stores"
    with pytest.MonkeyPatch.context() as patch:  # the sentences' embeddings cached here, not in the user's cache
        patch.setenv("LABELDIST_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield build(root)


def build(root: Path) -> Path:
    write_store(
        root / "sentences",
        read_caption_sentences(COCO, limit=40),
        SentenceRelevance("bert"),
        dataset="coco",
        k=5,
        dense=False,
        block_rows=64,
    )
    write_store(
        root / "pose",
        read_mpii_csv(MPII_CSV).subset(slice(0, 50)),
        PoseDistance(),
        dataset="mpii",
        k=5,
        dense=False,
        block_rows=64,
    )
    return root


def wait_ready(client: TestClient) -> dict:
    """/readyz's answer once the warm-up has ended (its state, waited for within READY_TIMEOUT_S); an answer before
    then is a 503 saying how far the warm-up is."""
    answer = client.get("/readyz")
    if answer.status_code != 200:
        assert answer.status_code == 503 and answer.json()["detail"].startswith("warming up: "), answer.text
        assert answer.headers["retry-after"] == "1"
    wait_until(lambda: client.app.state.warmup.done, "the warm-up", READY_TIMEOUT_S)
    answer = client.get("/readyz")
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_service_warms_up_by_default() -> None:
    assert make_settings(default_warm=True).warm is True
    assert make_settings(warm="false").warm is False  # LABELDIST_WARM=false, as the environment spells it


@pytest.mark.parametrize("argv, warm", [((), None), (("--warm",), True), (("--no-warm",), False)])
def test_serve_passes_warm_or_no_warm_on_and_leaves_the_default_to_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...], warm: bool | None
) -> None:
    """``labeldist serve`` hands ``--warm`` / ``--no-warm`` to the settings through LABELDIST_WARM (every worker
    process reads it); neither leaves LABELDIST_WARM, else the default (on)."""
    import uvicorn

    from labeldist.api.settings import get_settings
    from labeldist.cli import main

    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)
    for name in [k for k in os.environ if k.startswith("LABELDIST_")]:
        monkeypatch.delenv(name)
    for name in ("LABELDIST_STORES", "LABELDIST_WARM"):  # recorded, so that what serve sets is undone after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    try:
        assert main(["serve", "--stores", str(tmp_path), *argv]) == 0
        assert os.environ.get("LABELDIST_WARM") == (None if warm is None else str(warm))
        assert get_settings().warm is (True if warm is None else warm)  # the settings serve started uvicorn with
    finally:
        get_settings.cache_clear()


def test_warm_and_no_warm_cannot_both_be_given(capsys) -> None:
    from labeldist.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["serve", "--warm", "--no-warm"])
    assert stopped.value.code == 2 and "not allowed with argument --warm" in capsys.readouterr().err


def test_warm_loads_every_store_before_the_first_request(stores: Path) -> None:
    """The sentence store embeds by ONNX Runtime (the CPU default): its encoder is what the warm-up loads."""
    load_onnx_encoder.cache_clear()
    with TestClient(create_app(make_settings(stores=stores, default_warm=True))) as client:  # warm: the default
        assert client.get("/healthz").json() == {"status": "ok"}  # up, whatever the warm-up's state
        ready = wait_ready(client)
        assert ready == {"status": "ready", "warmed": ["pose", "sentences"], "failed": {}}
        registry = client.app.state.registry
        assert all(registry.entries[name].warmed for name in ("pose", "sentences"))
        assert load_onnx_encoder.cache_info().currsize == 1, "the sentence model was loaded by the warm-up"
        hits = client.post("/v1/stores/sentences/search", json={"label": "A dog runs on a beach.", "k": 3})
        assert hits.status_code == 200 and len(hits.json()["indices"]) == 3
        assert load_onnx_encoder.cache_info().misses == 1, "the first search loaded no model"


def test_without_warm_the_service_is_ready_at_once_and_loads_on_first_need(stores: Path) -> None:
    with TestClient(create_app(make_settings(stores=stores, warm=False))) as client:
        assert client.get("/readyz").json() == {"status": "ready", "warmed": [], "failed": {}}
        assert not client.app.state.registry.entries["sentences"].warmed


def test_readyz_says_how_far_the_warm_up_is(stores: Path) -> None:
    with TestClient(create_app(make_settings(stores=stores, warm=False))) as client:
        client.app.state.warmup = Warmup(
            names=["pose", "sentences"], warmed={"pose": 0.2}, current="sentences", done=False
        )
        answer = client.get("/readyz")
        assert answer.status_code == 503
        detail = answer.json()["detail"]
        assert detail.startswith("warming up: 1 of 2 stores loaded (") and detail.endswith("; loading 'sentences'")


def test_local_source_says_what_a_first_search_loads_once(stores: Path, capsys) -> None:
    source = LocalSource(stores)
    source.search("sentences", "A cat sleeps on a sofa.", k=2)
    err = capsys.readouterr().err.splitlines()
    assert (
        err[0]
        == "labeldist: store 'sentences': first search: loading its labels, sentence model and embeddings (once) ..."
    )
    assert err[1].startswith("labeldist: store 'sentences': loaded in ") and err[1].endswith(" s")
    source.search("sentences", "A cat sleeps on a sofa.", k=2)
    assert capsys.readouterr().err == ""


def test_local_source_warm_loads_every_store_up_front(stores: Path, capsys) -> None:
    source = LocalSource(stores)
    seconds = source.warm()
    assert sorted(seconds) == ["pose", "sentences"] and all(s > 0 for s in seconds.values())
    err = capsys.readouterr().err
    assert "store 'pose': warming: loading its labels (once) ..." in err
    source.search("sentences", "A dog runs.", k=1)
    assert capsys.readouterr().err == ""
    assert source.warm() == {"pose": 0.0, "sentences": 0.0}


def test_serve_warms_up_by_default_says_what_it_loads_and_when_it_is_ready(stores: Path) -> None:
    """``labeldist serve`` (no LABELDIST_WARM, no --warm): /healthz at once, /readyz once the warm-up ends; its log
    names what it loaded and how long it took (labeldist's loggers at INFO in the service, without -v)."""
    import httpx

    from tests.api.api_helpers import start_server
    from tests.processes import free_port, wait_healthy

    port = free_port()
    proc = start_server(stores, port, LABELDIST_CACHE=os.environ.get("LABELDIST_CACHE", ""))
    follower = LogFollower(proc)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base)
        answer = httpx.get(f"{base}/readyz")
        assert answer.status_code in (200, 503), answer.text
        follower.wait_for("warm-up done", READY_TIMEOUT_S)  # logged once the state says done
        answer = httpx.get(f"{base}/readyz")
        assert answer.status_code == 200 and answer.json()["warmed"] == ["pose", "sentences"], answer.text
    finally:
        out = follower.stop()
    assert "warming up 2 stores in the background" in out
    assert re.search(r"loaded the sentence model .+ in \d+\.\d s", out), out
    assert re.search(r"sentences: ready for search and computed distances in \d+\.\d s", out), out
    assert re.search(r"warm-up done: 2 stores ready in \d+\.\d s", out), out
