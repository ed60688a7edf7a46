"""On-demand computation is bounded: a cost budget checked before any work, a bounded pool
answering 503 with Retry-After when saturated, and work stopped when its client has gone."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import anyio
import numpy as np
import pytest
from fastapi.testclient import TestClient

from labeldist.api.main import create_app
from labeldist.api.serving.compute import ComputeGuard, ComputePool
from labeldist.distances.pose import PoseDistance
from labeldist.view.pairs import plan_pairs
from tests.api.api_helpers import KNN, N_ITEMS, make_settings, reference, start_server
from tests.logs import LogFollower, wait_until
from tests.processes import free_port, wait_healthy


def _far_pairs(n: int, count: int, seed: int = 0) -> list[list[int]]:
    """Pairs unlikely to be in a kNN list of k = 20 among 300 items: drawn at random."""
    return np.random.default_rng(seed).integers(0, n, size=(count, 2)).tolist()


def test_the_estimate_follows_the_plan_and_the_kinds_unit_costs() -> None:
    a, b = np.arange(0, 100), np.arange(100, 200)
    scattered = plan_pairs(a, b)  # 100 rows of one pair each
    square = plan_pairs(*np.triu_indices(40, 1))  # one rectangle call
    assert not scattered.rectangle and scattered.calls == 100 and scattered.kernel_pairs == 100
    assert square.rectangle and square.calls == 1 and square.kernel_pairs <= 2.5 * 780
    expected = 100 * PoseDistance.cost_per_call_s + 100 * PoseDistance.cost_per_pair_s
    assert scattered.cost_s(PoseDistance) == pytest.approx(expected)


def test_a_request_over_the_budget_is_refused_before_any_work(stores_dir: Path, pose_labels) -> None:
    settings = make_settings(stores=stores_dir, compute_budget_s=0.05)
    pairs = _far_pairs(N_ITEMS, 400)  # ~400 calls x 400 us: about 0.16 s estimated
    with TestClient(create_app(settings)) as client:
        r = client.post(f"/v1/stores/{KNN}/distances", json={"pairs": pairs})
        assert r.status_code == 413, r.text
        detail = r.json()["detail"]
        assert "LABELDIST_COMPUTE_BUDGET_S" in detail and "budget of 0.05 s" in detail, detail
        store = client.app.state.registry.get(KNN)
        assert store._labels is None, "the labels were loaded for a refused request"
        # a request under the budget is answered, right
        small = pairs[:20]
        r = client.post(f"/v1/stores/{KNN}/distances", json={"pairs": small})
        assert r.status_code == 200, r.text
        want = [reference(pose_labels, i, j) for i, j in small]
        np.testing.assert_array_equal(np.float32(r.json()["distances"]), np.float32(want))


def test_a_batches_request_counts_both_of_its_computations_against_one_budget(stores_dir: Path) -> None:
    body = {"anchors": [3], "size": 60, "pairwise": True, "seed": 2}
    plan = plan_pairs(*np.triu_indices(60, 1))
    one = plan.cost_s(PoseDistance)
    settings = make_settings(stores=stores_dir, compute_budget_s=one * 0.9)
    with TestClient(create_app(settings)) as client:
        r = client.post(f"/v1/stores/{KNN}/batches", json=body)
        assert r.status_code == 413 and "LABELDIST_COMPUTE_BUDGET_S" in r.json()["detail"], r.text


def test_a_saturated_pool_answers_503_with_retry_after(stores_dir: Path) -> None:
    settings = make_settings(stores=stores_dir, compute_workers=1, compute_queue_s=0.0)
    with TestClient(create_app(settings)) as client:
        body = {"pairs": _far_pairs(N_ITEMS, 5, seed=1)}
        pool = _hold_every_slot(client)  # another request is computing
        r = client.post(f"/v1/stores/{KNN}/distances", json=body)
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"].isdigit() and "LABELDIST_COMPUTE_WORKERS" in r.json()["detail"]
        # what needs no computation is still answered
        assert client.get(f"/v1/stores/{KNN}/items/1/neighbors?k=3").status_code == 200
        _release_every_slot(client, pool)
        assert client.post(f"/v1/stores/{KNN}/distances", json=body).status_code == 200


def test_a_guard_stops_between_chunks_once_cancelled() -> None:
    from labeldist.api.serving.compute import ClientGone
    from labeldist.labels.pose_files import read_mpii_csv
    from labeldist.view.pairs import compute_planned
    from tests.conftest import DATA

    labels = read_mpii_csv(DATA / "mpii" / "mpii_valid_2958.csv").subset(slice(0, 200))
    guard = ComputeGuard(100.0, ComputePool(1, 0.0))
    calls = []

    def check() -> None:
        calls.append(1)
        if len(calls) == 3:
            guard.cancelled.set()
        guard.check()

    a, b = np.arange(0, 100), np.arange(100, 200)
    with pytest.raises(ClientGone):
        compute_planned(labels, PoseDistance(), plan_pairs(a, b), check)
    assert len(calls) == 3, "the computation went on after the client had gone"


@pytest.fixture(scope="module")
def caption_stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stores folder with one kNN-only store of 400 COCO caption sets: every pair it does not hold is a
    caption-set WMD computed on demand, so 50,000 of them are tens of seconds of work."""
    from labeldist.distances.caption_sets import CaptionSetWMD
    from labeldist.labels.captions import read_karpathy_captions
    from tests.conftest import DATA, write_store

    root = tmp_path_factory.mktemp("caption-stores")
    coco = json.loads((DATA / "coco" / "coco_karpathy_test.json").read_text())[:400]
    (root / "coco.json").write_text(json.dumps(coco))
    labels = read_karpathy_captions(root / "coco.json")
    write_store(
        root / "stores" / "captions", labels, CaptionSetWMD(), dataset="coco400", k=5, dense=False, block_rows=100
    )
    return root / "stores"


@pytest.mark.slow
def test_a_client_that_disconnects_stops_its_computation_on_a_live_server(caption_stores: Path) -> None:
    """A real uvicorn server: a client sends an expensive request, waits until the server logs that the computation
    has started, and closes its socket; the server stops the work (its log says so) instead of finishing it for
    nobody. Every step waits for an event the server logs, never for a time."""
    port = free_port()
    proc = start_server(
        caption_stores, port, verbose=True, LABELDIST_COMPUTE_BUDGET_S="100000", LABELDIST_MAX_ITEMS="50000"
    )
    log = LogFollower(proc)
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}")
        # 50,000 distinct caption-set pairs of 400 items: some 30 s of WMDs on this machine, far more than the few
        # milliseconds between the server's log line and the socket's close
        upper = np.stack(np.triu_indices(400, 1), axis=1)
        pairs = upper[np.random.default_rng(0).permutation(len(upper))[:50_000]].tolist()
        body = json.dumps({"pairs": pairs}).encode()
        head = (
            f"POST /v1/stores/captions/distances HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(head + body)
            started = log.wait_for("captions: computing ")
        # the socket is closed: the server must notice and stop between two chunks of work
        stopped = log.wait_for("stopped: the client has gone", start=started)
        assert "distance(s) stopped" in log.lines[stopped]
    finally:
        out = log.stop()
    assert "Traceback" not in out, out[-3000:]


def _hold_every_slot(client: TestClient) -> ComputePool:
    """Take every slot of the app's compute pool, as running computations would (on the app's event loop)."""
    pool: ComputePool = client.app.state.compute_pool
    for _ in range(pool.workers):
        client.portal.call(pool.acquire)
    return pool


def _release_every_slot(client: TestClient, pool: ComputePool) -> None:
    for _ in range(pool.workers):
        client.portal.call(pool.release)


def test_requests_waiting_for_a_compute_slot_hold_no_thread_and_sync_routes_stay_answered(
    stores_dir: Path, pose_labels
) -> None:
    """Waiting for a compute slot must not hold a worker thread. 60 requests that must compute
    wait for the one slot (held by the test) with a queue time far longer than the test; meanwhile no worker thread
    is taken by them, and the sync label route, which needs a thread, is answered while every one of them is still
    waiting. Then the slot frees, and every waiting request is answered 200 with the right distances.

    Before the fix the 60 requests each blocked a thread of anyio's pool of 40 inside the slot's wait: the label
    request waited behind them until the queue time ran out."""
    import anyio.to_thread
    import httpx

    settings = make_settings(stores=stores_dir, compute_workers=1, compute_queue_s=600.0)
    n_flood = 60
    with TestClient(create_app(settings)) as client:
        pool = _hold_every_slot(client)
        bodies = [{"pairs": _far_pairs(N_ITEMS, 4, seed=100 + t)} for t in range(n_flood)]

        async def flood() -> list[httpx.Response]:
            transport = httpx.ASGITransport(app=client.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=None) as ac:
                results: list[httpx.Response] = [None] * n_flood  # type: ignore[list-item]

                async def one(t: int) -> None:
                    results[t] = await ac.post(f"/v1/stores/{KNN}/distances", json=bodies[t])

                async with anyio.create_task_group() as group:
                    for t in range(n_flood):
                        group.start_soon(one, t)
                return results

        future = client.portal.start_task_soon(flood)
        try:
            wait_until(lambda: pool.waiting == n_flood, f"{n_flood} requests waiting for the compute slot")

            def threads_in_use() -> float:  # called on the app's event loop
                return anyio.to_thread.current_default_thread_limiter().borrowed_tokens

            assert client.portal.call(threads_in_use) == 0
            label = client.get(f"/v1/stores/{KNN}/items/5/label")
            assert label.status_code == 200, label.text
            assert pool.waiting == n_flood and not future.done(), "the label was answered only after the flood"
        finally:  # also when failing: the waiting requests must not hold the test for the queue time
            _release_every_slot(client, pool)
        answers = future.result(timeout=600)
    for body, r in zip(bodies, answers):
        assert r.status_code == 200, r.text
        want = [reference(pose_labels, i, j) for i, j in body["pairs"]]
        np.testing.assert_array_equal(np.float32(r.json()["distances"]), np.float32(want))


def test_a_flood_past_the_queue_time_is_answered_503_and_holds_no_thread(stores_dir: Path) -> None:
    """The slot stays taken for the whole flood: each of 150 requests gets 503 with Retry-After once the queue time
    has passed, none is computed, and the pool is whole again afterwards."""
    import httpx

    settings = make_settings(stores=stores_dir, compute_workers=2, compute_queue_s=0.5)
    with TestClient(create_app(settings)) as client:
        pool = _hold_every_slot(client)

        async def flood() -> list[httpx.Response]:
            transport = httpx.ASGITransport(app=client.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=None) as ac:
                results: list[httpx.Response] = []

                async def one(t: int) -> None:
                    results.append(
                        await ac.post(f"/v1/stores/{KNN}/distances", json={"pairs": _far_pairs(N_ITEMS, 4, seed=t)})
                    )

                async with anyio.create_task_group() as group:
                    for t in range(150):
                        group.start_soon(one, t)
                return results

        answers = client.portal.call(flood)
        assert [r.status_code for r in answers] == [503] * 150
        assert all(
            r.headers["retry-after"].isdigit() and "LABELDIST_COMPUTE_WORKERS" in r.json()["detail"] for r in answers
        )
        assert pool.waiting == 0
        _release_every_slot(client, pool)
        assert client.portal.call(lambda: pool.busy) == 0
        r = client.post(f"/v1/stores/{KNN}/distances", json={"pairs": _far_pairs(N_ITEMS, 4, seed=1)})
        assert r.status_code == 200, r.text
