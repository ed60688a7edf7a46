"""labeldist.client sits between the service and the trainer (labels -> distances -> engine -> store -> api ->
client -> trainer): it imports neither, and reads stores only through labeldist.store (the store boundary of
tests/store/test_store_boundary.py, applied to client/)."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.client.conftest import REPO
from tests.store.test_store_boundary import LAYOUT

CLIENT = REPO / "client"
#: modules of client/ that may import zarr for something that is not a store, and why
NOT_STORES = {"client/data.py": "reads a user's feature array (.zarr), not a labeldist store"}


def imported(path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.lineno, node.module))
    return out


def test_the_client_imports_neither_the_service_nor_the_trainer() -> None:
    offenders = [
        f"{p.relative_to(REPO)}:{line} {name}"
        for p in sorted(CLIENT.rglob("*.py"))
        for line, name in imported(p)
        if name.startswith(("labeldist.api", "labeldist.trainer", "api", "trainer", "fastapi"))
    ]
    assert not offenders, offenders
    code = (
        "import sys, labeldist.client, labeldist.client.loader; print(sorted(m for m in sys.modules "
        "if m.startswith(('labeldist.api', 'labeldist.trainer', 'fastapi'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]", out.stdout


def test_the_client_reads_stores_only_through_labeldist_store() -> None:
    offenders = []
    for path in sorted(CLIENT.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel not in NOT_STORES:
            offenders += [
                f"{rel}:{line}" for line, name in imported(path) if name == "zarr" or name.startswith("zarr.")
            ]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and LAYOUT.match(node.value):
                offenders.append(f"{rel}:{node.lineno} {node.value!r}")
            if isinstance(node, ast.Attribute) and node.attr == "_group":
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, offenders
