"""Labels in answers: ``"include_labels": true`` on ``POST .../search`` and
``?include_labels=true`` on ``GET .../items/{index}/neighbors`` answer each hit's label in its kind's JSON form,
for every built-in kind, through a real ``labeldist serve``. Each label is checked against the store's raw label
arrays read straight with zarr (not through the kinds' code); a search by an item's answered label finds that
item at distance 0 (the form is the one search reads). Requests without the field are answered as before, byte
for byte; a kind with no JSON form is refused 422 naming the field, before any work."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import zarr
from fastapi.testclient import TestClient

from labeldist.api.main import create_app
from labeldist.distances.caption_sets import CaptionSetWMD
from labeldist.distances.layout import LayoutMIoU
from labeldist.distances.pose import PoseDistance
from labeldist.distances.sts import SentenceRelevance
from labeldist.distances.vectors import VectorDistance
from labeldist.labels.base import LabelSet, has_json_form
from labeldist.labels.captions import read_karpathy_captions
from labeldist.labels.layouts import LayoutMaps
from labeldist.labels.pose_files import read_mpii_csv
from labeldist.labels.sentences import sentences_from_texts
from labeldist.labels.vectors import Vectors
from tests.api.api_helpers import MPII_CSV, REPO, make_settings, start_server, stop_server
from tests.conftest import write_store
from tests.processes import free_port, wait_healthy

K = 6
SENTENCES = [
    "A man rides a horse.",
    "A dog runs on the beach.",
    "A woman rides a horse on a beach.",
    "Two cats sleep on a sofa.",
    "A child kicks a red ball.",
    "An old man reads a newspaper.",
    "A dog catches a frisbee.",
    "Rain falls on the city street.",
    "A cat sleeps on a sunny windowsill.",
]


@pytest.fixture(scope="module")
def stores_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store of each built-in kind, kNN-only, k = 6."""
    root = tmp_path_factory.mktemp("item-labels")
    rng = np.random.default_rng(11)
    data = json.loads((REPO / "data" / "coco" / "coco_karpathy_test.json").read_text())[:25]
    (root / "coco.json").write_text(json.dumps(data))
    maps = rng.integers(0, 6, size=(20, 6, 5)).astype(np.uint8)
    built = {
        "pose": (read_mpii_csv(MPII_CSV).subset(slice(0, 60)), PoseDistance()),
        "vec": (
            Vectors([f"v{i}" for i in range(40)], rng.normal(size=(40, 3)), ["a", "b", "c"]),
            VectorDistance("euclidean"),
        ),
        "captions": (read_karpathy_captions(root / "coco.json"), CaptionSetWMD()),
        "sentences": (
            sentences_from_texts([f"s{i}" for i in range(len(SENTENCES))], SENTENCES),
            SentenceRelevance("cbow"),
        ),
        "layout": (LayoutMaps(np.array([f"m{i}" for i in range(20)]), maps), LayoutMIoU()),
    }
    for name, (labels, distance) in built.items():
        write_store(root / "stores" / name, labels, distance, dataset=name, k=K, dense=False, block_rows=16)
    return root / "stores"


@pytest.fixture(scope="module")
def base(stores_root: Path) -> Iterator[str]:
    port = free_port()
    proc = start_server(stores_root, port)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url)
        yield url
    finally:
        stop_server(proc)


def expected_label(store: Path, i: int) -> Any:
    """Item ``i``'s label in its kind's JSON form, made here from the store's raw arrays (labels/<name>)."""
    g = zarr.open_group(str(store), mode="r")
    arrays = {name: arr for name, arr in g["labels"].arrays()}
    if "xy" in arrays:  # a pose: [x, y] or null per joint
        xy, present = arrays["xy"][i], arrays["present"][i]
        return [[float(x), float(y)] if p else None for (x, y), p in zip(xy.tolist(), present.tolist())]
    if "values" in arrays:  # a vector
        return [float(v) for v in arrays["values"][i]]
    if "maps" in arrays:  # a layout map: H rows of W ints
        return [[int(v) for v in row] for row in arrays["maps"][i]]
    text, offsets = bytes(arrays["text"][:]), arrays["text_offsets"][:]
    if "caption_offsets" in arrays:  # a caption set: its captions
        first, last = arrays["caption_offsets"][i : i + 2]
        return [text[offsets[c] : offsets[c + 1]].decode() for c in range(first, last)]
    return text[offsets[i] : offsets[i + 1]].decode()  # a sentence


STORES = ["pose", "vec", "captions", "sentences", "layout"]


@pytest.mark.parametrize("name", STORES)
def test_neighbours_answer_the_labels_in_their_kinds_json_form(base: str, stores_root: Path, name: str) -> None:
    for index in (0, 7):
        url = f"{base}/v1/stores/{name}/items/{index}/neighbors"
        plain = httpx.get(url, params={"k": K})
        answer = httpx.get(url, params={"k": K, "include_labels": "true"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert list(body) == ["index", "id", "indices", "ids", "distances", "label", "labels"]
        assert {key: body[key] for key in list(body)[:5]} == plain.json()  # the rest as without labels
        assert body["label"] == expected_label(stores_root / name, index)
        assert len(body["labels"]) == len(body["indices"]) == K
        assert body["labels"] == [expected_label(stores_root / name, j) for j in body["indices"]]


@pytest.mark.parametrize("name", ["pose", "vec", "captions"])
def test_search_answers_each_hits_label_and_an_answered_label_is_found_again(
    base: str, stores_root: Path, name: str
) -> None:
    item = 3
    label = httpx.get(
        f"{base}/v1/stores/{name}/items/{item}/neighbors", params={"k": 1, "include_labels": "true"}
    ).json()["label"]
    url = f"{base}/v1/stores/{name}/search"
    answer = httpx.post(url, json={"label": label, "k": K, "include_labels": True}, timeout=60)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert list(body) == ["indices", "ids", "distances", "computed", "labels"]
    assert body["labels"] == [expected_label(stores_root / name, j) for j in body["indices"]]
    assert body["distances"][0] == 0.0 and item in [j for j, d in zip(body["indices"], body["distances"]) if d == 0]
    plain = httpx.post(url, json={"label": label, "k": K}, timeout=60)
    assert plain.json() == {key: body[key] for key in ("indices", "ids", "distances", "computed")}


def test_requests_without_the_field_are_answered_as_before(base: str) -> None:
    url = f"{base}/v1/stores/vec/items/5/neighbors"
    plain = httpx.get(url, params={"k": 4})  # the fast path's answer
    assert list(plain.json()) == ["index", "id", "indices", "ids", "distances"]
    assert httpx.get(url, params={"k": 4, "include_labels": "false"}).content == plain.content  # FastAPI's route
    search = f"{base}/v1/stores/vec/search"
    answers = [
        httpx.post(search, json={"label": [0.1, 0.2, 0.3], "k": 4, **extra})
        for extra in ({}, {"include_labels": False})
    ]
    assert list(answers[0].json()) == ["indices", "ids", "distances", "computed"]
    assert answers[0].content == answers[1].content
    refused = httpx.post(search, json={"label": [0.1, 0.2, 0.3], "include_labels": "yes"})
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "include_labels"]


def test_every_built_in_kind_has_a_json_form() -> None:
    from labeldist.kinds import distance_class, registry

    kinds = {k.name for k in registry().kinds.values() if k.origin == "built-in"}
    assert {"pose", "vectors", "caption_wmd", "sentence_relevance", "layout_miou"} <= kinds
    assert all(has_json_form(distance_class(kind).labels_class) for kind in kinds)
    assert not has_json_form(LabelSet)


# ------------------------------------------------------------------------------------------------ no JSON form
@pytest.fixture
def no_json_form(monkeypatch: pytest.MonkeyPatch, stores_root: Path) -> Iterator[tuple[TestClient, list[int]]]:
    """An in-process app where the vector kind has no per-item JSON form (as a plugin that defines none), and
    the searches that reached the distance computation."""
    import labeldist.api.routers.search as search_module

    monkeypatch.setattr(Vectors, "to_json", LabelSet.to_json)
    calls: list[int] = []
    real = search_module.search_labels
    monkeypatch.setattr(search_module, "search_labels", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    with TestClient(create_app(make_settings(stores=stores_root))) as client:
        yield client, calls


def test_a_kind_without_a_json_form_is_422_naming_the_field_before_any_work(no_json_form) -> None:
    client, calls = no_json_form
    message = (
        "labels are not available for kind 'vectors': its labels have no JSON form (LabelSet.to_json); ask "
        "without include_labels"
    )
    answer = client.post("/v1/stores/vec/search", json={"label": [0, 0, 0], "include_labels": True})
    assert answer.status_code == 422
    assert answer.json()["detail"] == [
        {"type": "value_error", "loc": ["body", "include_labels"], "msg": message, "input": True}
    ]
    assert not calls
    answer = client.get("/v1/stores/vec/items/0/neighbors?include_labels=true")
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["query", "include_labels"]
    assert answer.json()["detail"][0]["msg"] == message
    # without the field, both are answered
    assert client.post("/v1/stores/vec/search", json={"label": [0, 0, 0]}).status_code == 200 and calls
    assert client.get("/v1/stores/vec/items/0/neighbors").status_code == 200


def test_the_field_is_in_the_openapi_schema(no_json_form) -> None:
    client, _ = no_json_form
    spec = client.get("/openapi.json").json()
    assert "include_labels" in spec["components"]["schemas"]["Search"]["properties"]
    assert "labels" in spec["components"]["schemas"]["SearchResult"]["properties"]
    assert {"label", "labels"} <= set(spec["components"]["schemas"]["Neighbors"]["properties"])
    params = spec["paths"]["/v1/stores/{store}/items/{index}/neighbors"]["get"]["parameters"]
    assert "include_labels" in [p["name"] for p in params]


# ------------------------------------------------------------------------------------------------ size bound
def test_labels_past_the_size_bound_are_413_before_they_are_made(stores_root: Path) -> None:
    """An answer carries at most LABELDIST_MAX_LABEL_BYTES of labels, each estimated as the largest of a sample
    (here every caption set of the 25-item store, measured independently from its raw arrays). Before: unbounded,
    and 40 clients asking 2,000 layouts for k=100 with labels (3.3 MB each) slowed every other request 100-fold."""
    store, limit = stores_root / "captions", 1024
    each = max(len(json.dumps(expected_label(store, i))) for i in range(25)) + 2
    fit = limit // each
    assert 2 <= fit < K  # the case at hand: a few labels fit, k = K do not
    with TestClient(create_app(make_settings(stores=stores_root, max_label_bytes=limit))) as client:
        # neighbours carry k + 1 labels (the item's own too)
        answer = client.get(f"/v1/stores/captions/items/0/neighbors?k={fit - 1}&include_labels=true")
        assert answer.status_code == 200 and len(answer.json()["labels"]) == fit - 1
        answer = client.get(f"/v1/stores/captions/items/0/neighbors?k={fit}&include_labels=true")
        assert answer.status_code == 413, answer.text
        detail = answer.json()["detail"]
        assert f"{fit + 1} labels of store 'captions' (about {each:,} bytes each in JSON)" in detail, detail
        assert f"LABELDIST_MAX_LABEL_BYTES; {fit} fit" in detail, detail
        label = expected_label(store, 3)
        answer = client.post("/v1/stores/captions/search", json={"label": label, "k": fit + 1, "include_labels": True})
        assert answer.status_code == 413 and "LABELDIST_MAX_LABEL_BYTES" in answer.json()["detail"]
        answer = client.post("/v1/stores/captions/search", json={"label": label, "k": fit, "include_labels": True})
        assert answer.status_code == 200, answer.text
        assert answer.json()["labels"][0] == label
        # without labels, any k the store has
        assert client.get(f"/v1/stores/captions/items/0/neighbors?k={K}").status_code == 200


def test_labels_the_sample_missed_are_measured_as_they_are_made(tmp_path: Path) -> None:
    """Before: the bound was checked on an estimate from 32 sampled labels alone, so a sentence store whose sampled
    lines were short and the rest 8 KB answered 1.6 MB under a 100 KB bound. Here the lines the sample skips are
    3 KB and the bound 2 KB: the estimate lets the request through, and the labels made are refused once they pass
    the bound."""
    from labeldist.api.answers.itemlabels import SIZE_SAMPLE

    n = 40
    sampled = set(np.unique(np.linspace(0, n - 1, SIZE_SAMPLE).astype(np.int64)).tolist())
    long = [i for i in range(n) if i not in sampled]
    assert long  # the sample misses some lines
    words = ["horse", "beach", "dog", "city", "rain", "ball", "sofa", "cat"]
    texts = [
        " ".join([words[i % 8]] * 600) if i in long else f"a {words[i % 8]} and a {words[(i + 1) % 8]}."
        for i in range(n)
    ]
    labels = sentences_from_texts([f"s{i}" for i in range(n)], texts)
    write_store(
        tmp_path / "stores" / "s", labels, SentenceRelevance("cbow"), dataset="s", k=K, dense=False, block_rows=16
    )
    limit = 2048
    with TestClient(create_app(make_settings(stores=tmp_path / "stores", max_label_bytes=limit))) as client:
        answer = client.get(f"/v1/stores/s/items/{long[0]}/neighbors?k=2&include_labels=true")
        assert answer.status_code == 413, answer.status_code
        detail = answer.json()["detail"]
        assert "LABELDIST_MAX_LABEL_BYTES" in detail and f"over the {limit:,} bytes" in detail, detail
        answer = client.post("/v1/stores/s/search", json={"label": texts[long[0]], "k": 3, "include_labels": True})
        assert answer.status_code == 413 and "LABELDIST_MAX_LABEL_BYTES" in answer.json()["detail"]
        # every answer that is sent carries at most the bound, and answers of short lines are sent
        sent = 0
        for i in range(n):
            r = client.get(f"/v1/stores/s/items/{i}/neighbors?k=2&include_labels=true")
            assert r.status_code in (200, 413), r.text
            if r.status_code == 200:
                body = r.json()
                assert len(json.dumps([body["label"], *body["labels"]])) <= limit
                sent += 1
        assert sent >= 10 and all(
            client.get(f"/v1/stores/s/items/{i}/neighbors?k=2&include_labels=true").status_code == 413 for i in long
        )
