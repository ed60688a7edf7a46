"""A served store is one store: rebuilt, shrunk, added or removed under a live server, it is
served as the store now on disk without a restart, and no answer ever mixes two stores.

Before 0.3 the service opened its stores once: after ``precompute --overwrite`` under a running server, 540 of 540
polls mixed the two stores (the manifest, the neighbour lists and cached dense rows stayed old while uncached rows
came from the new store), a shrunk store answered old neighbours and a false 503 "damaged on disk", and a new
store folder was not seen until a restart.

Real parts throughout: ``labeldist precompute`` rebuilds the store while two real ``labeldist serve`` processes
(one with the default dense-row cache, one with none, so that every dense read goes to disk) are polled by client
threads. Each answer is classified by comparing it with the stores themselves, read back with
:class:`~labeldist.store.StoreReader` before and after the rebuild: it must be wholly the old store's or wholly the
new one's, and once a client has seen the new store it never sees the old one again.
"""

from __future__ import annotations

import random
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest

from labeldist.store import StoreReader
from tests.api.api_helpers import MPII_CSV, start_server
from tests.logs import LogFollower, wait_until
from tests.processes import free_port, labeldist, wait_healthy

pytestmark = pytest.mark.slow

NAME = "pose"
K = 10
#: how long the pollers may take to see the new store once the rebuild has finished (an event, not a pace)
SEE_TIMEOUT = 120.0


def write_csv(path: Path, rows: int) -> Path:
    """The first ``rows`` poses of the shipped MPII file."""
    with open(MPII_CSV) as f:
        lines = [next(f) for _ in range(rows + 1)]
    path.write_text("".join(lines))
    return path


def precompute(csv: Path, out: Path, *extra: str) -> None:
    r = labeldist(
        "precompute",
        "pose",
        str(csv),
        "--out",
        str(out),
        "--k",
        str(K),
        "--dense",
        "--workers",
        "1",
        "--no-progress",
        *extra,
    )
    assert r.returncode == 0, r.stderr


@dataclass
class Snapshot:
    """What a complete store answers, read from disk: every neighbour list and the whole dense matrix."""

    tag: str
    n_items: int
    normalization: str
    knn: np.ndarray
    knn_distances: np.ndarray
    dense: np.ndarray

    @classmethod
    def read(cls, tag: str, path: Path) -> Snapshot:
        reader = StoreReader(str(path))
        indices, distances = reader.knn()
        dense = reader.dense_rows(0, reader.n_items)
        return cls(tag, reader.n_items, reader.manifest["params"]["labels"]["normalization"], indices, distances, dense)


@dataclass
class Answer:
    kind: str
    request: dict
    status: int
    body: dict


@dataclass
class Poller:
    """A client that polls one server in a loop, recording every answer, until told to stop."""

    url: str
    seed: int
    answers: list[Answer] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, n_items: Callable[[], int]) -> None:
        rng = random.Random(self.seed)
        with httpx.Client(base_url=self.url, timeout=60.0) as client:
            while not self.stop.is_set():
                n = n_items()
                i = rng.randrange(n)
                items = [rng.randrange(n) for _ in range(6)]
                kind = rng.choice(["neighbors", "distances", "batches", "store"])
                if kind == "neighbors":
                    request: dict = {"index": i}
                    r = client.get(f"/v1/stores/{NAME}/items/{i}/neighbors")
                elif kind == "distances":
                    request = {"anchor": i, "items": items}
                    r = client.post(f"/v1/stores/{NAME}/distances", json=request)
                elif kind == "batches":
                    request = {"anchors": [i], "size": 8, "neighbors": 3, "seed": rng.randrange(1 << 30)}
                    r = client.post(f"/v1/stores/{NAME}/batches", json=request)
                else:
                    request = {}
                    r = client.get(f"/v1/stores/{NAME}")
                self.answers.append(Answer(kind, request, r.status_code, r.json()))
                self.stop.wait(0.01)  # leave the 2 cores to the servers and the rebuild (no answer depends on it)


def classify(answer: Answer, stores: list[Snapshot]) -> str:
    """The tag of the one store the answer is wholly from; "retry" for a 503 saying the store changed; "gone" for
    a 404 of an item past a shrunk store; "MIXED" when it matches none."""
    if answer.status == 503 and "changed on disk" in answer.body["detail"]:
        return "retry"
    if answer.status == 503 and "being replaced" in answer.body["detail"]:
        return "retry"
    matches = [s.tag for s in stores if _matches(answer, s)]
    if answer.status == 404 and "has no " in answer.body.get("detail", ""):
        return "gone"
    return matches[0] if len(matches) == 1 else ("MIXED" if not matches else "+".join(matches))


def _matches(answer: Answer, s: Snapshot) -> bool:
    if answer.status != 200:
        return False
    body, req = answer.body, answer.request
    if answer.kind == "store":
        return body["n_items"] == s.n_items and body["params"]["labels"]["normalization"] == s.normalization
    if answer.kind == "neighbors":
        i = req["index"]
        return (
            i < s.n_items
            and body["indices"] == s.knn[i].tolist()
            and np.array_equal(np.float32(body["distances"]), s.knn_distances[i])
        )
    if answer.kind == "distances":
        i, items = req["anchor"], req["items"]
        return (
            i < s.n_items
            and max(items) < s.n_items
            and np.array_equal(np.float32(body["distances"]), s.dense[i, items])
        )
    (batch,) = body["batches"]
    a, items = batch["anchor"], batch["items"]
    return (
        a < s.n_items
        and max(items) < s.n_items
        and items[:3] == s.knn[a, :3].tolist()
        and np.array_equal(np.float32(batch["distances"]), s.dense[a, items])
    )


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[Path, list[tuple[str, LogFollower]]]]:
    """A stores folder holding the first 800 MPII poses in MPII's person frame (center_scale), and two live servers
    over it: the default row caches, and none (every kNN list and dense row read from disk when asked, so that reads
    meet the new store's files while it replaces the old one)."""
    stores = tmp_path / "stores"
    precompute(write_csv(tmp_path / "poses800.csv", 800), stores / NAME, "--normalization", "center_scale")
    running: list[tuple[str, LogFollower]] = []
    try:
        for cache_mb in (None, "0"):
            port = free_port()
            env = {} if cache_mb is None else {"LABELDIST_DENSE_CACHE_MB": cache_mb, "LABELDIST_KNN_CACHE_MB": cache_mb}
            proc = start_server(stores, port, verbose=True, **env)
            running.append((f"http://127.0.0.1:{port}", LogFollower(proc)))
        for url, log in running:
            wait_healthy(log.proc, url)
        yield stores, running
    finally:
        for _, log in running:
            log.stop()


def poll_through(
    change: Callable[[], None],
    servers: list[tuple[str, LogFollower]],
    old: Snapshot,
    new_path: Path,
    n_items: Callable[[], int],
    until_tag: Callable[[Snapshot], str],
) -> tuple[Snapshot, list[Poller]]:
    """Poll both servers with three clients each while ``change()`` runs, then until every client has had an
    answer of the new store (a neighbour list, a distance row, a batch or the manifest: whichever it asks)."""
    pollers = [Poller(url, seed) for url, _ in servers for seed in range(3)]
    threads = [threading.Thread(target=p.run, args=(n_items,), daemon=True) for p in pollers]
    for t in threads:
        t.start()
    try:
        # every client has been answered by the old store before the change starts
        wait_until(lambda: all(any(a.status == 200 for a in p.answers) for p in pollers), "first answers")
        change()
        new = Snapshot.read("new", new_path)
        tag = until_tag(new)
        wait_until(
            lambda: all(any(classify(a, [old, new]) == tag for a in p.answers[-50:]) for p in pollers),
            "every client answered by the new store",
            SEE_TIMEOUT,
        )
    finally:
        for p in pollers:
            p.stop.set()
        for t in threads:
            t.join(timeout=60)
    return new, pollers


def check_never_mixed(pollers: list[Poller], old: Snapshot, new: Snapshot) -> dict[str, int]:
    """Every answer wholly the old store's or the new one's (or a 503 retry, or a 404 for an item the new store
    does not have), and per client, once new never old again. Returns the counts of each class."""
    counts: dict[str, int] = {}
    for p in pollers:
        seen_new = False
        for a in p.answers:
            tag = classify(a, [old, new])
            counts[tag] = counts.get(tag, 0) + 1
            assert tag in {"old", "new", "old+new", "retry", "gone"}, (tag, a)
            if tag == "new":
                seen_new = True
            assert not (seen_new and tag == "old"), f"the old store answered after the new one: {a}"
            if a.status == 503:
                assert "damaged" not in a.body["detail"], a
    return counts


def test_an_overwrite_under_live_servers_is_served_whole_and_never_mixed(servers, tmp_path: Path) -> None:
    stores, running = servers
    old = Snapshot.read("old", stores / NAME)
    csv = tmp_path / "poses800.csv"

    def rebuild() -> None:  # the case: the same poses in image pixels, replacing the store in place
        precompute(csv, stores / NAME, "--normalization", "none", "--overwrite")

    new, pollers = poll_through(rebuild, running, old, stores / NAME, lambda: 800, lambda new: "new")
    counts = check_never_mixed(pollers, old, new)
    print("answers by store:", counts)
    assert counts.get("old", 0) > 0 and counts.get("new", 0) > 0, counts
    for _, log in running:  # the servers said what they did
        log.wait_for(f"{NAME}: changed on disk (rebuilt or replaced): the new store is served")


def test_a_shrunk_store_is_served_as_it_is_now(servers, tmp_path: Path) -> None:
    """800 -> 300 items: items past 300 answer 404 (not a false 503 "damaged"), item 5 the new store's lists."""
    stores, running = servers
    old = Snapshot.read("old", stores / NAME)
    small = write_csv(tmp_path / "poses300.csv", 300)
    n_items = [800]

    def shrink() -> None:
        precompute(small, stores / NAME, "--normalization", "center_scale", "--overwrite")
        n_items[0] = 300

    new, pollers = poll_through(shrink, running, old, stores / NAME, lambda: 800, lambda new: "new")
    check_never_mixed(pollers, old, new)
    with httpx.Client(base_url=running[1][0]) as client:
        r = client.get(f"/v1/stores/{NAME}/items/500/neighbors")
        assert r.status_code == 404 and "items are 0..299" in r.json()["detail"], r.text
        r = client.get(f"/v1/stores/{NAME}/items/5/neighbors")
        assert r.status_code == 200 and r.json()["indices"] == new.knn[5].tolist()


def test_a_new_store_folder_is_served_and_a_removed_one_is_not(servers, tmp_path: Path) -> None:
    stores, running = servers
    url = running[0][0]
    with httpx.Client(base_url=url) as client:
        assert client.get("/v1/stores/extra").status_code == 404
        precompute(write_csv(tmp_path / "poses200.csv", 200), stores / "extra")
        extra = Snapshot.read("extra", stores / "extra")
        names = [s["name"] for s in client.get("/v1/stores").json()["stores"]]
        assert names == ["extra", NAME]
        r = client.get("/v1/stores/extra/items/7/neighbors")
        assert r.status_code == 200 and r.json()["indices"] == extra.knn[7].tolist()
        shutil.rmtree(stores / "extra")
        r = client.get("/v1/stores/extra/items/7/neighbors")
        assert r.status_code == 404 and "unknown store 'extra'" in r.json()["detail"], r.text
        assert [s["name"] for s in client.get("/v1/stores").json()["stores"]] == [NAME]
    running[0][1].wait_for("extra: its folder was removed: no longer served")


def test_an_append_under_live_servers_is_served_whole_and_never_mixed(servers, tmp_path: Path) -> None:
    """``labeldist append`` grows the served store by 100 poses. Both servers answer from the old
    generation while the new one is built beside it, then from the new one (900 items, generation 2) without a
    restart, by the reload an ``--overwrite`` gets; no answer mixes the two, and an item of the new generation
    is served with the lists a precompute of all 900 gives."""
    stores, running = servers
    old = Snapshot.read("old", stores / NAME)
    with open(MPII_CSV) as f:
        lines = [next(f) for _ in range(901)]
    more = tmp_path / "poses800-900.csv"
    more.write_text(lines[0] + "".join(lines[801:]))
    n_items = [800]

    def grow() -> None:
        r = labeldist("append", str(stores / NAME), str(more), "--workers", "1", "--no-progress")
        assert r.returncode == 0, r.stderr
        n_items[0] = 900

    new, pollers = poll_through(grow, running, old, stores / NAME, lambda: n_items[0], lambda new: "new")
    counts = check_never_mixed(pollers, old, new)
    print("answers by store:", counts)
    assert counts.get("old", 0) > 0 and counts.get("new", 0) > 0, counts
    full = tmp_path / "full"
    precompute(write_csv(tmp_path / "poses900.csv", 900), full, "--normalization", "center_scale")
    expected = Snapshot.read("full", full)
    with httpx.Client(base_url=running[1][0]) as client:
        store = client.get(f"/v1/stores/{NAME}").json()
        assert store["n_items"] == 900 and store["generation"] == 2, store
        assert [g["items"] for g in store["generations"]] == [[0, 800], [800, 900]]
        for i in (5, 850):
            r = client.get(f"/v1/stores/{NAME}/items/{i}/neighbors")
            assert r.status_code == 200 and r.json()["indices"] == expected.knn[i].tolist(), r.text
    for _, log in running:
        log.wait_for(f"{NAME}: changed on disk (rebuilt or replaced): the new store is served")
