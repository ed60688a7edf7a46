"""The fault campaign, scripted like the adversarial run that found its bugs, against a real uvicorn
server over real stores (a dense 2,958-pose store, a kNN-only store of 1,030 COCO caption sets, and damaged
copies of both):

1. bounded schemathesis runs over the live app (its own CLI, as the adversarial run used it);
2. a list of hand-made bad requests, raw bytes on a socket where HTTP clients would refuse to send them;
3. 32 concurrent clients whose every answer is compared with the answer to the same request sent alone;
4. every store fault of the issue, injected into copies: each must be refused (503 naming the damage), never
   answered with a number, an empty list or random items;
5. the 56-byte request that made the service compute 1.45 million WMDs, and requests just under the budget.

Each part ends with zero 5xx and zero wrong answers. The figures are written to
``test-artifacts/fault_campaign.json``; RELIABILITY.md quotes them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from labeldist.store import StoreReader
from tests.conftest import DATA, flip_bit, vlen_utf8_chunk
from tests.processes import REPO, Service

ARTIFACTS = REPO / "test-artifacts"
POSE, CAPTION = "mpii-pose", "coco-captions"
N_CAPTIONS = 1030
FIGURES: dict[str, object] = {}

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------- the stores, their damaged copies, the server
def _invalid_utf8_vocab(store: Path) -> None:
    words = [w.encode() for w in StoreReader(str(store)).label_arrays()["vocab"].tolist()]
    words[5] = b"\x9a" + words[5][1:]
    (store / "labels" / "vocab" / "c" / "0").write_bytes(vlen_utf8_chunk(words))


#: name -> (the store it damages, how, the item whose answer it damages, what the 503's detail must name)
FAULTS = {
    "dense-shard-deleted": (POSE, lambda s: (s / "dense/distances/c/3/0").unlink(), 3 * 16 + 2, "dense/distances"),
    "pose-knn-chunk-deleted": (POSE, lambda s: (s / "knn/indices/c/2/0").unlink(), 2 * 16 + 1, "knn/indices"),
    "caption-knn-chunk-deleted": (CAPTION, lambda s: (s / "knn/indices/c/1/0").unlink(), 300, "knn/indices"),
    "ids-bit-flipped": (CAPTION, lambda s: flip_bit(s / "ids/c/0"), 585, "ids"),
    "vectors-bit-flipped": (CAPTION, lambda s: flip_bit(s / "labels/vectors/c/0/0"), 7, "labels/vectors"),
    "vocab-invalid-utf8": (CAPTION, _invalid_utf8_vocab, 7, "labels/vocab"),
    "array-metadata-deleted": (CAPTION, lambda s: (s / "labels/vocab/zarr.json").unlink(), 7, "labels"),
    "manifest-garbled": (POSE, lambda s: (s / "zarr.json").write_text('{"zarr_format": 3, "node_t'), 1, "zarr.json"),
}
#: damage that keeps a store from being served at all (the rest is refused where it is read)
UNSERVED = ("ids", "knn/indices", "zarr.json")


@pytest.fixture(scope="module")
def stores(reference_store: Path, dask_client, tmp_path_factory) -> Path:
    from labeldist.distances.caption_sets import CaptionSetWMD
    from labeldist.engine import precompute
    from labeldist.labels.captions import read_captions

    root = tmp_path_factory.mktemp("campaign") / "stores"
    shutil.copytree(reference_store, root / POSE)  # the system tests' job: 2,958 poses, dense, k = 30, 16 rows
    captions = read_captions(DATA / "coco" / "coco_karpathy_test.json").subset(slice(0, N_CAPTIONS))
    precompute(
        captions,
        CaptionSetWMD(),
        root / CAPTION,
        dataset="coco1030",
        k=10,
        dense=False,
        block_rows=256,
        client=dask_client,
        progress=False,
    )
    for name, (source, damage, _item, _array) in FAULTS.items():
        shutil.copytree(root / source, root / name)
        damage(root / name)
    shutil.copytree(root / CAPTION, root / FIFO_STORE)
    fifo = root.parent / "vectors.txt"
    os.mkfifo(fifo)
    _name_word_vectors(root / FIFO_STORE, f"word2vec:{fifo}")
    return root


#: a caption store whose manifest names a FIFO as its word vectors: a search must never block
FIFO_STORE = "captions-vectors-fifo"
#: the label bytes one answer carries in the campaign (LABELDIST_MAX_LABEL_BYTES): about 15 pose labels
LABEL_BYTES = 4096


def _name_word_vectors(store: Path, source: str) -> None:
    """Make the store's manifest name ``source`` as the word vectors its captions were read with, as a store
    shared by someone else might (the manifest carries no checksum: it is input like any other)."""
    metadata = json.loads((store / "zarr.json").read_text())
    metadata["attributes"]["labeldist"]["params"]["labels"]["word_vectors"]["source"] = source
    (store / "zarr.json").write_text(json.dumps(metadata))


@pytest.fixture(scope="module")
def service(stores: Path):
    with Service(stores, LABELDIST_MAX_LABEL_BYTES=str(LABEL_BYTES)) as s:
        yield s
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "fault_campaign.json").write_text(json.dumps(FIGURES, indent=2) + "\n")


def _json_error(r: httpx.Response) -> None:
    """Every error the server answers is JSON with a ``detail``."""
    assert r.headers.get("content-type", "").startswith("application/json"), (r.status_code, r.text[:200])
    assert "detail" in r.json(), r.text[:200]


# ---------------------------------------------------------------- 1. schemathesis over the live app
@pytest.mark.parametrize("store", [None, POSE, CAPTION])
def test_schemathesis_over_the_live_app_finds_no_5xx(service: Service, tmp_path: Path, store: str | None) -> None:
    config = tmp_path / "schemathesis.toml"
    # 503 is the documented answer of a damaged store (several are served here) and of a busy compute pool
    checks = '[checks.not_a_server_error]\nexpected-statuses = ["1xx", "2xx", "3xx", "4xx", "503"]\n'
    config.write_text(checks + (f'[parameters]\n"path.store" = "{store}"\n' if store else ""))
    report = tmp_path / "events.ndjson"
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "st"),
            "--config-file",
            str(config),
            "run",
            f"{service.url}/openapi.json",
            "--max-examples",
            "25",
            "--checks",
            "not_a_server_error",
            "--seed",
            "7",
            "--generation-deterministic",
            "--request-timeout",
            "60",
            "--report",
            "ndjson",
            "--report-ndjson-path",
            str(report),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    statuses = [int(s) for s in re.findall(r'"status_code":\s*(\d+)', report.read_text())]
    server_errors = sum(s >= 500 and s != 503 for s in statuses)
    FIGURES[f"schemathesis {store or 'any store'}"] = {
        "cases": len(statuses),
        "5xx": server_errors,
        "503 (damaged store)": statuses.count(503),
    }
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert len(statuses) >= 100 and server_errors == 0, proc.stdout[-3000:]


# ---------------------------------------------------------------- 2. hand-made bad requests
def _raw(port: int, request: bytes, timeout: float = 30) -> tuple[int, bytes]:
    """Send raw bytes; the status and the body of the answer (0 if the server closed without one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            length = re.search(rb"(?i)content-length:\s*(\d+)", head)
            if sep and length and len(body) >= int(length.group(1)):
                break
    match = re.match(rb"HTTP/1\.[01] (\d{3})", data)
    return (int(match.group(1)) if match else 0), data.partition(b"\r\n\r\n")[2]


def _post(path: str, body: bytes, content_type: str = "application/json", extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n"
    ).encode() + body


def bad_requests() -> list[tuple[str, bytes]]:
    d, b = f"/v1/stores/{POSE}/distances", f"/v1/stores/{POSE}/batches"
    cd, cb = f"/v1/stores/{CAPTION}/distances", f"/v1/stores/{CAPTION}/batches"
    bodies = {
        # non-finite numbers (Found 1)
        "anchor NaN": (d, b'{"anchor": NaN, "items": [1]}'),
        "items Infinity": (d, b'{"anchor": 1, "items": [Infinity]}'),
        "items -Infinity": (d, b'{"anchor": 1, "items": [-Infinity]}'),
        "pairs NaN": (d, b'{"pairs": [[NaN, 1]]}'),
        "size 1e309": (b, b'{"count": 2, "size": 1e309}'),
        "seed Infinity": (b, b'{"count": 2, "size": 8, "seed": Infinity}'),
        "count -1e309": (b, b'{"count": -1e309, "size": 8}'),
        "caption anchor NaN": (cd, b'{"anchor": NaN, "items": [1, 2]}'),
        # numbers out of range or of the wrong type
        "anchor 2**63": (d, b'{"anchor": 9223372036854775808, "items": [1]}'),
        "anchor -1": (d, b'{"anchor": -1, "items": [1]}'),
        "anchor 1.5": (d, b'{"anchor": 1.5, "items": [1]}'),
        "anchor true": (d, b'{"anchor": true, "items": [1]}'),
        "anchor string": (d, b'{"anchor": "1", "items": [1]}'),
        "item past n": (d, b'{"anchor": 1, "items": [2958]}'),
        "pair of three": (d, b'{"pairs": [[1, 2, 3]]}'),
        "huge exponent": (b, b'{"count": 1e999999, "size": 8}'),
        "seed 2**53": (b, b'{"count": 1, "size": 8, "seed": 9007199254740992}'),
        "size 1": (b, b'{"count": 1, "size": 1}'),
        "neighbors past k": (b, b'{"anchors": [1], "size": 50, "neighbors": 31}'),
        "pairwise string": (b, b'{"count": 1, "size": 8, "pairwise": "yes"}'),
        "both anchors and count": (b, b'{"anchors": [1], "count": 1, "size": 8}'),
        "unknown field": (b, b'{"count": 1, "size": 8, "evil": 1}'),
        "empty anchors": (b, b'{"anchors": [], "size": 8}'),
        # bodies that are not JSON, or not UTF-8
        "not JSON": (d, b"{anchor: 1"),
        "empty body": (d, b""),
        "invalid UTF-8": (d, b'{"anchor": "\xff\xfe", "items": [1]}'),
        "UTF-16": (d, '{"anchor": 1, "items": [1]}'.encode("utf-16")),
        "deep nesting": (b, b"[" * 50_000 + b"]" * 50_000),
        "a JSON string": (d, b'"hello"'),
        "null": (d, b"null"),
        "duplicate keys": (d, b'{"anchor": 1, "anchor": NaN, "items": [1]}'),
        # over the limits
        "56-byte WMD bomb": (cb, b'{"count":3,"size":1024,"pairwise":true,"seed":7}'),
        "too many items": (d, json.dumps({"anchor": 1, "items": list(range(2958)) * 4}).encode()),
        "too many pairs": (cd, json.dumps({"pairs": [[i, (i * 7) % 1030] for i in range(1030)] * 10}).encode()),
        # labels past LABELDIST_MAX_LABEL_BYTES
        "search labels over the bound": (
            f"/v1/stores/{POSE}/search",
            json.dumps({"label": [[0.0, 0.0]] * 16, "k": 30, "include_labels": True}).encode(),
        ),
    }
    out = [(name, _post(path, body)) for name, (path, body) in bodies.items()]
    out += [
        ("wrong content type", _post(d, b'{"anchor": 1, "items": [1]}', "text/plain")),
        ("form body", _post(d, b"anchor=1&items=2", "application/x-www-form-urlencoded")),
        ("Content-Length not a number", f"POST {d} HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n".encode()),
        (
            "Content-Length over the limit",
            f"POST {d} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: 999999999\r\nConnection: close\r\n\r\n{{".encode(),
        ),
        (
            "chunked body over the limit",
            f"POST {d} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n".encode()
            + b"".join(b"10000\r\n" + b" " * 0x10000 + b"\r\n" for _ in range(40))
            + b"0\r\n\r\n",
        ),
        ("GET on a POST route", f"GET {d} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()),
        ("DELETE a store", f"DELETE /v1/stores/{POSE} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()),
        (
            "path traversal",
            b"GET /v1/stores/..%2F..%2Fetc/items/0/neighbors HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        ),
        ("hidden store folder", b"GET /v1/stores/.mpii-pose.creating HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        (
            "index past 2**31",
            f"GET /v1/stores/{POSE}/items/99999999999/neighbors HTTP/1.1\r\nHost: x\r\n"
            "Connection: close\r\n\r\n".encode(),
        ),
        (
            "k NaN",
            f"GET /v1/stores/{POSE}/items/1/neighbors?k=NaN HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode(),
        ),
        (
            "k over the store",
            f"GET /v1/stores/{POSE}/items/1/neighbors?k=31 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode(),
        ),
        (
            "a 64 KiB query",
            f"GET /v1/stores/{POSE}/items/1/neighbors?k={'1' * 65536} HTTP/1.1\r\nHost: x\r\n"
            "Connection: close\r\n\r\n".encode(),
        ),
        (
            "neighbour labels over the bound",
            f"GET /v1/stores/{POSE}/items/1/neighbors?k=30&include_labels=true HTTP/1.1\r\nHost: x\r\n"
            "Connection: close\r\n\r\n".encode(),
        ),
        (
            "include_labels not a boolean",
            f"GET /v1/stores/{POSE}/items/1/neighbors?include_labels=2 HTTP/1.1\r\nHost: x\r\n"
            "Connection: close\r\n\r\n".encode(),
        ),
        (
            "label of a damaged store",
            b"GET /v1/stores/vectors-bit-flipped/items/1/label HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        ),
    ]
    return out


#: the bad requests whose right answer is not a 4xx: UTF-16 is JSON that Python reads as RFC 8259 allows (the
#: answer is then the right distance), and a damaged store's label is refused with 503
NOT_4XX = {"UTF-16": 200, "label of a damaged store": 503}


def test_bad_requests_get_a_json_4xx_and_never_a_5xx(service: Service) -> None:
    answers = {name: _raw(service.port, request) for name, request in bad_requests()}
    unexpected = {
        name: (status, body[:200])
        for name, (status, body) in answers.items()
        if status != NOT_4XX.get(name) and not 400 <= status < 500
    }
    not_json = []
    for name, (status, body) in answers.items():
        try:
            assert "detail" in json.loads(body) or status == 200
        except Exception:
            not_json.append((name, status, body[:80]))
    FIGURES["bad requests"] = {
        "cases": len(answers),
        "5xx": sum(s >= 500 and s != 503 for s, _ in answers.values()),
        "statuses": sorted({s for s, _ in answers.values()}),
    }
    assert not unexpected, unexpected
    assert json.loads(answers["UTF-16"][1])["distances"] == [0.0]  # item 1 to itself
    assert answers["56-byte WMD bomb"][0] == 413 and b"LABELDIST_COMPUTE_BUDGET_S" in answers["56-byte WMD bomb"][1]
    for name in ("search labels over the bound", "neighbour labels over the bound"):
        assert answers[name][0] == 413 and b"LABELDIST_MAX_LABEL_BYTES" in answers[name][1], answers[name]
    assert not not_json, not_json
    assert httpx.get(f"{service.url}/healthz").status_code == 200


# ---------------------------------------------------------------- 3. 32 concurrent clients
def _mixed_requests(n_pose: int, n_caption: int) -> list[tuple[str, str, dict | None]]:
    rng = np.random.default_rng(3)
    reqs: list[tuple[str, str, dict | None]] = []
    for i in rng.choice(n_pose, 40, replace=False).tolist():
        reqs.append(("GET", f"/v1/stores/{POSE}/items/{i}/neighbors?k=20", None))
        reqs.append(("POST", f"/v1/stores/{POSE}/distances", {"anchor": i, "items": rng.choice(n_pose, 30).tolist()}))
    for i in rng.choice(n_caption, 24, replace=False).tolist():
        reqs.append(("GET", f"/v1/stores/{CAPTION}/items/{i}/neighbors", None))
        # caption pairs not stored: computed on demand, concurrently, by the WMD kernel
        reqs.append(("POST", f"/v1/stores/{CAPTION}/distances", {"pairs": rng.choice(n_caption, (6, 2)).tolist()}))
        reqs.append(
            (
                "POST",
                f"/v1/stores/{CAPTION}/batches",
                {"anchors": [i], "size": 8, "neighbors": 3, "pairwise": True, "seed": i},
            )
        )
    for seed in range(12):
        reqs.append(
            (
                "POST",
                f"/v1/stores/{POSE}/batches",
                {"count": 2, "size": 24, "neighbors": 5, "pairwise": True, "seed": seed},
            )
        )
    return reqs


def _values(answer: dict) -> dict:
    """An answer without ``computed``: how many pairs this request computed depends on who asked first (later
    requests find them cached); every value must be the same."""
    return {key: value for key, value in answer.items() if key != "computed"}


def test_32_concurrent_clients_get_the_answers_of_sequential_requests(service: Service) -> None:
    reqs = _mixed_requests(2958, N_CAPTIONS)
    # the concurrent clients first, on a server that has computed nothing yet: every cache cold
    answers: dict[int, list[tuple[int, bytes]]] = {i: [] for i in range(len(reqs))}
    lock = threading.Lock()

    def client(c: int) -> None:
        order = np.random.default_rng(c).permutation(len(reqs)).tolist()
        with httpx.Client(base_url=service.url, timeout=120) as http:
            for i in order[: len(reqs) // 2]:
                method, path, body = reqs[i]
                r = http.request(method, path, json=body)
                with lock:
                    answers[i].append((r.status_code, r.content))

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(client, range(32)))
    sent = sum(len(a) for a in answers.values())
    # then each request alone, one after the other
    wrong, server_errors, busy = 0, 0, 0
    with httpx.Client(base_url=service.url, timeout=120) as http:
        for i, (method, path, body) in enumerate(reqs):
            alone = http.request(method, path, json=body)
            assert alone.status_code == 200, (path, body, alone.text[:300])
            for status, content in answers[i]:
                server_errors += status >= 500 and status != 503
                busy += status == 503  # a saturated compute pool: a documented answer, with Retry-After
                wrong += status == 200 and _values(json.loads(content)) != _values(alone.json())
    FIGURES["32 concurrent clients"] = {
        "requests": sent,
        "distinct": len(reqs),
        "5xx": server_errors,
        "503 busy": busy,
        "wrong answers": wrong,
    }
    assert server_errors == 0 and wrong == 0, FIGURES["32 concurrent clients"]


# ---------------------------------------------------------------- 4. every store fault, on copies
def test_every_store_fault_is_refused_never_served(service: Service) -> None:
    refused, served = [], []
    with httpx.Client(base_url=service.url, timeout=60) as http:
        listed = {s["name"]: s for s in http.get("/v1/stores").json()["stores"]}
        for name, (source, _damage, item, array) in FAULTS.items():
            answers = [
                http.get(f"/v1/stores/{name}/items/{item}/neighbors"),
                http.post(f"/v1/stores/{name}/distances", json={"anchor": item, "items": [1, 2, 3]}),
                http.post(
                    f"/v1/stores/{name}/batches",
                    json={"anchors": [item], "size": 6, "neighbors": 3, "pairwise": True, "seed": 1},
                ),
                http.get(f"/v1/stores/{name}/items/{item}/label"),
            ]
            for r in answers:
                assert r.status_code < 500 or r.status_code == 503, (name, r.status_code, r.text[:300])
            damaged = [r for r in answers if r.status_code == 503]
            for r in damaged:
                _json_error(r)
                assert array in r.json()["detail"] or "damaged" in r.json()["detail"], (name, r.text)
            # what the damage touches is refused; what is answered must equal the undamaged store's answer
            for r, path in zip(answers, ("neighbors", "distances", "batches", "label")):
                if r.status_code == 200:
                    whole = _same_request(http, source, item, path)
                    if r.json() != whole.json():
                        served.append((name, path))
            (refused if damaged else served).append(name)
            assert listed[name]["available"] is (array not in UNSERVED), (name, listed[name])
    FIGURES["store faults"] = {"injected": len(FAULTS), "refused": len(set(refused)), "served wrong": len(served)}
    assert not served and len(set(refused)) == len(FAULTS), (refused, served)


def test_a_manifest_naming_a_fifo_holds_no_computation_slot(service: Service) -> None:
    """More searches of the store whose manifest names a FIFO than there are computation slots, at once, and one of
    the plain caption store: each answered 200 from the store's own vocabulary, the same as the plain store's.
    Before: each search blocked opening the FIFO, the slots filled, and every on-demand request waited."""
    with httpx.Client(base_url=service.url, timeout=120) as http:
        label = http.get(f"/v1/stores/{CAPTION}/items/17/neighbors?k=1&include_labels=true").json()["label"]

        def search(store: str) -> httpx.Response:
            return http.post(f"/v1/stores/{store}/search", json={"label": label, "k": 5})

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(search, [FIFO_STORE] * 3 + [CAPTION]))
    statuses = [r.status_code for r in answers]
    FIGURES["manifest naming a FIFO"] = {"searches": len(answers), "statuses": statuses}
    assert statuses == [200] * 4, [r.text[:200] for r in answers]
    assert all(r.json()["indices"] == answers[-1].json()["indices"] for r in answers)
    assert 17 in answers[-1].json()["indices"]


def _same_request(http: httpx.Client, store: str, item: int, path: str) -> httpx.Response:
    if path == "neighbors":
        return http.get(f"/v1/stores/{store}/items/{item}/neighbors")
    if path == "distances":
        return http.post(f"/v1/stores/{store}/distances", json={"anchor": item, "items": [1, 2, 3]})
    if path == "batches":
        return http.post(
            f"/v1/stores/{store}/batches",
            json={"anchors": [item], "size": 6, "neighbors": 3, "pairwise": True, "seed": 1},
        )
    return http.get(f"/v1/stores/{store}/items/{item}/label")


# ---------------------------------------------------------------- 5. the budget
def test_requests_under_the_budget_finish_and_over_it_are_refused_at_once(service: Service) -> None:
    from labeldist.api.settings import Settings
    from labeldist.distances.caption_sets import CaptionSetWMD
    from labeldist.view.pairs import plan_pairs

    budget = Settings().compute_budget_s
    longest, under = 0.0, 0
    with httpx.Client(base_url=service.url, timeout=600) as http:
        t = time.perf_counter()
        bomb = http.post(f"/v1/stores/{CAPTION}/batches", json={"count": 3, "size": 1024, "pairwise": True, "seed": 7})
        refused_in = time.perf_counter() - t
        assert bomb.status_code == 413 and "LABELDIST_COMPUTE_BUDGET_S" in bomb.json()["detail"], bomb.text
        # pairwise batches whose estimate is just under the budget: the most a request may cost
        for seed in range(3):
            size = 2
            while plan_pairs(*np.triu_indices(size + 1, 1)).cost_s(CaptionSetWMD) < 0.9 * budget:
                size += 1
            t = time.perf_counter()
            r = http.post(
                f"/v1/stores/{CAPTION}/batches", json={"count": 1, "size": size, "pairwise": True, "seed": 100 + seed}
            )
            seconds = time.perf_counter() - t
            assert r.status_code == 200, r.text[:300]
            longest, under = max(longest, seconds), under + 1
    FIGURES["budget"] = {
        "budget_s": budget,
        "56-byte request refused in s": round(refused_in, 3),
        "requests near the budget": under,
        "largest batch size": size,
        "longest request s": round(longest, 2),
    }
