"""The examples in the docstrings run: every module of the installed package ``labeldist`` (labeldist.api,
labeldist.client and labeldist.trainer included, from their folders at the top of the repository) whose source
holds a ``>>>`` example has its doctests run here, under the name it is imported by, in a folder laid out as the
examples assume a user's to be (``data/``, ``stores/mpii-pose``).

pytest's own ``--doctest-modules`` collects files by path, and would import ``api/main.py`` as ``api.main``, a
second copy of the module beside ``labeldist.api.main``; walking the package imports each module once, by its
real name.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: the installed package and the subpackages whose folders lie outside labeldist/ (pyproject's package-dir), which a
#: walk of labeldist/ alone does not reach
PACKAGES = ("labeldist", "labeldist.api", "labeldist.client", "labeldist.trainer")


def modules_with_examples() -> list[str]:
    """Every module of labeldist (subpackages in other folders included) whose source file holds ``>>>``."""
    found = set()
    for package in PACKAGES:
        root = importlib.import_module(package)
        names = [package] + [info.name for info in pkgutil.walk_packages(root.__path__, f"{package}.")]
        for name in names:
            spec = importlib.util.find_spec(name)
            origin = spec.origin if spec is not None else None
            if origin and origin.endswith(".py") and ">>>" in Path(origin).read_text(encoding="utf-8"):
                found.add(name)
    return sorted(found)


MODULES = modules_with_examples()


def test_modules_with_examples_are_found() -> None:
    """The walk reaches the subpackages that live outside labeldist/ (labeldist.trainer is trainer/)."""
    assert "labeldist.trainer.training.metrics" in MODULES and "labeldist.core.knn" in MODULES, MODULES
    assert {"labeldist", "labeldist.library", "labeldist.client.store", "labeldist.client.minibatch"} <= set(MODULES)
    assert len(MODULES) >= 20


@pytest.fixture(scope="module")
def example_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder as the examples assume a user's to be: ``data/`` (the repository's) and ``stores/mpii-pose`` (300
    MPII poses, dense); what the examples write lands in a copy of it, never in the checkout."""
    from tests.client.conftest import build_pose_store

    folder = tmp_path_factory.mktemp("examples")
    (folder / "data").symlink_to(ROOT / "data")
    build_pose_store(str(folder / "stores" / "mpii-pose"), 300, k=20, dense=True)
    return folder


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str, example_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, name) if t.examples]
    assert tests, f"{name} has '>>>' in its source but no doctest was found in it"
    work = tmp_path / "work"
    shutil.copytree(example_folder, work, symlinks=True)
    monkeypatch.chdir(work)
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed (output above)"
