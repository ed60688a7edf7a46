"""The ``vectors`` kind (issue 12): numeric labels from .npy, .csv and .parquet, every scipy metric; a store of it
(real Dask cluster) equals scipy's brute force, kNN lists and dense matrix, and bad files are refused, naming the
row and column, with nothing written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from labeldist.cli import main
from labeldist.distances.vectors import METRICS, VectorDistance
from labeldist.engine import precompute
from labeldist.labels.base import LabelError
from labeldist.labels.vectors import Vectors, read_vectors
from labeldist.store import StoreReader
from tests.conftest import check_store

N, D, K = 157, 6, 12


def labels(seed: int = 0) -> Vectors:
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(N, D))
    values[7] = values[3]  # a duplicate: distance 0, where the matrix-product form cancels
    values[9] = values[3] + 1e-9  # nearly one
    return Vectors(np.array([f"item{i}" for i in range(N)]), values)


@pytest.mark.parametrize("metric", METRICS)
def test_a_store_equals_scipy_brute_force(metric: str, tmp_path: Path, dask_client) -> None:
    vectors = labels()
    out = tmp_path / metric
    precompute(vectors, VectorDistance(metric), out, dataset="v", k=K, block_rows=50, client=dask_client)
    assert check_store(out).strip().endswith(": ok")
    reader = StoreReader(str(out))
    brute = cdist(vectors.values, vectors.values, metric)
    np.testing.assert_allclose(reader.dense_rows(0, N), brute.astype(np.float32), rtol=2e-7, atol=1e-12)
    indices, distances = reader.knn()
    for i in range(N):
        others = np.delete(np.arange(N), i)
        expected = np.sort(brute[i, others])[:K].astype(np.float32)
        np.testing.assert_allclose(distances[i], expected, rtol=2e-7, atol=1e-12)
        # the same items, up to the order of exact ties
        assert np.allclose(brute[i, indices[i]], brute[i, indices[i]].clip(max=expected[-1] * (1 + 1e-6)))
    assert reader.labels().values.tolist() == vectors.values.tolist()


@pytest.mark.parametrize("metric", METRICS)
def test_the_kernel_equals_the_reference_formula(metric: str) -> None:
    vectors, distance = labels(1), VectorDistance(metric)
    block = distance.block(vectors.subset(slice(0, 20)), vectors)
    for i in range(0, 20, 3):
        for j in range(0, N, 11):
            assert block[i, j] == pytest.approx(distance.reference(vectors, i, vectors, j), rel=1e-9, abs=1e-12)
    i, j = np.arange(20), np.arange(20, 40)
    np.testing.assert_allclose(distance.pairs(vectors, i, j), block[i, j], rtol=1e-9, atol=1e-12)


def test_csv_parquet_and_npy_give_the_same_labels(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    values = np.random.default_rng(2).normal(size=(5, 3))
    np.save(tmp_path / "x.npy", values)
    lines = ["id,age,height,weight"] + [
        f"p{i}," + ",".join(repr(float(v)) for v in row) for i, row in enumerate(values)
    ]
    (tmp_path / "x.csv").write_text("\n".join(lines) + "\n")
    pq.write_table(pa.table({"id": [f"p{i}" for i in range(5)], "age": values[:, 0], "height": values[:, 1],
                             "weight": values[:, 2]}), tmp_path / "x.parquet")  # fmt: skip
    npy, table, parquet = (read_vectors(tmp_path / f"x.{s}") for s in ("npy", "csv", "parquet"))
    assert npy.ids.tolist() == ["0", "1", "2", "3", "4"]  # row numbers
    assert table.ids.tolist() == parquet.ids.tolist() == [f"p{i}" for i in range(5)]  # the id column
    assert table.columns == parquet.columns == ["age", "height", "weight"]
    for got in (npy, table, parquet):
        assert got.values.tolist() == values.tolist()
    ages = read_vectors(tmp_path / "x.csv", columns=["age"])
    assert ages.values.shape == (5, 1)
    np.save(tmp_path / "ages.npy", values[:, 0])  # N numbers: scalar labels
    assert read_vectors(tmp_path / "ages.npy").values.shape == (5, 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id,a,b\nx,1,2\ny,nan,3\n", "line 3, column 'a': 'nan' is not a finite number"),
        ("id,a,b\nx,1,2\ny,tall,3\n", "line 3, column 'a': 'tall' is not a number"),
        ("id,a,b\nx,1,2\ny,3\n", "line 3: 2 fields where the header has 3"),
        ("id,a\nx,1\nx,2\n", "duplicate item ids"),
        ("id,a\n", "a header and no rows"),
    ],
)
def test_bad_csv_is_refused_naming_the_place_and_nothing_is_written(text: str, message: str, tmp_path: Path,
                                                                     capsys) -> None:  # fmt: skip
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(LabelError, match=message):
        read_vectors(path)
    out = tmp_path / "store"
    assert main(["precompute", "vectors", str(path), "--k", "1", "--out", str(out), "--no-progress"]) != 0
    assert message.split(":")[0] in capsys.readouterr().err
    assert not out.exists()


def test_bad_npy_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "nan.npy", np.array([[1.0, np.nan], [2.0, 3.0]]))
    with pytest.raises(LabelError, match="row 0 .*column 1: nan is not a finite number"):
        read_vectors(tmp_path / "nan.npy")
    np.save(tmp_path / "text.npy", np.array(["a", "b"]))
    with pytest.raises(LabelError, match="not numeric"):
        read_vectors(tmp_path / "text.npy")
    np.save(tmp_path / "cube.npy", np.zeros((2, 2, 2)))
    with pytest.raises(LabelError, match="give N values or an N x D array"):
        read_vectors(tmp_path / "cube.npy")


def test_the_command_makes_a_store_with_row_number_ids(tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "ages.npy", np.array([20.0, 21.0, 35.0, 36.0, 60.0]))
    out = tmp_path / "ages"
    assert main(["precompute", "vectors", str(tmp_path / "ages.npy"), "--metric", "cityblock", "--k", "2", "--out",
                 str(out), "--workers", "1", "--no-progress"]) == 0  # fmt: skip
    reader = StoreReader(str(out))
    assert reader.manifest["kind"] == "vectors" and reader.manifest["params"]["metric"] == "cityblock"
    indices, distances = reader.knn()
    assert indices[0].tolist() == [1, 2] and distances[0].tolist() == [1.0, 15.0]
    assert list(reader.ids) == ["0", "1", "2", "3", "4"]
