"""A precompute killed at any instant resumes to the same store, bit for bit.

Found: a kill just after ``<out>/ids`` appeared left a manifest and ``ids`` but no ``progress/blocks``, and every
rerun, even with ``--overwrite``, failed with ``No array found ... at path progress/blocks``. Now the skeleton is
laid out aside and renamed into place. Here the job of :mod:`tests.system.kill_at_write` is killed just before its
Nth write (every chunk, metadata file, deletion and rename of the job counts, from laying out the store to the
publish), for many N, each time in a fresh folder; then the same job is rerun and must finish with a store equal
to an uninterrupted run's. ``LABELDIST_KILL_POINTS=all`` kills at every write (RELIABILITY.md quotes that run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from labeldist.store import StoreIncompleteError, StoreReader, read_manifest
from tests.processes import REPO
from tests.system.conftest import assert_same_store
from tests.system.kill_at_write import APPEND_BASE, N_ITEMS, append_base, append_job, job

#: kill points of a default run: the layout's writes (about 20 for this job), then a spread, then the publish's
LAYOUT, SPREAD = 22, 36


class Killer:
    """The job of :mod:`tests.system.kill_at_write` killed at chosen writes, each run a child forked from one
    process that made the imports once (``kill_at_write serve``), instead of a new interpreter a run."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.proc = subprocess.Popen(
            # faulthandler: a job that dies of anything but the kill says where, in the failure's message
            [sys.executable, "-X", "faulthandler", "-m", "tests.system.kill_at_write", "serve"],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, n: int, out: Path, which: str = "precompute") -> subprocess.CompletedProcess:
        """The job into ``out`` killed just before write ``n`` (0: never): its exit status and output."""
        log = self.folder / f"kill-{n}-{which}.log"
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{n} {out} {which} {log}\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer, f"the job server ended (status {self.proc.wait(timeout=60)})"
        text = log.read_text() if log.exists() else ""
        return subprocess.CompletedProcess([n, str(out), which], int(answer), text, "")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture
def killer(tmp_path: Path) -> Iterator[Killer]:
    k = Killer(tmp_path)
    try:
        yield k
    finally:
        k.close()


def not_killed(n: int, run: subprocess.CompletedProcess) -> str:
    """Why a run that should have been killed at write ``n`` was not: its status, output and (for a crash, through
    faulthandler) where it died."""
    return f"write {n}: the job was not killed ({run.returncode}): {run.stdout}{run.stderr[-3000:]}"


def kill_points(writes: int) -> list[int]:
    """Every other write of the layout (each one a write into the same hidden skeleton), every write of the
    publish (the last three), and a spread of the blocks' between."""
    if os.environ.get("LABELDIST_KILL_POINTS") == "all":
        return list(range(1, writes + 1))
    middle = np.linspace(LAYOUT + 1, writes - 3, SPREAD - LAYOUT - 3).round().astype(int).tolist()
    return sorted({*range(1, LAYOUT + 1, 2), *middle, *range(writes - 2, writes + 1)})


def state(out: Path) -> str:
    """What a kill left at ``out``, as a reader sees it."""
    manifest = read_manifest(str(out))
    if manifest is None:
        return "nothing" if not out.exists() else "not a store"
    if manifest.get("complete") is True:
        return "complete"
    with pytest.raises(StoreIncompleteError):
        StoreReader(str(out))
    return "incomplete"


@pytest.mark.slow
def test_a_precompute_killed_at_any_write_resumes_to_the_same_store(tmp_path, dask_client, killer) -> None:
    reference = tmp_path / "reference" / "store"
    job(str(reference), dask_client)
    dry = killer.run(0, tmp_path / "dry" / "store")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    writes = int(dry.stdout.strip().split("writes=")[-1])
    assert writes > 40, dry.stdout  # layout, 8 blocks of 5 arrays each, publish

    seen: dict[str, int] = {}
    points = kill_points(writes)
    for n in points:
        out = tmp_path / f"kill{n}" / "store"
        killed = killer.run(n, out)
        assert killed.returncode == -9, not_killed(n, killed)
        what = state(out)
        assert what != "not a store", f"write {n}: the kill left a folder that is no store: {os.listdir(out)}"
        seen[what] = seen.get(what, 0) + 1
        result = job(str(out), dask_client)  # the rerun: resumes, or starts over where nothing was left
        assert_same_store(out, reference)
        assert sorted(os.listdir(out.parent)) == ["store"], f"write {n}: leftovers {os.listdir(out.parent)}"
        if what == "incomplete":
            assert not result.reused
    print(f"kill points: {len(points)} of {writes} writes; states left by the kills: {seen}; all resumed equal")
    # the kills hit both phases: before the store existed (its layout) and while it was incomplete (its blocks)
    assert seen.get("nothing", 0) >= 5 and seen.get("incomplete", 0) >= 5, seen


def append_kill_points(writes: int) -> list[int]:
    """Kill points of an append: its staged store's layout (the same atomic creation as a precompute's, killed
    above) at every fifth write, a spread over its blocks, and each of its last six writes: the pairs recorded, the
    publish, and the swap (two renames and the removal of the old generation)."""
    if os.environ.get("LABELDIST_KILL_POINTS") == "all":
        return list(range(1, writes + 1))
    spread = np.linspace(LAYOUT + 1, writes - 6, 8).round().astype(int).tolist()
    return sorted({*range(1, LAYOUT + 1, 5), *spread, *range(writes - 5, writes + 1)})


@pytest.mark.slow
@pytest.mark.parametrize("which", ["append-pose", "append-vectors"])
def test_an_append_killed_at_any_write_resumes_to_the_same_store(tmp_path, dask_client, killer, which) -> None:
    """An append (a plain dense pose store; a symmetric dense vectors store, whose append has two phases)
    killed just before any of its writes leaves a complete store at its path, the old generation or the new one,
    never an incomplete one, except between the two renames of the swap, where nothing is there for an instant (a
    server keeps the old one open then); the same append rerun ends with the store an uninterrupted append gives,
    bit for bit, and nothing left beside it."""
    base = tmp_path / "base" / "store"
    append_base(str(base), dask_client, which)
    reference = tmp_path / "reference" / "store"
    shutil.copytree(base, reference)
    append_job(str(reference), dask_client, which)
    dry = tmp_path / "dry" / "store"
    shutil.copytree(base, dry)
    ran = killer.run(0, dry, which)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert_same_store(dry, reference)
    writes = int(ran.stdout.strip().split("writes=")[-1])

    seen: dict[str, int] = {}
    for n in append_kill_points(writes):
        out = tmp_path / f"kill{n}" / "store"
        shutil.copytree(base, out)
        killed = killer.run(n, out, which)
        assert killed.returncode == -9, not_killed(n, killed)
        what = state(out)
        assert what in ("complete", "nothing"), f"write {n}: the kill left {what} at the store's path"
        if what == "complete":
            n_items = read_manifest(str(out))["n_items"]
            assert n_items in (APPEND_BASE, N_ITEMS), n_items
            what = "old generation" if n_items == APPEND_BASE else "new generation"
        seen[what] = seen.get(what, 0) + 1
        append_job(str(out), dask_client, which)  # the rerun: resumes, finishes the swap, or finds it done
        assert_same_store(out, reference)
        assert sorted(os.listdir(out.parent)) == ["store"], f"write {n}: leftovers {os.listdir(out.parent)}"
    print(f"{which}: kill points {len(append_kill_points(writes))} of {writes} writes; states left: {seen}")
    assert seen.get("old generation", 0) >= 10 and seen.get("nothing", 0) + seen.get("new generation", 0) >= 1, seen


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_half_laid_out_store_of_an_older_labeldist_is_laid_out_again(tmp_path, dask_client, overwrite) -> None:
    """What the adversarial run found: a kill just after ``<out>/ids`` appeared (before creation was atomic) left
    a manifest and ``ids`` but no ``progress/blocks``, and every rerun, even with --overwrite, failed with
    ``No array found ... at path progress/blocks``. Such a store is now laid out again."""
    reference = tmp_path / "reference" / "store"
    job(str(reference), dask_client)
    out = tmp_path / "half" / "store"
    shutil.copytree(reference, out)
    for name in ("progress", "knn", "dense", "labels"):
        shutil.rmtree(out / name)
    manifest = json.loads((out / "zarr.json").read_text())
    manifest["attributes"]["labeldist"]["complete"] = False
    (out / "zarr.json").write_text(json.dumps(manifest))
    result = job(str(out), dask_client) if not overwrite else job_overwrite(str(out), dask_client)
    assert not result.reused and result.blocks_computed == result.blocks_total
    assert_same_store(out, reference)


def job_overwrite(out: str, client) -> object:
    from labeldist.distances.pose import PoseDistance
    from labeldist.engine import precompute
    from labeldist.labels.pose_files import read_mpii_csv
    from tests.system.kill_at_write import BLOCK_ROWS, CSV, N_ITEMS, K

    labels = read_mpii_csv(CSV).subset(slice(0, N_ITEMS))
    return precompute(
        labels,
        PoseDistance(),
        out,
        dataset="mpii120",
        k=K,
        dense=True,
        block_rows=BLOCK_ROWS,
        client=client,
        progress=False,
        overwrite=True,
    )
