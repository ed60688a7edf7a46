"""Docstrings as the reference: every function of the Python face has a NumPy-style docstring (Parameters,
Returns, and Examples for the library's functions). The examples themselves run in tests/project/test_doctests.py."""

from __future__ import annotations

import inspect
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
