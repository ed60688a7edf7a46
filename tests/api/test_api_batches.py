"""POST /v1/stores/{store}/batches: batch invariants, distances, pairwise matrices, reproducibility."""

from __future__ import annotations

import io

import numpy as np
import pytest
from fastapi.testclient import TestClient

from labeldist.labels.poses import Poses
from labeldist.view.drawing import sample_excluding
from tests.api.api_helpers import DENSE, KNN, N_ITEMS, reference


def _f32(values: list) -> np.ndarray:
    """JSON distances (lists or lists of lists; null is +inf) as the float32 values they stand for."""
    if values and isinstance(values[0], list):
        return np.stack([_f32(row) for row in values])
    return np.array([np.inf if v is None else v for v in values], dtype=np.float64).astype(np.float32)


def _post(client: TestClient, store: str, **body) -> dict:
    r = client.post(f"/v1/stores/{store}/batches", json=body)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("store", [DENSE, KNN])
def test_batch_invariants(client: TestClient, store_arrays: dict, store: str) -> None:
    arrays = store_arrays[store]
    anchors = [0, 5, 299, 5]
    body = _post(client, store, anchors=anchors, size=40, neighbors=6, seed=1)
    assert [b["anchor"] for b in body["batches"]] == anchors
    assert body["seed"] == 1
    for b in body["batches"]:
        a, items = b["anchor"], b["items"]
        assert len(items) == len(b["ids"]) == len(b["distances"]) == 39
        assert len(set(items)) == 39, "no duplicates"
        assert a not in items, "never the anchor among the items"
        assert all(0 <= j < N_ITEMS for j in items)
        assert items[:6] == arrays["indices"][a, :6].tolist(), "the nearest first, as in the kNN list"
        assert b["anchor_id"] == arrays["ids"][a] and b["ids"] == arrays["ids"][items].tolist()
        assert b["pairwise"] is None
        assert np.array_equal(_f32(b["distances"]), store_arrays[DENSE]["dense"][a, items])
    # the same anchor twice gets different random others (each batch has its own stream)
    assert body["batches"][1]["items"][6:] != body["batches"][3]["items"][6:]


def test_batches_are_reproducible_with_a_seed(client: TestClient) -> None:
    first = _post(client, KNN, count=3, size=20, neighbors=2, seed=123)
    again = _post(client, KNN, count=3, size=20, neighbors=2, seed=123)
    other = _post(client, KNN, count=3, size=20, neighbors=2, seed=124)
    assert [b["items"] for b in first["batches"]] == [b["items"] for b in again["batches"]]
    assert [b["anchor"] for b in first["batches"]] == [b["anchor"] for b in again["batches"]]
    assert [b["items"] for b in first["batches"]] != [b["items"] for b in other["batches"]]
    # the same seed draws the same batches in either store: the draw does not depend on how distances are held
    dense = _post(client, DENSE, count=3, size=20, neighbors=2, seed=123)
    assert [b["items"] for b in dense["batches"]] == [b["items"] for b in first["batches"]]


def test_batches_without_a_seed_say_which_seed_to_replay(client: TestClient) -> None:
    first = _post(client, DENSE, count=2, size=16, neighbors=1)
    replay = _post(client, DENSE, count=2, size=16, neighbors=1, seed=first["seed"])
    assert replay["batches"] == first["batches"]


def test_count_draws_distinct_anchors(client: TestClient) -> None:
    body = _post(client, DENSE, count=50, size=4, seed=3)
    anchors = [b["anchor"] for b in body["batches"]]
    assert len(anchors) == 50 and len(set(anchors)) == 50


def test_random_others_are_spread_over_the_store(client: TestClient) -> None:
    body = _post(client, DENSE, anchors=[10] * 40, size=50, neighbors=0, seed=8)
    counts = np.bincount(np.concatenate([b["items"] for b in body["batches"]]), minlength=N_ITEMS)
    assert counts[10] == 0
    assert (counts > 0).sum() > 0.9 * (N_ITEMS - 1)  # 1960 draws from 299 items reach nearly every item
    assert counts.max() < 20


@pytest.mark.parametrize("store", [DENSE, KNN])
def test_pairwise_matrix(client: TestClient, store_arrays: dict, pose_labels: Poses, store: str) -> None:
    body = _post(client, store, anchors=[7, 100], size=24, neighbors=4, pairwise=True, seed=2)
    dense = store_arrays[DENSE]["dense"]
    for b in body["batches"]:
        members = [b["anchor"], *b["items"]]
        m = _f32(b["pairwise"])
        assert m.shape == (24, 24)
        assert np.array_equal(m, m.T), "symmetric"
        assert np.all(np.diag(m) == 0), "zero diagonal"
        assert np.array_equal(m[0, 1:], _f32(b["distances"])), "anchor first"
        assert np.array_equal(m, dense[np.ix_(members, members)])
        iu = np.triu_indices(24, 1)
        sample = list(zip(iu[0][::13].tolist(), iu[1][::13].tolist()))
        expected = [reference(pose_labels, members[p], members[q]) for p, q in sample]
        np.testing.assert_allclose([m[p, q] for p, q in sample], expected, rtol=1e-6)


def test_batches_as_npz(client: TestClient) -> None:
    body = {"anchors": [3, 4], "size": 12, "neighbors": 2, "pairwise": True, "seed": 4}
    as_json = _post(client, KNN, **body)
    r = client.post(f"/v1/stores/{KNN}/batches", params={"format": "npz"}, json=body)
    assert r.headers["content-type"] == "application/x-npz"
    data = np.load(io.BytesIO(r.content))
    assert data["anchors"].tolist() == [3, 4] and int(data["seed"]) == 4
    assert data["items"].tolist() == [b["items"] for b in as_json["batches"]]
    assert np.array_equal(data["distances"], np.stack([_f32(b["distances"]) for b in as_json["batches"]]))
    assert data["pairwise"].shape == (2, 12, 12) and data["pairwise"].dtype == np.float32
    assert np.array_equal(data["pairwise"], np.stack([_f32(b["pairwise"]) for b in as_json["batches"]]))
    r = client.post(f"/v1/stores/{KNN}/batches", params={"format": "npz"}, json={**body, "pairwise": False})
    assert "pairwise" not in np.load(io.BytesIO(r.content)).files


@pytest.mark.parametrize("seed", range(20))
def test_sample_excluding(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 60))
    exclude = rng.choice(n, size=int(rng.integers(0, n - 3)), replace=False)
    count = int(rng.integers(0, n - exclude.size + 1))
    out = sample_excluding(rng, n, count, exclude)
    assert out.size == count and len(set(out.tolist())) == count
    assert not set(out.tolist()) & set(exclude.tolist())
    assert out.min(initial=0) >= 0 and out.max(initial=0) < n


def test_sample_excluding_is_uniform() -> None:
    rng = np.random.default_rng(0)
    draws = np.concatenate([sample_excluding(rng, 10, 3, np.array([2, 7])) for _ in range(4000)])
    counts = np.bincount(draws, minlength=10)
    assert counts[2] == counts[7] == 0
    allowed = np.delete(counts, [2, 7])
    assert np.all(np.abs(allowed - 1500) < 150)  # 12000 draws over 8 values
