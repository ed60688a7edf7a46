"""The API reference site (mkdocs.yml, `make docs`): it builds with ``mkdocs build --strict`` from docs/*.md and the
docstrings, offline, and a broken link between its pages fails that build.

griffe reads packages from their folders, and ``labeldist.api``, ``labeldist.client`` and ``labeldist.trainer`` lie
outside labeldist/ (pyproject's package-dir): tools/griffe_editable.py finds them through the import system, and
the first test checks that it does.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings_handlers") is None,
    reason="mkdocs or mkdocstrings-python is not installed (pip install -e '.[docs]')",
)

#: reference pages and names each must show
REFERENCE = {
    "library": ["precompute", "open", "append", "split", "read_labels"],
    "store": ["Store", "neighbors", "to_pandas", "to_xarray"],
    "distances": ["PoseDistance", "VectorDistance", "LayoutMIoU", "CaptionSetWMD", "SentenceRelevance"],
    "minibatches": ["pml_labels", "pml_triplets", "binary_split", "MinibatchStream", "FeatureInputs", "LocalSource"],
    "http-client": ["LabelDistClient"],
    "labels": ["read_poses", "read_mpii_csv", "read_vectors"],
    "kinds": ["get_kind", "registry", "DistanceSuite"],
    "errors": ["LabeldistError", "UsageError"],
}


def build(config_dir: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``config_dir``'s mkdocs.yml into ``site``."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=config_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_griffe_finds_the_subpackages_installed_from_other_folders() -> None:
    import griffe

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from griffe_editable import EditableSubpackages
    finally:
        sys.path.remove(str(ROOT / "tools"))
    loader = griffe.GriffeLoader(
        search_paths=[str(ROOT)], extensions=griffe.load_extensions(EditableSubpackages()), docstring_parser="numpy"
    )
    package = loader.load("labeldist", try_relative_path=False)
    assert Path(package["client.http.LabelDistClient"].filepath) == ROOT / "client" / "http.py"
    assert Path(package["api"].filepath) == ROOT / "api" / "__init__.py"
    assert "losses" in package["trainer"].members  # its subpackages read from trainer/ too
    # and without the extension griffe does not see them: the extension is what finds them
    bare = griffe.GriffeLoader(search_paths=[str(ROOT)]).load("labeldist", try_relative_path=False)
    assert "client" not in bare.members


@pytest.mark.slow
def test_the_site_builds_strict_with_the_reference_pages(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = build(ROOT, site)
    assert done.returncode == 0, done.stdout + done.stderr
    for page, names in REFERENCE.items():
        html = (site / "reference" / f"{page}.html").read_text(encoding="utf-8")
        for name in names:
            assert name in html, f"reference/{page}.html does not name {name}"
        assert not re.search(r":(func|class|meth|mod):`", html), f"reference/{page}.html shows a Sphinx role as is"
    minibatches = (site / "reference" / "minibatches.html").read_text(encoding="utf-8")
    assert 'id="labeldist.client.pml.pml_labels"' in minibatches  # read by griffe from client/pml.py
    assert (site / "index.html").is_file() and (site / "guide.html").is_file()
    # offline: no page loads a script, a stylesheet or a font from elsewhere (material's offline plugin would add
    # the iframe-worker shim from unpkg.com; mkdocs.yml keeps it out)
    for page in site.rglob("*.html"):
        outside = re.findall(r'<(?:script|link)[^>]*(?:src|href)="(?:https?:)?//[^"]*"', page.read_text("utf-8"))
        assert not outside, f"{page.relative_to(site)} loads {outside}"
    assert (site / "search" / "search_index.js").is_file()  # the offline plugin's inlined index


@pytest.mark.slow
def test_a_broken_link_between_pages_fails_the_build(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    (tmp_path / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "griffe_editable.py", tmp_path / "tools")
    assert build(tmp_path, tmp_path / "site-ok").returncode == 0  # the copy builds as the checkout does
    guide = tmp_path / "docs" / "guide.md"
    guide.write_text(guide.read_text(encoding="utf-8") + "\n[x](no-such-page.md)\n", encoding="utf-8")
    done = build(tmp_path, tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stdout + done.stderr
    # a missing anchor of an existing page fails it too
    guide.write_text(guide.read_text(encoding="utf-8").replace("no-such-page.md", "design.md#no-such-anchor"))
    done = build(tmp_path, tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-anchor" in done.stdout + done.stderr
