"""Held-out items never reach a training minibatch: a pool (or its complement, ``exclude``) restricts every member
of every minibatch, through a real ``labeldist serve`` and through LocalSource alike, and
``MinibatchStream(anchors=train)`` asks for it by default.

Every member is checked against an independent computation: the nearest within the pool are the stable order of
the anchor's row of the whole matrix (a dense store's matrix as StoreReader reads it; for the kNN-only store
the kind's distance over every pair of its labels), restricted to the pool. Requests without a pool draw what they
drew before pools, checked against the drawing rule written out here on its own.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

from labeldist.client import FeatureInputs, LabelDistClient, LocalSource, MinibatchStream, RequestRejected
from labeldist.store import StoreReader
from labeldist.view.stored import stored_distance, stored_labels
from tests.client.conftest import DENSE, KNN

SIZES = {DENSE: 300, KNN: 200}


@pytest.fixture(scope="module")
def local(stores: Path) -> LocalSource:
    return LocalSource(stores)


@pytest.fixture(scope="module")
def http(service: str):
    with LabelDistClient(service) as client:
        yield client


@pytest.fixture(scope="module")
def matrices(stores: Path) -> dict[str, np.ndarray]:
    """Every distance of each store, independent of the code under test: the dense store's matrix as stored, the
    kNN-only store's from its labels and its kind's distance (every pair at once)."""
    dense = StoreReader(str(stores / DENSE))
    knn = StoreReader(str(stores / KNN))
    labels = stored_labels(knn)
    return {
        DENSE: np.asarray(dense.dense_rows(0, dense.n_items), dtype=np.float32),
        KNN: stored_distance(knn).block(labels, labels).astype(np.float32),
    }


@pytest.fixture(scope="module")
def lists(stores: Path) -> dict[str, np.ndarray]:
    return {name: StoreReader(str(stores / name)).knn()[0] for name in (DENSE, KNN)}


def split(n: int, held_out: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(seed).permutation(n)
    n_test = round(n * held_out)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def nearest_within(row: np.ndarray, anchor: int, pool: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` items of ``pool`` nearest the anchor by its whole row, ties by index (the stores' rule)."""
    cand = pool[pool != anchor]
    return cand[np.lexsort((cand, row[cand]))][:count]


def check_minibatches(
    members: np.ndarray, distances: np.ndarray, matrix: np.ndarray, pool: np.ndarray, neighbors: int
) -> None:
    """Every member in the pool; each anchor's ``neighbors`` nearest within the pool first, then distinct others;
    the distances the matrix's."""
    size = members.shape[1]
    assert np.isin(members, pool).all(), np.setdiff1d(members, pool)[:10]
    for row, dist in zip(members, distances):
        anchor, items = int(row[0]), row[1:]
        np.testing.assert_array_equal(items[:neighbors], nearest_within(matrix[anchor], anchor, pool, neighbors))
        assert len(set(row.tolist())) == size  # distinct, the anchor once
        np.testing.assert_array_equal(dist, matrix[anchor, items])


def ran_out(anchors: np.ndarray, lists: np.ndarray, matrix: np.ndarray, pool: np.ndarray, neighbors: int) -> int:
    """Anchors whose nearest within the pool are not all on their kNN list: the list ran out within the pool."""
    return sum(
        not np.isin(nearest_within(matrix[a], a, pool, neighbors), lists[a]).all() for a in np.asarray(anchors).tolist()
    )


def stream_steps(source, store: str, anchors: np.ndarray, **kw) -> list:
    inputs = FeatureInputs(np.arange(SIZES[store], dtype=np.float32)[:, None])
    options = dict(size=30, neighbors=5, batches_per_step=2, anchors_per_request=8, anchors=anchors, epochs=2, seed=3)
    return list(MinibatchStream(source, store, inputs, **{**options, **kw}))


# ------------------------------------------------------------------ the stream over a training split
@pytest.mark.parametrize("store", [DENSE, KNN])
def test_no_held_out_item_ever_appears_in_a_training_minibatch(
    local: LocalSource, http: LabelDistClient, matrices: dict, store: str
) -> None:
    train, test = split(SIZES[store], 0.1, seed=0)
    over_http = stream_steps(http, store, train)
    in_process = stream_steps(local, store, train)
    assert len(over_http) == len(in_process) == 2 * (len(train) // 2)
    members = torch.cat([s.indices for s in over_http]).numpy()
    assert members.shape == (2 * (len(train) // 2) * 2, 30)
    assert not np.isin(members, test).any()  # the claim, for every member of every minibatch of both epochs
    for a, b in zip(over_http, in_process):  # the same minibatches from either source
        torch.testing.assert_close(a.indices, b.indices, rtol=0, atol=0)
        torch.testing.assert_close(a.distances, b.distances, rtol=0, atol=0)
    distances = torch.cat([s.distances for s in over_http]).numpy()
    check_minibatches(members, distances, matrices[store], train, 5)
    assert len(np.unique(members[:, 6:])) > 0.9 * len(train)  # the random others reach the whole pool
    # the same stream without the pool (the opt-out) does draw held-out items: what the check above would catch
    leaky = torch.cat([s.indices for s in stream_steps(http, store, train, pool=None)]).numpy()
    assert np.isin(leaky, test).mean() > 0.05


@pytest.mark.parametrize(("store", "neighbors", "held_out"), [(DENSE, 10, 0.6), (KNN, 5, 0.5)])
def test_where_a_list_runs_out_the_nearest_come_from_the_rest_of_the_pool(
    local: LocalSource,
    http: LabelDistClient,
    matrices: dict,
    lists: dict,
    store: str,
    neighbors: int,
    held_out: float,
) -> None:
    """A small pool: many anchors have fewer than ``neighbors`` of their list in it, and their nearest within the
    pool come from the dense row or from distances computed from the labels (the kNN-only store)."""
    pool, _ = split(SIZES[store], held_out, seed=1)
    anchors = pool[::3]
    assert ran_out(anchors, lists[store], matrices[store], pool, neighbors) >= len(anchors) // 4
    for source in (http, local):
        got = source.batches(store, anchors=anchors, size=25, neighbors=neighbors, pairwise=True, seed=11, pool=pool)
        np.testing.assert_array_equal(got.anchors, anchors)
        check_minibatches(got.members, got.distances, matrices[store], pool, neighbors)
        m = got.members
        np.testing.assert_array_equal(got.pairwise, matrices[store][m[:, :, None], m[:, None, :]])
    theirs = http.batches(store, anchors=anchors, size=25, neighbors=neighbors, seed=11, pool=pool)
    mine = local.batches(store, anchors=anchors, size=25, neighbors=neighbors, seed=11, pool=pool)
    np.testing.assert_array_equal(theirs.items, mine.items)


def test_the_json_answer_and_a_count_draw_keep_to_the_pool(service: str, matrices: dict) -> None:
    """JSON (the service's fast path) as well as .npz; anchors drawn by ``count`` come from the pool; the
    distances computed to rank a kNN-only store's pool are counted in ``computed``."""
    pool, test = split(SIZES[KNN], 0.5, seed=2)
    body = {"count": 40, "size": 20, "neighbors": 5, "seed": 4, "pool": pool.tolist()}
    answer = httpx.post(f"{service}/v1/stores/{KNN}/batches", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    batches = answer.json()["batches"]
    members = np.array([[b["anchor"], *b["items"]] for b in batches])
    distances = np.array([b["distances"] for b in batches], dtype=np.float32)
    assert len(set(members[:, 0].tolist())) == 40  # without replacement, from the pool
    check_minibatches(members, distances, matrices[KNN], pool, 5)
    assert answer.json()["computed"] > 0
    as_npz = LabelDistClient(service).batches(KNN, count=40, size=20, neighbors=5, seed=4, exclude=test)
    np.testing.assert_array_equal(as_npz.members, members)  # exclude=test is the same pool


@pytest.mark.parametrize("store", [DENSE, KNN])
def test_exclude_is_the_pool_of_every_other_item(local: LocalSource, http: LabelDistClient, store: str) -> None:
    pool, test = split(SIZES[store], 0.3, seed=5)
    for source in (http, local):
        by_pool = source.batches(store, anchors=pool[:12], size=15, neighbors=4, seed=2, pool=pool[::-1])
        by_exclude = source.batches(store, anchors=pool[:12], size=15, neighbors=4, seed=2, exclude=test)
        np.testing.assert_array_equal(by_pool.items, by_exclude.items)
        np.testing.assert_array_equal(by_pool.distances, by_exclude.distances)
        assert not np.isin(by_pool.members, test).any()


# ------------------------------------------------------------------ without a pool: as before pools
def old_rule(knn: np.ndarray, anchors: np.ndarray | None, count: int | None, size: int, neighbors: int, seed: int):
    """The drawing rule of a request without a pool, written out on its own (as the service drew before pools)."""
    n = len(knn)
    rng = np.random.default_rng(seed)
    if anchors is None:
        anchors = rng.choice(n, size=count, replace=count > n).astype(np.int64)
    items = np.empty((len(anchors), size - 1), dtype=np.int64)
    for t, a in enumerate(anchors.tolist()):
        near = knn[a][:neighbors].astype(np.int64)
        items[t, :neighbors] = near
        ex = np.unique(np.append(near, a))
        draw = rng.choice(n - ex.size, size=size - 1 - neighbors, replace=False)
        items[t, neighbors:] = draw + np.searchsorted(ex - np.arange(ex.size), draw, side="right")
    return anchors, items


@pytest.mark.parametrize("store", [DENSE, KNN])
@pytest.mark.parametrize("seed", [0, 7, 2**40 + 3])
def test_without_a_pool_the_minibatches_are_those_of_before(
    local: LocalSource, http: LabelDistClient, matrices: dict, lists: dict, store: str, seed: int
) -> None:
    n = SIZES[store]
    cases = [
        dict(anchors=np.array([0, 5, 17, n - 1]), count=None, size=30, neighbors=5),
        dict(anchors=None, count=6, size=12, neighbors=3),
        dict(anchors=None, count=3, size=50, neighbors=0),
    ]
    for case in cases:
        anchors, items = old_rule(lists[store], seed=seed, **case)
        request = {k: v for k, v in case.items() if v is not None}
        for source in (http, local):
            for extra in ({}, {"pool": np.arange(n)}, {"exclude": []}):  # every item as the pool: the same
                got = source.batches(store, seed=seed, pairwise=True, **request, **extra)
                np.testing.assert_array_equal(got.anchors, anchors)
                np.testing.assert_array_equal(got.items, items)
                np.testing.assert_array_equal(got.distances, matrices[store][anchors[:, None], items])
                m = got.members
                np.testing.assert_array_equal(got.pairwise, matrices[store][m[:, :, None], m[:, None, :]])


# ------------------------------------------------------------------ refused pools
REFUSED = [
    (
        {"anchors": [0], "pool": [0, 1, 300] + list(range(2, 40))},
        "pool",
        "pool names item 300, which the store does not have (its items are 0..299)",
    ),
    (
        {"anchors": [0], "exclude": [5, 301]},
        "exclude",
        "exclude names item 301, which the store does not have (its items are 0..299)",
    ),
    (
        {"anchors": [3, 5], "pool": list(range(5)) + list(range(6, 50))},
        "anchors",
        "anchor 5 is not in the pool: every member of a minibatch, its anchor included, is an item of the pool",
    ),
    (
        {"anchors": [3, 5], "exclude": [5]},
        "anchors",
        "anchor 5 is excluded: every member of a minibatch, its anchor included, is an item of the pool",
    ),
    (
        {"anchors": [3], "pool": list(range(10))},
        "pool",
        "the pool holds 10 item(s), fewer than size=30: a minibatch is size distinct items of the pool, "
        "anchor included",
    ),
    (
        {"count": 2, "exclude": list(range(280))},
        "exclude",
        "the items not excluded are 20 item(s), fewer than size=30: a minibatch is size distinct items of the pool, "
        "anchor included",
    ),
    (
        {"count": 2, "pool": [], "size": 2, "neighbors": 1},
        "pool",
        "the pool holds 0 item(s), fewer than size=2: a minibatch is size distinct items of the pool, anchor included",
    ),
    (
        {"anchors": [0], "pool": list(range(40)), "exclude": [50]},
        "exclude",
        "give pool (the items minibatches are drawn from) or exclude (the items they never contain), not both",
    ),
]


@pytest.mark.parametrize(("body", "field", "message"), REFUSED)
def test_a_pool_the_store_cannot_take_is_refused_with_422_naming_it(
    service: str, local: LocalSource, body: dict, field: str, message: str
) -> None:
    request = {"size": 30, "neighbors": 5, "seed": 0, **body}
    for params in ({}, {"format": "npz"}):  # the fast path (JSON) and the route (npz) answer alike
        answer = httpx.post(f"{service}/v1/stores/{DENSE}/batches", json=request, params=params, timeout=60)
        assert answer.status_code == 422, answer.text
        [error] = answer.json()["detail"]
        assert error["loc"] == ["body", field] and error["msg"] == message
    kwargs = {k: (np.asarray(v) if isinstance(v, list) else v) for k, v in request.items()}
    with pytest.raises(RequestRejected) as refused:
        local.batches(DENSE, **kwargs)
    assert refused.value.status == 422 and refused.value.detail == message


def test_a_negative_index_in_a_pool_is_refused_by_the_schema(service: str, local: LocalSource) -> None:
    for field in ("pool", "exclude"):
        body = {"anchors": [0], "size": 4, field: [1, 2, 3, -4]}
        answer = httpx.post(f"{service}/v1/stores/{DENSE}/batches", json=body, timeout=60)
        assert answer.status_code == 422
        assert any(e["loc"][-2:] == [field, 3] for e in answer.json()["detail"]), answer.text
        with pytest.raises(RequestRejected, match=f"{field} indices must be >= 0, got -4") as refused:
            local.batches(DENSE, anchors=[0], size=4, **{field: np.array([1, 2, 3, -4])})
        assert refused.value.status == 422


@pytest.mark.parametrize("field", ["pool", "exclude", "anchors"])
def test_a_boolean_mask_or_floats_are_refused_as_the_service_refuses_them(
    service: str, local: LocalSource, field: str
) -> None:
    # NumPy's cast would read the mask as the items 0 and 1 and truncate 2.7 to 2: LocalSource once trained
    # "exclude=is_test" minibatches full of test items
    mask = np.zeros(300, dtype=bool)
    mask[250:] = True
    for given, message in (
        (mask, f"{field} is a boolean mask: give the items' indices (np.flatnonzero(mask))"),
        (np.array([2.7, 5.0]), f"{field} must be item indices (integers), got float64 values such as 2.7"),
    ):
        request = {"size": 4, "seed": 0, field: given.tolist()}
        if field != "anchors":
            request["anchors"] = [0] if field == "pool" and given.dtype != bool else [260]
        answer = httpx.post(f"{service}/v1/stores/{DENSE}/batches", json=request, timeout=60)
        assert answer.status_code == 422, answer.text
        with pytest.raises(RequestRejected) as refused:
            local.batches(DENSE, **{**request, field: given})
        assert refused.value.status == 422 and refused.value.detail == message


def test_a_stream_refuses_a_pool_it_cannot_draw_from(local: LocalSource) -> None:
    inputs = FeatureInputs(np.zeros((300, 1), dtype=np.float32))
    with pytest.raises(ValueError, match=r"the anchors hold 10 items, fewer than size=30: .*pass pool=None"):
        MinibatchStream(local, DENSE, inputs, size=30, anchors=np.arange(10))
    with pytest.raises(ValueError, match="anchor 12 is not in the pool"):
        MinibatchStream(local, DENSE, inputs, size=30, anchors=np.arange(13), pool=np.arange(12, -1, -1)[1:])
    wide = MinibatchStream(local, DENSE, inputs, size=30, anchors=np.arange(10), pool=np.arange(40))
    members = torch.cat([s.indices for s in wide]).numpy()
    assert np.isin(members[:, 0], np.arange(10)).all() and members.max() < 40 and members[:, 1:].max() >= 10
    assert wide.restrict.keys() == {"pool"}  # 40 of 300 items: sent as the pool, the shorter
    train = MinibatchStream(local, DENSE, inputs, size=30, anchors=np.arange(250))
    assert train.restrict.keys() == {"exclude"} and train.restrict["exclude"].tolist() == list(range(250, 300))
