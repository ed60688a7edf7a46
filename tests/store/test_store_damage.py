"""Damage to a store on disk is refused, never served as data.

Each case damages a copy of a small real store the way the adversarial run did (a chunk file deleted, a bit
flipped, bytes replaced by invalid UTF-8) and checks three readers: ``labeldist verify`` names the array and the
rows and exits 1 without a traceback; :class:`StoreReader` raises StoreCorruptError; the service (the real app,
in-process) answers 503 naming the damage on every route that would read it, never 200 with null, an empty list
or random items, and never 500.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from labeldist.api.main import create_app
from labeldist.distances.caption_sets import CaptionSetWMD
from labeldist.distances.pose import PoseDistance
from labeldist.labels.captions import read_captions
from labeldist.store import (
    StoreCorruptError,
    StoreReader,
    store_arrays,
)
from tests.api.api_helpers import make_settings
from tests.conftest import DATA, flip_bit, vlen_utf8_chunk, write_store
from tests.conftest import ROOT as REPO

ROWS = 16


def _build(url: Path, labels, distance, *, k: int, dense: bool) -> Path:
    return write_store(url, labels, distance, dataset="t", k=k, dense=dense, block_rows=ROWS)


@pytest.fixture(scope="module")
def clean(tmp_path_factory, mpii_poses) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("clean")
    captions = read_captions(DATA / "coco" / "coco_karpathy_test.json").subset(slice(0, 40))
    return {
        "pose": _build(root / "pose", mpii_poses.subset(slice(0, 64)), PoseDistance(), k=8, dense=True),
        "caption": _build(root / "caption", captions, CaptionSetWMD(), k=6, dense=False),
    }


def _copy(src: Path, tmp_path: Path, name: str = "hit") -> Path:
    dst = tmp_path / "stores" / name
    shutil.copytree(src, dst)
    return dst


def _verify(store: Path) -> tuple[int, dict, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "labeldist.cli", "verify", str(store), "--sample", "10"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, (json.loads(proc.stdout) if proc.stdout.strip() else {}), proc.stderr


def _client(store: Path) -> TestClient:
    return TestClient(create_app(make_settings(stores=store.parent)), raise_server_exceptions=False)


def _refused(r, *words: str) -> None:
    assert r.status_code == 503, (r.status_code, r.text)
    detail = r.json()["detail"]
    assert isinstance(detail, str) and all(w in detail for w in words), detail


# ---------------------------------------------------------------- every array carries a checksum
def test_every_array_of_a_new_store_carries_a_checksum_and_every_chunk_is_on_disk(clean) -> None:
    from labeldist.store import has_checksums, missing_chunks

    for store in clean.values():
        arrays = dict(store_arrays(str(store)))
        assert {"ids", "knn/indices", "progress/blocks", "progress/exact_pairs"} <= set(arrays)
        assert any(p.startswith("labels/") for p in arrays)
        for path, array in arrays.items():
            assert has_checksums(array), path
            assert missing_chunks(array) == [], path
    assert "labels/vocab" in dict(store_arrays(str(clean["caption"])))


# ---------------------------------------------------------------- a dense shard deleted
def test_a_deleted_dense_shard_is_named_by_verify_and_refused_by_the_api(clean, tmp_path) -> None:
    hit = _copy(clean["pose"], tmp_path)
    (hit / "dense" / "distances" / "c" / "2" / "0").unlink()  # rows 32:48
    code, report, _ = _verify(hit)
    assert code == 1 and report["ok"] is False
    assert [(d["array"], d["rows"]) for d in report["damaged"]] == [("dense/distances", [32, 48])]
    assert "missing" in report["damaged"][0]["error"]
    with pytest.raises(StoreCorruptError, match=r"dense/distances rows 32:48.*missing"):
        StoreReader(str(hit)).dense_rows(40, 41)
    with _client(hit) as client:
        _refused(client.post("/v1/stores/hit/distances", json={"anchor": 40, "items": [1, 2, 3]}), "missing")
        _refused(client.post("/v1/stores/hit/batches", json={"anchors": [40], "size": 5, "pairwise": True}))
        ok = client.post("/v1/stores/hit/distances", json={"anchor": 1, "items": [2, 3]})
        assert ok.status_code == 200 and None not in ok.json()["distances"]


# ---------------------------------------------------------------- a chunk of knn/indices deleted
@pytest.mark.parametrize("kind", ["pose", "caption"])
def test_a_deleted_knn_chunk_is_named_by_verify_and_the_store_is_not_served(clean, tmp_path, kind) -> None:
    hit = _copy(clean[kind], tmp_path)
    (hit / "knn" / "indices" / "c" / "1" / "0").unlink()  # rows 16:32
    code, report, _ = _verify(hit)
    assert code == 1
    assert [(d["array"], d["rows"]) for d in report["damaged"]] == [("knn/indices", [16, 32])]
    with pytest.raises(StoreCorruptError, match="knn/indices rows 16:32"):
        StoreReader(str(hit)).knn()
    with _client(hit) as client:
        # neither an empty neighbour list nor random items in the place of neighbours
        _refused(client.get("/v1/stores/hit/items/20/neighbors"), "knn/indices", "missing")
        _refused(client.post("/v1/stores/hit/batches", json={"anchors": [20], "size": 5, "neighbors": 3}))
        listed = client.get("/v1/stores").json()["stores"]
        assert [s["available"] for s in listed] == [False]


# ---------------------------------------------------------------- ids and vocab: a flipped bit
def test_a_flipped_bit_in_ids_is_found_not_served_as_another_id(clean, tmp_path) -> None:
    hit = _copy(clean["caption"], tmp_path)
    flip_bit(hit / "ids" / "c" / "0")
    code, report, _ = _verify(hit)
    assert code == 1 and [d["array"] for d in report["damaged"]] == ["ids"]
    with pytest.raises(StoreCorruptError, match="ids"):
        StoreReader(str(hit)).ids  # noqa: B018
    with _client(hit) as client:
        _refused(client.get("/v1/stores/hit/items/5/neighbors"), "ids")


@pytest.mark.parametrize("array", ["labels/vocab", "labels/vectors"])
@pytest.mark.parametrize("at", [0.2, 0.5, 0.9])
def test_a_flipped_bit_in_the_labels_is_found_and_refused_with_503(clean, tmp_path, array, at) -> None:
    hit = _copy(clean["caption"], tmp_path)
    (chunk,) = [p for p in (hit / array / "c").rglob("*") if p.is_file()]
    flip_bit(chunk, at)
    code, report, _ = _verify(hit)
    assert code == 1 and [d["array"] for d in report["damaged"]] == [array]
    with _client(hit) as client:
        # the kNN lists are whole and still served; what needs the labels is refused
        assert client.get("/v1/stores/hit/items/0/neighbors").status_code == 200
        _refused(client.post("/v1/stores/hit/distances", json={"anchor": 0, "items": [30, 31]}), array)
        _refused(client.post("/v1/stores/hit/batches", json={"anchors": [0], "size": 8, "pairwise": True}), array)
        _refused(client.get("/v1/stores/hit/items/3/label"), array)


def test_invalid_utf8_in_the_vocab_is_named_by_verify_and_refused(clean, tmp_path) -> None:
    """Bytes that pass the checksum but are not UTF-8 (a chunk rewritten by something other than labeldist)."""
    hit = _copy(clean["caption"], tmp_path)
    words = [w.encode() for w in StoreReader(str(hit)).label_arrays()["vocab"].tolist()]
    chunk = hit / "labels" / "vocab" / "c" / "0"
    assert chunk.read_bytes() == vlen_utf8_chunk(words), "the chunk layout assumed here is the store's"
    words[3] = b"\x9a" + words[3][1:]  # a continuation byte with no lead byte
    chunk.write_bytes(vlen_utf8_chunk(words))
    code, report, _ = _verify(hit)
    assert code == 1 and [d["array"] for d in report["damaged"]] == ["labels/vocab"]
    assert "decode" in report["damaged"][0]["error"]
    with _client(hit) as client:
        _refused(client.post("/v1/stores/hit/distances", json={"anchor": 0, "items": [30]}), "labels/vocab")


# ---------------------------------------------------------------- metadata: an array's zarr.json, the manifest
def test_a_deleted_array_metadata_is_named_by_verify_and_refused(clean, tmp_path) -> None:
    """Zarr no longer sees an array whose zarr.json is gone: the chunk scan cannot find it, the labels can."""
    hit = _copy(clean["caption"], tmp_path)
    (hit / "labels" / "vocab" / "zarr.json").unlink()
    code, report, _ = _verify(hit)
    assert code == 1 and [d["array"] for d in report["damaged"]] == ["labels"]
    assert "vocab" in report["damaged"][0]["error"]
    with _client(hit) as client:
        _refused(client.post("/v1/stores/hit/distances", json={"anchor": 0, "items": [30]}), "labels")
        # the texts of a label view do not need the vocabulary: served, and the same as the whole store's
        view = client.get("/v1/stores/hit/items/3/label")
    with _client(clean["caption"]) as whole:
        assert view.json() == whole.get(f"/v1/stores/{clean['caption'].name}/items/3/label").json()


def test_a_garbled_manifest_is_refused_and_the_other_stores_still_served(clean, tmp_path) -> None:
    hit = _copy(clean["caption"], tmp_path)
    _copy(clean["pose"], tmp_path, "whole")
    meta = hit / "zarr.json"
    meta.write_bytes(meta.read_bytes()[:100])  # cut short: not JSON
    code, _report, stderr = _verify(hit)
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and str(hit) in stderr and "zarr.json" in stderr
    with _client(hit) as client:
        _refused(client.get("/v1/stores/hit/items/1/neighbors"), "zarr.json")
        listed = {s["name"]: s["available"] for s in client.get("/v1/stores").json()["stores"]}
        assert listed == {"hit": False, "whole": True}
        assert client.get("/v1/stores/whole/items/1/neighbors").status_code == 200
    # and precompute refuses to write over it rather than taking it for an empty folder
    from labeldist.store import StoreCorruptError as Corrupt
    from labeldist.store import read_manifest

    with pytest.raises(Corrupt, match="zarr.json"):
        read_manifest(str(hit))
