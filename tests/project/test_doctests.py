"""The examples in the docstrings run: every module of the installed package ``labeldist`` (labeldist.api,
labeldist.client and labeldist.trainer included, from their folders at the top of the repository) whose source
holds a ``>>>`` example has its doctests run here, under the name it is imported by.

pytest's own ``--doctest-modules`` collects files by path, and would import ``api/main.py`` as ``api.main``, a
second copy of the module beside ``labeldist.api.main``; walking the package imports each module once, by its
real name.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

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
    assert len(MODULES) >= 20


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, name) if t.examples]
    assert tests, f"{name} has '>>>' in its source but no doctest was found in it"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed (output above)"
