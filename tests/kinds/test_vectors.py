"""The ``vectors`` kind: numeric labels from .npy, .csv and .parquet, every scipy metric; a store of it
(real Dask cluster) equals scipy's brute force, kNN lists and dense matrix, and bad files are refused, naming the
row and column, with nothing written."""

from __future__ import annotations

import re
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
from labeldist.view.stored import stored_labels
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
    assert stored_labels(reader).values.tolist() == vectors.values.tolist()


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
    pq.write_table(
        pa.table(
            {"id": [f"p{i}" for i in range(5)], "age": values[:, 0], "height": values[:, 1], "weight": values[:, 2]}
        ),
        tmp_path / "x.parquet",
    )
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
        ("id,a\nx,1\nx,2\n", "line 3: duplicate item id .x. \\(first at line 2\\)"),
        ("id,a\n", "a header and no rows"),
    ],
)
def test_bad_csv_is_refused_naming_the_place_and_nothing_is_written(
    text: str, message: str, tmp_path: Path, capsys
) -> None:
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
    with pytest.raises(LabelError, match=r"nan\.npy: row 0 .*column .1.: nan is not a finite number"):
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
    assert (
        main(
            [
                "precompute",
                "vectors",
                str(tmp_path / "ages.npy"),
                "--metric",
                "cityblock",
                "--k",
                "2",
                "--out",
                str(out),
                "--workers",
                "1",
                "--no-progress",
            ]
        )
        == 0
    )
    reader = StoreReader(str(out))
    assert reader.manifest["kind"] == "vectors" and reader.manifest["params"]["metric"] == "cityblock"
    indices, distances = reader.knn()
    assert indices[0].tolist() == [1, 2] and distances[0].tolist() == [1.0, 15.0]
    assert list(reader.ids) == ["0", "1", "2", "3", "4"]


# ---------------------------------------------------------------- wrong labels stored, errors naming nothing
def refused(path: Path, tmp_path: Path, capsys, *options: str) -> str:
    """Run ``precompute vectors`` on ``path``: it must fail with one line (no traceback) and write nothing;
    returns that line."""
    out = tmp_path / "store"
    code = main(
        ["precompute", "vectors", str(path), "--k", "1", "--out", str(out), "--workers", "1", "--no-progress", *options]
    )
    err = capsys.readouterr().err.strip()
    assert code != 0, err
    assert not out.exists(), "something was written to --out"
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("labeldist: error: ") and str(path) in err, err
    return err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # a repeated column name: the first 'a' was stored twice and the second dropped, and verify said ok
        ("a,a,b\n1,100,5\n2,200,6\n3,300,7\n", "line 1: the header names column 'a' twice (fields 1 and 2)"),
        ("id,v,id\nx,1,y\nz,2,w\n", "line 1: the header names column 'id' twice (fields 1 and 3)"),
        # ids compared as Python strings: NumPy's fixed-width strings drop trailing NULs ('x\0' read as 'x')
        ("id,v\nx\x00,1\nx,2\ny,3\n", r"line 2: the item id 'x\x00' holds a NUL character"),
        ("id,v\nx,1\ny,2\nx,3\n", "line 4: duplicate item id 'x' (first at line 2)"),
        ("id,v\nx,1\n ,2\n", "line 3: the item id is empty"),
    ],
)
def test_a_csv_that_would_store_wrong_labels_is_refused(text: str, message: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(LabelError, match=re.escape(f"{path}, {message}")):
        read_vectors(path)
    assert message in refused(path, tmp_path, capsys)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        # numeric strings were read as numbers (while a word was refused); a timestamp became nanoseconds
        ({"id": ["a", "b", "c"], "s": ["1", "2", "3"]}, "column 's' has type string, not a number"),
        ({"id": ["a", "b", "c"], "t": "timestamps"}, "column 't' has type timestamp[us], not a number"),
        # a null id was stored as the id 'None'
        ({"id": ["a", None, "c"], "v": [1.0, 2.0, 3.0]}, "row 1: the item id is null"),
        ({"id": ["a", "b", "a"], "v": [1.0, 2.0, 3.0]}, "row 2: duplicate item id 'a' (first at row 0)"),
        ({"id": ["a", "b", "c"], "v": [1, None, 3]}, "row 1 (id 'b'), column 'v': nan is not a finite number"),
    ],
)
def test_a_parquet_file_that_would_store_wrong_labels_is_refused(
    table: dict, message: str, tmp_path: Path, capsys
) -> None:
    import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    if table.get("t") == "timestamps":
        table["t"] = pa.array([datetime.datetime(2020, 1, d) for d in (1, 2, 3)], pa.timestamp("us"))
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table(table), path)
    with pytest.raises(LabelError, match=re.escape(message)):
        read_vectors(path)
    assert message in refused(path, tmp_path, capsys)


def test_a_parquet_file_with_a_repeated_column_name_is_refused(tmp_path: Path, capsys) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "twice.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array([1.0, 2.0]), pa.array([3.0, 4.0])], names=["a", "a"]), path)
    assert "the table names column 'a' twice (fields 1 and 2)" in refused(path, tmp_path, capsys)


def test_integer_decimal_and_boolean_parquet_columns_are_numbers(tmp_path: Path) -> None:
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "ok.parquet"
    pq.write_table(
        pa.table(
            {
                "id": [1, 2],
                "i": pa.array([1, 2], pa.int8()),
                "f": pa.array([0.5, 1.5], pa.float32()),
                "d": [decimal.Decimal("1.25"), decimal.Decimal("2.5")],
                "b": [True, False],
            }
        ),
        path,
    )
    got = read_vectors(path)
    assert got.ids.tolist() == ["1", "2"] and got.values.tolist() == [[1, 0.5, 1.25, 1], [2, 1.5, 2.5, 0]]


def test_an_object_npy_is_refused_unread(tmp_path: Path, capsys) -> None:
    path = tmp_path / "objects.npy"
    np.save(path, np.array([{"a": 1}, 2], dtype=object), allow_pickle=True)
    message = refused(path, tmp_path, capsys)
    assert (
        f"{path}: an array of Python objects (dtype object), which is not read: it would have to be unpickled"
        in message
    )
    (tmp_path / "not.npy").write_bytes(b"hello, not an array")
    message = refused(tmp_path / "not.npy", tmp_path, capsys)
    assert f"{tmp_path / 'not.npy'}: cannot read as .npy: not a NumPy .npy file" in message


@pytest.mark.parametrize(
    ("text", "metric", "message"),
    [
        # the product form's squared norm overflows float64: was "kind 'vectors': block() returned NaN distances"
        (
            "v\n1e300\n-1e300\n1\n2\n",
            "euclidean",
            "row 0 (id '0'): its values are too large for the euclidean "
            "distance: 1e+300 (column 'v') makes its squared norm overflow",
        ),
        # ... and where the rows are not among the first three that the probe looks at, a store of NaN was written
        ("v\n1\n2\n3\n4\n1e300\n-1e300\n", "euclidean", "row 4 (id '4'): its values are too large for the euclidean"),
        ("v\n1\n2\n3\n4\n1e300\n-1e300\n", "sqeuclidean", "row 4 (id '4'): its values are too large for the sqeuclid"),
        # the distances overflow float32, as a store holds them: they were stored as inf
        (
            "v\n1\n2\n1e300\n-1e300\n",
            "cityblock",
            "its values are too large for the cityblock distance: column 'v' "
            "spans -1e+300 (row 3, id '3') to 1e+300 (row 2, id '2')",
        ),
        ("a,b\n1,1\n3e38,0\n-3e38,0\n", "chebyshev", "column 'a' spans -3e+38 (row 2, id '2') to 3e+38 (row 1"),
        ("a,b\n1,1\n2e19,0\n0,0\n", "sqeuclidean", "too large for the sqeuclidean distance: column 'a' spans 0"),
        # cosine: a norm zero, or too small for the formula (its square underflows float64)
        ("a,b\n1,1\n2,2\n3,4\n1e-320,1e-320\n5,1\n", "cosine", "row 3 (id '3'): its norm, 1.41e-320, is too small"),
        (
            "a,b\n1,1\n2,2\n3,4\n0,0\n5,1\n",
            "cosine",
            "row 3 (id '3'): a zero vector has no direction: its cosine distance is undefined",
        ),
    ],
)
def test_values_whose_distances_overflow_are_refused_naming_file_row_and_cause(
    text: str, metric: str, message: str, tmp_path: Path, capsys
) -> None:
    path = tmp_path / "big.csv"
    path.write_text(text)
    err = refused(path, tmp_path, capsys, "--metric", metric)
    assert f"labeldist: error: {path}: " in err and message in err, err


def test_values_that_fit_are_kept(tmp_path: Path) -> None:
    """Large values close together fit: the spread of each column bounds the distances, not the values."""
    vectors = Vectors(np.array(["a", "b", "c"]), np.array([[1e30, 1.0], [1e30 + 1e16, 2.0], [1e30, 3.0]]))
    for metric in METRICS:
        VectorDistance(metric).check_labels(vectors)  # sqeuclidean up to (1e16)^2 = 1e32: under float32's 3.4e38
        assert np.isfinite(VectorDistance(metric).block(vectors, vectors).astype(np.float32)).all()
    apart = Vectors(np.array(["a", "b"]), np.array([[0.0], [1e20]]))
    VectorDistance("euclidean").check_labels(apart)
    with pytest.raises(LabelError, match="too large for the sqeuclidean distance"):
        VectorDistance("sqeuclidean").check_labels(apart)  # (1e20)^2 = 1e40: float32 holds at most 3.4e38


@pytest.mark.parametrize("block_rows", [None, 50])
@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "cosine"])
def test_a_knn_only_store_searched_by_faiss_equals_scipy(
    metric: str, block_rows: int | None, tmp_path: Path, dask_client
) -> None:
    """FAISS blocks spread over a real cluster (one block of all N by default, or 50 rows each) give
    cdist's lists: distances to float32, indices equal except among tied items."""
    vectors = labels()
    out = tmp_path / metric
    result = precompute(
        vectors, VectorDistance(metric), out, dataset="v", k=K, dense=False, block_rows=block_rows, client=dask_client
    )
    assert result.manifest["block_rows"] == (block_rows or N)  # FAISS's blocks: at least 2048 rows, here all N
    assert check_store(out).strip().endswith(": ok")
    indices, distances = StoreReader(str(out)).knn()
    brute = cdist(vectors.values, vectors.values, metric)
    np.fill_diagonal(brute, np.inf)
    expected = np.argsort(brute.astype(np.float32), axis=1, kind="stable")[:, :K]
    np.testing.assert_allclose(
        distances, np.take_along_axis(brute, expected, 1).astype(np.float32), rtol=2.5e-7, atol=1e-12
    )
    differ = indices != expected
    np.testing.assert_allclose(
        np.take_along_axis(brute, indices.astype(np.int64), 1)[differ],
        np.take_along_axis(brute, expected, 1)[differ],
        rtol=2.5e-7,
    )
