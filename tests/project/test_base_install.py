"""The engine-only install: ``pip install labeldist`` with no extras, in a clean virtual
environment, is enough for a Dask worker of the numeric kinds, and no more.

Found: installing labeldist to run a Dask worker for pose or vector distances pulled in torch, torchvision,
sentence-transformers and FastAPI, a 6.9 GB virtualenv.

The clean venv gets the checkout (a copy: an in-tree build would leave build/ and egg-info behind) through
``pip install`` with pip's own resolution from the configured package registries (pip's cache makes a rerun
quick). From an empty folder it precomputes a pose store and a kNN-only vectors store (FAISS) on a Dask
LocalCluster with ``--workers 1``, and both pass ``labeldist verify`` and equal the stores this test run's full
environment makes from the same files. torch, fastapi and sentence_transformers cannot be imported there, and
``labeldist serve``, ``trainer`` and the text kinds stop with the one line that names their extra. The sizes of
both environments' site-packages are printed (docs/guide.md, "Install", quotes them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path

import numpy as np
import pytest

from labeldist.core.extras import install_command
from tests.conftest import DATA

INSTALL_SERVE, INSTALL_TRAIN, INSTALL_STS = (install_command(e) for e in ("serve", "train", "sts"))

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "torchvision", "fastapi", "uvicorn", "sentence_transformers", "transformers", "gensim")

pytestmark = pytest.mark.slow


def du_bytes(folder: str | Path) -> int:
    """Disk usage of ``folder`` as ``du`` counts it (blocks, each file once)."""
    out = subprocess.run(["du", "-sk", str(folder)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) * 1024


@pytest.fixture(scope="module")
def base_env(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A clean venv holding ``pip install <checkout>``, no extras: its bin folder, purelib and the install time."""
    root = tmp_path_factory.mktemp("base-install")
    source = root / "labeldist"
    skip = shutil.ignore_patterns(
        ".git",
        ".venv",
        "build",
        "dist",
        "stores",
        "models",
        "runs",
        "test-artifacts",
        "*.egg-info",
        "__pycache__",
        ".*cache",
        ".gpu",
    )
    shutil.copytree(ROOT, source, ignore=skip)
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    started = time.perf_counter()
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", str(source)],
        capture_output=True,
        text=True,
        timeout=1800,
        env=clean_env(),
    )
    assert install.returncode == 0, install.stdout + install.stderr
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return {"bin": env_dir / "bin", "purelib": purelib, "install_s": time.perf_counter() - started}


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def run(command: list, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(c) for c in command], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_the_base_install_precomputes_pose_and_vectors_stores_on_a_local_cluster(
    base_env: dict, tmp_path: Path, capsys
) -> None:
    started = time.perf_counter()
    bin_, work = base_env["bin"], tmp_path / "work"
    work.mkdir()
    # nothing of the checkout or of this environment: the commands run the clean venv's own copy
    where = run([bin_ / "python", "-c", "import labeldist; print(labeldist.__file__)"], work)
    assert where.returncode == 0 and where.stdout.startswith(base_env["purelib"]), where.stdout + where.stderr

    # the heavy packages are not there
    probe = (
        "import importlib, json, sys\n"
        "found = []\n"
        "for m in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "        found.append(m)\n"
        "    except ModuleNotFoundError:\n"
        "        pass\n"
        "print(json.dumps(found))"
    )
    imported = run([bin_ / "python", "-c", probe, *HEAVY], work)
    assert imported.returncode == 0 and json.loads(imported.stdout) == [], imported.stdout + imported.stderr

    # every built-in kind is listed, the text kinds included
    listed = run([bin_ / "labeldist", "precompute", "--help"], work)
    assert listed.returncode == 0, listed.stderr
    assert "{captions,layout,pose,sentences,vectors}" in listed.stdout, listed.stdout

    # the inputs: 300 shipped MPII poses; 2,500 random 8-d vectors with ids, as Parquet
    poses = work / "poses.csv"
    poses.write_text("\n".join((DATA / "mpii" / "mpii_valid_2958.csv").read_text().splitlines()[:301]) + "\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = np.random.default_rng(0).normal(size=(2500, 8))
    pq.write_table(
        pa.table({"id": [f"v{i}" for i in range(2500)], **{f"x{j}": x[:, j] for j in range(8)}}),
        work / "vectors.parquet",
    )
    jobs = {
        "pose": ["pose", poses, "--normalization", "center_scale", "--k", "10"],
        "vectors": ["vectors", work / "vectors.parquet", "--knn-only", "--k", "10"],
    }
    for name, job in jobs.items():
        made = run([bin_ / "labeldist", "precompute", *job, "--workers", "1", "--out", work / "base" / name], work)
        assert made.returncode == 0, made.stdout + made.stderr
        assert "Dask dashboard: http://" in made.stderr, made.stderr  # a LocalCluster ran it
        assert ": complete, " in made.stdout, made.stdout
        checked = run([bin_ / "labeldist", "verify", work / "base" / name, "--sample", "100"], work)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        report = json.loads(checked.stdout)
        assert report["ok"] and report["entries_checked"] > 0 and not report["problems"], report
        # the same store as the full install makes
        full = run(
            [
                sys.executable,
                "-m",
                "labeldist.cli",
                "precompute",
                *job,
                "--workers",
                "1",
                "--no-progress",
                "--out",
                work / "full" / name,
            ],
            work,
        )
        assert full.returncode == 0, full.stdout + full.stderr
        from labeldist.store import StoreReader

        base_reader, full_reader = StoreReader(str(work / "base" / name)), StoreReader(str(work / "full" / name))
        for a, b in zip(base_reader.knn(), full_reader.knn()):
            np.testing.assert_array_equal(a, b)
        assert base_reader.has_dense == (name == "pose")
        if base_reader.has_dense:
            np.testing.assert_array_equal(base_reader.dense_rows(0, 300), full_reader.dense_rows(0, 300))
    # and the vectors' lists are the exact nearest ones
    from scipy.spatial.distance import cdist

    idx, dist = StoreReader(str(work / "base" / "vectors")).knn()
    d = cdist(x, x)
    np.fill_diagonal(d, np.inf)
    np.testing.assert_array_equal(idx, np.argsort(d, axis=1, kind="stable")[:, :10])
    np.testing.assert_allclose(dist, np.sort(d, axis=1)[:, :10], rtol=1e-6)

    # what needs an extra says which, in one line, exit status 2
    served = run([bin_ / "labeldist", "serve", "--stores", work / "base"], work, timeout=120)
    assert served.returncode == 2 and one_line(served.stderr).startswith(
        "labeldist: error: labeldist serve needs the [serve] extra: " + INSTALL_SERVE + " (not installed: fastapi"
    ), served.stderr
    trainer = run([bin_ / "trainer", "fit", "--help"], work, timeout=120)
    assert trainer.returncode == 2 and one_line(trainer.stderr).startswith(
        "trainer: error: trainer needs the [train] extra: " + INSTALL_TRAIN + " (not installed: torch"
    ), trainer.stderr
    captions = run(
        [
            bin_ / "labeldist",
            "precompute",
            "captions",
            DATA / "coco" / "coco_karpathy_test.json",
            "--out",
            work / "captions",
        ],
        work,
        timeout=120,
    )
    assert captions.returncode == 2 and one_line(captions.stderr).startswith(
        "labeldist: error: labeldist precompute captions needs the [sts] extra: " + INSTALL_STS
    ), captions.stderr
    assert not (work / "captions").exists()

    # the sizes: this clean base install against this test run's full environment ([all,dev], the Makefile's)
    base, full = du_bytes(base_env["purelib"]), du_bytes(sysconfig.get_paths()["purelib"])
    with capsys.disabled():
        print(
            f"\nbase install (pip install labeldist): site-packages {base / 2**20:,.0f} MiB; full environment "
            f"([all,dev], {sysconfig.get_paths()['purelib']}): {full / 2**30:,.2f} GiB, {full / base:.1f} times "
            f"as large; install {base_env['install_s']:.0f} s, the rest {time.perf_counter() - started:.0f} s"
        )
    assert base < 1.2 * 2**30, f"the base install takes {base / 2**20:,.0f} MiB"
    assert base * 2 < full, (base, full)
