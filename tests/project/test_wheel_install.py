"""The documented install runs the docs: the wheel built from a copy of the checkout, installed in a clean virtual
environment with no package index, runs README's own-data blocks unchanged in an empty folder far from the checkout
with ``[all]``, and docs/training.md's Python blocks with ``[train]`` alone (the extra that page names); and what
a wheel must carry that a checkout has beside it works there: the papers' STS-B scorer (coarse_to_fine calibrates
on the shipped STS-B files), ``labeldist verify`` (the store contract), ``--version``.

Found: after ``pip install 'dist/labeldist-...whl[all]'`` the own-data block stopped at ``import pandas`` (pandas
was only in [dev]), and ``precompute sentences --scorer coarse_to_fine`` at "no STS-B file given" (the files were
in the repository's data/, not in the package).

No index: this machine's installed distributions stand in for the registry. The clean venv sees exactly the
distributions the install requires, read from the wheel's own metadata and resolved through their requirements
(``tools/install_sizes.py``'s closure, markers evaluated), each linked in from this environment (its RECORD's
top-level files): a module a block imports that no requirement brings is not there, as after a real install.
``pip check`` confirms that every requirement is met. The venv has no other site-packages and the folder is
not the checkout, so nothing is imported from the repository.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from tests.conftest import DATA
from tests.project.test_readme_own_data import block
from tools.install_sizes import closure

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def wheel_requirements(wheel: Path) -> list[str]:
    """The Requires-Dist lines of the wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode("utf-8")
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def link_distributions(names: set[str], target: Path) -> None:
    """Link each distribution's top-level files and folders (from its RECORD) into ``target``."""
    target.mkdir()
    for name in sorted(names):
        dist = metadata.distribution(name)
        site = Path(dist.locate_file(""))
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            if not (target / top).exists() and (site / top).exists():
                (target / top).symlink_to(site / top)


def make_venv(wheel: Path, extras: set[str], root: Path) -> dict[str, Path]:
    """A clean venv holding the labeldist wheel (``--no-index --no-deps``) and, on its path, exactly the
    distributions ``labeldist[extras]`` requires (``pip check`` passes); its bin folder, python and purelib."""
    names = closure(wheel_requirements(wheel), extras)
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    link_distributions(names, root / "deps")
    (purelib / "deps.pth").write_text(f"{root / 'deps'}\n")
    env = clean_env()
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    install = subprocess.run(
        [*pip, "install", "-q", "--no-index", "--no-deps", str(wheel)], capture_output=True, text=True, env=env
    )
    assert install.returncode == 0, install.stdout + install.stderr
    check = subprocess.run([*pip, "check"], capture_output=True, text=True, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    return {"bin": env_dir / "bin", "python": python, "root": root, "purelib": purelib, "names": names}


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel with ``[all]``: what README's install line makes."""
    made = make_venv(wheel, {"all"}, tmp_path_factory.mktemp("wheel-all"))
    assert {"torch", "pandas", "fastapi", "sentence-transformers", "pytorch-metric-learning"} <= made["names"]
    return made


@pytest.fixture(scope="module")
def installed_train(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel with ``[train]``: what docs/training.md's "Train with your own code" names."""
    made = make_venv(wheel, {"train"}, tmp_path_factory.mktemp("wheel-train"))
    assert "torch" in made["names"] and "fastapi" not in made["names"] and "sentence-transformers" not in made["names"]
    return made


def clean_env() -> dict[str, str]:
    """This process's environment without what points Python at the checkout or at settings of its own."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("LABELDIST_")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def run_in(installed: dict[str, Path], folder: Path, *command: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = clean_env()
    env["PATH"] = f"{installed['bin']}{os.pathsep}/usr/bin{os.pathsep}/bin"
    return subprocess.run(list(command), cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_wheel_holds_every_product_package_and_no_research_script(wheel: Path) -> None:
    """Every package folder of the checkout is in the wheel, installed where pyproject maps it (api/, client/ and
    trainer/ under labeldist/), but trainer/experiments: research code run from the checkout, which no product
    module imports (tests/project/test_layers.py)."""
    with zipfile.ZipFile(wheel) as z:
        in_wheel = {n.rsplit("/", 1)[0] for n in z.namelist() if n.endswith("/__init__.py")}
    folders = {
        "labeldist": "labeldist",
        "api": "labeldist/api",
        "client": "labeldist/client",
        "trainer": "labeldist/trainer",
    }
    in_checkout = {
        "/".join([installed_as, *init.parent.relative_to(ROOT / folder).parts])
        for folder, installed_as in folders.items()
        for init in (ROOT / folder).rglob("__init__.py")
    }
    assert in_checkout - in_wheel == {"labeldist/trainer/experiments"}
    assert in_wheel <= in_checkout


def test_labeldist_comes_from_the_wheel_not_the_checkout(installed: dict[str, Path], tmp_path: Path) -> None:
    where = run_in(installed, tmp_path, "python", "-c", "import labeldist, pandas; print(labeldist.__file__)")
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed["purelib"]), where.stdout
    version = run_in(installed, tmp_path, "labeldist", "--version")
    assert version.returncode == 0 and re.fullmatch(r"labeldist \d+\.\d+\.\d+\S*\n", version.stdout), version


def test_readme_own_data_blocks_run_unchanged(installed: dict[str, Path], tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    shell = block(text, "<!-- example: own-data -->", "bash")
    python = block(text, "<!-- example: own-data-python -->", "python")
    made = run_in(installed, tmp_path, "bash", "-e", "-c", shell)
    assert made.returncode == 0, made.stdout + made.stderr
    (tmp_path / "own.py").write_text(python)
    ran = run_in(installed, tmp_path, "python", "own.py")
    assert ran.returncode == 0, ran.stderr
    assert re.search(r"^recall@5 of the label neighbours: 0\.\d\d$", ran.stdout, re.M), ran.stdout
    verified = run_in(installed, tmp_path, "labeldist", "verify", "stores/mine", "--sample", "50")
    assert verified.returncode == 0 and '"problems": []' in verified.stdout, verified.stdout + verified.stderr


def test_the_papers_sentence_scorer_runs_from_the_wheel(installed: dict[str, Path], tmp_path: Path) -> None:
    """coarse_to_fine calibrates its CBoW gate on STS-B's training file, shipped in the package."""
    (tmp_path / "mine.txt").write_text(
        "A man rides a horse.\nA dog runs on the beach.\nA woman rides a horse on a beach.\nTwo cats sleep.\n"
        "A child kicks a red ball.\nAn old man reads a newspaper.\n"
    )
    made = run_in(
        installed,
        tmp_path,
        "labeldist",
        "precompute",
        "sentences",
        "mine.txt",
        "--scorer",
        "coarse_to_fine",
        "--out",
        "stores/mine",
        "--k",
        "3",
        "--workers",
        "1",
        "--no-progress",
    )
    assert made.returncode == 0, made.stdout + made.stderr
    info = run_in(installed, tmp_path, "labeldist", "info", "stores/mine", "--json")
    assert '"file": "data/stsb/sts-train.csv"' in info.stdout, info.stdout


def test_what_no_requirement_brings_is_not_there(installed: dict[str, Path], tmp_path: Path) -> None:
    """The venv is no copy of this environment: the test tools ([dev]: pytest, schemathesis, hypothesis) are absent
    (xarray is there: [all] holds [io], for Store.to_xarray)."""
    for module in ("pytest", "schemathesis", "hypothesis"):
        tried = run_in(installed, tmp_path, "python", "-c", f"import {module}")
        assert tried.returncode == 1 and "ModuleNotFoundError" in tried.stderr, module


def training_block(marker: str) -> str:
    text = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    assert text.count(marker) == 1, marker
    return re.search(re.escape(marker) + r"\s*```python\n(.*?)```", text, re.DOTALL).group(1)


def test_the_training_docs_blocks_run_with_train_alone(installed_train: dict[str, Path], tmp_path: Path) -> None:
    """docs/training.md's PML and held-out blocks, unchanged, on the store they name (stores/mpii-pose, made
    there from 300 MPII poses), in a venv of the wheel with [train] and nothing more."""
    rows = (DATA / "mpii" / "mpii_valid_2958.csv").read_text().splitlines()[:301]
    (tmp_path / "mpii.csv").write_text("\n".join(rows) + "\n")
    made = run_in(
        installed_train,
        tmp_path,
        "labeldist",
        "precompute",
        "pose",
        "mpii.csv",
        "--normalization",
        "center_scale",
        "--out",
        "stores/mpii-pose",
        "--workers",
        "1",
        "--no-progress",
    )
    assert made.returncode == 0, made.stdout + made.stderr
    pml = (
        training_block("<!-- example: train-with-pml -->")
        + "\nprint(len(losses), sum(losses[:50]) / 50, sum(losses[-50:]) / 50)\n"
    )
    (tmp_path / "pml.py").write_text(pml)
    ran = run_in(installed_train, tmp_path, "python", "pml.py")
    assert ran.returncode == 0, ran.stderr
    steps, first, last = ran.stdout.split()
    assert int(steps) == 300 and float(last) < float(first), ran.stdout
    (tmp_path / "hold.py").write_text(training_block("<!-- example: hold-out-pool -->"))
    ran = run_in(installed_train, tmp_path, "python", "hold.py")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "36,000 members, 0 of them test items\n", ran.stdout
