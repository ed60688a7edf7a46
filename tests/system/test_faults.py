"""Faults survived with nothing lost or changed: a worker killed mid-job, the precompute killed and rerun, the API
killed under load and restarted, a chunk corrupted on disk. (The disk filling up is in test_disk_full.py.)

Each test ends by comparing against the reference store (the same job in one process, no faults), bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from labeldist.store import StoreIncompleteError, StoreReader, blocks_done, read_manifest
from tests.conftest import check_store
from tests.processes import Service, kill, labeldist, spawn
from tests.system.conftest import JOB, assert_same_store

STORE = "mpii-pose"
KILL_AFTER_BLOCKS = 5


def wait_for_blocks(store: Path, n: int, proc, timeout: float = 180) -> int | None:
    """Wait until at least ``n`` row blocks of the store are marked done; the number done, or None if the job
    ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (store / "progress" / "blocks" / "zarr.json").exists():
            done = int(blocks_done(str(store)).sum())
            if done >= n:
                return done
        if proc.poll() is not None:
            return None
        time.sleep(0.01)
    raise TimeoutError(f"{store}: fewer than {n} blocks done after {timeout} s")


def job_half_way(cluster, tmp_path: Path, attempts: int = 4):
    """The job started on a fresh store and caught with at least ``KILL_AFTER_BLOCKS`` blocks done and some not:
    (the job's process, its store, blocks done). A job that ends before this process sees it half-way (a loaded
    machine can keep the poll from running for the whole job) is started again on a fresh store, so that the fault
    that follows always hits a job that is running."""
    for attempt in range(attempts):
        out = tmp_path / f"{STORE}-{attempt}"
        job = spawn(["labeldist.cli", *JOB, "--out", str(out), "--scheduler", cluster.address])
        done = wait_for_blocks(out, KILL_AFTER_BLOCKS, job)
        if done is not None and done < blocks_done(str(out)).size:
            return job, out, done
        output, _ = job.communicate(timeout=600)
        assert job.returncode == 0, f"the job failed before the fault: {output}"
    raise AssertionError(f"the job ended before it could be caught half-way, {attempts} times")


def files_digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# ---------------------------------------------------------------- the cluster loses a worker
@pytest.mark.slow
def test_a_worker_killed_mid_job_and_the_job_still_finishes_with_the_same_store(cluster, reference_store, tmp_path):
    job, out, done_at_kill = job_half_way(cluster, tmp_path)
    cluster.kill_worker(1)  # SIGKILL to its nanny and its worker process: nothing restarts it
    output, _ = job.communicate(timeout=600)
    assert job.returncode == 0, output
    total = blocks_done(str(out)).size
    assert done_at_kill < total, "the worker died before the job ended"
    assert cluster.n_workers() == 1, "one worker finished the job alone"
    assert_same_store(out, reference_store)
    check_store(out)


# ---------------------------------------------------------------- the precompute command is killed
@pytest.mark.slow
def test_the_precompute_killed_and_rerun_resumes_to_an_identical_store(cluster, reference_store, tmp_path):
    job, out, _ = job_half_way(cluster, tmp_path)
    kill(job)  # the client dies; the workers live on (tasks already running finish on their own)
    assert read_manifest(str(out))["complete"] is False
    with pytest.raises(StoreIncompleteError):
        StoreReader(str(out))
    done_before_rerun = int(blocks_done(str(out)).sum())
    total = blocks_done(str(out)).size
    assert 0 < done_before_rerun < total

    rerun = labeldist(*JOB, "--out", str(out), "--scheduler", cluster.address)
    assert rerun.returncode == 0, rerun.stderr
    computed = int(re.search(r"(\d+) of (\d+) blocks computed", rerun.stdout).group(1))
    assert computed <= total - done_before_rerun, "blocks written before the kill were computed again"
    assert_same_store(out, reference_store)
    check_store(out)


# ---------------------------------------------------------------- the API is killed under load
def _requests(n_items: int) -> list[tuple[str, str, dict | None]]:
    rng = np.random.default_rng(0)
    reqs: list[tuple[str, str, dict | None]] = []
    for item in rng.choice(n_items, 40, replace=False).tolist():
        reqs.append(("GET", f"/v1/stores/{STORE}/items/{item}/neighbors?k=30", None))
    for anchor in rng.choice(n_items, 20, replace=False).tolist():
        body = {"anchors": [anchor], "size": 30, "neighbors": 5, "pairwise": True, "seed": 7}
        reqs.append(("POST", f"/v1/stores/{STORE}/batches", body))
        reqs.append(("POST", f"/v1/stores/{STORE}/distances", {"pairs": rng.integers(0, n_items, (50, 2)).tolist()}))
    return reqs


class Load:
    """Clients sending the same requests in a loop, keeping every 200 answer per phase (before the kill, after the
    restart) and counting failed connections."""

    def __init__(self, url: str, requests: list[tuple[str, str, dict | None]], clients: int = 4) -> None:
        self.url, self.requests = url, requests
        self.phase = 0
        self.answers: dict[tuple[int, int], set[str]] = {(p, i): set() for p in (0, 1) for i in range(len(requests))}
        self.failed, self.other = 0, []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._run, args=(c * len(requests) // clients,)) for c in range(clients)
        ]

    def _run(self, offset: int) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            t = offset
            while not self.stop.is_set():
                i = t % len(self.requests)
                method, path, body = self.requests[i]
                phase = self.phase
                try:
                    r = client.request(method, path, json=body)
                except httpx.TransportError:
                    with self.lock:
                        self.failed += 1
                    time.sleep(0.05)
                    continue  # the same request again
                t += 1
                with self.lock:
                    if r.status_code == 200:
                        self.answers[phase, i].add(json.dumps(r.json(), sort_keys=True))
                    else:
                        self.other.append((r.status_code, r.text[:200]))

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)

    def wait_all_answered(self, phase: int, timeout: float = 180) -> None:
        """Until every request has had a 200 answer in ``phase``."""
        deadline = time.monotonic() + timeout
        while not all(self.answers[phase, i] for i in range(len(self.requests))):
            assert time.monotonic() < deadline, f"not every request answered in {timeout} s"
            time.sleep(0.05)


@pytest.mark.slow
def test_the_api_killed_under_load_and_restarted_gives_the_same_answers(reference_store, tmp_path):
    stores = tmp_path / "stores"
    shutil.copytree(reference_store, stores / STORE)
    before = files_digest(stores)
    requests = _requests(StoreReader(str(stores / STORE)).n_items)
    service = Service(stores).start()
    try:
        with Load(service.url, requests) as load:
            load.wait_all_answered(phase=0)
            service.kill()  # SIGKILL, mid-load
            service.start()  # same port; the clients reconnect on their own
            load.phase = 1
            load.wait_all_answered(phase=1)
        assert load.failed > 0, "the clients saw the service go away"
        assert not load.other, f"answers other than 200: {load.other[:3]}"
        # every request had one and the same answer, before the kill and after the restart
        for i in range(len(requests)):
            assert len(load.answers[0, i]) == 1 and load.answers[0, i] == load.answers[1, i], requests[i]
        # and that answer is the one a fresh sequential client gets
        with httpx.Client(base_url=service.url, timeout=30) as client:
            for i, (method, path, body) in enumerate(requests):
                r = client.request(method, path, json=body)
                assert {json.dumps(r.json(), sort_keys=True)} == load.answers[1, i]
    finally:
        service.stop()
    assert files_digest(stores) == before, "the service changed a store file"


# ---------------------------------------------------------------- a chunk corrupted on disk
def _flip_a_byte(chunk: Path) -> None:
    data = bytearray(chunk.read_bytes())
    data[len(data) // 3] ^= 0x5A
    chunk.write_bytes(bytes(data))


def _shard(store: Path, array: str, row_block: int) -> Path:
    return store / array / "c" / str(row_block) / "0"


def test_a_corrupted_chunk_is_found_by_verify_and_refused_by_the_api(reference_store, tmp_path):
    stores = tmp_path / "stores"
    clean, dense_hit, knn_hit = (stores / name for name in (STORE, "dense-hit", "knn-hit"))
    for dst in (clean, dense_hit, knn_hit):
        shutil.copytree(reference_store, dst)
    rows = StoreReader(str(clean)).manifest["block_rows"]
    _flip_a_byte(_shard(dense_hit, "dense/distances", 3))  # rows 3*rows .. 4*rows of the dense matrix
    _flip_a_byte(_shard(knn_hit, "knn/distances", 5))

    for store, array, block in ((dense_hit, "dense/distances", 3), (knn_hit, "knn/distances", 5)):
        proc = labeldist("verify", str(store), "--sample", "20")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        report = json.loads(proc.stdout)
        assert report["ok"] is False
        assert [(d["array"], d["rows"]) for d in report["damaged"]] == [(array, [block * rows, (block + 1) * rows])]
    clean_report = json.loads(labeldist("verify", str(clean), "--sample", "20").stdout)
    assert clean_report["ok"] is True and clean_report["damaged"] == []

    reader = StoreReader(str(clean))
    dense = reader.dense_rows(0, reader.n_items)
    hit = 3 * rows + 1  # an item whose dense row lies in the damaged shard
    with Service(stores).start() as service:
        with httpx.Client(base_url=service.url, timeout=30) as client:
            # the store with a damaged kNN chunk is not served at all
            r = client.get("/v1/stores/knn-hit/items/0/neighbors", params={"k": 5})
            assert r.status_code == 503 and "checksum" in r.json()["detail"], r.text
            listed = {s["name"]: s for s in client.get("/v1/stores").json()["stores"]}
            assert listed["knn-hit"]["available"] is False and listed[STORE]["available"] is True
            # the store with a damaged dense shard refuses those rows, every time, and serves the rest right
            for _ in range(2):
                r = client.post("/v1/stores/dense-hit/distances", json={"anchor": hit, "items": [0, 1, 2]})
                assert r.status_code == 503 and "checksum" in r.json()["detail"], r.text
                r = client.post(
                    "/v1/stores/dense-hit/batches", json={"anchors": [hit], "size": 10, "pairwise": True, "seed": 1}
                )
                assert r.status_code == 503, r.text
            r = client.post("/v1/stores/dense-hit/distances", json={"anchor": 0, "items": [1, hit, 2957]})
            assert r.status_code == 200
            assert np.array_equal(np.float32(r.json()["distances"]), dense[0, [1, hit, 2957]])
    assert not any(p.name.startswith(".") for p in stores.iterdir())
