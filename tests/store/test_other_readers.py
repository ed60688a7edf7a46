"""A store opens in any Zarr v3 reader: every array carries ``dimension_names``, so that
``xarray.open_zarr(store, group=...)`` opens every group of a store of each built-in kind; what xarray and
zarr-python read equals ``labeldist export``'s table (the lists), ``StoreReader`` (the dense matrix) and the label
arrays the store was made from (``LabelSet.to_arrays``). The snippet of docs/store-format.md, "Reading a store
without labeldist", is run as written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from labeldist.distances.caption_sets import CaptionSetWMD
from labeldist.distances.layout import LayoutMIoU
from labeldist.distances.pose import PoseDistance
from labeldist.distances.sts import SentenceRelevance
from labeldist.distances.vectors import VectorDistance
from labeldist.engine.export import export_neighbors
from labeldist.labels.base import LabelSet
from labeldist.labels.captions import read_karpathy_captions
from labeldist.labels.layouts import LayoutMaps
from labeldist.labels.pose_files import read_mpii_csv
from labeldist.labels.sentences import sentences_from_texts
from tests.api.api_helpers import MPII_CSV, REPO
from tests.api.test_api_item_labels import SENTENCES
from tests.conftest import write_store

K = 5


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, LabelSet]]:
    """One store of each built-in kind (pose and vectors dense), with the labels each was made from."""
    root = tmp_path_factory.mktemp("other-readers")
    rng = np.random.default_rng(5)
    data = json.loads((REPO / "data" / "coco" / "coco_karpathy_test.json").read_text())[:14]
    (root / "coco.json").write_text(json.dumps(data))
    from labeldist.labels.vectors import Vectors

    kinds = {
        "pose": (read_mpii_csv(MPII_CSV).subset(slice(0, 40)), PoseDistance(), True),
        "vectors": (
            Vectors([f"v{i}" for i in range(30)], rng.normal(size=(30, 3)), ["a", "b", "c"]),
            VectorDistance("euclidean"),
            True,
        ),
        "captions": (read_karpathy_captions(root / "coco.json"), CaptionSetWMD(), False),
        "sentences": (
            sentences_from_texts([f"s{i}" for i in range(len(SENTENCES))], SENTENCES),
            SentenceRelevance("cbow"),
            False,
        ),
        "layout": (
            LayoutMaps(np.array([f"m{i}" for i in range(12)]), rng.integers(0, 6, size=(12, 6, 5)).astype(np.uint8)),
            LayoutMIoU(),
            False,
        ),
    }
    out = {}
    for name, (labels, distance, dense) in kinds.items():
        path = write_store(root / name, labels, distance, dataset=name, k=K, dense=dense, block_rows=16)
        out[name] = (path, labels)
    return out


def strings(values: np.ndarray) -> list[str]:
    """Strings as Python strs, whichever NumPy string type a reader answers (xarray: ``StringDType``)."""
    return [str(v) for v in values.tolist()]


KINDS = ["pose", "vectors", "captions", "sentences", "layout"]


def all_arrays(group: zarr.Group, prefix: str = "") -> dict[str, zarr.Array]:
    arrays = {}
    for name, member in group.members():
        if isinstance(member, zarr.Array):
            arrays[prefix + name] = member
        else:
            arrays.update(all_arrays(member, f"{prefix}{name}/"))
    return arrays


@pytest.mark.parametrize("kind", KINDS)
def test_every_array_names_its_dimensions(built, kind: str) -> None:
    path, _ = built[kind]
    arrays = all_arrays(zarr.open_group(str(path), mode="r"))
    assert {"ids", "knn/indices", "knn/distances", "progress/blocks"} <= set(arrays)
    for name, array in arrays.items():
        names = array.metadata.dimension_names
        assert names is not None and len(names) == array.ndim and all(names), name


@pytest.mark.parametrize("kind", KINDS)
def test_xarray_opens_every_group(built, kind: str) -> None:
    path, labels = built[kind]
    root = zarr.open_group(str(path), mode="r")
    groups = [""] + [name for name, member in root.members() if isinstance(member, zarr.Group)]
    assert {"knn", "labels", "progress"} <= set(groups)
    for group in groups:
        ds = xr.open_zarr(str(path), group=group or None, consolidated=False, mask_and_scale=False)
        stored = {name: a for name, a in root[group].members() if isinstance(a, zarr.Array)} if group else {}
        if not group:
            stored = {"ids": root["ids"]}
        assert set(ds.data_vars) == set(stored), group
        for name, array in stored.items():
            assert ds[name].dims == tuple(array.metadata.dimension_names)
            assert np.array_equal(ds[name].values, array[...]), (group, name)
    # the labels group, read by xarray, holds the arrays the store was made from
    ds = xr.open_zarr(str(path), group="labels", consolidated=False, mask_and_scale=False)
    made = labels.to_arrays()
    assert set(ds.data_vars) == set(made)
    for name, arr in made.items():
        arr = np.asarray(arr)
        got = ds[name].values
        if arr.dtype.kind in "UO":
            assert strings(got) == strings(arr), name
        else:
            assert got.dtype == arr.dtype and np.array_equal(got, arr), name
    assert strings(xr.open_zarr(str(path), consolidated=False)["ids"].values) == labels.ids.tolist()


@pytest.mark.parametrize("kind", KINDS)
def test_xarray_lists_equal_the_export(built, kind: str, tmp_path: Path) -> None:
    path, _ = built[kind]
    export_neighbors(str(path), str(tmp_path / "t.parquet"), progress=False)
    table = pd.read_parquet(tmp_path / "t.parquet")
    knn = xr.open_zarr(str(path), group="knn", consolidated=False, mask_and_scale=False)
    ids = np.array(strings(xr.open_zarr(str(path), consolidated=False)["ids"].values))
    indices, distances = knn["indices"].values, knn["distances"].values
    assert knn["indices"].dims == ("item", "rank") and indices.dtype == np.int32
    item, rank = np.nonzero(indices >= 0)
    assert np.array_equal(table["item_index"], item) and np.array_equal(table["rank"], rank + 1)
    assert np.array_equal(table["neighbor_index"], indices[item, rank])
    assert np.array_equal(table["distance"].to_numpy(), distances[item, rank])
    assert table["neighbor_id"].tolist() == ids[indices[item, rank]].tolist()


def test_dense_group_reads_as_the_store_reader(built) -> None:
    from labeldist.store import StoreReader

    path, _ = built["pose"]
    dense = xr.open_zarr(str(path), group="dense", consolidated=False)["distances"]
    assert dense.dims == ("item", "other_item")
    assert np.array_equal(dense.values, StoreReader(str(path)).dense_rows(0, 40))


def doc_block(heading: str) -> str:
    text = (REPO / "docs" / "store-format.md").read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_documented_snippet_runs(built, capsys) -> None:
    path, _ = built["captions"]
    code = doc_block("Reading a store without labeldist").replace('"stores/coco-captions"', repr(str(path)))
    assert repr(str(path)) in code
    exec(compile(code, "store-format.md", "exec"), {})
    out = capsys.readouterr().out
    assert strings(zarr.open_group(str(path), mode="r")["ids"][:])[0] in out
