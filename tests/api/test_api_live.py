"""Against a real server: ``labeldist serve`` in a subprocess on 127.0.0.1, and parallel httpx clients."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

from tests.api.api_helpers import DENSE, INCOMPLETE, KNN, REPO, start_server, stop_server
from tests.processes import free_port, wait_healthy

#: seconds a request may take before the test fails: generous, the machine may be a busy 2-core one (nothing here
#: is a measurement of speed)
WAIT = 120.0


def test_live_server_serves_the_stores(live_server: str, store_arrays: dict) -> None:
    with httpx.Client(base_url=live_server, timeout=WAIT) as http:
        names = {s["name"]: s["available"] for s in http.get("/v1/stores").json()["stores"]}
        assert names == {DENSE: True, KNN: True, "pose-tiny": True, INCOMPLETE: False}
        body = http.get(f"/v1/stores/{DENSE}/items/9/neighbors", params={"k": 10}).json()
        assert body["indices"] == store_arrays[DENSE]["indices"][9, :10].tolist()
        r = http.get(f"/v1/stores/{INCOMPLETE}/items/9/neighbors")
        assert r.status_code == 503 and "not complete" in r.json()["detail"]
        assert http.get("/ui").headers["content-type"].startswith("text/html")


def _requests() -> list[tuple[str, str, dict | None]]:
    """A mixed workload: neighbours, stored and computed distances, batches with and without pairwise."""
    rng = np.random.default_rng(0)
    out: list[tuple[str, str, dict | None]] = []
    for t in range(60):
        store = (DENSE, KNN)[t % 2]
        kind = t % 4
        if kind == 0:
            out.append(("GET", f"/v1/stores/{store}/items/{int(rng.integers(300))}/neighbors?k=15", None))
        elif kind == 1:
            body = {"anchor": int(rng.integers(300)), "items": rng.integers(0, 300, 40).tolist()}
            out.append(("POST", f"/v1/stores/{store}/distances", body))
        elif kind == 2:
            out.append(("POST", f"/v1/stores/{store}/distances", {"pairs": rng.integers(0, 300, (30, 2)).tolist()}))
        else:
            body = {"count": 2, "size": 25, "neighbors": 3, "pairwise": bool(t % 8 == 3), "seed": t}
            out.append(("POST", f"/v1/stores/{store}/batches", body))
    return out


def _answer(http: httpx.Client, method: str, path: str, body: dict | None) -> tuple[int, object]:
    r = http.request(method, path, json=body)
    data = r.json()
    if isinstance(data, dict):
        data.pop("computed", None)  # how many were computed depends on what others already cached
    return r.status_code, data


def test_parallel_clients_get_the_sequential_answers(live_server: str) -> None:
    """Parallel clients first, while the server's caches are cold (concurrent on-demand computing and
    caching), then the same requests one by one."""
    work = _requests()

    def client_run(shift: int) -> list[tuple[int, object]]:
        order = work[shift:] + work[:shift]  # each client starts elsewhere, so they overlap differently
        with httpx.Client(base_url=live_server, timeout=WAIT) as http:
            answers = [_answer(http, *req) for req in order]
        return answers[-shift:] + answers[:-shift] if shift else answers

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(client_run, [0, 7, 13, 21, 30, 38, 45, 52]))
    with httpx.Client(base_url=live_server, timeout=WAIT) as http:
        sequential = [_answer(http, *req) for req in work]
    assert all(status == 200 for status, _ in sequential)
    for answers in results:
        assert answers == sequential


def test_serve_refuses_a_stores_folder_named_that_does_not_exist(tmp_path: Path) -> None:
    """A folder named on the command line that is not there is a typo: one line, exit 2, nothing served."""
    proc = start_server(tmp_path / "absent", free_port())
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out
    assert out.strip().splitlines() == [f"labeldist: error: {tmp_path / 'absent'}: no such folder"], out


def test_serve_warns_about_a_missing_default_stores_folder(tmp_path: Path) -> None:
    """The default folder (LABELDIST_STORES, or ./stores) may not exist yet: served empty, with a warning."""
    port = free_port()
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("LABELDIST_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "labeldist.cli", "serve", "--port", str(port)],
        cwd=REPO,
        env={**inherited, "LABELDIST_STORES": str(tmp_path / "absent"), "LABELDIST_ACCESS_LOG": "false"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base)
        assert httpx.get(f"{base}/v1/stores").json() == {"stores": []}
    finally:
        out = stop_server(proc)
    assert "does not exist" in out
