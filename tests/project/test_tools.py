"""The before/after tools a refactor is checked with: tools/compare_stores.py finds a difference in any array or
manifest of two folders of stores, and none between two builds of the same stores; tools/help_texts.py writes
every command's --help."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import zarr

from labeldist.distances.pose import PoseDistance
from tests.conftest import write_store

ROOT = Path(__file__).resolve().parents[2]


def compare(old: Path, new: Path) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "compare_stores.py"), str(old), str(new)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stdout


def test_two_builds_of_the_same_stores_compare_equal_and_one_changed_value_does_not(tmp_path, mpii_poses) -> None:
    labels = mpii_poses.subset(slice(0, 40))
    for folder in ("a", "b"):
        write_store(tmp_path / folder / "pose", labels, PoseDistance(), dataset="p", k=5, dense=True, block_rows=16)
    code, out = compare(tmp_path / "a", tmp_path / "b")
    assert code == 0 and out.strip().endswith("0 differences"), out  # written at other times: the times differ
    shutil.copytree(tmp_path / "b", tmp_path / "c")
    dense = zarr.open_array(str(tmp_path / "c" / "pose" / "dense" / "distances"), mode="r+")
    dense[3, 7] = np.nextafter(dense[3, 7], np.float32(np.inf))  # one float32 step
    code, out = compare(tmp_path / "a", tmp_path / "c")
    assert code == 1 and "pose/dense/distances: differs" in out and out.strip().endswith("1 differences"), out
    (tmp_path / "c" / "pose").rename(tmp_path / "c" / "poses")
    code, out = compare(tmp_path / "a", tmp_path / "c")
    assert code == 1 and "pose: in one folder only" in out and "poses: in one folder only" in out, out


def test_help_texts_writes_every_commands_help(tmp_path) -> None:
    subprocess.run([sys.executable, str(ROOT / "tools" / "help_texts.py"), str(tmp_path)], check=True, timeout=300)
    written = {p.stem for p in tmp_path.iterdir()}
    for name in ("labeldist", "labeldist_precompute_pose", "labeldist_split", "trainer_split", "trainer_fit"):
        assert name in written, name
    assert (tmp_path / "labeldist_split.txt").read_text().startswith("usage: labeldist split")
    assert "usage: trainer split" in (tmp_path / "trainer_split.txt").read_text()


def test_every_data_file_the_scripts_name_is_shipped() -> None:
    """The scripts `make run` and the before/after checks run (tools/*.sh) read their inputs as "$DATA/...", DATA
    being the repository's data/: each file they name is there. (A file moved into the package, as STS-B's did,
    left the main job failing at its sentence store while every test passed.)"""
    named = {
        (script.name, match)
        for script in (ROOT / "tools").glob("*.sh")
        for match in re.findall(r"\$DATA/([A-Za-z0-9_./-]+)", script.read_text())
    }
    assert named, "no script names a data file: the pattern no longer matches them"
    missing = sorted(f"{script}: data/{path}" for script, path in named if not (ROOT / "data" / path).is_file())
    assert not missing, f"named by a script, not shipped in data/: {missing}"
