"""Docstrings as the reference: every function of the Python face has a NumPy-style docstring (Parameters,
Returns, and Examples for the library's functions), and every example in the face's docstrings runs as written,
from a folder where ``stores/mpii-pose`` and ``data/`` lie as the examples assume."""

from __future__ import annotations

import doctest
import importlib
import inspect
import os
import shutil
from pathlib import Path

import pytest

import labeldist as ld

ROOT = Path(__file__).resolve().parents[2]

#: the modules whose examples run here: the face and what it names
MODULES = (
    "labeldist",
    "labeldist.library",
    "labeldist.client.store",
    "labeldist.client.minibatch",
    "labeldist.client.pml",
    "labeldist.distances",
    "labeldist.labels",
    "labeldist.labels.vectors",
)


def face_functions() -> list[tuple[str, object]]:
    """The library's functions and the public methods of Store and Minibatch, by name."""
    from labeldist import library

    found = [(f"ld.{name}", getattr(ld, name)) for name in library.__all__]
    for cls in (ld.Store, ld.Minibatch):
        for name, member in vars(cls).items():
            if not name.startswith("_") and inspect.isfunction(member):
                found.append((f"{cls.__name__}.{name}", member))
    return found


def sections(doc: str) -> set[str]:
    """The NumPy-style section headings of a docstring: a line followed by a line of dashes as long."""
    lines = inspect.cleandoc(doc).splitlines()
    return {a.strip() for a, b in zip(lines, lines[1:]) if b.strip() and set(b.strip()) == {"-"}}


@pytest.mark.parametrize("name, function", face_functions(), ids=[n for n, _ in face_functions()])
def test_every_face_function_has_a_numpy_docstring(name: str, function) -> None:
    doc = function.__doc__ or ""
    assert doc.strip(), f"{name} has no docstring"
    found = sections(doc)
    parameters = [p for p in inspect.signature(function).parameters if p not in ("self", "cls")]
    if parameters:
        assert "Parameters" in found, f"{name}: no Parameters section ({sorted(found)})"
        documented = inspect.cleandoc(doc).split("Parameters", 1)[1]
        missing = [p for p in parameters if p not in documented]
        assert not missing, f"{name}: parameters not documented: {missing}"
    returns = inspect.signature(function).return_annotation
    if returns not in (None, "None", inspect.Signature.empty):
        assert "Returns" in found, f"{name}: no Returns section"
    if name.startswith("ld."):
        assert "Examples" in found, f"{name}: no Examples section"


def test_the_section_finder_finds_numpy_headings() -> None:
    doc = """Summary.

    Parameters
    ----------
    x : int

    Returns
    -------
    int
    """
    assert sections(doc) == {"Parameters", "Returns"}
    assert sections("Only prose.\n\nNo headings -- here.") == set()


@pytest.fixture(scope="module")
def example_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder as the examples assume: ``data/`` (the repository's) and ``stores/mpii-pose``."""
    folder = tmp_path_factory.mktemp("examples")
    (folder / "data").symlink_to(ROOT / "data")
    from tests.client.conftest import build_pose_store

    build_pose_store(str(folder / "stores" / "mpii-pose"), 300, k=20, dense=True)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("module_name", MODULES)
def test_the_examples_in_the_docstrings_run(module_name: str, example_folder: Path, tmp_path: Path) -> None:
    module = importlib.import_module(module_name)
    work = tmp_path / "work"
    shutil.copytree(example_folder, work, symlinks=True)
    tests = [t for t in doctest.DocTestFinder().find(module, module_name) if t.examples]
    assert tests or module_name in ("labeldist.distances",), f"{module_name} has no examples"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    before = os.getcwd()
    os.chdir(work)
    try:
        for test in tests:
            runner.run(test)
    finally:
        os.chdir(before)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {module_name} failed (above)"
