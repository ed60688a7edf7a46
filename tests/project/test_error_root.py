"""One error root: every exception class the project defines derives from ``labeldist.errors.LabeldistError`` (and
keeps the built-in base it had, so code catching ``ValueError`` still does), so that each command catches one type
and prints it as one line."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import labeldist
from labeldist.errors import LabeldistError, UsageError


def project_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined in a module of the installed package (labeldist, labeldist.api, .client,
    .trainer), by its qualified name."""
    found = {}
    names = [info.name for info in pkgutil.walk_packages(labeldist.__path__, "labeldist.")]
    for top in ("labeldist.api", "labeldist.client", "labeldist.trainer"):  # their folders lie beside labeldist/
        package = importlib.import_module(top)
        names += [info.name for info in pkgutil.walk_packages(package.__path__, f"{top}.")]
    for module_name in sorted(set(names)):
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module_name:
                found[f"{module_name}.{name}"] = value
    return found


def test_every_error_class_derives_from_the_root() -> None:
    found = project_exceptions()
    assert len(found) >= 30, sorted(found)  # the walk reached the sub-packages (api, client, trainer)
    strays = sorted(name for name, cls in found.items() if not issubclass(cls, LabeldistError))
    assert strays == [], strays


def test_the_root_keeps_the_built_in_bases() -> None:
    from labeldist.client import InputError, ServiceError
    from labeldist.labels.base import LabelError
    from labeldist.store import StoreError

    assert issubclass(UsageError, ValueError) and issubclass(LabelError, ValueError)
    assert issubclass(InputError, ValueError) and issubclass(StoreError, RuntimeError)
    assert issubclass(ServiceError, RuntimeError)


def test_each_command_catches_the_root_in_one_place() -> None:
    """labeldist's and trainer's main() catch LabeldistError, not a hand-kept list of classes."""
    from labeldist import cli
    from labeldist.trainer import cli as trainer_cli

    for module in (cli, trainer_cli):
        source = inspect.getsource(module.main)
        assert "except (LabeldistError" in source or "except LabeldistError" in source, module.__name__


def test_product_code_raises_no_bare_value_error() -> None:
    """Input errors are the project's own: ``UsageError`` (a ``ValueError``) or a more specific class under the root,
    so that every command prints them as one line; no module of the product raises a bare ``ValueError``. Read from
    the sources' syntax trees, so that a docstring or a comment that quotes one is not counted."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    bare = []
    for folder in ("labeldist", "api", "trainer", "client"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                raised = node.exc if isinstance(node, ast.Raise) else None
                if isinstance(raised, ast.Call):
                    raised = raised.func
                if isinstance(raised, ast.Name) and raised.id == "ValueError":
                    bare.append(f"{path.relative_to(root)}:{node.lineno}")
    assert bare == [], bare
