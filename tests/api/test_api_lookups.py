"""Answers compared with the store arrays, and on-demand pairs with ``PoseDistance.reference``."""

from __future__ import annotations

import io

import numpy as np
import pytest
from fastapi.testclient import TestClient

import labeldist.api.answers.encoding
from labeldist.api.main import create_app
from labeldist.api.settings import Settings
from labeldist.labels.poses import MPII_JOINTS, Poses
from tests.api.api_helpers import DENSE, KNN, N_ITEMS, TINY, TINY_STORE, K, reference

ITEMS = [0, 1, 17, 150, 299]


def _f32(values: list) -> np.ndarray:
    return np.array([np.inf if v is None else v for v in values], dtype=np.float64).astype(np.float32)


# ---------------------------------------------------------------- neighbours
@pytest.mark.parametrize("store", [DENSE, KNN])
@pytest.mark.parametrize("index", ITEMS)
def test_neighbors_are_the_stored_knn_list(client: TestClient, store_arrays: dict, store: str, index: int) -> None:
    arrays = store_arrays[store]
    r = client.get(f"/v1/stores/{store}/items/{index}/neighbors", params={"k": 7})
    assert r.status_code == 200
    body = r.json()
    assert body["index"] == index and body["id"] == arrays["ids"][index]
    assert body["indices"] == arrays["indices"][index, :7].tolist()
    assert body["ids"] == arrays["ids"][arrays["indices"][index, :7]].tolist()
    assert np.array_equal(_f32(body["distances"]), arrays["distances"][index, :7])
    assert body["distances"] == sorted(body["distances"])


def test_neighbors_default_k_is_the_stores_k(client: TestClient, store_arrays: dict) -> None:
    body = client.get(f"/v1/stores/{DENSE}/items/5/neighbors").json()
    assert len(body["indices"]) == K
    assert body["indices"] == store_arrays[DENSE]["indices"][5].tolist()


def test_neighbors_agree_with_the_dense_row(client: TestClient, store_arrays: dict) -> None:
    dense = store_arrays[DENSE]["dense"]
    body = client.get(f"/v1/stores/{DENSE}/items/42/neighbors", params={"k": K}).json()
    row = np.where(np.arange(N_ITEMS) == 42, np.inf, dense[42])
    assert body["indices"] == np.argsort(row, kind="stable")[:K].tolist()


def test_neighbors_padding_is_left_out(client: TestClient) -> None:
    body = client.get(f"/v1/stores/{TINY_STORE}/items/3/neighbors").json()  # k = 20 > 11 other items
    assert len(body["indices"]) == len(body["ids"]) == len(body["distances"]) == TINY - 1
    assert sorted(body["indices"]) == [i for i in range(TINY) if i != 3]


# ---------------------------------------------------------------- labels
def test_label_of_a_pose(client: TestClient, pose_labels: Poses) -> None:
    body = client.get(f"/v1/stores/{DENSE}/items/3/label").json()
    assert body["index"] == 3 and body["id"] == pose_labels.ids[3] and body["kind"] == "pose"
    pose = body["pose"]
    assert pose["joints"] == list(MPII_JOINTS)
    for j in range(pose_labels.n_joints):
        if pose_labels.present[3, j]:
            assert pose["xy"][j] == pose_labels.xy[3, j].tolist()
        else:
            assert pose["xy"][j] is None
    assert pose["visible"] == pose_labels.visible[3].tolist()
    assert [6, 7] in pose["edges"] and all(0 <= a < 16 and 0 <= b < 16 for a, b in pose["edges"])


def test_render_label_of_a_map_and_texts() -> None:
    from labeldist.api.answers.labelview import render_label

    maps = np.zeros((2, 4, 6), dtype=np.uint8)
    maps[1, :, 3:] = 2
    arrays = {"maps": maps, "captions": np.array([["a dog", "a cat"], ["two men", ""]]), "extra": np.arange(2.0)}
    view = render_label("layout_miou", arrays, 2, 1, "b")
    assert view.pose is None
    assert view.texts == ["two men"]
    assert view.values == {"extra": 1.0}
    assert len(view.images) == 1 and view.images[0].startswith("data:image/png;base64,")
    import base64

    from PIL import Image

    png = Image.open(io.BytesIO(base64.b64decode(view.images[0].split(",", 1)[1])))
    assert png.size == (6, 4)
    assert png.getpixel((0, 0)) != png.getpixel((5, 0))  # labels 0 and 2 get different colours


def test_render_label_of_ragged_texts() -> None:
    """Caption sets keep their captions as flat UTF-8 bytes cut by offsets, grouped per image."""
    from labeldist.api.answers.labelview import render_label

    captions = ["a dog", "a brown dog", "two cats", "ein Kätzchen"]
    raw = [c.encode() for c in captions]
    arrays = {
        "text": np.frombuffer(b"".join(raw), dtype=np.uint8),
        "text_offsets": np.cumsum([0] + [len(r) for r in raw]),
        "caption_offsets": np.array([0, 2, 4]),
        "vocab": np.array(["a", "brown"]),  # as long as N by chance: not one row per item, not a text
    }
    assert render_label("caption_wmd", arrays, 2, 0, "x").texts == ["a dog", "a brown dog"]
    assert render_label("caption_wmd", arrays, 2, 1, "y").texts == ["two cats", "ein Kätzchen"]
    del arrays["caption_offsets"]  # sentences: one text per item
    assert render_label("sentence_relevance", arrays, 4, 3, "z").texts == ["ein Kätzchen"]


# ---------------------------------------------------------------- distances
def test_distances_from_the_dense_matrix(client: TestClient, store_arrays: dict) -> None:
    items = [3, 0, 299, 3, 150, 7]
    body = client.post(f"/v1/stores/{DENSE}/distances", json={"anchor": 7, "items": items}).json()
    assert body["computed"] == 0
    assert np.array_equal(_f32(body["distances"]), store_arrays[DENSE]["dense"][7, items])


def test_pairs_from_the_dense_matrix(client: TestClient, store_arrays: dict) -> None:
    pairs = [[0, 1], [299, 5], [5, 299], [8, 8]]
    body = client.post(f"/v1/stores/{DENSE}/distances", json={"pairs": pairs}).json()
    dense = store_arrays[DENSE]["dense"]
    assert np.array_equal(_f32(body["distances"]), np.array([dense[i, j] for i, j in pairs]))
    assert body["distances"][3] == 0.0


def test_knn_only_store_answers_listed_pairs_from_the_lists(client: TestClient, store_arrays: dict) -> None:
    arrays = store_arrays[KNN]
    anchor = 11
    items = arrays["indices"][anchor, ::3].tolist()
    body = client.post(f"/v1/stores/{KNN}/distances", json={"anchor": anchor, "items": items}).json()
    assert body["computed"] == 0
    assert np.array_equal(_f32(body["distances"]), arrays["distances"][anchor, ::3])
    # the reverse direction: pairs (j, anchor) are found in the anchor's list too
    body = client.post(f"/v1/stores/{KNN}/distances", json={"pairs": [[j, anchor] for j in items]}).json()
    assert body["computed"] == 0
    assert np.array_equal(_f32(body["distances"]), arrays["distances"][anchor, ::3])


def test_knn_only_store_computes_other_pairs_on_demand(
    settings: Settings, store_arrays: dict, pose_labels: Poses
) -> None:
    with TestClient(create_app(settings)) as client:  # its own app: a cold cache
        _check_on_demand(client, store_arrays, pose_labels)


def _check_on_demand(client: TestClient, store_arrays: dict, pose_labels: Poses) -> None:
    arrays = store_arrays[KNN]
    anchor = 23
    listed = set(arrays["indices"][anchor].tolist())
    items = [j for j in range(0, N_ITEMS, 7) if j not in listed and anchor not in arrays["indices"][j]]
    items = items + [anchor]  # and the anchor itself: 0
    body = client.post(f"/v1/stores/{KNN}/distances", json={"anchor": anchor, "items": items}).json()
    assert body["computed"] == len(items) - 1
    got = _f32(body["distances"])
    expected = np.array([reference(pose_labels, anchor, j) for j in items])
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert got[-1] == 0.0
    # rounded to float32 exactly like the stored values: the dense store holds the very same numbers
    assert np.array_equal(got, store_arrays[DENSE]["dense"][anchor, items])
    # cached: asking again computes nothing, in either direction
    again = client.post(f"/v1/stores/{KNN}/distances", json={"pairs": [[j, anchor] for j in items]}).json()
    assert again["computed"] == 0
    assert np.array_equal(_f32(again["distances"]), got)


def test_scattered_pairs_on_demand(client: TestClient, store_arrays: dict, pose_labels: Poses) -> None:
    rng = np.random.default_rng(5)
    pairs = rng.integers(0, N_ITEMS, size=(400, 2))
    body = client.post(f"/v1/stores/{KNN}/distances", json={"pairs": pairs.tolist()}).json()
    got = _f32(body["distances"])
    assert np.array_equal(got, store_arrays[DENSE]["dense"][pairs[:, 0], pairs[:, 1]])
    sample = pairs[:40]
    np.testing.assert_allclose(got[:40], [reference(pose_labels, i, j) for i, j in sample], rtol=1e-6)


def test_distances_as_npz(client: TestClient, store_arrays: dict) -> None:
    items = [4, 9, 200]
    path = f"/v1/stores/{KNN}/distances"
    for r in (
        client.post(path, params={"format": "npz"}, json={"anchor": 2, "items": items}),
        client.post(path, headers={"Accept": "application/x-npz"}, json={"anchor": 2, "items": items}),
    ):
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/x-npz"
        data = np.load(io.BytesIO(r.content))
        assert data["distances"].dtype == np.float32
        assert np.array_equal(data["distances"], store_arrays[DENSE]["dense"][2, items])
    r = client.post(
        path, params={"format": "json"}, headers={"Accept": "application/x-npz"}, json={"anchor": 2, "items": items}
    )
    assert r.headers["content-type"] == "application/json"


def test_json_without_orjson_is_the_same(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    body = {"anchors": [1, 2], "size": 10, "neighbors": 3, "pairwise": True, "seed": 9}
    with_default = client.post(f"/v1/stores/{KNN}/batches", json=body)
    monkeypatch.setattr(labeldist.api.answers.encoding, "orjson", None)
    plain = client.post(f"/v1/stores/{KNN}/batches", json=body)
    for a, b in zip(plain.json()["batches"], with_default.json()["batches"], strict=True):
        # orjson writes a float32's shortest decimal, pydantic-core its float64 one: the same float32
        assert np.array_equal(np.array(a.pop("pairwise"), np.float32), np.array(b.pop("pairwise"), np.float32))
        assert np.array_equal(_f32(a.pop("distances")), _f32(b.pop("distances")))
        assert a == b


def test_json_encodes_infinity_as_null(monkeypatch: pytest.MonkeyPatch) -> None:
    values = np.array([1.5, np.inf], dtype=np.float32)
    assert labeldist.api.answers.encoding.json_bytes({"d": values}) == b'{"d":[1.5,null]}'
    monkeypatch.setattr(labeldist.api.answers.encoding, "orjson", None)
    assert labeldist.api.answers.encoding.json_bytes({"d": values}) == b'{"d":[1.5,null]}'


def test_knn_lookup_matches_a_plain_search(store_arrays: dict) -> None:
    from labeldist.view.knnlookup import knn_lookup

    arrays = store_arrays[KNN]
    idx, dist = arrays["indices"], arrays["distances"]
    rng = np.random.default_rng(3)
    i = rng.integers(0, N_ITEMS, 3000)
    j = np.where(rng.random(3000) < 0.5, idx[i, rng.integers(0, K, 3000)], rng.integers(0, N_ITEMS, 3000))
    values, found = knn_lookup(idx, dist, i, j)
    for t in range(3000):
        a, b = int(i[t]), int(j[t])
        row = idx[a].tolist()
        back = idx[b].tolist()
        if a == b:
            expected = 0.0
        elif b in row:
            expected = dist[a, row.index(b)]
        elif a in back:
            expected = dist[b, back.index(a)]
        else:
            assert not found[t] and np.isnan(values[t])
            continue
        assert found[t] and values[t] == expected
    assert 0.4 < found.mean() < 0.9
