"""The import layers of docs/design.md, held over the source: no module imports a module of a higher layer, and no
group of modules imports itself round a cycle. Every ``import`` and ``from ... import`` counts, inside a function,
a class or an ``if TYPE_CHECKING:`` block included: an import put off to run time is still a dependency, and it is
how the cycles this test replaced were hidden (8 two-module cycles, all inside functions).

The layers, lowest first. A module may import modules of its own layer and of the layers below it. The most
specific prefix decides a module's layer (``labeldist.trainer.experiments`` is research, the rest of
``labeldist.trainer`` the trainer). A new module must be placed here: the test names any module that has no layer.

Imports by name at run time (``importlib.import_module``, a kind's ``"module:Class"`` distance, entry points) are
not seen here; the registry (``labeldist.kinds``) makes those, and only downwards.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parents[2]
#: where each installed package's source lies in the repository (pyproject's package-dir)
SOURCES = {
    "labeldist": "labeldist",
    "labeldist.api": "api",
    "labeldist.client": "client",
    "labeldist.trainer": "trainer",
}
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("labeldist", "labeldist.errors", "labeldist.core")),
    ("labels", ("labeldist.labels",)),
    ("sentence models", ("labeldist.sts",)),
    ("distances", ("labeldist.distances",)),
    ("kinds", ("labeldist.kinds", "labeldist.testing")),
    ("store", ("labeldist.store", "labeldist.view")),
    ("engine", ("labeldist.engine",)),
    ("api", ("labeldist.api",)),
    ("client", ("labeldist.client",)),
    # the Python face (`import labeldist as ld`): the commands' work as functions, answering the client's Store
    ("library", ("labeldist.library",)),
    ("trainer", ("labeldist.trainer",)),
    ("commands", ("labeldist.cli", "labeldist.commands", "labeldist.entrypoints")),
    # research scripts use the product; nothing of the product, the commands included, imports them
    ("research", ("labeldist.trainer.experiments",)),
]


def find_modules(sources: dict[str, Path]) -> dict[str, Path]:
    """Every module of the packages ``sources`` (package name -> its folder), by its import name."""
    modules = {}
    for package, folder in sources.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The project modules module ``name`` imports, anywhere in its source, each with the line of its first
    import. ``from a.b import c`` imports ``a.b.c`` where that is a module, else ``a.b``."""

    def known(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from its package, one level up per extra dot
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            module = known(target)
            if module is not None and module != name:
                found.setdefault(module, node.lineno)
    return found


def layer_of(module: str, layers: list[tuple[str, tuple[str, ...]]]) -> int | None:
    """The position in ``layers`` of the longest prefix that ``module`` falls under, None if none does."""
    best: tuple[int, int] | None = None
    for position, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (position, len(prefix))
    return None if best is None else best[0]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (SciPy's csgraph): each is a set of modules that
    import each other round a cycle, sorted; the components in the order of their first module."""
    names = sorted(set(graph) | {target for targets in graph.values() for target in targets})
    position = {name: i for i, name in enumerate(names)}
    edges = [(position[a], position[b]) for a, targets in graph.items() for b in targets]
    rows, cols = zip(*edges) if edges else ((), ())
    matrix = coo_matrix((np.ones(len(edges)), (rows, cols)), shape=(len(names), len(names)))
    _, component = connected_components(matrix, directed=True, connection="strong")
    groups: dict[int, list[str]] = {}
    for name, label in zip(names, component):
        groups.setdefault(int(label), []).append(name)
    return sorted(group for group in groups.values() if len(group) > 1)


def layer_problems(sources: dict[str, Path], layers: list[tuple[str, tuple[str, ...]]]) -> list[str]:
    """What breaks the layers in the source: modules with no layer, imports of a higher layer, cycles."""
    modules = find_modules(sources)
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    problems = [
        f"{name} ({path}) has no layer: add it to LAYERS in tests/project/test_layers.py and to docs/design.md"
        for name, path in modules.items()
        if layer_of(name, layers) is None
    ]
    for name, imported in sorted(graph.items()):
        mine = layer_of(name, layers)
        for target, line in sorted(imported.items()):
            theirs = layer_of(target, layers)
            if mine is not None and theirs is not None and theirs > mine:
                problems.append(
                    f"{modules[name]}:{line}: {name} ({layers[mine][0]}) imports {target} "
                    f"({layers[theirs][0]}), a higher layer"
                )
    for component in cycles({name: set(imported) for name, imported in graph.items()}):
        problems.append(f"import cycle: {' <-> '.join(component)}")
    return problems


def test_the_source_keeps_its_layers() -> None:
    problems = layer_problems({package: ROOT / folder for package, folder in SOURCES.items()}, LAYERS)
    assert not problems, "\n".join(problems)


#: the modules at the root of labeldist/: the package's face, the error root and the entry points (the commands, their
#: console-script guards, and the plugin authors' DistanceSuite); every other module lives in a folder of its layer
ROOT_MODULES = {"__init__", "errors", "cli", "entrypoints", "library", "testing"}


def test_the_layers_are_folders() -> None:
    """The root of labeldist/ holds only :data:`ROOT_MODULES`, and every other name in LAYERS is a folder."""
    assert {path.stem for path in (ROOT / "labeldist").glob("*.py")} == ROOT_MODULES
    modules = find_modules({package: ROOT / folder for package, folder in SOURCES.items()})
    named = [prefix for _, prefixes in LAYERS for prefix in prefixes]
    at_root = {"labeldist", *(f"labeldist.{name}" for name in ROOT_MODULES - {"__init__"})}
    modules_named = [prefix for prefix in named if prefix not in at_root and modules[prefix].name != "__init__.py"]
    assert not modules_named, f"LAYERS names modules, not folders: {modules_named}"


def test_every_layer_is_in_the_design_doc() -> None:
    """docs/design.md lists the same layers and modules as LAYERS."""
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    missing = [f"{layer}: {prefix}" for layer, prefixes in LAYERS for prefix in prefixes if f"`{prefix}`" not in design]
    assert not missing, f"docs/design.md does not name: {missing}"


def _tree(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return {"pkg": tmp_path / "pkg"}


TOY_LAYERS = [("low", ("pkg", "pkg.low")), ("high", ("pkg.high",))]


def test_a_clean_toy_tree_passes(tmp_path: Path) -> None:
    sources = _tree(tmp_path, {"__init__.py": "", "low.py": "import os\n", "high.py": "from pkg import low\n"})
    assert layer_problems(sources, TOY_LAYERS) == []


@pytest.mark.parametrize(
    "low",
    [
        "from pkg.high import thing\n",
        "def late():\n    from pkg import high\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.high\n",
        "class A:\n    def f(self):\n        from .high import thing\n",
    ],
    ids=["top", "in-function", "type-checking", "relative-in-method"],
)
def test_an_upward_import_is_found_wherever_it_hides(tmp_path: Path, low: str) -> None:
    sources = _tree(tmp_path, {"__init__.py": "", "low.py": low, "high.py": "from pkg import low\n"})
    problems = layer_problems(sources, TOY_LAYERS)
    assert any("pkg.low (low) imports pkg.high (high), a higher layer" in p for p in problems), problems
    assert "import cycle: pkg.high <-> pkg.low" in problems


def test_a_cycle_within_a_layer_is_found(tmp_path: Path) -> None:
    sources = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "low.py": "def f():\n    from pkg import a\n",
            "a.py": "import pkg.b\n",
            "b.py": "from . import low\n",
            "high.py": "",
        },
    )
    problems = layer_problems(sources, [("low", ("pkg",)), ("high", ("pkg.high",))])
    assert problems == ["import cycle: pkg.a <-> pkg.b <-> pkg.low"]


def test_a_module_without_a_layer_is_named(tmp_path: Path) -> None:
    sources = _tree(tmp_path, {"__init__.py": "", "low.py": "", "high.py": "", "extra/__init__.py": ""})
    problems = layer_problems(sources, [("low", ("pkg.low",)), ("high", ("pkg.high",))])
    assert any(p.startswith("pkg (") and "has no layer" in p for p in problems)
    assert any(p.startswith("pkg.extra (") and "has no layer" in p for p in problems)
