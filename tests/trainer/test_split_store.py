"""``trainer split STORE --out DIR``: a store of any kind split into a train store and a test store whose items
partition the store's, each holding exactly the store's distances among its items (a dense store's copied out of
its matrix, bit for bit; a kNN-only store's precomputed from the labels) and the exact kNN lists of those, checked
against an independent computation from the store's dense matrix, then by ``labeldist verify`` and the store
contract's checker."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from labeldist.client import LocalSource
from labeldist.distances.pose import PoseDistance
from labeldist.distances.vectors import VectorDistance
from labeldist.engine.split import SplitError, split_indices, split_store
from labeldist.engine.verify import verify_store
from labeldist.labels.vectors import Vectors
from labeldist.store import StoreReader, build_manifest, create_store, exact_pairs_total
from labeldist.trainer.cli import main
from labeldist.view.stored import stored_distance, stored_labels
from tests.conftest import check_store, write_store
from tests.trainer.conftest import STORE


def top_k(rows: np.ndarray, k: int, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k smallest, the item itself left out, ties by index: a stable argsort (the oracle of knn.py)."""
    d = rows.astype(np.float64)
    d[np.arange(len(d)), first + np.arange(len(d))] = np.inf
    order = np.argsort(d, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(rows, order, axis=1)


def check_parts(source: Path, out: Path, split: dict, matrix: np.ndarray) -> None:
    """The parts hold the source's items of the split, in order, with its labels, kind and parameters, the
    sub-matrices of ``matrix`` (the source's distances: stored, or from its labels) and their exact kNN lists."""
    original = StoreReader(str(source))
    ids, labels = original.ids, stored_labels(original).to_arrays()
    shared = type(stored_labels(original)).shared_arrays  # arrays of the whole set (a column list), not one row an item
    parts = {name: StoreReader(str(out / name)) for name in ("train", "test")}
    assert sorted(split["train"] + split["test"]) == list(range(original.n_items))
    assert not set(parts["train"].ids) & set(parts["test"].ids)
    for name, part in parts.items():
        items = np.asarray(split[name])
        np.testing.assert_array_equal(part.ids, ids[items])
        for key, value in stored_labels(part).to_arrays().items():
            np.testing.assert_array_equal(value, labels[key] if key in shared else labels[key][items], err_msg=key)
        for key in ("kind", "params", "labels_type"):
            assert part.manifest[key] == original.manifest[key], key
        assert part.manifest["dataset"] == f"{original.manifest['dataset']}-{name}"
        sub = matrix[np.ix_(items, items)]
        k = min(original.k, len(items) - 1)
        assert part.k == k
        indices, distances = part.knn()
        want_indices, want_distances = top_k(sub, k)
        np.testing.assert_array_equal(indices, want_indices)
        assert distances.tobytes() == want_distances.tobytes()  # float32, bit for bit
        if original.has_dense:
            dense = part.dense_rows(0, part.n_items)
            assert dense.dtype == np.float32 and dense.tobytes() == sub.tobytes()
        report = verify_store(str(out / name))
        assert report["ok"], report["problems"]
        check_store(out / name)


def test_a_dense_store_splits_into_two_stores_holding_its_sub_matrices(
    pose_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, out = pose_store / STORE, tmp_path / "split"
    assert main(["split", str(source), "--out", str(out), "--seed", "3", "--test-fraction", "0.25"]) == 0
    printed = capsys.readouterr().out.splitlines()
    split = json.loads((out / "split.json").read_text())
    assert printed[0] == f"split {source}: 300 items, seed 3"
    assert printed[1].split() == ["train", f"{len(split['train'])}", "items", "store", str(out / "train")]
    assert printed[2].split()[:5] == ["test", f"{len(split['test'])}", "items", "store", str(out / "test")]
    assert {k: split[k] for k in ("train", "test", "queries", "gallery")} == split_indices(
        300, test_fraction=0.25, query_fraction=0.2, seed=3
    )
    assert split["kind"] == "pose" and split["stores"] == {"train": str(out / "train"), "test": str(out / "test")}
    original = StoreReader(str(source))
    check_parts(source, out, split, np.asarray(original.dense_rows(0, 300), dtype=np.float32))
    assert exact_pairs_total(str(out / "train")) == exact_pairs_total(str(out / "test")) == 0  # nothing computed
    # the parts serve as any store: minibatches of the train store hold train items only
    got = LocalSource(out).batches("train", count=4, size=50, neighbors=5, seed=0)
    assert got.members.max() < len(split["train"])


def test_a_rerun_keeps_the_parts_and_another_split_needs_overwrite(
    pose_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, out = pose_store / STORE, tmp_path / "split"
    assert main(["split", str(source), "--out", str(out)]) == 0
    stamp = {p: os.stat(out / p / "zarr.json").st_mtime_ns for p in ("train", "test")}
    assert main(["split", str(source), "--out", str(out)]) == 0  # the same split: both parts kept as they are
    assert {p: os.stat(out / p / "zarr.json").st_mtime_ns for p in ("train", "test")} == stamp
    capsys.readouterr()
    assert main(["split", str(source), "--out", str(out), "--seed", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err == (  # refused before any part is built: split.json says which split is there
        f"trainer split: {out / 'split.json'}: exists with other contents (another split); give --overwrite to "
        "replace it"
    )
    (out / "split.json").unlink()  # without it, the parts themselves refuse
    assert main(["split", str(source), "--out", str(out), "--seed", "1"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"trainer split: {out / 'train'}: another store is already there (the labels differ): another "
        "split, or another source; choose another --out or pass --overwrite"
    )
    assert main(["split", str(source), "--out", str(out), "--seed", "1", "--overwrite"]) == 0
    split = json.loads((out / "split.json").read_text())
    assert split["seed"] == 1
    check_parts(source, out, split, np.asarray(StoreReader(str(source)).dense_rows(0, 300), dtype=np.float32))


def test_a_vectors_store_with_blocks_unlike_its_parts(tmp_path: Path) -> None:
    """Another kind, and row blocks (32) that the parts' items cut anywhere: each part's blocks stay whole."""
    values = np.random.default_rng(0).normal(size=(150, 3)).astype(np.float32)
    values[7] = values[8]  # a tie, broken by index
    labels = Vectors([f"v{i}" for i in range(150)], values)
    source = write_store(
        tmp_path / "vectors", labels, VectorDistance("euclidean"), dataset="vec", k=8, dense=True, block_rows=32
    )
    split = split_store(source, tmp_path / "out", test_fraction=0.3, seed=2)
    matrix = np.asarray(StoreReader(str(source)).dense_rows(0, 150), dtype=np.float32)
    check_parts(source, tmp_path / "out", split, matrix)


def test_a_knn_only_store_splits_into_parts_precomputed_from_its_labels(
    tmp_path: Path, mpii_poses, dask_client
) -> None:
    """A kNN-only store holds no matrix to copy: its parts are precomputed, and every distance they hold is the one
    the store answers for that pair (stored, or computed from its labels)."""
    source = write_store(
        tmp_path / "knn",
        mpii_poses.subset(slice(0, 160)),
        PoseDistance(),
        dataset="mpii160",
        k=10,
        dense=False,
        block_rows=64,
    )
    split = split_store(source, tmp_path / "out", test_fraction=0.25, seed=4, client=dask_client, progress=False)
    original = StoreReader(str(source))
    labels = stored_labels(original)
    matrix = stored_distance(original).block(labels, labels).astype(np.float32)  # every pair, from the labels
    check_parts(source, tmp_path / "out", split, matrix)
    answers = LocalSource()
    for name in ("train", "test"):
        items = np.asarray(split[name])
        indices, distances = StoreReader(str(tmp_path / "out" / name)).knn()
        pairs = np.stack([np.repeat(items, indices.shape[1]), items[indices.ravel()]], axis=1)
        assert answers.pair_distances(str(source), pairs).tobytes() == distances.ravel().tobytes()


def test_what_cannot_be_split_is_refused_in_one_line(
    tmp_path: Path, mpii_poses, capsys: pytest.CaptureFixture[str]
) -> None:
    labels = mpii_poses.subset(slice(0, 20))
    manifest = build_manifest(
        dataset="x", kind="pose", params=PoseDistance().params(), labels=labels, k=5, dense=True, block_rows=10
    )
    create_store(str(tmp_path / "unfinished"), manifest, labels)  # laid out, never computed
    for args, expected in (
        ([str(tmp_path / "unfinished")], "store is not complete"),
        ([str(tmp_path / "vectors.npy")], "build its store first (labeldist precompute KIND FILE --out STORE)"),
    ):
        assert main(["split", *args, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith(f"trainer split: {args[0]}") and expected in err, err
    write_store(
        tmp_path / "tiny", labels.subset(slice(0, 4)), PoseDistance(), dataset="t", k=2, dense=True, block_rows=10
    )
    with pytest.raises(SplitError, match="4 items are too few"):
        split_store(tmp_path / "tiny", tmp_path / "tiny-out")
    write_store(
        tmp_path / "ten", labels.subset(slice(0, 10)), PoseDistance(), dataset="t", k=2, dense=True, block_rows=10
    )
    with pytest.raises(SplitError, match="10 items leave 1 for the train store at test_fraction=0.9; a store needs"):
        split_store(tmp_path / "ten", tmp_path / "ten-out", test_fraction=0.9)
    assert not (tmp_path / "tiny-out").exists() and not (tmp_path / "ten-out").exists()  # nothing written


def test_labeldist_split_is_trainer_split_and_needs_no_torch(
    pose_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``labeldist split`` and its alias ``trainer split`` make the same split and the same parts; the command's
    module imports no torch (checked in a fresh interpreter), so an engine-only install can split."""
    import subprocess
    import sys

    from labeldist.cli import main as labeldist_main

    source = pose_store / STORE
    assert labeldist_main(["split", str(source), "--out", str(tmp_path / "a"), "--seed", "5"]) == 0
    assert main(["split", str(source), "--out", str(tmp_path / "b"), "--seed", "5"]) == 0
    capsys.readouterr()
    a, b = (json.loads((tmp_path / name / "split.json").read_text()) for name in ("a", "b"))
    for key in ("train", "test", "queries", "gallery", "kind", "seed"):
        assert a[key] == b[key], key
    for part in ("train", "test"):
        first, second = StoreReader(str(tmp_path / "a" / part)), StoreReader(str(tmp_path / "b" / part))
        np.testing.assert_array_equal(first.ids, second.ids)
        assert first.dense_rows(0, first.n_items).tobytes() == second.dense_rows(0, second.n_items).tobytes()
    assert labeldist_main(["split", str(tmp_path / "none"), "--out", str(tmp_path / "c")]) == 2
    assert capsys.readouterr().err.startswith("labeldist split: ")
    code = "import sys, labeldist.engine.split, labeldist.cli, labeldist.trainer; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_split_never_replaces_its_own_input_nor_writes_through_split_json(
    pose_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fifth adversarial run: ``cp -r st/va sp/train; labeldist split sp/train --out sp --overwrite`` replaced
    its input with its train part, then failed: 66 of 330 items gone. A link at ``OUT/split.json`` was followed, a
    FIFO there hung the command."""
    import shutil

    source = tmp_path / "sp" / "train"
    shutil.copytree(pose_store / STORE, source)
    before = {p.name: p.stat().st_mtime_ns for p in source.rglob("*")}
    assert main(["split", str(source), "--out", str(tmp_path / "sp"), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"trainer split: {source}: that is the store being split ({source}, a labeldist store); a command never "
        "writes over its own input: write it elsewhere"
    )
    assert {p.name: p.stat().st_mtime_ns for p in source.rglob("*")} == before
    victim, out = tmp_path / "victim.txt", tmp_path / "out"
    victim.write_text("precious\n")
    out.mkdir()
    (out / "split.json").symlink_to(victim)
    assert main(["split", str(pose_store / STORE), "--out", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip()
    assert "split.json: a symbolic link; --overwrite replaces regular files only" in err, err
    assert victim.read_text() == "precious\n"
    (out / "split.json").unlink()
    os.mkfifo(out / "split.json")
    assert main(["split", str(pose_store / STORE), "--out", str(out)]) == 2
    assert "split.json: exists with other contents" in capsys.readouterr().err
