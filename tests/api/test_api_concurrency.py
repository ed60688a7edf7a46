"""A freshly started server hammered by concurrent clients on every kind.

On a fresh ``labeldist serve`` nothing is cached: the first requests load the labels and the models together
and compute their distances on demand in many threads at once (one used to fail with a tokenizer race: a 500).
Here small kNN-only stores of each of the four kinds are served on 127.0.0.1; 24 clients send uncached
``/distances`` and ``/batches`` requests together, then the same requests are sent again one by one. Every
answer must be 200 and equal to the sequential one, and a sample equals the distance class's own slow
``reference``. Bounded in count; nothing is timed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from labeldist.engine.blocks import compute_block
from labeldist.store import StoreReader, build_manifest, create_store, n_blocks, publish
from labeldist.view.stored import stored_distance, stored_labels
from tests.api.api_helpers import start_server
from tests.conftest import DATA
from tests.processes import free_port, wait_healthy

COCO = DATA / "coco" / "coco_karpathy_test.json"
CLIENTS = 24
REQUESTS_PER_CLIENT = 6
#: the store each request goes to, in turn: half to the sentences, whose models are what threads used to race on
STORES = ("sentences", "captions", "sentences", "layout", "sentences", "pose")
KINDS = ("sentences", "captions", "layout", "pose")
K, BLOCK_ROWS = 5, 64
#: items of a request that are not its anchor: fresh ones each time, so that its pairs are not cached
ITEMS = 6


def _write_store(url: Path, labels: Any, distance: Any) -> None:
    """A kNN-only store written block by block by the engine's own task function (no cluster to start)."""
    manifest = build_manifest(
        dataset=url.name,
        kind=distance.kind,
        params=distance.params(),
        labels=labels,
        k=K,
        dense=False,
        block_rows=BLOCK_ROWS,
    )
    create_store(str(url), manifest, labels)
    for block in range(n_blocks(len(labels), BLOCK_ROWS)):
        compute_block(block, labels=labels, distance=distance, url=str(url), k=K, block_rows=BLOCK_ROWS, dense=False)
    publish(str(url))


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, mpii_poses: Any) -> Path:
    """One small kNN-only store of each kind: distances not in the lists are computed on demand."""
    from labeldist.distances.caption_sets import CaptionSetWMD
    from labeldist.distances.layout import LayoutMIoU
    from labeldist.distances.pose import PoseDistance
    from labeldist.distances.sts import SentenceRelevance
    from labeldist.labels.captions import read_captions
    from labeldist.labels.lsun_rooms import generate_layouts
    from labeldist.labels.sentences import read_caption_sentences

    root = tmp_path_factory.mktemp("concurrency-stores")
    _write_store(root / "pose", mpii_poses.subset(slice(0, 150)), PoseDistance())
    _write_store(root / "layout", generate_layouts(80, height=48, width=64, seed=3), LayoutMIoU())
    _write_store(root / "captions", read_captions(COCO).subset(slice(0, 60)), CaptionSetWMD())
    # the main job's scorer (CBoW gate, then the bi-encoder); a low gate, so that most pairs reach the model
    sentences = SentenceRelevance("coarse_to_fine", cbow_threshold=0.6, below="zero")
    _write_store(root / "sentences", read_caption_sentences(COCO, limit=600), sentences)
    return root


def _requests(stores: Path) -> list[tuple[str, str, dict]]:
    """Requests over every store in turn; each takes items no earlier request of its store took (until a store
    runs out and starts over), so its pairs are computed on demand, not found in a cache."""
    rng = np.random.default_rng(0)
    n_items = {name: StoreReader(str(stores / name)).manifest["n_items"] for name in KINDS}
    fresh = {name: iter(np.tile(rng.permutation(n), 8).tolist()) for name, n in n_items.items()}
    out = []
    for t in range(CLIENTS * REQUESTS_PER_CLIENT):
        name = STORES[t % len(STORES)]
        path = f"/v1/stores/{name}"
        items = [next(fresh[name]) for _ in range(ITEMS + 1)]
        shape = (t // len(STORES)) % 3
        if shape == 0:
            out.append((name, f"{path}/distances", {"anchor": items[0], "items": items[1:]}))
        elif shape == 1:
            out.append((name, f"{path}/distances", {"pairs": [items[i : i + 2] for i in range(ITEMS)]}))
        else:
            body = {"anchors": items[:2], "size": 5, "neighbors": 2, "pairwise": True, "seed": t}
            out.append((name, f"{path}/batches", body))
    return out


@pytest.fixture
def fresh_server(stores: Path) -> Iterator[tuple[str, list[str]]]:
    """A server started for this test alone (nothing loaded, nothing cached), and its log, read as it comes
    (an unread pipe would fill and stall the server)."""
    port = free_port()
    # one computation slot per client and a generous budget: a 503 "busy" or a 413 would be a fair answer, but
    # this test is about answers computed concurrently, so every request must get to compute
    proc = start_server(
        stores,
        port,
        LABELDIST_COMPUTE_WORKERS=str(CLIENTS),
        LABELDIST_COMPUTE_QUEUE_S="600",
        LABELDIST_COMPUTE_BUDGET_S="600",
    )
    log: list[str] = []
    reader = threading.Thread(target=lambda: log.extend(proc.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base)
        yield base, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except Exception:
            proc.kill()
            proc.wait(timeout=30)
        reader.join(timeout=30)


def _answer(http: httpx.Client, path: str, body: dict) -> tuple[int, Any, int]:
    """Status, body without ``computed`` (it depends on what other requests computed first), and ``computed``."""
    try:
        r = http.post(path, json=body)
    except httpx.TransportError as e:  # a connection reset, say: reported with the others, not raised
        return 0, repr(e), 0
    if not r.headers.get("content-type", "").startswith("application/json"):
        return r.status_code, r.text, 0  # Starlette's plain-text 500, for one
    data = r.json()
    computed = data.pop("computed", 0) if isinstance(data, dict) else 0
    return r.status_code, data, computed


def test_concurrent_uncached_requests_on_every_kind(stores: Path, fresh_server: tuple[str, list[str]]) -> None:
    base, log = fresh_server
    work = _requests(stores)
    chunks = [work[c::CLIENTS] for c in range(CLIENTS)]  # each client asks every kind
    start = threading.Barrier(CLIENTS)

    def client(chunk: list[tuple[str, str, dict]]) -> list[tuple[int, Any, int]]:
        with httpx.Client(base_url=base, timeout=600) as http:
            start.wait()  # all together: the server has loaded nothing yet
            return [_answer(http, path, body) for _, path, body in chunk]

    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        concurrent = list(pool.map(client, chunks))
    by_request = {id(req): ans for chunk, answers in zip(chunks, concurrent) for req, ans in zip(chunk, answers)}
    with httpx.Client(base_url=base, timeout=600) as http:
        sequential = [_answer(http, path, body) for _, path, body in work]

    failed = [(req[1], by_request[id(req)][:2]) for req in work if by_request[id(req)][0] != 200]
    assert not failed, (
        f"{len(failed)} of {len(work)} concurrent requests failed, first: {failed[0]}\n"
        f"server log: {''.join(log)[-3000:]}"
    )
    assert all(status == 200 for status, _, _ in sequential)
    for req, (_, body, _) in zip(work, sequential):
        assert by_request[id(req)][1] == body, f"{req[1]} {req[2]}: the concurrent answer differs"
    for name in KINDS:
        asked = [req for req in work if req[0] == name]
        computed = sum(by_request[id(req)][2] for req in asked)
        assert computed >= len(asked), f"{name}: only {computed} pairs were computed on demand"
    assert not [line for line in log if "Traceback" in line], "".join(log)[-3000:]

    _assert_equal_to_the_reference(stores, work, sequential)


def _assert_equal_to_the_reference(stores: Path, work: list, answers: list) -> None:
    """The anchor requests of every store against the distance class's slow, plain ``reference``."""
    for name in KINDS:
        reader = StoreReader(str(stores / name))
        labels, distance = stored_labels(reader), stored_distance(reader)
        got, expected = [], []
        for (store, _, body), (_, data, _) in zip(work, answers):
            if store == name and "anchor" in body:
                got += [np.inf if d is None else d for d in data["distances"]]
                expected += [distance.reference(labels, body["anchor"], labels, j) for j in body["items"]]
        assert len(got) >= 2 * ITEMS
        np.testing.assert_allclose(np.float32(got), np.float32(expected), rtol=1e-5, atol=1e-5, err_msg=name)
