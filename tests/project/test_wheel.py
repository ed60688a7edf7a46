"""The built wheel: it claims the top-level name ``labeldist`` alone (a user's own ``api`` or ``trainer``
module is never shadowed), installs in a clean virtual environment, and its two commands run from there.

The clean venv gets the wheel and nothing else from the repository; its third-party dependencies (numpy, torch,
...) come from this test run's own environment through a path file, because the registries may not be reachable
here. The commands run from an empty folder, so nothing is imported from the checkout.
"""

from __future__ import annotations

import os
import signal
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

from tests.processes import free_port, kill, wait_healthy

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_claims_only_the_name_labeldist(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"labeldist"}, top
    for module in (
        "labeldist/api/main.py",
        "labeldist/api/static/ui.html",
        "labeldist/trainer/cli.py",
        "labeldist/trainer/losses/ladder.py",
        "labeldist/store/__init__.py",
        "labeldist/store/reading.py",
    ):
        assert module in names, module
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    # trainer: labeldist.trainer.cli:main behind the one line naming [train] where torch is missing
    # (labeldist.entrypoints)
    assert "labeldist = labeldist.cli:main" in text and "trainer = labeldist.entrypoints:trainer_main" in text


def test_the_wheel_installs_in_a_clean_venv_and_its_commands_run(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "clean"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # the dependencies from this environment: its site-packages, but not the editable install of the checkout
    deps = [p for p in {sysconfig.get_paths()["purelib"], *site.getsitepackages()} if Path(p).is_dir()]
    (Path(purelib) / "deps.pth").write_text("\n".join(deps) + "\n")
    # with an extra, resolved by pip against what the venv sees (no index: nothing is downloaded, so a requirement
    # of the wheel's metadata that nothing satisfies fails here)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "-q", f"{wheel}[serve]"],
        check=True,
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import labeldist, labeldist.api.main, labeldist.trainer.cli; print(labeldist.__file__)"
    where = subprocess.run([python, "-c", code], cwd=work, env=env, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(purelib), where.stdout  # the wheel's copy, not the checkout
    for command in ("labeldist", "trainer"):
        run = subprocess.run([env_dir / "bin" / command, "--help"], cwd=work, env=env, capture_output=True, text=True)
        assert run.returncode == 0 and "usage:" in run.stdout, run.stderr
    # the [serve] extra's command serves from the venv
    port = free_port()
    (work / "stores").mkdir()
    serve = [env_dir / "bin" / "labeldist", "serve", "--stores", work / "stores", "--port", str(port)]
    server = subprocess.Popen(serve, cwd=work, env=env, start_new_session=True)
    try:
        wait_healthy(server, f"http://127.0.0.1:{port}")
    finally:
        kill(server, signal.SIGTERM)
