"""``labeldist.engine.append``: a store grown by new items (a new generation) equals a precompute of all items at once.

For every built-in kind and the example plugin kind (``angles``, installed with pip into a folder of its own, as
``tests/kinds/test_plugin.py`` does), a store of the first ``n_old`` items is grown by the rest and compared, array by
array and bit for bit, with a precompute of all of them (same k, same block_rows; ``n_old`` is never a multiple
of block_rows, so one row block holds old and new items). Dense and kNN-only stores; the vectors kind under a
metric FAISS searches and one it does not. Then the manifest's record of the generations, three generations,
a rerun, an append that fails half-way (the store untouched) and its resumption, the refusals (each leaving the
store folder, and what is beside it, byte for byte as it was), ``LabelSet.concat`` and ``knn.merge_topk`` against
the top-k oracle. The sentence kind uses the CBoW scorer (no transformer: cheap).

Everything runs on the session's real 2-worker LocalCluster (``tests.conftest.dask_client``) and real Zarr stores.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from labeldist.core.dense import dense_bytes
from labeldist.core.knn import merge_topk, topk_rows
from labeldist.distances.pose import PoseDistance
from labeldist.engine import precompute
from labeldist.engine.grow import append, appended_pairs
from labeldist.labels.base import LabelError, LabelSet
from labeldist.store import (
    StoreError,
    StoreIncompleteError,
    StoreMismatchError,
    StoreReader,
    block_range,
    blocks_done,
    build_manifest,
    create_store,
    fingerprint_diff,
    manifest_digest,
    n_blocks,
    read_manifest,
    store_identity,
)
from labeldist.view.stored import stored_labels
from tests.conftest import DATA, check_store
from tests.processes import install_example_plugin

MPII = DATA / "mpii" / "mpii_valid_2958.csv"
COCO = DATA / "coco" / "coco_karpathy_test.json"


# ---------------------------------------------------------------- the labels of every kind (built once)
@functools.cache
def _poses(normalization: str = "none"):
    from labeldist.labels.pose_files import read_mpii_csv

    return read_mpii_csv(MPII, normalization=normalization)


@functools.cache
def _captions():
    from labeldist.labels.captions import read_captions

    return read_captions(COCO).subset(slice(0, 50))


@functools.cache
def _sentences():
    from labeldist.labels.sentences import read_caption_sentences

    return read_caption_sentences(COCO, limit=60)


@functools.cache
def _layouts():
    from labeldist.labels.layouts import LayoutMaps
    from labeldist.labels.lsun_rooms import generate_layouts

    # several LSUN types, so that maps of one type tie and maps of others do not
    parts = [generate_layouts(15, layout_type=t, height=24, width=36, seed=t) for t in (5, 0, 4, 9)]
    return LayoutMaps(np.concatenate([p.ids for p in parts]), np.concatenate([p.maps for p in parts]))


@functools.cache
def _vectors(ties: bool = False):
    from labeldist.labels.vectors import Vectors

    rng = np.random.default_rng(0)
    # with ties: few distinct small integers (no zero vector: the cosine of one is undefined), many equal distances
    values = rng.integers(1, 4, size=(150, 3)).astype(float) if ties else rng.normal(size=(150, 8))
    return Vectors([f"v{i}" for i in range(150)], values, [f"c{j}" for j in range(values.shape[1])])


def _angles(module):
    rng = np.random.default_rng(1)  # whole degrees: many angles at the same distance from one another
    return module.Angles(np.array([f"a{i}" for i in range(80)]), rng.integers(0, 360, size=80).astype(float))


@dataclass(frozen=True)
class Case:
    labels: LabelSet
    distance: object
    n_old: int
    k: int
    block_rows: int


def make_case(name: str, request: pytest.FixtureRequest) -> Case:
    """The labels (all items), the distance, the old items' count, k and block_rows of case ``name``. ``n_old``
    is never a multiple of ``block_rows``: a row block straddles the old and the new items."""
    from labeldist.distances.caption_sets import CaptionSetWMD
    from labeldist.distances.layout import LayoutMIoU
    from labeldist.distances.sts import SentenceRelevance
    from labeldist.distances.vectors import VectorDistance

    if name == "pose":
        return Case(_poses().subset(slice(0, 100)), PoseDistance(), 70, 8, 16)
    if name == "pose-one-new":
        return Case(_poses().subset(slice(0, 48)), PoseDistance(), 47, 8, 16)
    if name == "layout_miou":
        return Case(_layouts(), LayoutMIoU(), 37, 6, 8)
    if name == "caption_wmd":
        return Case(_captions(), CaptionSetWMD(), 37, 5, 8)
    if name == "sentence_relevance":
        return Case(_sentences(), SentenceRelevance("cbow"), 41, 5, 16)
    if name.startswith("vectors-"):
        _, metric, *ties = name.split("-")
        return Case(_vectors(bool(ties)), VectorDistance(metric), 111, 7, 16)
    if name == "angles":
        module = request.getfixturevalue("angles_plugin")
        return Case(_angles(module), module.CircularDistance(), 53, 6, 16)
    raise AssertionError(name)


CASES = [
    "pose",
    "pose-one-new",
    "layout_miou",
    "caption_wmd",
    "sentence_relevance",
    "vectors-euclidean",  # kNN-only: FAISS
    "vectors-cosine",  # kNN-only: FAISS
    "vectors-cityblock",  # no FAISS
    "vectors-euclidean-ties",
    "vectors-cityblock-ties",
    "angles",
]


@pytest.fixture(scope="module")
def angles_plugin(tmp_path_factory, dask_client):
    """The example plugin, installed with pip into a folder of its own and put on ``sys.path`` here and on the
    workers (which unpickle its labels and distance); the kinds registry rebuilt, to find its entry point."""
    from labeldist.kinds import registry

    target = install_example_plugin(tmp_path_factory.mktemp("plugin-site"))
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    registry.cache_clear()
    dask_client.run(_sys_path_insert, str(target))
    try:
        import labeldist_angles

        assert "angles" in registry().kinds
        yield labeldist_angles
    finally:
        sys.path.remove(str(target))
        registry.cache_clear()
        dask_client.run(_sys_path_remove, str(target))


def _sys_path_insert(path: str) -> None:
    import importlib as lib
    import sys as system

    system.path.insert(0, path)
    lib.invalidate_caches()


def _sys_path_remove(path: str) -> None:
    import sys as system

    if path in system.path:
        system.path.remove(path)


# ---------------------------------------------------------------- helpers
def build(labels: LabelSet, distance, url: Path, case: Case, dense: bool, client) -> None:
    precompute(
        labels,
        distance,
        url,
        dataset="t",
        k=case.k,
        dense=dense,
        block_rows=case.block_rows,
        client=client,
        progress=False,
    )


def _members(url: Path) -> list[str]:
    return sorted(name for name, _ in zarr.open_group(str(url), mode="r").members(max_depth=None))


def exact_pairs(url: Path) -> np.ndarray:
    return zarr.open_group(str(url), mode="r")["progress/exact_pairs"][:]


def assert_same_store(got: Path, want: Path) -> None:
    """The store at ``got`` holds what the one at ``want`` holds: ids, labels, kNN lists, dense matrix, the
    fingerprint of the manifest, the same arrays."""
    a, b = StoreReader(str(got)), StoreReader(str(want))
    assert a.n_items == b.n_items
    np.testing.assert_array_equal(a.ids, b.ids)
    got_idx, got_dist = a.knn()
    want_idx, want_dist = b.knn()
    np.testing.assert_array_equal(got_idx, want_idx)
    np.testing.assert_array_equal(got_dist, want_dist)
    assert a.has_dense == b.has_dense
    if b.has_dense:
        np.testing.assert_array_equal(a.dense_rows(0, a.n_items), b.dense_rows(0, b.n_items))
    assert a.manifest["labels_sha256"] == b.manifest["labels_sha256"]
    assert fingerprint_diff(a.manifest, b.manifest) == []  # kind, params (provenance too), n, k, dense, symmetric
    got_arrays, want_arrays = a.label_arrays(), b.label_arrays()
    assert sorted(got_arrays) == sorted(want_arrays)
    for name, arr in want_arrays.items():
        np.testing.assert_array_equal(got_arrays[name], arr)
    assert stored_labels(a).sha256() == stored_labels(b).sha256() == b.manifest["labels_sha256"]
    assert _members(got) == _members(want)  # the plain layout: no work arrays left


def folder_state(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` (hidden siblings of a store included) with the digest of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(folder.rglob("*"))
    }


def hidden_siblings(url: Path) -> list[str]:
    return sorted(p.name for p in url.parent.iterdir() if p.name.startswith(f".{url.name}."))


# ---------------------------------------------------------------- 1. append == precompute of all items
@dataclass(frozen=True)
class Grown:
    """A store of a case's first ``n_old`` items grown by the rest, and a precompute of all of them."""

    case: Case
    dense: bool
    grown: Path
    full: Path
    before: dict  # the manifest of the store before the append
    old_pairs: int  # the sum of its progress/exact_pairs
    result: object  # the AppendResult


@pytest.fixture(scope="module")
def grown_stores(tmp_path_factory, dask_client):
    """``get(name, dense, request)``: the :class:`Grown` of a case, made once for the tests that read it."""
    made: dict[tuple[str, bool], Grown] = {}

    def get(name: str, dense: bool, request: pytest.FixtureRequest) -> Grown:
        if (name, dense) not in made:
            case = make_case(name, request)
            n, folder = len(case.labels), tmp_path_factory.mktemp(f"{name}-{'dense' if dense else 'knn'}")
            grown, full = folder / "grown", folder / "full"
            build(case.labels.subset(slice(0, case.n_old)), case.distance, grown, case, dense, dask_client)
            before, old_pairs = read_manifest(str(grown)), int(exact_pairs(grown).sum())
            result = append(grown, case.labels.subset(slice(case.n_old, n)), client=dask_client, progress=False)
            build(case.labels, case.distance, full, case, dense, dask_client)
            made[name, dense] = Grown(case, dense, grown, full, before, old_pairs, result)
        return made[name, dense]

    return get


#: every case dense and kNN-only; the cases with ties kNN-only, where the merged lists and FAISS's must break them
EQUIVALENCE = [
    pytest.param(name, dense, id=f"{name}-{'dense' if dense else 'knn-only'}")
    for name in CASES
    for dense in ((False,) if name.endswith("-ties") else (True, False))
]


@pytest.mark.parametrize(("name", "dense"), EQUIVALENCE)
def test_append_equals_a_precompute_of_all_items(name, dense, request, grown_stores):
    g = grown_stores(name, dense, request)
    case, n = g.case, len(g.case.labels)
    assert case.n_old % case.block_rows and case.n_old < n
    result = g.result
    assert (result.generation, result.n_old, result.n_new, result.reused) == (2, case.n_old, n - case.n_old, False)
    assert result.blocks_total == n_blocks(n, case.block_rows)
    assert_same_store(g.grown, g.full)
    assert read_manifest(str(g.grown))["generation"] == 2
    assert hidden_siblings(g.grown) == []  # staged store swapped in, old one and lock removed


# ---------------------------------------------------------------- 2. the manifest's generations
def _symmetric_pairs(n_old: int, n: int, block_rows: int) -> int:
    """What a symmetric dense append computes: each block's upper strip from column max(start, n_old)."""
    return sum(
        (stop - start) * (n - max(start, n_old))
        for start, stop in (block_range(b, n, block_rows) for b in range(n_blocks(n, block_rows)))
    )


@pytest.mark.parametrize(
    ("name", "dense"),
    [("pose", True), ("pose", False), ("vectors-euclidean", True), ("caption_wmd", False)],
    ids=["pose-dense", "pose-knn-only", "vectors-symmetric-dense", "caption_wmd-pruned"],
)
def test_manifest_records_both_generations_and_their_pairs(name, dense, request, grown_stores):
    g = grown_stores(name, dense, request)
    case, result = g.case, g.result
    n, n_old = len(case.labels), case.n_old
    m = n - n_old
    old, new = case.labels.subset(slice(0, n_old)), case.labels.subset(slice(n_old, n))
    man = read_manifest(str(g.grown))
    assert man["complete"] is True and man["n_items"] == n and man["generation"] == 2
    assert man["labels_sha256"] == case.labels.sha256()
    first, second = man["generations"]
    assert (first["generation"], first["items"], first["labels_sha256"]) == (1, [0, n_old], old.sha256())
    assert (second["generation"], second["items"], second["labels_sha256"]) == (2, [n_old, n], new.sha256())
    assert second["appended_to"] == manifest_digest(g.before)  # the generation it was built on
    # the pairs: the old generation's as its job counted them, the new one's as this job's blocks counted them
    assert first["exact_pairs"] == g.old_pairs > 0
    assert second["exact_pairs"] == int(exact_pairs(g.grown).sum()) == result.exact_pairs
    full_pairs = int(exact_pairs(g.full).sum())
    assert second["exact_pairs"] < full_pairs  # the point of appending
    symmetric = bool(man.get("symmetric"))
    assert symmetric == (dense and case.distance.symmetric)
    if name == "pose":  # nothing pruned, nothing searched: exactly the new pairs, in both orientations
        assert second["exact_pairs"] == appended_pairs(n_old, m, False) == m * n + n_old * m
    elif symmetric:  # the upper strips from the first new column, their leading squares whole
        assert second["exact_pairs"] == _symmetric_pairs(n_old, n, case.block_rows)
    else:  # lower-bound pruning: at most the new pairs
        assert 0 < second["exact_pairs"] <= appended_pairs(n_old, m, False)
    assert result.blocks_computed == result.blocks_total == n_blocks(n, case.block_rows)
    if name == "pose":
        assert "ok" in check_store(g.grown)  # the contract's own checker


def test_symmetric_dense_append_computes_appended_pairs(dask_client, tmp_path):
    """The count of the blocks' strips: 1,100 for N = 100, M = 10, 16-row blocks (each block's whole leading square,
    as precompute computes it), 1,055 for the triangle alone."""
    from labeldist.distances.vectors import VectorDistance

    labels, url = _vectors().subset(slice(0, 110)), tmp_path / "s"
    case = Case(labels, VectorDistance(), 100, 7, 16)
    build(labels.subset(slice(0, 100)), case.distance, url, case, True, dask_client)
    result = append(url, labels.subset(slice(100, 110)), client=dask_client, progress=False)
    assert result.exact_pairs == appended_pairs(100, 10, True, block_rows=16) == 1100
    assert appended_pairs(100, 10, True) == 100 * 10 + 10 * 11 // 2


# ---------------------------------------------------------------- 3. three generations
@pytest.mark.parametrize(
    ("name", "dense"),
    [("pose", True), ("pose", False), ("caption_wmd", False)],
    ids=["pose-dense", "pose-knn-only", "caption_wmd-knn-only"],
)
def test_two_appends_equal_a_precompute_of_all_items(name, dense, request, dask_client, grown_stores, tmp_path):
    case, full = make_case(name, request), grown_stores(name, dense, request).full
    n = len(case.labels)
    cuts = [0, case.n_old - 11, case.n_old, n]  # 59 / 70 / 100 poses, 26 / 37 / 50 images: no cut on a block edge
    assert all(c % case.block_rows for c in cuts[1:3])
    grown = tmp_path / "grown"
    build(case.labels.subset(slice(0, cuts[1])), case.distance, grown, case, dense, dask_client)
    for a, b in zip(cuts[1:], cuts[2:]):
        append(grown, case.labels.subset(slice(a, b)), client=dask_client, progress=False)
    assert_same_store(grown, full)
    man = read_manifest(str(grown))
    assert man["generation"] == 3
    assert [g["items"] for g in man["generations"]] == [[0, cuts[1]], [cuts[1], cuts[2]], [cuts[2], n]]
    assert [g["labels_sha256"] for g in man["generations"]] == [
        case.labels.subset(slice(a, b)).sha256() for a, b in zip(cuts, cuts[1:])
    ]
    assert man["generations"][2]["exact_pairs"] == int(exact_pairs(grown).sum())


# ---------------------------------------------------------------- 4. a rerun does nothing
def test_rerunning_a_finished_append_reuses_it_and_changes_nothing(request, dask_client, tmp_path):
    case = make_case("pose", request)
    n = len(case.labels)
    url = tmp_path / "stores" / "pose"
    build(case.labels.subset(slice(0, case.n_old)), case.distance, url, case, True, dask_client)
    new = case.labels.subset(slice(case.n_old, n))
    first = append(url, new, client=dask_client, progress=False)
    state, identity = folder_state(url.parent), store_identity(url)
    again = append(url, new, client=dask_client, progress=False)
    assert again.reused is True and first.reused is False
    assert (again.generation, again.n_old, again.n_new, again.blocks_computed) == (2, case.n_old, n - case.n_old, 0)
    assert again.exact_pairs == first.exact_pairs
    assert again.manifest == first.manifest == read_manifest(str(url))
    assert folder_state(url.parent) == state and store_identity(url) == identity


# ---------------------------------------------------------------- an interrupted append resumes
class _FailsOnItem(PoseDistance):
    """The pose distance (same kind, same parameters: the store's own), raising on the row block holding one
    item: a job that stops half-way, as a killed one would, with some blocks written and others not."""

    def __init__(self, item: str) -> None:
        super().__init__()
        self.item = item

    def block(self, rows, cols):
        if self.item in rows.ids:
            raise RuntimeError(f"injected failure at {self.item}")
        return super().block(rows, cols)


def _drain(client) -> None:
    """Return once every worker has finished the task it was running: one task on each of the single-threaded
    workers, queued behind it."""
    workers = list(client.scheduler_info()["workers"])
    client.gather([client.submit(int, 0, workers=[w], allow_other_workers=False, pure=False) for w in workers])


def test_an_interrupted_append_leaves_the_store_as_it_was_and_resumes(request, dask_client, grown_stores, tmp_path):
    case, full = make_case("pose", request), grown_stores("pose", True, request).full
    n = len(case.labels)
    url = tmp_path / "stores" / "pose"
    build(case.labels.subset(slice(0, case.n_old)), case.distance, url, case, True, dask_client)
    new = case.labels.subset(slice(case.n_old, n))
    state, identity = folder_state(url), store_identity(url)
    with pytest.raises(RuntimeError, match="injected failure"):
        append(url, new, distance=_FailsOnItem(str(case.labels.ids[90])), client=dask_client, progress=False)
    assert folder_state(url) == state and store_identity(url) == identity  # the old generation, untouched
    assert read_manifest(str(url))["generation"] == 1
    _drain(dask_client)  # a task still running when the job failed finishes before the staged store is looked at
    staged = url.parent / ".pose.append"
    assert read_manifest(str(staged))["complete"] is False
    left = int((~blocks_done(str(staged))).sum())  # blocks not written: the failing one (rows 80..95) at least
    assert not blocks_done(str(staged))[80 // case.block_rows]
    result = append(url, new, client=dask_client, progress=False)
    assert result.blocks_computed == left  # resumed: only what was left
    assert result.exact_pairs == appended_pairs(case.n_old, n - case.n_old, False)  # blocks of both runs counted
    assert_same_store(url, full)
    assert hidden_siblings(url) == []


# ---------------------------------------------------------------- 5. refusals leave everything as it was
@pytest.fixture(scope="module")
def pose_store(tmp_path_factory, dask_client):
    """A dense store of the first 70 poses, read with the reader's provenance recorded (``params["labels"]``)."""
    poses = _poses()
    old = poses.subset(slice(0, 70))
    old.provenance = dict(poses.provenance)
    url = tmp_path_factory.mktemp("pristine") / "pose"
    precompute(old, PoseDistance(), url, dataset="t", k=8, block_rows=16, client=dask_client, progress=False)
    return url


@pytest.fixture
def store(pose_store, tmp_path):
    """A copy of the pose store of its own for one test, alone in its folder."""
    url = tmp_path / "stores" / "pose"
    shutil.copytree(pose_store, url)
    return url


def _new_poses(start: int = 70, stop: int = 100, normalization: str = "none", **provenance):
    poses = _poses(normalization)
    new = poses.subset(slice(start, stop))
    new.provenance = {**poses.provenance, **provenance}
    return new


def refused(url: Path, error: type[BaseException], match: str, labels, **kwargs) -> pytest.ExceptionInfo:
    """Run the append, expecting ``error`` matching ``match``; the store and what is beside it unchanged."""
    state, identity = folder_state(url.parent), store_identity(url)
    with pytest.raises(error, match=match) as info:
        append(url, labels, progress=False, **kwargs)
    assert folder_state(url.parent) == state  # no staged store, no lock file, nothing rewritten
    assert store_identity(url) == identity
    return info


def test_ids_already_in_the_store_are_refused_by_name(store, dask_client):
    new = _new_poses(65, 90)  # 65..69 are in the store
    info = refused(store, LabelError, "5 of the 25 new items are already in", new, client=dask_client)
    assert repr(str(new.ids[0])) in str(info.value) and repr(str(new.ids[4])) in str(info.value)
    assert repr(str(new.ids[5])) not in str(info.value)  # only the ids that are there


def test_a_distance_with_other_parameters_is_refused(store, dask_client):
    from labeldist.distances.vectors import VectorDistance

    info = refused(
        store,
        StoreMismatchError,
        "other parameters",
        _new_poses(),
        distance=PoseDistance(metric="sqeuclidean"),
        client=dask_client,
    )
    assert "metric: store has 'euclidean', asked 'sqeuclidean'" in str(info.value)
    refused(
        store,
        StoreMismatchError,
        "a pose store; the new items are of kind vectors",
        _new_poses(),
        distance=VectorDistance(),
        client=dask_client,
    )


def test_labels_read_with_other_settings_are_refused(store, dask_client):
    info = refused(
        store, StoreMismatchError, "read with other settings", _new_poses(normalization="head"), client=dask_client
    )
    assert "normalization: store has 'none', the new items 'head'" in str(info.value)
    refused(store, StoreMismatchError, "min_joints", _new_poses(min_joints=3), client=dask_client)


def test_labels_from_another_file_read_the_same_way_are_appended(store, dask_client):
    before = read_manifest(str(store))
    result = append(store, _new_poses(file="more.csv"), client=dask_client, progress=False)
    assert result.generation == 2
    assert read_manifest(str(store))["params"] == before["params"]  # the store's own reading stays recorded


def test_labels_of_another_kind_are_refused(store, dask_client):
    refused(
        store,
        TypeError,
        "PoseDistance needs Poses labels, got Vectors",
        _vectors().subset(slice(0, 5)),
        client=dask_client,
    )


def test_a_dense_store_grown_past_the_dense_limit_is_refused(store, dask_client):
    from dask.utils import format_bytes

    limit = dense_bytes(100) - 1
    info = refused(store, ValueError, "over the dense limit", _new_poses(), dense_limit=limit, client=dask_client)
    assert f"dense limit of {format_bytes(limit)}" in str(info.value) and "100 x 100" in str(info.value)
    assert append(store, _new_poses(), dense_limit=dense_bytes(100), client=dask_client, progress=False).n_new == 30


def test_a_knn_only_store_has_no_dense_limit(dask_client, tmp_path):
    case = make_case("pose", None)
    url = tmp_path / "knn"
    build(case.labels.subset(slice(0, 70)), case.distance, url, case, False, dask_client)
    result = append(url, case.labels.subset(slice(70, 100)), dense_limit=0, client=dask_client, progress=False)
    assert result.generation == 2 and StoreReader(str(url)).n_items == 100


def test_an_incomplete_store_is_refused(dask_client, tmp_path):

    old = _poses().subset(slice(0, 70))
    url = tmp_path / "stores" / "pose"
    manifest = build_manifest(
        dataset="t", kind="pose", params=PoseDistance().params(), labels=old, k=8, dense=True, block_rows=16
    )
    create_store(str(url), manifest, old)  # laid out, no block written: a precompute killed at its start
    info = refused(url, StoreIncompleteError, "not complete", _new_poses(), client=dask_client)
    assert isinstance(info.value, StoreError)


def test_a_missing_store_is_refused(dask_client, tmp_path):
    url = tmp_path / "stores" / "nothing"
    url.parent.mkdir()
    refused(url, StoreError, "no store there", _new_poses(), client=dask_client)
    assert not url.exists()
    deeper = tmp_path / "no" / "such" / "folder"
    with pytest.raises(StoreError, match="no store there"):
        append(deeper, _new_poses(), client=dask_client, progress=False)
    assert not (tmp_path / "no").exists()  # the lock's folders made for the attempt are gone again


def test_no_new_items_are_refused(store, dask_client):
    refused(store, ValueError, "no items to append", _poses().subset(slice(0, 0)), client=dask_client)


# ---------------------------------------------------------------- 6. LabelSet.concat
@pytest.mark.parametrize("name", ["pose", "caption_wmd", "sentence_relevance", "vectors", "layout_miou", "angles"])
def test_concat_of_two_subsets_is_the_subset_of_the_whole(name, request):
    labels = {
        "pose": lambda: _poses().subset(slice(0, 90)),
        "caption_wmd": _captions,
        "sentence_relevance": _sentences,
        "vectors": _vectors,
        "layout_miou": _layouts,
        "angles": lambda: _angles(request.getfixturevalue("angles_plugin")),
    }[name]()
    cut = len(labels) // 2 + 3
    head, tail = labels.subset(slice(0, cut)), labels.subset(slice(cut, len(labels)))
    joined = head.concat(tail)
    assert type(joined) is type(labels)
    assert joined.sha256() == labels.sha256() != head.sha256()
    for key, arr in labels.to_arrays().items():
        np.testing.assert_array_equal(joined.to_arrays()[key], arr)
    np.testing.assert_array_equal(joined.ids, labels.ids)
    if name in ("caption_wmd", "sentence_relevance"):  # each part has words the other lacks: vocabularies merged
        assert set(head.vocab.tolist()) - set(tail.vocab.tolist()) and set(tail.vocab.tolist()) - set(head.vocab)
        np.testing.assert_array_equal(joined.vocab, labels.vocab)


def test_concat_keeps_the_first_sets_provenance():
    head, tail = _captions().subset(slice(0, 10)), _captions().subset(slice(10, 20))
    tail.provenance = {"format": "coco"}
    assert head.concat(tail).provenance == head.provenance and head.provenance["format"] == "karpathy"


def test_concat_refuses_overlapping_ids():
    poses = _poses()
    with pytest.raises(LabelError, match=r"3 item ids are in both sets"):
        poses.subset(slice(0, 10)).concat(poses.subset(slice(7, 20)))
    captions = _captions()
    with pytest.raises(LabelError, match="1 item ids are in both sets"):
        captions.subset(slice(0, 10)).concat(captions.subset(slice(9, 20)))


def test_concat_refuses_other_columns_classes_or_shapes():
    from labeldist.labels.layouts import LayoutMaps
    from labeldist.labels.vectors import Vectors

    a = Vectors(["a", "b"], np.ones((2, 2)), ["x", "y"])
    with pytest.raises(LabelError, match="the labels' columns differ"):
        a.concat(Vectors(["c"], np.ones((1, 2)), ["x", "z"]))
    with pytest.raises(LabelError, match="the labels' values cannot be joined item by item"):
        a.concat(Vectors(["c"], np.ones((1, 3)), ["x", "y", "z"]))
    with pytest.raises(LabelError, match="cannot join Vectors labels with Poses labels"):
        a.concat(_poses().subset(slice(0, 2)))
    maps = np.zeros((1, 8, 8), np.uint8)
    with pytest.raises(LabelError, match="n_classes differ"):
        LayoutMaps(np.array(["m"]), maps, 5).concat(LayoutMaps(np.array(["n"]), maps, 6))
    with pytest.raises(LabelError, match="maps cannot be joined item by item"):
        LayoutMaps(np.array(["m"]), maps).concat(LayoutMaps(np.array(["n"]), np.zeros((1, 8, 9), np.uint8)))


def test_concat_refuses_caption_sets_read_with_other_word_vectors():
    from labeldist.labels.captions import CaptionSets

    head, tail = _captions().subset(slice(0, 20)), _captions().subset(slice(20, 40))
    word = str(np.intersect1d(head.vocab, tail.vocab)[3])
    arrays = tail.to_arrays()
    vectors = arrays["vectors"].copy()
    vectors[np.searchsorted(tail.vocab, word)] += 1e-3
    changed = CaptionSets.from_arrays(tail.ids, {**arrays, "vectors": vectors})
    with pytest.raises(LabelError, match=f"the word {word!r} has another vector in each set"):
        head.concat(changed)
    other_size = CaptionSets.from_arrays(tail.ids, {**arrays, "vectors": np.ones((len(tail.vocab), 3), np.float32)})
    with pytest.raises(LabelError, match="word vectors of 50 and 3 numbers"):
        head.concat(other_size)
    # a word only one set uses may have any vector: nothing to compare it with
    only_tail = str(np.setdiff1d(tail.vocab, head.vocab)[0])
    vectors = arrays["vectors"].copy()
    vectors[np.searchsorted(tail.vocab, only_tail)] += 1e-3
    head.concat(CaptionSets.from_arrays(tail.ids, {**arrays, "vectors": vectors}))


# ---------------------------------------------------------------- 7. merge_topk against the oracle
@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(
    n_old=st.integers(1, 12),
    m=st.integers(1, 12),
    k=st.integers(1, 16),
    levels=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
    prune=st.booleans(),
)
def test_merge_topk_equals_the_top_k_of_the_whole_rows(n_old, m, k, levels, seed, prune):
    """Rows of old items (their own column excluded) over integer-valued float32 distances (ties everywhere): the
    top k of the old columns merged with the new columns is the top k of the whole row, also where the old list
    is padded (fewer than k old columns), and where new entries behind the list's k-th value are ruled out
    (+inf), as an append's lower-bound pruning leaves them."""
    rng = np.random.default_rng(seed)
    full = rng.integers(0, levels, size=(n_old, n_old + m)).astype(np.float32)
    rows = np.arange(n_old)
    old_idx, old_dist = topk_rows(full[:, :n_old], k, exclude=rows)
    extra = full[:, n_old:].copy()
    if prune:  # what the bound rules out: strictly behind the k-th of the old list
        behind = (extra > old_dist[:, -1:]) & (rng.random(extra.shape) < 0.7)
        extra[behind] = np.inf
    got_idx, got_dist = merge_topk(old_idx, old_dist, extra, n_old, k)
    want_idx, want_dist = topk_rows(full, k, exclude=rows)
    assert got_idx.dtype == np.int32 and got_dist.dtype == np.float32
    np.testing.assert_array_equal(got_idx, want_idx)
    np.testing.assert_array_equal(got_dist, want_dist)


def test_a_block_that_computed_no_pair_is_written_and_published(tmp_path):
    """A block of old rows whose new items were all ruled out by the bound computes 0 distances; 0 is
    ``progress/exact_pairs``' fill value, and its chunk must still be written (every chunk of a complete store is
    on disk), or publish would refuse the store as missing a chunk."""
    import os

    from labeldist.engine.blocks import block_kernel
    from labeldist.labels.pose_files import read_mpii_csv
    from labeldist.store import build_manifest, create_store, open_array, publish, write_block

    labels = read_mpii_csv(MPII).subset(slice(0, 40))

    url = str(tmp_path / "s")
    create_store(
        url,
        build_manifest(
            dataset="t", kind="pose", params=PoseDistance().params(), labels=labels, k=3, dense=False, block_rows=20
        ),
        labels,
    )
    for block in (0, 1):
        _, idx, dist = block_kernel(labels, PoseDistance(), 20 * block, 20 * block + 20, 3)
        write_block(url, 20 * block, idx, dist, None, block, 0)
    assert sorted(os.listdir(tmp_path / "s" / "progress" / "exact_pairs" / "c")) == ["0", "1"]
    assert publish(url)["complete"] is True
    assert open_array(url, "progress/exact_pairs", "r")[:].tolist() == [0, 0]
