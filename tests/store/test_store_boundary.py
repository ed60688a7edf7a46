"""One store boundary: only the package labeldist/store/ knows the Zarr layout of a store. The CLI, verify,
the engine and the service read and write stores through its functions and StoreReader, so a check made there (a
checksum, a missing chunk, a NaN never written) cannot be bypassed by a reader that indexes the group itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("labeldist", "api", "client", "trainer")
#: the one package that knows the layout: its modules, and no other (not a labeldist/store.py beside it)
STORE = "labeldist/store/"
#: modules that may import zarr for something that is not a store, and why
NOT_STORES = {
    "client/data.py": "reads a user's feature array (.zarr), not a labeldist store",
}
#: the layout's array paths: a string naming one outside labeldist/store/ is a reader that knows the layout
LAYOUT = re.compile(r"^(knn/(indices|distances)|dense/distances|progress/\w+|labels/\w+|work/upper)$")


def _modules() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


def _in_store(rel: str) -> bool:
    return rel.startswith(STORE)


def _zarr_imports(rel: str, source: str) -> list[str]:
    offenders = []
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        if any(n == "zarr" or n.startswith("zarr.") for n in names):
            offenders.append(f"{rel}:{node.lineno}")
    return offenders


def test_only_the_store_package_imports_zarr() -> None:
    offenders = []
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        if _in_store(rel) or rel in NOT_STORES:
            continue
        offenders += _zarr_imports(rel, path.read_text())
    assert not offenders, f"only labeldist/store/ may open a store with zarr: {offenders}"


def test_the_boundary_exempts_the_store_package_alone() -> None:
    """The check above is not vacuous: the package exists and uses zarr, and a zarr import anywhere else (a module
    beside the package, one whose name merely starts like it) is caught."""
    assert (ROOT / STORE / "__init__.py").is_file()
    assert any(_zarr_imports(p.name, p.read_text()) for p in sorted((ROOT / STORE).glob("*.py")))
    for rel in ("labeldist/store.py", "labeldist/stores/x.py", "labeldist/engine/build.py", "api/serving/registry.py"):
        assert not _in_store(rel), rel
        for source in ("import zarr\n", "from zarr.codecs import Crc32cCodec\n", "import zarr.storage as s\n"):
            assert _zarr_imports(rel, source) == [f"{rel}:1"], (rel, source)


def test_no_module_outside_the_store_package_names_an_array_of_the_layout() -> None:
    offenders = []
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        if _in_store(rel):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and LAYOUT.match(node.value):
                offenders.append(f"{rel}:{node.lineno} {node.value!r}")
            # reader.group["knn/indices"], reader._group: the group indexed from outside (match.group(1) is fine)
            indexed = isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
            if (indexed and node.value.attr == "group") or (isinstance(node, ast.Attribute) and node.attr == "_group"):
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, f"the store layout is labeldist/store/'s alone: {offenders}"
