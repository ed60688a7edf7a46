"""``POST /v1/stores/{store}/search``: the exact k nearest items of a new label.

For a vector, a pose and a caption store, the answer equals the brute-force top k of the label against every
item: exactly that of the kind's kernel over the whole row (no pruning; same float32 values, ties broken by
index), and, within float32 rounding, that of the kind's slow ``reference``. Bad labels are answered 422 naming
what is wrong, with nothing computed; a search over the compute budget is refused with 413 before any work.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient

from labeldist.api.main import create_app
from labeldist.core.knn import topk_rows
from labeldist.distances.caption_sets import CaptionSetWMD
from labeldist.distances.pose import PoseDistance
from labeldist.distances.vectors import VectorDistance
from labeldist.labels.base import LabelSet
from labeldist.labels.captions import CaptionSets, read_karpathy_captions
from labeldist.labels.pose_files import read_mpii_csv
from labeldist.labels.poses import Poses
from labeldist.labels.vectors import Vectors
from tests.api.api_helpers import MPII_CSV, REPO, make_settings
from tests.conftest import write_store

COCO = REPO / "data" / "coco" / "coco_karpathy_test.json"
N_VEC, N_POSE, N_CAP, K = 200, 150, 60, 10
#: images of the COCO file past the store's: their captions are new labels
COCO_IMAGES = 70


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[LabelSet, object]]:
    """Four kNN-only stores (the caption store's lists pruned by its lower bound, as precompute does), and the
    labels and distance of each."""
    root = tmp_path_factory.mktemp("search-stores")
    rng = np.random.default_rng(5)
    vectors = Vectors(np.array([f"v{i}" for i in range(N_VEC)]), rng.normal(size=(N_VEC, 3)), ["a", "b", "c"])
    ages = Vectors(np.array([f"p{i}" for i in range(N_VEC)]), rng.integers(1, 90, size=N_VEC).astype(float))
    poses = read_mpii_csv(MPII_CSV).subset(slice(0, N_POSE))
    data = json.loads(COCO.read_text())[:COCO_IMAGES]
    (root / "coco.json").write_text(json.dumps(data[:N_CAP]))
    captions = read_karpathy_captions(root / "coco.json")
    built = {
        "vec": (vectors, VectorDistance("euclidean")),
        "ages": (ages, VectorDistance("cityblock")),
        "pose": (poses, PoseDistance()),
        "captions": (captions, CaptionSetWMD()),
    }
    for name, (labels, distance) in built.items():
        write_store(root / "stores" / name, labels, distance, dataset=name, k=K, dense=False, block_rows=64)
    built["root"] = root  # type: ignore[assignment]
    return built


@pytest.fixture(scope="module")
def client(stores: dict) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(stores=stores["root"] / "stores"))) as c:
        yield c


@pytest.fixture
def computed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every search that reached the distance computation (labeldist.api.routers.search.search_labels)."""
    import labeldist.api.routers.search as search_module

    calls: list[int] = []
    real = search_module.search_labels

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(search_module, "search_labels", spy)
    return calls


def brute_force(query: LabelSet, labels: LabelSet, distance, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top k of the whole row of the kind's kernel (no bound, no pruning), float32, ties broken by index."""
    row = distance.block(query, labels).astype(np.float32)
    indices, dists = topk_rows(row, k)
    return indices[0], dists[0]


def by_reference(query: LabelSet, labels: LabelSet, distance) -> np.ndarray:
    """The label's distance to every item by the kind's slow, plain ``reference``, float32."""
    return np.array([distance.reference(query, 0, labels, j) for j in range(len(labels))], dtype=np.float32)


def check_exact(answer: dict, query: LabelSet, labels: LabelSet, distance, k: int) -> None:
    indices, dists = brute_force(query, labels, distance, k)
    assert answer["indices"] == indices.tolist()
    assert answer["ids"] == labels.ids[indices].tolist()
    got = np.array([np.inf if d is None else d for d in answer["distances"]], dtype=np.float32)
    np.testing.assert_array_equal(got, dists)
    # and by the slow reference: the same k smallest values, each item's value its own (ties may swap items)
    ref = by_reference(query, labels, distance)
    np.testing.assert_allclose(got, np.sort(ref)[:k], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, ref[answer["indices"]], rtol=1e-5, atol=1e-6)
    assert 0 < answer["computed"] <= len(labels)


def search(client: TestClient, store: str, label: object, k: int = K, **kw: object):
    return client.post(f"/v1/stores/{store}/search", json={"label": label, "k": k}, **kw)


def detail(response) -> str:
    assert response.status_code == 422, response.text
    body = response.json()["detail"]
    assert isinstance(body, list) and body[0]["loc"] == ["body", "label"], body
    return body[0]["msg"]


# ------------------------------------------------------------------------------------------------ exact answers
def test_a_vector_search_is_the_brute_force_top_k(client: TestClient, stores: dict) -> None:
    labels, distance = stores["vec"]
    for label, k in (([0.1, -0.2, 0.3], K), ([3.0, 3.0, -1.0], 4), (labels.values[17].tolist(), 7)):
        r = search(client, "vec", label, k)
        assert r.status_code == 200, r.text
        query = Vectors.from_json(label, like=labels)
        check_exact(r.json(), query, labels, distance, k)
    assert r.json()["indices"][0] == 17 and r.json()["distances"][0] == 0.0  # an item's own label: itself first


def test_a_scalar_store_takes_a_number_or_a_list_of_one(client: TestClient, stores: dict) -> None:
    labels, distance = stores["ages"]
    a, b = search(client, "ages", 41.5), search(client, "ages", [41.5])
    assert a.status_code == 200 and a.json() == b.json(), a.text
    check_exact(a.json(), Vectors.from_json(41.5, like=labels), labels, distance, K)  # many ties: by index


def pose_json(poses: Poses, i: int) -> list:
    return [[float(x), float(y)] if p else None for (x, y), p in zip(poses.xy[i], poses.present[i])]


def test_a_pose_search_is_the_brute_force_top_k(client: TestClient, stores: dict) -> None:
    labels, distance = stores["pose"]
    others = read_mpii_csv(MPII_CSV).subset(slice(N_POSE, N_POSE + 40))
    new = [i for i in range(len(others)) if not others.present[i].all()][:2] + [0]  # some with joints missing
    for i in new:
        label = pose_json(others, i)
        r = search(client, "pose", label)
        assert r.status_code == 200, r.text
        check_exact(r.json(), Poses.from_json(label, like=labels), labels, distance, K)
    r = search(client, "pose", pose_json(labels, 42), 3)
    assert r.json()["indices"][0] == 42 and r.json()["distances"][0] == 0.0


def test_a_caption_search_is_the_brute_force_top_k(client: TestClient, stores: dict) -> None:
    labels, distance = stores["captions"]
    like = client.app.state.registry.get("captions").labels_and_distance()[0]  # as served: with its provenance
    new_images = json.loads(COCO.read_text())[N_CAP:COCO_IMAGES]
    queries = [
        new_images[0]["caption"],
        new_images[5]["caption"][:2],
        ["a man riding a wave on top of a surfboard", "A dog runs on the beach."],
        "two cats asleep on a bed",
    ]
    for label in queries:
        r = search(client, "captions", label)
        assert r.status_code == 200, r.text
        check_exact(r.json(), CaptionSets.from_json(label, like=like), labels, distance, K)
    r = search(client, "captions", labels.captions(9), 3)
    assert r.json()["indices"][0] == 9 and r.json()["distances"][0] == 0.0, "an item's own captions: itself first"


def test_the_caption_query_is_made_as_the_stores_captions_were(client: TestClient, stores: dict) -> None:
    """Tokenized with the store's tokenizer (gensim's stop words), embedded with its word vectors (GloVe): the
    query's words and vectors are those a caption of the store's file would get."""
    labels, _ = stores["captions"]
    like = client.app.state.registry.get("captions").labels_and_distance()[0]
    assert like.provenance["tokenizer"] == labels.provenance["tokenizer"]
    query = CaptionSets.from_json(["The zebra stands NEAR the water", "xylophone"], like=like)
    assert query.caption_words(0) == ["zebra", "stands", "near", "water"]  # "the" is a stop word
    assert query.caption_words(1) == ["xylophone"], "a word no caption of the store uses still has its vector"
    from labeldist.labels.text import default_word_vectors

    table = default_word_vectors()
    np.testing.assert_array_equal(query.vectors, table.lookup(query.vocab.tolist()))


def test_k_larger_than_the_store_answers_every_item(client: TestClient, stores: dict) -> None:
    r = search(client, "pose", pose_json(stores["pose"][0], 3), 500)
    assert r.status_code == 200 and len(r.json()["indices"]) == N_POSE, r.text
    assert search(client, "pose", pose_json(stores["pose"][0], 3), 1001).status_code == 413  # LABELDIST_MAX_K
    assert search(client, "pose", pose_json(stores["pose"][0], 3), 0).status_code == 422


# ------------------------------------------------------------------------------------------------ bad labels
@pytest.mark.parametrize(
    ("store", "label", "says"),
    [
        ("captions", [], "the caption set is empty"),
        ("captions", "", "has no known word: no word at all"),
        ("captions", ["the of and to"], "has no known word: only stop words"),
        ("captions", ["zzxqv blorfing qqqpr"], "no vector for 'zzxqv', 'blorfing', 'qqqpr'"),
        ("captions", ["a dog", 7], "caption 1 is 7, not a string"),
        ("captions", {"captions": ["a dog"]}, "must be a list of caption strings"),
        ("captions", ["a dog"] * 40, "40 captions: a query may have at most"),
        ("vec", [], "the vector is empty"),
        ("vec", [1.0, 2.0], "the vector has 2 numbers, the store's labels have 3 (a, b, c)"),
        ("vec", [1.0, "2", 3.0], "number 1 of the vector is '2', not a number"),
        ("vec", [1.0, True, 3.0], "number 1 of the vector is True, not a number"),
        ("vec", 4.0, "the vector must be a list of 3 numbers (a, b, c)"),
        ("vec", None, "the vector must be a list of 3 numbers"),
        ("ages", [1.0, 2.0], "the vector has 2 numbers, the store's labels have 1"),
        ("pose", [None] * 16, "the pose has no joint"),
        ("pose", [[1.0, 2.0]] * 15, "the pose has 15 joints, the store's poses have 16"),
        ("pose", [[1.0, 2.0, 1.0]] + [None] * 15, "joint 0 (r_ankle) must be [x, y] or null"),
        ("pose", [[1.0, "x"]] + [None] * 15, "joint 0 (r_ankle) y is 'x', not a number"),
        ("pose", "a pose", "the pose must be a list of 16 joints"),
    ],
)
def test_a_bad_label_is_422_naming_what_is_wrong_and_nothing_is_computed(
    client: TestClient, computed: list[int], store: str, label: object, says: str
) -> None:
    message = detail(search(client, store, label))
    assert says in message, message
    assert not computed, "a distance was computed for a refused label"


def test_non_finite_numbers_are_refused_and_echoed_safely(client: TestClient, computed: list[int]) -> None:
    body = b'{"label": [1.0, NaN, 3.0], "k": 3}'
    r = client.post("/v1/stores/vec/search", content=body, headers={"Content-Type": "application/json"})
    assert "number 1 of the vector is nan, not a finite number" in detail(r)
    body = b'{"label": [[Infinity, 1]' + b", null" * 15 + b"]}"
    r = client.post("/v1/stores/pose/search", content=body, headers={"Content-Type": "application/json"})
    assert "joint 0 (r_ankle) x is inf, not a finite number" in detail(r)
    assert not computed


def test_the_body_is_checked_by_its_schema(client: TestClient) -> None:
    for body in ({}, {"k": 3}, {"label": [1, 2, 3], "k": "3"}, {"label": [1, 2, 3], "extra": 1}):
        r = client.post("/v1/stores/vec/search", json=body)
        assert r.status_code == 422, (body, r.text)
    assert client.post("/v1/stores/nope/search", json={"label": [1, 2, 3]}).status_code == 404


def test_a_kind_without_a_json_form_is_422(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Vectors, "from_json", classmethod(LabelSet.from_json.__func__))
    message = detail(search(client, "vec", [1.0, 2.0, 3.0]))
    assert message == "search by label is not available for kind 'vectors': its labels have no JSON form"


def test_layouts_have_no_json_form_to_search_by_yet() -> None:
    from labeldist.labels.base import reads_json
    from labeldist.labels.layouts import LayoutMaps
    from labeldist.labels.sentences import Sentences

    with pytest.raises(NotImplementedError):
        LayoutMaps.from_json([[0]], like=None)  # type: ignore[arg-type]
    assert not reads_json(LayoutMaps) and reads_json(Sentences) and reads_json(CaptionSets)


# ------------------------------------------------------------------------------------------------ bounds
def test_a_search_over_the_budget_is_413_before_any_work(stores: dict, computed: list[int]) -> None:
    settings = make_settings(stores=stores["root"] / "stores", compute_budget_s=0.001)
    with TestClient(create_app(settings)) as client:
        r = search(client, "captions", ["a dog on a beach"])
        assert r.status_code == 413, r.text
        message = r.json()["detail"]
        assert f"a search of the {N_CAP} items of 'captions'" in message and "LABELDIST_COMPUTE_BUDGET_S" in message
        assert client.app.state.registry.get("captions")._labels is None, "labels loaded for a refused search"
        assert search(client, "vec", [0.0, 0.0, 0.0]).status_code == 200  # a cheap kind is under it
    assert computed == [1]


def test_a_search_needs_the_api_key_when_one_is_set(stores: dict) -> None:
    settings = make_settings(stores=stores["root"] / "stores", api_key="s3cret")
    with TestClient(create_app(settings)) as client:
        r = search(client, "vec", [0.0, 0.0, 0.0])
        assert r.status_code == 401 and "send the API key" in r.json()["detail"], r.text
        assert search(client, "vec", [0.0, 0.0, 0.0], headers={"X-API-Key": "wrong"}).status_code == 401
        assert search(client, "vec", [0.0, 0.0, 0.0], headers={"X-API-Key": "s3cret"}).status_code == 200
    settings = make_settings(stores=stores["root"] / "stores", host="0.0.0.0")
    with TestClient(create_app(settings)) as client:
        r = search(client, "vec", [0.0, 0.0, 0.0])
        assert r.status_code == 403 and "computing distances on demand is disabled" in r.json()["detail"], r.text


def test_a_busy_pool_is_503_with_retry_after(stores: dict) -> None:
    settings = make_settings(stores=stores["root"] / "stores", compute_workers=1, compute_queue_s=0.0)
    with TestClient(create_app(settings)) as client:
        pool = client.app.state.compute_pool
        client.portal.call(pool.acquire)  # another request is computing
        r = search(client, "vec", [0.0, 0.0, 0.0])
        assert r.status_code == 503 and r.headers["retry-after"].isdigit(), r.text
        client.portal.call(pool.release)
        assert search(client, "vec", [0.0, 0.0, 0.0]).status_code == 200


def test_a_search_stops_when_its_client_has_gone(stores: dict) -> None:
    from labeldist.api.routers.search import search_store
    from labeldist.api.serving.compute import ClientGone, ComputeGuard, ComputePool

    settings = make_settings(stores=stores["root"] / "stores")
    with TestClient(create_app(settings)) as client:
        store = client.app.state.registry.get("captions")
        guard = ComputeGuard(10.0, ComputePool(1, 0.0))
        guard.holds_slot = True  # as run_cancellable sets it once the request has its slot
        guard.cancelled.set()
        with pytest.raises(ClientGone):
            search_store(store, ["a dog on a beach"], 5, True, guard)


def test_the_search_is_in_the_openapi_schema(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    post = paths["/v1/stores/{store}/search"]["post"]
    assert {"413", "422"} <= set(post["responses"])


def test_pruning_computes_fewer_exact_distances_than_items(client: TestClient, stores: dict) -> None:
    labels, _ = stores["captions"]
    r = search(client, "captions", labels.captions(3), 3)
    assert r.status_code == 200 and r.json()["computed"] < N_CAP, r.json()


# ------------------------------------------------------------------------------------------------ hostile bodies
#: an integer JSON allows and Python reads exactly, but no float64 holds: 10**400 written out
HUGE = "1" + "0" * 400


def post_raw(client: TestClient, store: str, body: str):
    """A search whose body is sent as written (JSON escapes and long numbers that ``json=`` would not make)."""
    return client.post(
        f"/v1/stores/{store}/search", content=body.encode("ascii"), headers={"Content-Type": "application/json"}
    )


@pytest.mark.parametrize(
    ("store", "body", "says"),
    [
        # a lone surrogate: JSON's \u escapes allow it, it is no Unicode text (it was a UnicodeEncodeError, a 500)
        ("captions", r'{"label": ["\ud800 dog"], "k": 5}', r"label[0] '\ud800 dog' holds a lone surrogate (U+D800"),
        ("captions", r'{"label": "a dog \udfff", "k": 5}', r"label 'a dog \udfff' holds a lone surrogate (U+DFFF"),
        # an integer no float holds (it was an OverflowError, a 500)
        ("vec", f'{{"label": [1, {HUGE}, 3]}}', "label[1] is an integer of 401 digits, too large for a number"),
        ("ages", f'{{"label": -{HUGE}}}', "label is an integer of 401 digits, too large for a number"),
        ("pose", f'{{"label": [[{HUGE}, 1]{", null" * 15}]}}', "label[0][0] is an integer of 401 digits"),
        # finite numbers whose distances overflow (it was "block() returned NaN distances", a 500)
        ("vec", '{"label": [1e308, 1e308, 0]}', "the label's values are too large for the euclidean distance"),
        ("vec", '{"label": [1e200, 0, 0]}', "the label's values are too large for the euclidean distance"),
        ("ages", '{"label": 1e300}', "the label's values are too large for the cityblock distance"),
        ("pose", f'{{"label": [[1e308, -1e308]{", null" * 15}]}}', "the label's values are too large for the pose"),
    ],
)
def test_finite_json_no_label_can_hold_is_422_naming_the_value(
    client: TestClient, computed: list[int], store: str, body: str, says: str
) -> None:
    message = detail(post_raw(client, store, body))
    assert says in message, message
    assert not computed, "a distance was computed for a refused label"


def test_an_overflowing_label_names_its_value(client: TestClient) -> None:
    message = detail(post_raw(client, "vec", '{"label": [0, 3e200, 1]}'))
    assert "number 1 (b), 3e+200" in message, message
    message = detail(post_raw(client, "ages", '{"label": 1e300}'))
    assert "1e+300" in message and "float32" in message, message


def test_a_kind_without_a_json_form_is_422_before_the_budget(tmp_path, computed: list[int]) -> None:
    """A layout store's labels have no JSON form to search by: 422 saying so, not 413 for the cost of a search it
    cannot run (the kind's JSON form is known from its class, before the budget and before the labels are
    loaded)."""
    from labeldist.distances.layout import LayoutMIoU
    from labeldist.labels.layouts import LayoutMaps

    maps = np.random.default_rng(0).integers(0, 6, size=(4, 6, 5)).astype(np.uint8)
    layouts = LayoutMaps(np.array([f"m{i}" for i in range(4)]), maps)
    write_store(tmp_path / "stores" / "rooms", layouts, LayoutMIoU(), dataset="rooms", k=2, dense=False, block_rows=2)
    # not warmed at start-up: what a refused search loads is what this test looks at
    settings = make_settings(stores=tmp_path / "stores", compute_budget_s=1e-9, warm=False)
    with TestClient(create_app(settings)) as client:
        message = detail(search(client, "rooms", [[0] * 5] * 6))
        assert message == "search by label is not available for kind 'layout_miou': its labels have no JSON form", (
            message
        )
        assert client.app.state.registry.get("rooms")._labels is None, "labels loaded for a refused search"
    assert not computed
