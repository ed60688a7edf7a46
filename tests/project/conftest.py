"""Fixtures of the project tests: the wheel built from a copy of the checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the source (a build/ folder left in the checkout could leak stale files)."""
    source, out = tmp_path_factory.mktemp("source") / "labeldist", tmp_path_factory.mktemp("dist")
    skip = shutil.ignore_patterns(
        ".git",
        ".venv",
        "build",
        "dist",
        "stores",
        "models",
        "test-artifacts",
        "*.egg-info",
        "__pycache__",
        ".*cache",
        ".whl",
        ".gpu",
    )
    shutil.copytree(ROOT, source, ignore=skip)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(out),
            str(source),
        ],
        cwd=out,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert "Package would be ignored" not in built.stdout + built.stderr, "setuptools warns of package data left out"
    (found,) = out.glob("labeldist-*.whl")
    return found
