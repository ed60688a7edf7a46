"""griffe extensions for the reference site (mkdocs.yml): the folders installed under another package's name, and
the Sphinx roles of the docstrings.

pyproject's ``package-dir`` installs ``api/``, ``client/`` and ``trainer/`` as ``labeldist.api``,
``labeldist.client`` and ``labeldist.trainer``. griffe reads a package from its folder, and ``labeldist/`` has no
``client/`` folder, so ``::: labeldist.client.http`` would not be found. Once griffe has read the ``labeldist``
package, this extension asks Python's import system where each of its subpackages lies (``importlib.util.find_spec``,
which follows the editable install's mapping or the installed wheel: nothing is imported but ``labeldist`` itself)
and reads those that lie outside ``labeldist/`` as its members.

The docstrings name code with Sphinx roles (``:func:`binary_split```, ``:class:`~labeldist.store.StoreReader```),
which Markdown would show as they are written: :class:`SphinxRoles` turns each into a code span of the name a
reader of the source sees (``binary_split``, ``StoreReader``).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import griffe

PACKAGE = "labeldist"
# the subpackages installed from folders of their own (pyproject.toml, [tool.setuptools.package-dir])
MAPPED = ("api", "client", "trainer")


class EditableSubpackages(griffe.Extension):
    """Add ``labeldist.api``, ``labeldist.client`` and ``labeldist.trainer`` to the ``labeldist`` package griffe
    read, from wherever the import system finds them."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != PACKAGE:
            return
        for name in MAPPED:
            if name in pkg.members:
                continue
            spec = importlib.util.find_spec(f"{PACKAGE}.{name}")
            if spec is None or spec.origin is None:
                continue
            # griffe has no public call that reads a folder as a given package's member: _load_module is the one
            # load() itself uses (griffe 2), with the submodules read from the folder
            module = loader._load_module(name, Path(spec.origin), submodules=True, parent=pkg)
            pkg.set_member(name, module)


# :role:`target`, :role:`~dotted.target` (shown as its last part) or :role:`title <target>` (shown as the title)
ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const|math):`(~?)([^`<]*?)\s*(?:<[^`>]*>)?`")


def role_as_code(match: re.Match[str]) -> str:
    tilde, text = match.groups()
    return f"`{text.rsplit('.', 1)[-1] if tilde else text}`"


class SphinxRoles(griffe.Extension):
    """Each Sphinx role of a docstring as a Markdown code span of the name it shows."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ":`" in obj.docstring.value:
            obj.docstring.value = ROLE.sub(role_as_code, obj.docstring.value)
