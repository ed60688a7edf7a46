"""One store boundary (issue 13): only labeldist/store.py knows the Zarr layout of a store. The CLI, verify, the
engine and the service read and write stores through its functions and StoreReader, so a check made there (a
checksum, a missing chunk, a NaN never written) cannot be bypassed by a reader that indexes the group itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("labeldist", "api", "client", "trainer")
#: modules that may import zarr for something that is not a store, and why
NOT_STORES = {
    "client/data.py": "reads a user's feature array (.zarr), not a labeldist store",
}
#: the layout's array paths: a string naming one outside store.py is a reader that knows the layout
LAYOUT = re.compile(r"^(knn/(indices|distances)|dense/distances|progress/\w+|labels/\w+|work/upper)$")


def _modules() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


def test_only_store_py_imports_zarr() -> None:
    offenders = []
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        if rel == "labeldist/store.py" or rel in NOT_STORES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "zarr" or n.startswith("zarr.") for n in names):
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, f"only labeldist/store.py may open a store with zarr: {offenders}"


def test_no_module_but_store_py_names_an_array_of_the_layout() -> None:
    offenders = []
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        if rel == "labeldist/store.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and LAYOUT.match(node.value):
                offenders.append(f"{rel}:{node.lineno} {node.value!r}")
            # reader.group["knn/indices"], reader._group: the group indexed from outside (match.group(1) is fine)
            indexed = isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
            if (indexed and node.value.attr == "group") or (isinstance(node, ast.Attribute) and node.attr == "_group"):
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, f"the store layout is store.py's alone: {offenders}"
