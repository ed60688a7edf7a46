"""The `labeldist` command end to end: precompute, info, verify, and bad input leaving nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import zarr

from tests.conftest import DATA

CSV = DATA / "mpii" / "mpii_valid_2958.csv"


def labeldist(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labeldist.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300)  # fmt: skip


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("csv") / "mpii_small.csv"
    path.write_text("\n".join(CSV.read_text().splitlines()[:121]) + "\n")
    return path


@pytest.fixture(scope="module")
def pose_store(small_csv, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "mpii-small-pose"
    proc = labeldist("precompute", "pose", small_csv, "--k", "10", "--workers", "1", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "complete, 120 items, k=10, dense=True; 1 of 1 blocks computed" in proc.stdout
    return out


def test_info_prints_manifest_and_statistics(pose_store):
    proc = labeldist("info", pose_store)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["manifest"]["n_items"] == 120 and info["blocks_done"] == "1/1"
    knn = zarr.open_group(str(pose_store), mode="r")["knn/distances"][:]
    assert info["knn"]["nearest"]["median"] == pytest.approx(float(np.median(knn[:, 0])), rel=1e-6)


def test_verify_passes_on_a_good_store(pose_store):
    proc = labeldist("verify", pose_store, "--sample", "100")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["ok"] and report["entries_checked"] == 200
    assert report["max_rel_error"] < 1e-6


def test_verify_catches_a_wrong_stored_value(pose_store, tmp_path):
    import shutil

    bad = tmp_path / "tampered"
    shutil.copytree(pose_store, bad)
    knn = zarr.open_array(str(bad), path="knn/distances", mode="r+")
    knn[:, :] = knn[:, :] * 1.01  # every stored neighbour distance 1 % off, rows still sorted
    proc = labeldist("verify", bad, "--sample", "50")
    assert proc.returncode == 1
    assert "differ from the reference" in " ".join(json.loads(proc.stdout)["problems"])


def _assert_error_and_nothing_written(proc, out, message):
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not out.exists()


def test_malformed_csv_row_is_named_and_no_store_is_made(small_csv, tmp_path):
    lines = small_csv.read_text().splitlines()
    lines[5] = lines[5] + ",1"
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    proc = labeldist("precompute", "pose", path, "--out", out)
    _assert_error_and_nothing_written(proc, out, "bad.csv, line 6: 58 fields, expected 57")


def test_nan_coordinates_are_refused(small_csv, tmp_path):
    lines = small_csv.read_text().splitlines()
    fields = lines[9].split(",")
    fields[12] = "NaN"
    lines[9] = ",".join(fields)
    path = tmp_path / "nan.csv"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    proc = labeldist("precompute", "pose", path, "--out", out)
    _assert_error_and_nothing_written(proc, out, "nan.csv, line 10: column 'r_knee_x' is not finite")


def test_other_parameters_at_the_output_path(pose_store):
    before = zarr.open_group(str(pose_store), mode="r").attrs["labeldist"]
    proc = labeldist("precompute", "pose", CSV, "--k", "10", "--out", pose_store)
    assert proc.returncode == 2 and "the labels differ" in proc.stderr and "--overwrite" in proc.stderr
    assert zarr.open_group(str(pose_store), mode="r").attrs["labeldist"] == before


def test_output_path_holding_something_else_is_refused(small_csv, tmp_path):
    out = tmp_path / "occupied"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    proc = labeldist("precompute", "pose", small_csv, "--out", out)
    assert proc.returncode == 2 and "is not a labeldist store; refusing to write over it" in proc.stderr
    assert (out / "notes.txt").read_text() == "mine"


def test_unknown_store_for_info(tmp_path):
    proc = labeldist("info", tmp_path / "nowhere")
    assert proc.returncode == 2 and "no store there" in proc.stderr
