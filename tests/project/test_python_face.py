"""The Python face, as a researcher meets it: ``import labeldist as ld`` names everything in one place and loads
nothing heavy until asked; the notebook-style example (examples/python_face.py), a script that imports only
labeldist, builds a vectors store from a NumPy array and a pose store from the MPII file, opens one again, reads it
and trains on its minibatches; and its stores equal those the command line builds from the same inputs
(tools/compare_stores.py's comparison: every array, and the manifests but for what records a time)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr

import labeldist as ld

ROOT = Path(__file__).resolve().parents[2]
MPII = ROOT / "data" / "mpii" / "mpii_valid_2958.csv"
PACKAGES = ("labeldist", "labeldist.client", "labeldist.distances", "labeldist.kinds", "labeldist.labels")


def load_compare_stores():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        return importlib.import_module("compare_stores")
    finally:
        sys.path.remove(str(ROOT / "tools"))


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves_and_is_documented(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(set(module.__all__)) == sorted(module.__all__), "a name twice in __all__"
    for name in module.__all__:
        if name in ("__version__", "ENTRY_POINTS"):
            continue
        value = getattr(module, name)
        assert (getattr(value, "__doc__", None) or "").strip(), f"{package}.{name} has no docstring"
    assert set(module.__all__) <= set(dir(module))


def test_importing_labeldist_loads_no_dask_zarr_or_torch() -> None:
    """The face is named at once and imported on first use: a Dask worker, the CLI and the service stay light."""
    code = (
        "import sys, labeldist as ld; heavy = ('dask', 'zarr', 'torch', 'httpx', 'numba');"
        "print([m for m in heavy if m in sys.modules]); ld.Store; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split("\n")[:2] == ["[]", "False"], out.stdout


def test_a_name_not_in_the_face_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        ld.no_such_name  # noqa: B018


@pytest.mark.slow
def test_the_example_builds_reads_and_trains_and_its_stores_equal_the_clis(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    made = tmp_path / "py"
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "python_face.py"), "--poses", str(MPII), "--out", str(made)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    losses = [float(line.rsplit(" ", 1)[1]) for line in run.stdout.splitlines() if line.startswith("step ")]
    assert len(losses) == 4 and all(np.isfinite(losses))

    # the same inputs through the command line
    cli = tmp_path / "cli"
    points = np.random.default_rng(0).normal(size=(500, 8))  # the example's array
    np.save(tmp_path / "points.npy", points)
    labeldist = [sys.executable, "-m", "labeldist.cli", "precompute"]
    common = ["--no-progress", "--workers", "1"]
    for args in (
        ["vectors", str(tmp_path / "points.npy"), "--out", str(cli / "points"), "--k", "10", "--dataset", "points"],
        ["pose", str(MPII), "--out", str(cli / "mpii-pose"), "--k", "20", "--normalization", "center_scale"],
    ):
        subprocess.run(labeldist + args + common, check=True, capture_output=True, timeout=900)

    compare = load_compare_stores()
    found, compared = compare.differences(cli, made)
    # a store from a file records how the file was read (its format, ...); one from an array has no file
    assert found == ["points: manifests differ"], found
    assert compared >= 2 * 4
    a = zarr.open_group(str(cli / "points"), mode="r").attrs["labeldist"]
    b = zarr.open_group(str(made / "points"), mode="r").attrs["labeldist"]
    reading = a["params"].pop("labels")
    assert reading["format"] == "npy"
    assert compare.without_times(a) == compare.without_times(b), json.dumps([a, b])[:2000]

    # the example's store read as a table is labeldist export's file of the command line's store
    exported = tmp_path / "cli-pose.parquet"
    export = [sys.executable, "-m", "labeldist.cli", "export", str(cli / "mpii-pose"), "--out", str(exported)]
    subprocess.run(export + ["--no-progress"], check=True, capture_output=True, timeout=600)
    pd.testing.assert_frame_equal(ld.open(made / "mpii-pose").to_pandas(), pd.read_parquet(exported))


@pytest.mark.slow
def test_read_labels_reads_as_precompute_does_and_refuses_unknown_options() -> None:
    poses = ld.read_labels("pose", MPII, normalization="center_scale", min_joints="3")
    from labeldist.labels.pose_files import read_mpii_csv

    want = read_mpii_csv(MPII, normalization="center_scale", min_joints=3)
    assert list(poses.ids) == list(want.ids)
    np.testing.assert_array_equal(poses.xy, want.xy)
    with pytest.raises(ld.UsageError, match="kind 'pose' has no option 'bogus'; its options: format, joints"):
        ld.read_labels("pose", MPII, bogus=1)
    with pytest.raises(ld.UsageError, match="metric='manhattan': one of euclidean, sqeuclidean"):
        ld.read_labels("pose", MPII, metric="manhattan")
    with pytest.raises(ld.UsageError, match="labels for a pose store: a label file's path, a LabelSet"):
        ld.precompute("pose", [[1, 2]], "unused")


@pytest.mark.slow
def test_the_face_refuses_a_label_file_inside_the_store_it_would_replace_or_grow(tmp_path: Path) -> None:
    """ld.append and ld.precompute check their inputs against what they replace, as the commands do."""
    store = ld.precompute("vectors", np.eye(6), tmp_path / "st", k=2, workers=1, progress=False)
    inside = tmp_path / "st" / "more.npy"
    np.save(inside, np.ones((2, 6)))
    with pytest.raises(ld.LabeldistError, match="more.npy") as appended:
        ld.append(store, inside, workers=1, progress=False)
    with pytest.raises(ld.LabeldistError, match="more.npy") as rebuilt:
        ld.precompute("vectors", inside, tmp_path / "st", k=1, overwrite=True, workers=1, progress=False)
    assert "\n" not in str(appended.value) and "\n" not in str(rebuilt.value)
    assert inside.is_file() and len(ld.open(tmp_path / "st")) == 6
