"""The disk fills up while a store is being replaced: a clear error, the previous store intact, and after freeing
space the same command resumes and finishes.

A real full disk: a small tmpfs mounted in a private user and mount namespace (``unshare``), so the test needs no
root and touches no real disk. Where namespaces are not allowed (some containers), the test is skipped, saying so.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import check_store
from tests.processes import REPO, labeldist
from tests.system.conftest import JOB, assert_same_store

HERE = Path(__file__).resolve().parent
NEW_JOB = [*JOB, "--metric", "sqeuclidean", "--workers", "1"]  # other parameters: replacing the store


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def namespaces_allowed() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
        capture_output=True,
    )
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not namespaces_allowed(), reason="unshare cannot mount a tmpfs here (no user namespaces)")
def test_a_full_disk_mid_write_fails_clearly_and_leaves_the_previous_store_intact(reference_store, tmp_path):
    size = folder_bytes(reference_store)
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir(), out.mkdir()
    report_path = out / "report.json"
    # room for the old store and the new one's first few blocks only; the ballast is freed before the rerun
    tmpfs_bytes = 2 * size + (16 << 20)
    free = size // 3
    script = (
        f"mount -t tmpfs -o size={tmpfs_bytes} tmpfs {disk} && exec {sys.executable} {HERE / 'disk_full_job.py'} "
        f"{disk} {report_path} {reference_store} {free} -- precompute {' '.join(NEW_JOB[1:])}"
    )
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(report_path.read_text())

    full = report["full"]
    assert full["returncode"] == 2, full
    assert "no space left on device" in full["stderr"] and "rerun the same command" in full["stderr"]
    assert full["stderr"].strip().count("\n") == 0, "one clear line, no traceback: " + full["stderr"]
    assert report["previous_intact"], "the store being replaced was damaged"
    # the half-written replacement sits in a hidden folder, marked incomplete; the service never lists it
    assert report["entries_after_failure"] == [".mpii-pose.overwrite", "mpii-pose"]
    assert report["staged_complete"] is False and report["staged_blocks_done"] > 0

    rerun = report["rerun"]
    assert rerun["returncode"] == 0, rerun
    computed, total = map(int, re.search(r"(\d+) of (\d+) blocks computed", rerun["stdout"]).groups())
    assert computed == total - report["staged_blocks_done"], "blocks written before the disk filled were redone"
    assert report["entries_after_rerun"] == ["mpii-pose"]

    # the store that replaced the old one equals the same job run on a roomy disk
    roomy = tmp_path / "roomy"
    done = labeldist(*NEW_JOB, "--out", str(roomy))
    assert done.returncode == 0, done.stderr
    assert_same_store(out / "after", roomy)
    check_store(out / "after")


def test_a_swap_interrupted_between_its_renames_is_finished_by_the_next_run(reference_store, tmp_path):
    from labeldist.engine.staging import finish_replacement, staging_url

    url = str(tmp_path / "mpii-pose")
    shutil.copytree(reference_store, staging_url(url))  # the new store, complete
    shutil.copytree(reference_store, tmp_path / ".mpii-pose.replaced")  # the old one, renamed aside
    finish_replacement(url)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mpii-pose"]
    assert_same_store(url, reference_store)
    finish_replacement(url)  # nothing left to do: a no-op
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mpii-pose"]
