"""Search a sentence store by a new sentence: scored by the store's own scorer, exact top-k,
within the on-demand budget; the clients' ``search()`` give the service's answers.

Each answer is compared with a brute-force ranking by the store's scorer: every item's distance to the sentence
by the distance's slow oracle (``SentenceRelevance.reference``: each sentence encoded alone, one model call a
sentence or a pair), which the answer's distances must equal (to float32 and the batching's rounding), and no item
left out may be nearer than the answer's last. Real stores of COCO captions as sentences, the packaged
all-MiniLM-L6-v2, an in-process app (FastAPI's TestClient)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from labeldist.api.main import create_app
from labeldist.distances.sts import SentenceRelevance
from labeldist.labels.sentences import read_caption_sentences
from labeldist.view.stored import stored_distance, stored_labels
from tests.api.api_helpers import REPO, make_settings
from tests.conftest import write_store

COCO = REPO / "data" / "coco" / "coco_karpathy_test.json"
N, K = 120, 5
QUERIES = ["A man riding a wave on top of a surfboard.", "Two giraffes standing next to a tree in a field."]
#: the scorers searched: BERT alone (a bi-encoder), CBoW alone, and the paper's coarse-to-fine
SCORERS = {
    "bert": SentenceRelevance("bert"),
    "cbow": SentenceRelevance("cbow"),
    "coarse": SentenceRelevance("coarse_to_fine", cbow_threshold=0.8),
}
#: float32 storage, and a sentence embedded in a batch against alone (the oracle): about 1e-7 apart
ATOL = 2e-5


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sentence-search") / "stores"
    labels = read_caption_sentences(COCO, limit=N)
    for name, distance in SCORERS.items():
        write_store(root / name, labels, distance, dataset="coco", k=K, dense=False, block_rows=64)
    return root


@pytest.fixture(scope="module")
def client(stores: Path) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(stores=stores))) as c:
        yield c


def oracle(store: Path, sentence: str) -> np.ndarray:
    """Every item's distance to ``sentence`` by the store's scorer, one pair at a time (the slow reference)."""
    from labeldist.labels.sentences import query_sentence
    from labeldist.store import StoreReader

    reader = StoreReader(str(store))
    labels, distance = stored_labels(reader), stored_distance(reader)
    recorded = reader.manifest["params"].get("labels")
    labels.provenance = dict(recorded) if isinstance(recorded, dict) else {}
    query = query_sentence(sentence, labels)
    return np.array([distance.reference(query, 0, labels, j) for j in range(len(labels))])


def check_exact(answer: dict, reference: np.ndarray, k: int) -> None:
    indices, distances = np.array(answer["indices"]), np.array(answer["distances"], dtype=np.float64)
    assert len(indices) == k and np.all(np.diff(distances) >= 0), answer
    np.testing.assert_allclose(distances, reference[indices], atol=ATOL)
    rest = np.setdiff1d(np.arange(len(reference)), indices)
    assert reference[rest].min() >= distances[-1] - ATOL, "an item left out is nearer than the last one answered"


@pytest.mark.parametrize("scorer", list(SCORERS))
@pytest.mark.parametrize("sentence", QUERIES)
def test_a_new_sentence_finds_the_brute_force_top_k(client, stores, scorer, sentence) -> None:
    answer = client.post(f"/v1/stores/{scorer}/search", json={"label": sentence, "k": K, "include_labels": True})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    check_exact(body, oracle(stores / scorer, sentence), K)
    assert body["computed"] == N
    assert all(isinstance(label, str) for label in body["labels"])


@pytest.mark.parametrize("scorer", list(SCORERS))
def test_an_items_own_sentence_finds_it_at_distance_0(client, scorer) -> None:
    label = client.get(f"/v1/stores/{scorer}/items/17/neighbors?k=1&include_labels=true").json()["label"]
    body = client.post(f"/v1/stores/{scorer}/search", json={"label": label, "k": 3}).json()
    assert body["distances"][0] == 0.0 and 17 in [i for i, d in zip(body["indices"], body["distances"]) if d == 0]


def test_bad_sentences_are_422_naming_what_is_wrong(client) -> None:
    cases = [
        ("bert", ["two", "sentences"], "a sentence store is searched by one sentence, a JSON string"),
        ("bert", "   ", "the sentence is empty"),
        ("bert", 7, "a sentence store is searched by one sentence"),
        ("cbow", "the of and", "has no word with a vector, and this store scores by CBoW alone"),
        ("bert", " ".join(["horse"] * 400), "words with a vector: at most"),
    ]
    for store, label, message in cases:
        answer = client.post(f"/v1/stores/{store}/search", json={"label": label})
        assert answer.status_code == 422, (label, answer.text)
        assert message in answer.json()["detail"][0]["msg"], answer.json()
    # BERT reads a sentence of stop words as any other
    assert client.post("/v1/stores/bert/search", json={"label": "the of and"}).status_code == 200


def test_the_search_is_within_the_budget(tmp_path, monkeypatch) -> None:
    """The estimate counts the store's embeddings only where they are not at hand. A store of 120 sentences this
    process never embedded, made by the real command in another process (which leaves their embeddings in its
    LABELDIST_CACHE): with another cache a search costs 120 embeddings and is refused before any work (413); with
    the store's cache it costs one and is answered, exactly."""
    colours, animals = ["red", "grey", "small", "old"], ["fox", "heron", "goat", "otter", "lynx"]
    places = ["lake", "ridge", "field", "harbour", "forest", "valley"]
    texts = [f"A {c} {a} rests by the {p}." for c in colours for a in animals for p in places]
    (tmp_path / "sentences.txt").write_text("\n".join(texts) + "\n")
    cache = tmp_path / "cache"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "labeldist.cli",
            "precompute",
            "sentences",
            str(tmp_path / "sentences.txt"),
            "--out",
            str(tmp_path / "stores" / "new"),
            "--scorer",
            "bert",
            "--k",
            "5",
            "--knn-only",
            "--workers",
            "1",
            "--no-progress",
        ],
        check=True,
        env={**os.environ, "LABELDIST_CACHE": str(cache)},
    )
    settings = make_settings(stores=tmp_path / "stores", compute_budget_s=0.5)  # 120 x 12 ms do not fit; one does
    monkeypatch.setenv("LABELDIST_CACHE", str(tmp_path / "elsewhere"))
    with TestClient(create_app(settings)) as c:
        answer = c.post("/v1/stores/new/search", json={"label": QUERIES[0]})
        assert answer.status_code == 413 and "LABELDIST_COMPUTE_BUDGET_S" in answer.json()["detail"], answer.text
    monkeypatch.setenv("LABELDIST_CACHE", str(cache))
    with TestClient(create_app(settings)) as c:
        answer = c.post("/v1/stores/new/search", json={"label": "A grey heron rests by the lake.", "k": K})
        assert answer.status_code == 200, answer.text
    check_exact(answer.json(), oracle(tmp_path / "stores" / "new", "A grey heron rests by the lake."), K)


def test_the_store_list_says_which_stores_can_be_searched(client, tmp_path) -> None:
    listed = {s["name"]: s for s in client.get("/v1/stores").json()["stores"]}
    assert all(listed[name]["searchable"] is True for name in SCORERS)


def test_a_long_sentence_counts_against_the_budget_by_its_length(client) -> None:
    """The fifth adversarial run: under a 1 s budget a 960 KB sentence of unknown words was answered after 10.6 s,
    and three clients sending such sentences made 7 of 13 ordinary searches 503. A sentence is read and tokenized
    whole before the model truncates it: the estimate counts its bytes (12 us a byte), refused before any work."""
    long = " ".join(f"qz{i}x" for i in range(150_000))  # about 1 MB: about 12 s, over the default 10 s
    answer = client.post("/v1/stores/bert/search", json={"label": long})
    assert answer.status_code == 413, answer.text
    detail = answer.json()["detail"]
    assert re.search(r"by a label of 1,\d{3},\d{3} bytes: estimated \d+\.\d s", detail)
    assert "LABELDIST_COMPUTE_BUDGET_S" in detail, detail
    assert client.post("/v1/stores/bert/search", json={"label": QUERIES[0]}).status_code == 200
