"""``labeldist export``: a store's neighbour lists as a Parquet or CSV table, one row per
(item, rank), read back with pandas and compared with ``StoreReader.knn()`` and the ids exactly; refusals as one
line and exit 2; written a row block at a time, in bounded memory."""

from __future__ import annotations

import csv
import io
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from labeldist.distances.pose import PoseDistance
from labeldist.distances.vectors import VectorDistance
from labeldist.engine.export import COLUMNS, export_neighbors
from labeldist.labels.poses import Poses
from labeldist.labels.vectors import Vectors
from labeldist.store import StoreReader, build_manifest, create_store
from tests.cli.test_cli import run_cli
from tests.conftest import write_store

N_POSE, K_POSE = 130, 12
#: ids a CSV must quote (a comma, a quote, a line break of either kind), ids pandas would read as numbers or as
#: missing
ODD_IDS = ["a,b", 'say "hi"', "two\nlines", "carriage\rreturn", "crlf\r\nid", "007", "NA", " padded "]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, mpii_poses: Poses) -> dict[str, Path]:
    """A pose store of MPII poses, its ids made odd, items 0 and 1 +infinity away from all others (no joint in
    common), in row blocks of 48 (three blocks); a vector store of fewer items than its k (lists padded with -1)."""
    root = tmp_path_factory.mktemp("export")
    poses = mpii_poses.subset(slice(0, N_POSE))
    ids = poses.ids.astype(object)
    ids[: len(ODD_IDS)] = ODD_IDS
    present = poses.present.copy()
    present[:2] = False
    present[:, 0] = [True, True] + [False] * (N_POSE - 2)  # items 0 and 1 share a joint with each other only
    poses = Poses(np.array(ids.tolist()), poses.xy, present, present)
    write_store(root / "pose", poses, PoseDistance(), dataset="mpii", k=K_POSE, dense=False, block_rows=48)
    tiny = Vectors([f"t{i}" for i in range(5)], np.arange(5.0) ** 2)
    write_store(root / "tiny", tiny, VectorDistance("cityblock"), dataset="tiny", k=8, dense=False, block_rows=4)
    return {"pose": root / "pose", "tiny": root / "tiny"}


def read_back(path: Path) -> pd.DataFrame:
    """The file as a user reads it, ids as the strings they are (``dtype=str`` and no "NA" read as missing)."""
    if path.suffix == ".csv":
        return pd.read_csv(path, dtype={"item_id": str, "neighbor_id": str}, keep_default_na=False)
    return pd.read_parquet(path)


def expected_table(store: Path, k: int | None = None) -> dict[str, np.ndarray]:
    """The rows the export must hold, from ``StoreReader.knn()`` (the whole lists) and ``ids``."""
    reader = StoreReader(str(store))
    indices, distances = reader.knn()
    k = reader.k if k is None else k
    indices, distances = indices[:, :k], distances[:, :k]
    keep = indices >= 0
    item, position = np.nonzero(keep)
    return {
        "item_index": item,
        "item_id": reader.ids[item],
        "rank": position + 1,
        "neighbor_index": indices[keep],
        "neighbor_id": reader.ids[indices[keep]],
        "distance": distances[keep],
    }


def assert_equal_table(frame: pd.DataFrame, expected: dict[str, np.ndarray]) -> None:
    assert tuple(frame.columns) == COLUMNS
    assert len(frame) == len(expected["distance"])
    for name in ("item_index", "rank", "neighbor_index"):
        assert np.array_equal(frame[name].to_numpy(), expected[name]), name
    for name in ("item_id", "neighbor_id"):
        assert frame[name].astype(str).tolist() == expected[name].tolist(), name
    read = frame["distance"].to_numpy().astype(np.float32)  # CSV reads float64: the float32 written, exactly
    assert np.array_equal(read, expected["distance"]), np.flatnonzero(read != expected["distance"])[:5]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_the_export_reads_back_with_pandas_equal_to_the_store(stores, tmp_path, capsys, fmt) -> None:
    out = tmp_path / f"pose-neighbors.{fmt}"
    rc, stdout, stderr = run_cli(capsys, "export", stores["pose"], "--format", fmt, "--out", out)
    assert rc == 0, stderr
    frame = read_back(out)
    expected = expected_table(stores["pose"])
    assert_equal_table(frame, expected)
    assert len(frame) == N_POSE * K_POSE
    assert np.isinf(expected["distance"]).any(), "the store should hold +infinity (poses with no joint in common)"
    assert frame["item_id"].iloc[0] == "a,b" and frame["item_id"].iloc[ODD_IDS.index("007") * K_POSE] == "007"
    assert (
        stdout
        == f"{out}: {N_POSE * K_POSE:,} rows ({N_POSE} items, up to {K_POSE} neighbours each), {fmt}, "
        + (stdout.split(", ")[-1])
    )  # the one-line summary
    assert stdout.count("\n") == 1 and stdout.endswith(" s\n")
    # off a terminal: plain progress lines, never a carriage return
    assert f"export: {N_POSE} of {N_POSE} items (100.0%)" in stderr and "\r" not in stderr
    assert not list(tmp_path.glob(".*partial*")), "the partial file is left behind"


def test_parquet_keeps_the_column_types(stores, tmp_path) -> None:
    out = tmp_path / "x.parquet"
    export_neighbors(str(stores["pose"]), str(out), progress=False)
    frame = pd.read_parquet(out)
    assert {name: str(frame[name].dtype) for name in ("item_index", "rank", "neighbor_index", "distance")} == {
        "item_index": "int32",
        "rank": "int32",
        "neighbor_index": "int32",
        "distance": "float32",
    }
    assert np.array_equal(frame["distance"].to_numpy(), expected_table(stores["pose"])["distance"])


def test_csv_distances_are_float32s_shortest_decimals(stores, tmp_path) -> None:
    out = tmp_path / "x.csv"
    export_neighbors(str(stores["pose"]), str(out), progress=False)
    text = out.read_text()
    assert text.startswith(",".join(COLUMNS) + '\n0,"a,b",1,1,"say ""hi""",')
    rows = list(csv.reader(io.StringIO(text)))[1:]
    assert rows[2 * K_POSE][1] == "two\nlines"
    written = [row[-1] for row in rows]
    distances = expected_table(stores["pose"])["distance"]
    assert written == [str(d) for d in distances]  # NumPy's float32 repr: "inf" for +infinity
    assert written[1] == "inf" and all(len(w) <= 14 for w in written)  # not float64's 17 digits


def test_k_takes_the_first_neighbours_and_padding_is_left_out(stores, tmp_path, capsys) -> None:
    out = tmp_path / "first3.csv"
    rc, stdout, _ = run_cli(capsys, "export", stores["pose"], "--out", out, "--k", "3", "--no-progress")
    assert rc == 0
    assert_equal_table(read_back(out), expected_table(stores["pose"], k=3))
    out = tmp_path / "tiny.parquet"
    rc, stdout, stderr = run_cli(capsys, "export", stores["tiny"], "--out", out)
    assert rc == 0, stderr
    frame = read_back(out)
    assert len(frame) == 5 * 4  # k = 8 lists of 5 items: each has its 4 others, the -1 padding is no row
    assert_equal_table(frame, expected_table(stores["tiny"]))
    assert stdout.startswith(f"{out}: 20 rows (5 items, up to 8 neighbours each), parquet")


def test_the_format_follows_the_suffix_and_csv_goes_to_standard_output(stores, tmp_path, capsys) -> None:
    out = tmp_path / "by-suffix.csv"
    assert run_cli(capsys, "export", stores["tiny"], "--out", out)[0] == 0
    assert out.read_text().startswith("item_index,item_id,rank,")
    rc, stdout, stderr = run_cli(capsys, "export", stores["tiny"], "--format", "csv", "--out", "-", "--no-progress")
    assert rc == 0 and stdout == out.read_text()
    assert stderr.startswith("standard output: 20 rows") and stderr.count("\n") == 1
    # "-" is CSV without --format, as the docs say; Parquet asked for it is refused in one line
    rc, plain, _ = run_cli(capsys, "export", stores["tiny"], "--out", "-", "--no-progress")
    assert rc == 0 and plain == stdout
    rc, _, stderr = run_cli(capsys, "export", stores["tiny"], "--format", "parquet", "--out", "-")
    assert rc == 2 and "Parquet cannot be written to standard output" in stderr and stderr.count("\n") == 1


def test_the_default_output_is_named_after_the_store(stores, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_cli(capsys, "export", stores["tiny"], "--no-progress")[0] == 0
    assert_equal_table(read_back(tmp_path / "tiny-neighbors.parquet"), expected_table(stores["tiny"]))


# ------------------------------------------------------------------------------------------------ refusals
def assert_refused(rc: int, stderr: str, message: str) -> None:
    assert rc == 2 and stderr.count("\n") == 1 and stderr.startswith("labeldist: error: "), stderr
    assert message in stderr, stderr


def test_an_existing_file_is_refused_without_overwrite(stores, tmp_path, capsys) -> None:
    out = tmp_path / "there.csv"
    out.write_text("mine\n")
    rc, _, err = run_cli(capsys, "export", stores["tiny"], "--out", out)
    assert_refused(rc, err, f"{out}: exists; give --overwrite to replace it")
    assert out.read_text() == "mine\n"
    rc, _, err = run_cli(capsys, "export", stores["tiny"], "--out", out, "--overwrite", "--no-progress")
    assert rc == 0, err
    assert_equal_table(read_back(out), expected_table(stores["tiny"]))


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_overwrite_replaces_regular_files_only_and_never_inside_a_store(stores, tmp_path, capsys) -> None:
    """Before: ``--overwrite`` renamed over anything: a device (``/dev/full`` as root), ``STORE/zarr.json``
    (destroying the store), or wrote ``STORE/x.csv`` inside it. Now each is refused in one line, nothing written."""
    import os

    target = tmp_path / "precious.csv"
    target.write_text("keep\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    store = stores["tiny"]
    before = _tree(store)
    cases = [
        (link, f"{link}: a symbolic link; --overwrite replaces regular files only"),
        (fifo, f"{fifo}: not a regular file; --overwrite replaces regular files only"),
        (store / "zarr.json", f"{store / 'zarr.json'}: inside the labeldist store {store}"),
        (store / "x.csv", f"{store / 'x.csv'}: inside the labeldist store {store}"),
        (store / "knn" / "x.csv", f"{store / 'knn' / 'x.csv'}: inside the labeldist store {store}"),
    ]
    for out, message in cases:
        assert_refused(*run_cli(capsys, "export", store, "--out", out, "--overwrite")[::2], message)
    assert _tree(store) == before and target.read_text() == "keep\n" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "pipe.csv", "precious.csv"]


def test_bad_requests_are_one_line_and_write_nothing(stores, tmp_path, capsys) -> None:
    out = tmp_path / "x.csv"
    cases = [
        (["--k", "9"], "--k 9 is more than the store's k=8 (the length of its neighbour lists)"),
        (["--format", "parquet", "--out", "-"], "Parquet cannot be written to standard output"),
    ]
    for extra, message in cases:
        args = ["export", stores["tiny"], *(["--out", out] if "--out" not in extra else []), *extra]
        assert_refused(*run_cli(capsys, *args)[::2], message)
    assert_refused(*run_cli(capsys, "export", tmp_path / "nope", "--out", out)[::2], "nope: no store there")
    assert_refused(
        *run_cli(capsys, "export", stores["tiny"], "--out", tmp_path / "no" / "x.csv")[::2],
        f"{tmp_path / 'no'}: no such folder for the output file",
    )
    assert_refused(
        *run_cli(capsys, "export", stores["tiny"], "--out", tmp_path)[::2], f"{tmp_path}: a folder, not a file"
    )
    rc, _, err = run_cli(capsys, "export", stores["tiny"], "--format", "xlsx")
    assert rc == 2 and "invalid choice: 'xlsx'" in err
    assert not list(tmp_path.iterdir())


def test_an_incomplete_store_is_refused(tmp_path, capsys) -> None:
    labels = Vectors(["a", "b", "c"], np.array([1.0, 2.0, 4.0]))
    manifest = build_manifest(
        dataset="x",
        kind="vectors",
        params=VectorDistance("cityblock").params(),
        labels=labels,
        k=2,
        dense=False,
        block_rows=2,
    )
    create_store(str(tmp_path / "half"), manifest, labels)
    rc, _, err = run_cli(capsys, "export", tmp_path / "half", "--out", tmp_path / "x.csv")
    assert_refused(rc, err, "store is not complete")
    assert not (tmp_path / "x.csv").exists()


def test_without_pyarrow_parquet_says_what_to_install_and_csv_works(stores, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    rc, _, err = run_cli(capsys, "export", stores["tiny"], "--out", tmp_path / "x.parquet")
    assert_refused(rc, err, "--format parquet needs pyarrow, which is not installed: pip install pyarrow")
    assert not (tmp_path / "x.parquet").exists()
    rc, _, err = run_cli(capsys, "export", stores["tiny"], "--out", tmp_path / "x.csv", "--no-progress")
    assert rc == 0, err
    assert_equal_table(read_back(tmp_path / "x.csv"), expected_table(stores["tiny"]))


# ------------------------------------------------------------------------------------------------ streaming
@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4,000 items, k = 25: 100,000 rows."""
    root = tmp_path_factory.mktemp("export-big")
    values = np.random.default_rng(3).normal(size=(4000, 3))
    labels = Vectors([f"item-{i:06d}" for i in range(4000)], values)
    return write_store(
        root / "big", labels, VectorDistance("euclidean"), dataset="big", k=25, dense=False, block_rows=1000
    )


def test_the_export_reads_a_row_block_at_a_time_never_the_whole_lists(big_store, tmp_path, monkeypatch) -> None:
    expected = expected_table(big_store)
    spans: list[tuple[int, int]] = []
    real = StoreReader.knn_rows

    def knn_rows(self, start, stop):
        spans.append((start, stop))
        return real(self, start, stop)

    def whole(self):
        raise AssertionError("export read the whole (N, k) lists")

    monkeypatch.setattr(StoreReader, "knn_rows", knn_rows)
    monkeypatch.setattr(StoreReader, "knn", whole)
    lines: list[str] = []

    class Stream:  # a log file: progress as plain lines, one a block here (every 0 s)
        def write(self, text: str) -> None:
            lines.append(text)

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sys, "stderr", Stream())
    result = export_neighbors(str(big_store), str(tmp_path / "big.csv"), items_per_block=300, progress_every=0)
    monkeypatch.undo()
    assert spans == [(s, min(s + 300, 4000)) for s in range(0, 4000, 300)]
    assert result.rows == 100_000 and result.items == 4000 and result.k == 25
    assert_equal_table(read_back(tmp_path / "big.csv"), expected)
    progress = [line for line in "".join(lines).splitlines() if line]
    assert len(progress) == len(spans) and progress[0].startswith("export: 300 of 4,000 items (7.5%), ")
    assert progress[-1].startswith("export: 4,000 of 4,000 items (100.0%), ") and "s left" in progress[-1]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_memory_is_that_of_one_block(big_store, tmp_path, fmt) -> None:
    """The peak of Python and NumPy allocations while exporting 100,000 rows a block of 200 items (5,000 rows)
    at a time is a small part of the peak of the same export in one block: it does not grow with the store."""

    def peak(items_per_block: int) -> int:
        tracemalloc.start()
        try:
            export_neighbors(
                str(big_store),
                str(tmp_path / f"x.{fmt}"),
                progress=False,
                overwrite=True,
                items_per_block=items_per_block,
            )
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    peak(4000)  # imports (pyarrow's writer) and first-use caches outside the measures
    small, whole = peak(200), peak(4000)
    assert small * 4 < whole, (small, whole)
