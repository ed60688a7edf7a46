"""One Store object for one store: ``ld.open(folder)`` and ``ld.open(service URL)`` answer the same questions with
the same types and values (the service's own answers are checked against the store's arrays in tests/api); what
only a store's files can answer is refused for a served store in one line; ``to_pandas`` is ``labeldist export``'s
table, ``to_xarray`` the store's arrays."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr

import labeldist as ld
from labeldist.client import LabelDistClient, LocalSource, Minibatch, Neighbors
from tests.client.conftest import DENSE, KNN


@pytest.fixture(scope="module", params=[DENSE, KNN])
def pair(request: pytest.FixtureRequest, stores: Path, service: str) -> tuple[ld.Store, ld.Store]:
    """The same store opened from its folder and from the service."""
    name = request.param
    return ld.open(stores / name), ld.open(f"{service}/v1/stores/{name}")


def test_both_faces_are_one_type_and_say_where_they_read(pair: tuple[ld.Store, ld.Store]) -> None:
    local, served = pair
    assert type(local) is type(served) is ld.Store
    assert local.is_local and not served.is_local
    assert served.where.endswith(f"/v1/stores/{served.name}") and Path(local.where).name == local.name


def test_what_a_store_is_equals_the_services(pair: tuple[ld.Store, ld.Store], stores: Path) -> None:
    local, served = pair
    root = zarr.open_group(str(stores / local.name), mode="r")
    assert len(local) == len(served) == root["ids"].shape[0]
    assert local.ids == served.ids == [str(i) for i in root["ids"][:]]
    assert local.kind == served.kind == "pose" and local.k == served.k == root["knn/indices"].shape[1]
    for key in ("kind", "n_items", "k", "dense", "params", "dataset", "has_dense"):
        assert local.info[key] == served.info[key], key


def test_neighbours_and_distances_equal_the_services(pair: tuple[ld.Store, ld.Store], stores: Path) -> None:
    local, served = pair
    root = zarr.open_group(str(stores / local.name), mode="r")
    for item, k in ((0, None), (7, 3), (len(local) - 1, 1)):
        a, b = local.neighbors(item, k), served.neighbors(item, k)
        assert isinstance(a, Neighbors) and isinstance(b, Neighbors)
        want = root["knn/indices"][item, : k or local.k]
        np.testing.assert_array_equal(a.indices, want)
        np.testing.assert_array_equal(b.indices, want)
        np.testing.assert_array_equal(a.distances, b.distances)
        assert a.indices.dtype == b.indices.dtype == np.int64 and a.distances.dtype == b.distances.dtype == np.float32
    items = [3, 0, 150, 199]
    np.testing.assert_array_equal(local.distances(5, items), served.distances(5, items))
    pairs = [[0, 1], [199, 2], [4, 4]]
    np.testing.assert_array_equal(local.pair_distances(pairs), served.pair_distances(pairs))


def test_minibatches_are_one_type_and_equal_the_services(pair: tuple[ld.Store, ld.Store]) -> None:
    local, served = pair
    for kw in (
        dict(anchors=[0, 5, 150], size=12, neighbors=4, pairwise=True, seed=3),
        dict(count=4, size=20, seed=11),
    ):
        a, b = local.batches(**kw), served.batches(**kw)
        assert type(a) is type(b) is Minibatch is ld.Minibatch
        for name in ("indices", "distances", "pairwise"):
            u, v = getattr(a, name), getattr(b, name)
            assert (u is None) == (v is None), name
            if u is not None:
                np.testing.assert_array_equal(u, v, err_msg=name)
                assert u.dtype == v.dtype, name
        assert a.seed == b.seed == kw["seed"]
        assert ld.pml_labels(a, 2).tolist() == ld.pml_labels(b, 2).tolist()


def test_a_search_by_a_new_label_equals_the_services(pair: tuple[ld.Store, ld.Store]) -> None:
    local, served = pair
    label = local.labels.to_json(17)  # an item's own pose, as a new label: it finds that item at distance 0
    a, b = local.search(label, k=5, include_labels=True), served.search(label, k=5, include_labels=True)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.distances, b.distances)
    assert a.ids == b.ids and a.labels == b.labels and a.indices[0] == 17 and a.distances[0] == 0


def test_the_table_is_exports_whether_read_or_served(pair: tuple[ld.Store, ld.Store], tmp_path: Path) -> None:
    local, served = pair
    out = tmp_path / "n.parquet"
    run = [sys.executable, "-m", "labeldist.cli", "export", local.where, "--out", str(out), "--no-progress"]
    subprocess.run(run, check=True, capture_output=True, timeout=300)
    exported = pd.read_parquet(out)
    pd.testing.assert_frame_equal(local.to_pandas(), exported)
    pd.testing.assert_frame_equal(served.to_pandas(), exported)
    first = local.to_pandas(k=2)
    assert set(first["rank"]) == {1, 2} and len(first) == 2 * len(local)


def test_to_xarray_holds_the_stores_arrays(pair: tuple[ld.Store, ld.Store], stores: Path) -> None:
    local, _ = pair
    data = local.to_xarray()
    root = zarr.open_group(str(stores / local.name), mode="r")
    np.testing.assert_array_equal(data["indices"].values, root["knn/indices"][:])
    np.testing.assert_array_equal(data["distances"].values, root["knn/distances"][:])
    assert list(data["item"].values) == local.ids and data.attrs["labeldist"]["kind"] == "pose"
    if local.info["dense"]:
        np.testing.assert_array_equal(data["dense"].values, root["dense/distances"][:])
        assert data["dense"].dims == ("item", "other_item")
    else:
        assert "dense" not in data


def test_what_needs_the_files_is_refused_for_a_served_store_in_one_line(pair: tuple[ld.Store, ld.Store]) -> None:
    _, served = pair
    for ask in (lambda: served.labels, served.verify, served.to_xarray):
        with pytest.raises(ld.UsageError, match="is served by http://127.0.0.1:.*ld.open\\(PATH\\)") as e:
            ask()
        assert "\n" not in str(e.value)


def test_verify_of_a_local_store_is_labeldist_verifys(pair: tuple[ld.Store, ld.Store]) -> None:
    local, _ = pair
    report = local.verify(sample=30, seed=1)
    assert report["ok"] is True


def test_a_source_hands_out_the_same_store_by_name(stores: Path, service: str) -> None:
    with LocalSource(stores) as source, LabelDistClient(service) as client:
        a, b = source.open(DENSE), client.open(DENSE)
        assert (
            a.neighbors(3).indices.tolist()
            == b.neighbors(3).indices.tolist()
            == ld.open(stores / DENSE).neighbors(3).indices.tolist()
        )


def test_open_refuses_what_is_no_store_naming_it(stores: Path, service: str, tmp_path: Path) -> None:
    with pytest.raises(ld.StoreNotFound, match="no labeldist store at .*nothing-here"):
        ld.open(tmp_path / "nothing-here")
    with pytest.raises(ld.StoreNotFound, match="no-such-store"):
        ld.open(f"{service}/v1/stores/no-such-store")
    with pytest.raises(ld.UsageError, match="which store"):
        ld.open(service)
    with pytest.raises(ld.UsageError, match="name= and client options are for a service"):
        ld.open(stores / DENSE, timeout=3)


def test_a_store_has_every_method_a_source_answers_with_the_sources_parameters() -> None:
    """Each question both sources answer is a Store method with the same parameters, less the store's name (the
    sources' ``index`` of an item is the Store's ``item``)."""
    for method in ("neighbors", "distances", "pair_distances", "search", "batches"):
        source = list(inspect.signature(getattr(LocalSource, method)).parameters.values())
        source = [p.replace(name="item") if p.name == "index" else p for p in source]
        store = list(inspect.signature(getattr(ld.Store, method)).parameters.values())
        assert [p for i, p in enumerate(source) if i != 1] == store, method
