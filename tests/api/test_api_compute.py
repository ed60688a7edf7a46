"""On-demand computation is bounded (issue 13, Found 5): a cost budget checked before any work, a bounded pool
answering 503 with Retry-After when saturated, and work stopped when its client has gone."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from labeldist.api.compute import ComputeGuard, ComputePool
from labeldist.api.main import create_app
from labeldist.api.registry import plan_pairs

from labeldist.distances.pose import PoseDistance
from tests.api.api_helpers import KNN, N_ITEMS, make_settings, reference, start_server, stop_server, wait_healthy
from tests.processes import free_port


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
        pool: ComputePool = client.app.state.compute_pool
        body = {"pairs": _far_pairs(N_ITEMS, 5, seed=1)}
        with pool.slot():  # another request is computing
            r = client.post(f"/v1/stores/{KNN}/distances", json=body)
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"].isdigit() and "LABELDIST_COMPUTE_WORKERS" in r.json()["detail"]
            # what needs no computation is still answered
            assert client.get(f"/v1/stores/{KNN}/items/1/neighbors?k=3").status_code == 200
        assert client.post(f"/v1/stores/{KNN}/distances", json=body).status_code == 200


def test_a_guard_stops_between_chunks_once_cancelled() -> None:
    from labeldist.api.compute import ClientGone
    from labeldist.api.registry import compute_planned

    from labeldist.labels.poses import read_mpii_csv
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


@pytest.mark.slow
def test_a_client_that_disconnects_stops_its_computation_on_a_live_server(stores_dir: Path) -> None:
    """A real uvicorn server: a client sends an expensive request and closes its socket; the server stops the
    work (its log says so) instead of finishing it for nobody."""
    port = free_port()
    proc = start_server(stores_dir, port, LABELDIST_COMPUTE_BUDGET_S="1000")
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}")
        # 9,000 scattered pairs of 300 items: ~9,000 block calls, seconds of work
        pairs = [[i, j] for i in range(N_ITEMS) for j in range(i + 1, N_ITEMS)][::5][:9000]
        import json

        body = json.dumps({"pairs": pairs}).encode()
        head = (f"POST /v1/stores/{KNN}/distances HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(head + body)
            time.sleep(0.5)  # let the computation start; then go away without reading the answer
    finally:
        time.sleep(1.0)
        out = stop_server(proc)
    assert "stopped: the client has gone" in out, out[-3000:]
