"""LocalSource: a store read in this process answers what the service answers (the same minibatches for the same
seed, the same distances, the same errors), and its minibatches have the structure of Kim et al.'s dense-triplet
minibatches: the anchor first, its ``neighbors`` kNN neighbours next, random others, distances equal to the store's."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest
import torch

from labeldist.client import (
    FeatureInputs,
    InputError,
    LabelDistClient,
    LocalSource,
    MinibatchStream,
    Neighbors,
    RequestRejected,
    StoreNotFound,
)
from labeldist.store import StoreReader
from labeldist.view.stored import stored_distance, stored_labels
from tests.client.conftest import DENSE, KNN
from tests.conftest import flip_bit


@pytest.fixture(scope="module")
def local(stores: Path) -> LocalSource:
    return LocalSource(stores)


@pytest.fixture(scope="module")
def http(service: str):
    with LabelDistClient(service) as client:
        yield client


def assert_same_batches(a, b) -> None:
    assert a.seed == b.seed
    for name in ("anchors", "items", "distances"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        assert getattr(a, name).dtype == getattr(b, name).dtype, name
    assert (a.pairwise is None) == (b.pairwise is None)
    if a.pairwise is not None:
        np.testing.assert_array_equal(a.pairwise, b.pairwise)


# ------------------------------------------------------------------ the same answers as the service
@pytest.mark.parametrize("name", [DENSE, KNN])
def test_batches_equal_the_services(local: LocalSource, http: LabelDistClient, name: str) -> None:
    for kw in (
        dict(anchors=[0, 5, 5, 150], size=20, neighbors=5, pairwise=True, seed=3),
        dict(count=6, size=30, neighbors=0, pairwise=False, seed=11),
        dict(count=2, size=50, neighbors=10, pairwise=True, seed=2**40),
    ):
        assert_same_batches(local.batches(name, **kw), http.batches(name, **kw))
    drawn = local.batches(name, count=3, size=10, neighbors=2)  # no seed: one is drawn, and said
    assert_same_batches(drawn, http.batches(name, count=3, size=10, neighbors=2, seed=drawn.seed))


@pytest.mark.parametrize("name", [DENSE, KNN])
def test_lookups_equal_the_services(local: LocalSource, http: LabelDistClient, name: str) -> None:
    assert local.ids(name) == http.ids(name)
    mine, theirs = local.store(name), http.store(name)
    for key in ("name", "kind", "n_items", "k", "dataset", "params", "complete", "digest"):
        assert mine[key] == theirs[key], key
    for index, k in ((0, None), (17, 3), (99, 1), (5, 10)):
        # one result shape in both clients: named fields, and a pair that unpacks as before
        got, want = local.neighbors(name, index, k), http.neighbors(name, index, k)
        assert type(got) is type(want) is Neighbors and got._fields == ("indices", "distances")
        indices, distances = got
        assert indices is got.indices and distances is got.distances and len(got.indices) == (k or mine["k"])
        for got, want in zip(local.neighbors(name, index, k), http.neighbors(name, index, k)):
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype
    items = [1, 2, 3, 150, 0, 199]
    np.testing.assert_array_equal(local.distances(name, 0, items), http.distances(name, 0, items))
    pairs = [[0, 1], [5, 4], [199, 3], [8, 8]]
    np.testing.assert_array_equal(local.pair_distances(name, pairs), http.pair_distances(name, pairs))
    assert {s["name"] for s in local.stores()} == {s["name"] for s in http.stores()} == {DENSE, KNN}


@pytest.mark.parametrize("name", [DENSE, KNN])
def test_lists_read_from_disk_every_time_give_the_services_batches(
    stores: Path, http: LabelDistClient, name: str
) -> None:
    """knn_cache_mb=0 and dense_cache_mb=0: no row block kept, every list and row read from disk when asked."""
    with LocalSource(stores, knn_cache_mb=0, dense_cache_mb=0) as uncached:
        kw = dict(anchors=[0, 5, 5, 150, 199], size=20, neighbors=5, pairwise=True, seed=3)
        assert_same_batches(uncached.batches(name, **kw), http.batches(name, **kw))
        for index in (0, 99, 199):
            for got, want in zip(uncached.neighbors(name, index), http.neighbors(name, index)):
                np.testing.assert_array_equal(got, want)
        store = uncached._open(name)
        assert len(store.knn.cache) == 0 and store.knn.cache.reads > 0
        assert store.dense is None or len(store.dense) == 0


def test_a_store_with_a_damaged_list_is_refused_when_opened(stores: Path, tmp_path: Path) -> None:
    import shutil

    from labeldist.store import StoreCorruptError

    shutil.copytree(stores / KNN, tmp_path / KNN)
    flip_bit(tmp_path / KNN / "knn" / "distances" / "c" / "1" / "0")  # rows 100:200
    with pytest.raises(StoreCorruptError, match="knn/distances rows 100:200 failed its CRC32C checksum"):
        LocalSource(tmp_path).batches(KNN, anchors=[0], size=4, seed=0)  # item 0's list is whole: refused all the same


def test_refuses_what_the_service_refuses_with_the_same_errors(local: LocalSource, http: LabelDistClient) -> None:
    requests = [
        lambda c: c.batches("no-such-store", count=1, size=4),
        lambda c: c.batches(DENSE, anchors=[0, 300], size=4),  # no item 300
        lambda c: c.batches(DENSE, anchors=[-1], size=4),
        lambda c: c.batches(DENSE, count=1, size=301),  # more than the store's items
        lambda c: c.batches(DENSE, count=1, size=4, neighbors=4),  # does not fit
        lambda c: c.batches(KNN, count=1, size=40, neighbors=11),  # more than k
        lambda c: c.neighbors(DENSE, 300),
        lambda c: c.neighbors(DENSE, 0, 0),
        lambda c: c.neighbors(DENSE, 0, 21),  # more than k
        lambda c: c.distances(DENSE, 0, [1, 300]),
    ]
    for request in requests:
        with pytest.raises((StoreNotFound, RequestRejected)) as theirs:
            request(http)
        with pytest.raises(type(theirs.value)) as mine:
            request(local)
        assert mine.value.status == theirs.value.status
    with pytest.raises(ValueError, match="exactly one of anchors= and count="):
        local.batches(DENSE, size=4)


# ------------------------------------------------------------------ the structure of a minibatch
def test_minibatch_structure_on_a_dense_store(local: LocalSource, stores: Path) -> None:
    reader = StoreReader(str(stores / DENSE))
    knn, _ = reader.knn()
    dense = reader.dense_rows(0, reader.n_items)
    got = local.batches(DENSE, anchors=np.arange(0, 300, 7), size=25, neighbors=5, pairwise=True, seed=0)
    assert got.items.shape == got.distances.shape == (43, 24) and got.pairwise.shape == (43, 25, 25)
    for t, a in enumerate(got.anchors.tolist()):
        items = got.items[t]
        assert got.members[t, 0] == a  # the anchor first
        np.testing.assert_array_equal(items[:5], knn[a, :5])  # its 5 nearest next, nearest first
        assert len(set(items.tolist())) == 24 and a not in items  # then others: distinct, never the anchor
        np.testing.assert_array_equal(got.distances[t], dense[a, items])  # the store's numbers
        np.testing.assert_array_equal(got.pairwise[t], dense[np.ix_(got.members[t], got.members[t])])
    others = got.items[:, 5:].ravel()
    assert len(np.unique(others)) > 200  # random others, from all over the store


def test_minibatch_structure_on_a_knn_only_store(local: LocalSource, stores: Path) -> None:
    reader = StoreReader(str(stores / KNN))
    knn, knn_dist = reader.knn()
    labels, distance = stored_labels(reader), stored_distance(reader)
    full = distance.block(labels, labels).astype(np.float32)  # the kind's distance, every pair
    got = local.batches(KNN, anchors=[0, 1, 2, 50, 199], size=30, neighbors=4, pairwise=True, seed=5)
    for t, a in enumerate(got.anchors.tolist()):
        items, members = got.items[t], got.members[t]
        np.testing.assert_array_equal(items[:4], knn[a, :4])
        np.testing.assert_array_equal(got.distances[t, :4], knn_dist[a, :4])  # stored: exactly
        np.testing.assert_allclose(got.distances[t], full[a, items], rtol=1e-6)  # computed: the kind's distance
        pw = got.pairwise[t]
        np.testing.assert_array_equal(pw, pw.T)
        assert (np.diag(pw) == 0).all()
        np.testing.assert_array_equal(pw[0, 1:], got.distances[t])
        off = ~np.eye(30, dtype=bool)
        np.testing.assert_allclose(pw[off], full[np.ix_(members, members)][off], rtol=1e-6)


def test_a_store_is_named_by_its_folder_or_by_a_path(stores: Path) -> None:
    by_path = LocalSource().batches(str(stores / DENSE), anchors=[3], size=8, neighbors=2, seed=1)
    by_name = LocalSource(stores).batches(DENSE, anchors=[3], size=8, neighbors=2, seed=1)
    assert_same_batches(by_path, by_name)
    assert LocalSource(stores).store(DENSE)["has_dense"] and not LocalSource(stores).store(KNN)["has_dense"]
    with pytest.raises(StoreNotFound, match=f"unknown store 'nope'.*{DENSE}"):
        LocalSource(stores).ids("nope")


# ------------------------------------------------------------------ the stream over either source
def test_a_stream_over_the_local_source_sees_the_services_minibatches(
    local: LocalSource, http: LabelDistClient
) -> None:
    inputs = FeatureInputs(np.random.default_rng(0).normal(size=(300, 4)).astype(np.float32))

    def steps(source, **kw) -> list:
        stream = MinibatchStream(
            source,
            DENSE,
            inputs,
            size=12,
            neighbors=3,
            pairwise=True,
            batches_per_step=2,
            anchors_per_request=4,
            anchors=np.arange(24),
            epochs=1,
            seed=7,
            **kw,
        )
        return list(stream)

    mine, theirs = steps(local), steps(http)
    in_process = steps(local, processes=1)  # a DataLoader worker process: the source opened again there
    assert len(mine) == len(theirs) == len(in_process) == 12
    for a, b, c in zip(mine, theirs, in_process):
        for name in ("indices", "inputs", "distances", "pairwise"):
            torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=0, atol=0)
            torch.testing.assert_close(getattr(a, name), getattr(c, name), rtol=0, atol=0)
        torch.testing.assert_close(a.inputs, inputs(a.indices.numpy()))


class UndecodableImage(InputError):
    """Stands for the trainer's ImageInputError, a subclass of InputError."""


class BrokenInputs:
    """Inputs that fail as an image that does not decode does, in the worker process that makes them."""

    n_items = 300
    needs_processes = True

    def __call__(self, indices: np.ndarray) -> torch.Tensor:
        raise UndecodableImage("image /photos/17.jpg: cannot decode (truncated)")


def test_an_input_error_in_a_worker_process_comes_back_as_one_line_of_its_own_type(local: LocalSource) -> None:
    stream = MinibatchStream(
        local, DENSE, BrokenInputs(), size=8, neighbors=2, anchors=np.arange(8), anchors_per_request=2, processes=1
    )
    with pytest.raises(UndecodableImage) as error:
        list(stream)
    assert str(error.value) == "image /photos/17.jpg: cannot decode (truncated)"


@pytest.mark.parametrize(
    "method", ["batches", "distances", "pair_distances", "neighbors", "search", "store", "stores", "ids", "close"]
)
def test_local_source_takes_what_the_http_client_takes(method: str) -> None:
    """A training loop swaps one client for the other (MinibatchStream takes either): every method they share has
    the same parameters, defaults and annotations, so a call written for one is a call of the other."""
    assert inspect.signature(getattr(LocalSource, method)) == inspect.signature(getattr(LabelDistClient, method))
