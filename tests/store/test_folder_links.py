"""A store is its own folders, all the way down: a link, a FIFO or a device anywhere inside a store makes it damaged.

Before: only links at file level were caught (a chunk file, a ``zarr.json``). ``rm -r va/knn; ln -s
/abs/other/knn va/knn`` had the service and ``LocalSource`` answer the other store's neighbours (200), ``append``
merge the other store's lists into a new generation and replace the link by a real folder, and a FIFO, a link
loop or a character device at a dense chunk was reported as a chunk that "is missing". Now one walk of the store's
folders (:func:`labeldist.store.foreign_entries`), made when a store is opened, refuses it: the service answers 503
naming the path, ``LocalSource`` raises the store's error, ``verify`` lists it as damage, ``append``, ``export`` and
``split`` refuse it and leave it as it is, and a resumed job never writes through it.

Each case plants a link to a copy of another store's folder (the same shapes, other numbers: followed, it would
pass every checksum) at every folder level of a dense pose store and a kNN-only vectors store, built in this
process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from labeldist.api.main import create_app
from labeldist.distances.pose import PoseDistance
from labeldist.distances.vectors import VectorDistance
from labeldist.engine import append, precompute
from labeldist.engine.export import export_neighbors
from labeldist.engine.split import SplitError, split_store
from labeldist.engine.verify import verify_store
from labeldist.labels.vectors import Vectors
from labeldist.store import (
    StoreCorruptError,
    StoreError,
    StoreReader,
    build_manifest,
    create_store,
    damaged_regions,
    read_manifest,
)
from labeldist.store.outputs import OutputError, refuse_inside_store
from tests.api.api_helpers import make_settings
from tests.conftest import write_store

N = 60
KINDS = ("pose-dense", "vectors-knn")


def vectors(seed: int, n: int = N, first: int = 0) -> Vectors:
    rows = np.random.default_rng(seed).normal(size=(n, 4)).astype(np.float32)
    return Vectors([f"v{i}" for i in range(first, first + n)], rows)


def build(url: Path, kind: str, other: bool, mpii_poses) -> Path:
    """A complete store of ``kind``; ``other``: the same shapes and ids, other labels (other numbers)."""
    if kind == "pose-dense":
        labels = mpii_poses.subset(slice(N, 2 * N) if other else slice(0, N))
        labels = type(labels).from_arrays(np.array([f"p{i}" for i in range(N)]), labels.to_arrays())
        return write_store(url, labels, PoseDistance(), dataset="p60", k=5, dense=True, block_rows=20)
    labels = vectors(7 if other else 0)
    return write_store(url, labels, VectorDistance(), dataset="v60", k=5, dense=False, block_rows=20)


def folder_levels(store: Path) -> list[str]:
    """Every folder inside ``store``, relative to it."""
    return sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_dir())


def case_name(kind: str, level: str) -> str:
    return f"{kind}--{level.replace('/', '-')}"


def plant_link(store: Path, level: str, donors: Path) -> Path:
    """``store/level`` replaced by a link to a copy of the other store's folder at the same level."""
    donor = donors / case_name(store.name.split("--")[0], level)
    shutil.copytree(donors / "source" / level, donor)
    shutil.rmtree(store / level)
    os.symlink(donor, store / level)
    return store / level


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, mpii_poses) -> dict[str, Path]:
    """Per kind: a whole store and another one of the same shapes."""
    root = tmp_path_factory.mktemp("folder-links")
    out = {}
    for kind in KINDS:
        out[kind] = build(root / "good" / kind, kind, False, mpii_poses)
        out[f"{kind}-other"] = build(root / "other" / kind, kind, True, mpii_poses)
    return out


@pytest.fixture(scope="module")
def linked(tmp_path_factory: pytest.TempPathFactory, built) -> tuple[Path, dict[str, tuple[str, str, Path]]]:
    """A stores folder holding, for each kind and each folder level of its store, a copy of the store with that
    folder replaced by a link to the other store's copy: case name -> (kind, level, link)."""
    root = tmp_path_factory.mktemp("linked")
    stores, cases = root / "stores", {}
    stores.mkdir()
    for kind in KINDS:
        donors = root / f"donors-{kind}"
        donors.mkdir()
        shutil.copytree(built[f"{kind}-other"], donors / "source")
        for level in folder_levels(built[kind]):
            name = case_name(kind, level)
            shutil.copytree(built[kind], stores / name)
            cases[name] = (kind, level, plant_link(stores / name, level, donors))
    return stores, cases


def test_every_folder_level_of_each_kind_is_planted(built, linked) -> None:
    _, cases = linked
    for kind in KINDS:
        levels = {level for k, level, _ in cases.values() if k == kind}
        assert levels == set(folder_levels(built[kind])) and len(levels) > 10
        # chunk-row folders too (knn/indices/c/0), not only arrays and groups
        assert any(level.count("/") >= 3 for level in levels), levels
    assert any(level.startswith("dense/") for k, level, _ in cases.values() if k == "pose-dense")


def test_the_reader_refuses_a_link_at_every_folder_level(linked) -> None:
    from labeldist.store import foreign_entries

    stores, cases = linked
    for name, (_, level, link) in cases.items():
        with pytest.raises(StoreCorruptError, match=f"{link}: a symbolic link") as e:
            StoreReader(str(stores / name))
        assert e.value.array == level
        assert foreign_entries(stores / name) == [(str(link), "a symbolic link")]


def test_the_service_answers_503_naming_the_link_and_serves_the_whole_store(linked, built) -> None:
    stores, cases = linked
    shutil.copytree(built["vectors-knn"], stores / "whole")
    try:
        with TestClient(create_app(make_settings(stores=stores))) as client:
            listed = {s["name"]: s for s in client.get("/v1/stores").json()["stores"]}
            for name, (_, level, _) in cases.items():
                r = client.get(f"/v1/stores/{name}/items/0/neighbors?k=3")
                assert r.status_code == 503, (name, r.text)
                assert f"<store>/{level}: a symbolic link" in r.json()["detail"], r.text
                assert listed[name]["available"] is False and f"<store>/{level}" in listed[name]["detail"]
            whole = client.get("/v1/stores/whole/items/0/neighbors?k=3")
            assert whole.status_code == 200
            assert whole.json()["indices"] == StoreReader(str(built["vectors-knn"])).knn_rows(0, 1)[0][0, :3].tolist()
    finally:
        shutil.rmtree(stores / "whole")


def test_local_source_raises_the_store_error_naming_the_link(linked) -> None:
    from labeldist.client import LocalSource

    stores, cases = linked
    source = LocalSource(stores)
    for name, (_, _level, link) in cases.items():
        with pytest.raises(StoreCorruptError, match=f"{link}: a symbolic link"):
            source.neighbors(name, 0, k=3)


def test_verify_lists_the_link_as_damage(linked) -> None:
    stores, cases = linked
    for name, (_, level, link) in cases.items():
        report = verify_store(str(stores / name))
        assert report["ok"] is False and report["entries_checked"] == 0
        assert [d["array"] for d in report["damaged"]] == [level]
        assert f"{link}: a symbolic link" in report["damaged"][0]["error"]
        assert "missing" not in json.dumps(report)


def test_append_export_and_split_refuse_and_leave_the_link(linked, tmp_path: Path, mpii_poses) -> None:
    stores, cases = linked
    more = {"vectors-knn": vectors(3, n=5, first=N), "pose-dense": None}
    poses = mpii_poses.subset(slice(2 * N, 2 * N + 5))
    more["pose-dense"] = type(poses).from_arrays(np.array([f"p{i}" for i in range(N, N + 5)]), poses.to_arrays())
    for name, (kind, _level, link) in cases.items():
        target = os.readlink(link)
        before = sorted((p, p.stat().st_mtime_ns) for p in Path(target).rglob("*"))
        with pytest.raises(StoreCorruptError, match=f"{link}: a symbolic link"):
            append(stores / name, more[kind], n_workers=1, progress=False)
        with pytest.raises(StoreCorruptError, match=f"{link}: a symbolic link"):
            export_neighbors(str(stores / name), str(tmp_path / f"{name}.csv"), progress=False)
        with pytest.raises(SplitError, match=f"{link}: a symbolic link"):
            split_store(stores / name, tmp_path / f"{name}-split", n_workers=1, progress=False)
        assert os.path.islink(link) and os.readlink(link) == target
        assert sorted((p, p.stat().st_mtime_ns) for p in Path(target).rglob("*")) == before
        assert read_manifest(str(stores / name))["generation"] == 1
        assert not (tmp_path / f"{name}.csv").exists() and not (tmp_path / f"{name}-split").exists()
        assert not any(p.name.startswith(f".{name}.") for p in stores.iterdir())


def test_append_command_refuses_a_linked_knn_folder(built, tmp_path: Path, capsys) -> None:
    """The issue's own case: a kNN-only store whose knn/ is a link to another store's, then ``labeldist append``."""
    from labeldist.cli import main

    store, other = tmp_path / "vkl", tmp_path / "other"
    shutil.copytree(built["vectors-knn"], store)
    shutil.copytree(built["vectors-knn-other"], other)
    shutil.rmtree(store / "knn")
    os.symlink(other / "knn", store / "knn")
    np.save(tmp_path / "more.npy", vectors(3, n=5).values)
    code = main(["append", str(store), str(tmp_path / "more.npy"), "--workers", "1"])
    err = capsys.readouterr().err
    assert code != 0 and f"{store / 'knn'}: a symbolic link" in err.strip().splitlines()[-1], err
    assert os.path.islink(store / "knn") and read_manifest(str(store))["n_items"] == N
    assert read_manifest(str(other))["n_items"] == N


def test_a_resumed_precompute_never_writes_through_a_link(tmp_path: Path) -> None:
    """An unfinished store whose knn/indices is a link to another store's: resuming it would write there."""
    labels, distance = vectors(0), VectorDistance()
    manifest = build_manifest(
        dataset="v60", kind="vectors", params=distance.params(), labels=labels, k=5, dense=False, block_rows=20
    )
    store = tmp_path / "unfinished"
    create_store(str(store), manifest, labels)
    other = write_store(tmp_path / "other", vectors(7), distance, dataset="v60", k=5, dense=False, block_rows=20)
    shutil.rmtree(store / "knn" / "indices")
    os.symlink(other / "knn" / "indices", store / "knn" / "indices")
    before = {p: p.read_bytes() for p in (other / "knn" / "indices").rglob("*") if p.is_file()}
    with pytest.raises(StoreCorruptError, match=f"{store / 'knn' / 'indices'}: a symbolic link"):
        precompute(labels, distance, store, dataset="v60", k=5, dense=False, block_rows=20, n_workers=1)
    assert {p: p.read_bytes() for p in (other / "knn" / "indices").rglob("*") if p.is_file()} == before
    assert os.path.islink(store / "knn" / "indices")


# ---------------------------------------------------------------- what is at a dense chunk
def plant_at_chunk(chunk: Path, what: str) -> str:
    """``chunk`` replaced by ``what``; the words its refusal uses."""
    chunk.unlink()
    if what == "fifo":
        os.mkfifo(chunk)
        return "a FIFO (named pipe)"
    if what == "loop":
        os.symlink(chunk.name, chunk)
        return "a symbolic link"
    os.mknod(chunk, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    return "a character device"


@pytest.mark.parametrize("what", ["fifo", "loop", "device"])
def test_a_fifo_link_loop_or_device_at_a_dense_chunk_is_named_not_missing(built, tmp_path: Path, what) -> None:
    stores = tmp_path / "stores"
    store = stores / "dense"
    shutil.copytree(built["pose-dense"], store)
    chunk = store / "dense" / "distances" / "c" / "1" / "0"
    try:
        says = plant_at_chunk(chunk, what)
    except PermissionError:
        pytest.skip("no permission to make a device here")
    with pytest.raises(StoreCorruptError, match=re.escape(f"{chunk}: {says}")):
        StoreReader(str(store))
    report = verify_store(str(store))
    assert report["ok"] is False and [d["array"] for d in report["damaged"]] == ["dense/distances/c/1/0"]
    assert says in report["damaged"][0]["error"] and "missing" not in json.dumps(report)
    with TestClient(create_app(make_settings(stores=stores))) as client:
        r = client.get("/v1/stores/dense/items/0/neighbors?k=3")
        assert r.status_code == 503 and f"<store>/dense/distances/c/1/0: {says}" in r.json()["detail"], r.text


@pytest.mark.parametrize("what", ["fifo", "loop", "device"])
def test_a_chunk_planted_after_opening_is_named_by_what_is_there(built, tmp_path: Path, what) -> None:
    """A reader opened on a whole store, then a chunk replaced: its read and the chunk scan name what is there."""
    store = tmp_path / "dense"
    shutil.copytree(built["pose-dense"], store)
    reader = StoreReader(str(store))
    try:
        says = plant_at_chunk(store / "dense" / "distances" / "c" / "1" / "0", what)
    except PermissionError:
        pytest.skip("no permission to make a device here")
    with pytest.raises(StoreCorruptError, match=re.escape(f"chunk 1/0 is {says}")) as e:
        reader.dense_rows(20, 40)
    assert "missing" not in str(e.value).split("(")[0]
    regions = damaged_regions(str(store))
    assert [(d["array"], d["rows"]) for d in regions] == [("dense/distances", [20, 40])]
    assert f"is {says}, not a chunk file" in regions[0]["error"]


# ---------------------------------------------------------------- an array folder is no store
def test_the_output_rule_names_the_store_not_its_array_folder(built) -> None:
    store = built["vectors-knn"]
    assert read_manifest(str(store / "ids")) is None
    with pytest.raises(OutputError) as e:
        refuse_inside_store(store / "ids" / "x.csv")
    assert f"inside the labeldist store {store} (at ids/x.csv in it)" in str(e.value)
    assert f"store {store / 'ids'}" not in str(e.value)
    with pytest.raises(StoreError, match="a Zarr array's folder .*, not a labeldist store") as opened:
        StoreReader(str(store / "ids"))
    assert not isinstance(opened.value, StoreCorruptError)  # not a damaged store: no store at all
