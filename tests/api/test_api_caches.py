"""The service's caches and on-demand computation, unit by unit; and that no request changes a store. (The row-block
cache of kNN lists and dense rows, shared with labeldist.client, is tested in tests/store/test_rowcache.py.)"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient

from labeldist.api.serving.caches import PairCache
from labeldist.distances.pose import PoseDistance
from labeldist.labels.poses import Poses
from labeldist.view.pairs import compute_pairs
from tests.api.api_helpers import DENSE, INCOMPLETE, KNN


def test_pair_cache_hits_misses_and_collisions() -> None:
    cache = PairCache(64)
    assert cache.size == 64
    keys = np.arange(0, 10_000, 37, dtype=np.int64)
    values = keys.astype(np.float32) / 3
    cache.put(keys, values)
    got, found = cache.get(keys)
    assert 0 < found.sum() <= 64  # 271 keys in 64 slots: some evicted
    assert np.array_equal(got[found], values[found]), "a found key always has its own value"
    _, absent = cache.get(keys + 1)
    assert not absent.any()
    assert PairCache(0).get(keys)[1].sum() == 0


def test_compute_pairs_both_strategies_agree_with_block(pose_labels: Poses) -> None:
    distance = PoseDistance()
    full = distance.block(pose_labels, pose_labels).astype(np.float32)
    rng = np.random.default_rng(1)
    # a rectangle (batch-like) and scattered pairs (one block call per distinct item)
    members = rng.choice(300, 30, replace=False)
    a, b = np.meshgrid(members, members, indexing="ij")
    assert np.array_equal(compute_pairs(pose_labels, distance, a.ravel(), b.ravel()), full[a.ravel(), b.ravel()])
    i, j = rng.integers(0, 300, 3000), rng.integers(0, 300, 3000)
    assert np.array_equal(compute_pairs(pose_labels, distance, i, j), full[i, j])


def test_compute_pairs_turns_an_anchor_against_many_into_one_call(pose_labels: Poses) -> None:
    calls = []

    class Counting(PoseDistance):
        def block(self, rows, cols):
            calls.append((len(rows), len(cols)))
            return super().block(rows, cols)

    others = np.array([3, 250, 7, 199, 42, 120, 88, 201, 5, 260])
    i, j = np.minimum(100, others), np.maximum(100, others)  # canonical (min, max): 100 on either side
    got = compute_pairs(pose_labels, Counting(), i, j)
    assert calls == [(1, 10)]
    assert np.array_equal(
        got, PoseDistance().block(pose_labels.subset(np.array([100])), pose_labels.subset(others)).astype(np.float32)[0]
    )


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_no_request_changes_a_store(client: TestClient, stores_dir: Path) -> None:
    before = _digest(stores_dir)
    mtimes = {p: p.stat().st_mtime_ns for p in stores_dir.rglob("*")}
    for store in (DENSE, KNN, INCOMPLETE, "../" + DENSE, "notes"):
        client.get(f"/v1/stores/{store}")
        client.get(f"/v1/stores/{store}/items/3/neighbors")
        client.get(f"/v1/stores/{store}/items/3/label")
        client.post(f"/v1/stores/{store}/distances", json={"pairs": [[1, 2], [3, 250], [299, 0]]})
        client.post(f"/v1/stores/{store}/batches", json={"count": 3, "size": 30, "neighbors": 3, "pairwise": True})
    for method in ("PUT", "DELETE", "PATCH"):
        assert client.request(method, f"/v1/stores/{DENSE}").status_code == 405
    assert _digest(stores_dir) == before
    assert {p: p.stat().st_mtime_ns for p in stores_dir.rglob("*")} == mtimes
