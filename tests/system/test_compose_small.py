"""docker-compose.yml for real: ``tools/compose_small.sh`` (``make compose-small``) builds the
image, brings the system up on a small subset with podman-compose (scheduler, two workers, the main job on the
cluster, the api, a short training run through it), queries the api from the host, and tears it down.

It needs podman (``../shared/tools/podman-setup`` installs it on Debian) and several minutes (the image's build the
first time, then the system), so it runs only when asked: ``LABELDIST_COMPOSE_TEST=1``. Otherwise, and wherever
podman cannot run, it is skipped, saying why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _why_not() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed (../shared/tools/podman-setup installs it on Debian); Docker has no engine here"
    info = subprocess.run(["podman", "info"], capture_output=True, text=True)
    if info.returncode != 0:
        return f"podman cannot run containers here: {info.stderr.strip().splitlines()[-1:]}"
    if os.environ.get("LABELDIST_COMPOSE_TEST") != "1":
        return "the compose system takes minutes: set LABELDIST_COMPOSE_TEST=1 to run it (make compose-small)"
    return None


@pytest.mark.slow
def test_the_compose_system_runs_on_a_small_subset() -> None:
    why = _why_not()
    if why:
        pytest.skip(why)
    compose = Path(sys.executable).parent / "podman-compose"
    done = subprocess.run(
        ["sh", "tools/compose_small.sh"],
        cwd=REPO,
        env={**os.environ, "COMPOSE": str(compose)},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert '"name":"mpii-pose"' in output.replace(" ", "") and '"indices":[' in output.replace(" ", ""), output[-3000:]
    assert "== done" in output
