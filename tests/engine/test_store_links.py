"""A store reached through a symbolic link is written at the link's target, and a staging folder planted as a link
(or as a file) is refused, never followed (RELIABILITY.md, "The fourth adversarial run").

Before: ``append`` or ``precompute --overwrite`` on a symlinked store path replaced the link with a folder, left the
target at the old generation, and then failed on every later run ("cannot call rmtree on a symbolic link", naming
no path); a symlinked ``.NAME.creating`` blocked ``precompute`` the same way.

Real engine on the session's 2-worker LocalCluster, real stores of MPII poses.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from labeldist.distances.pose import PoseDistance
from labeldist.engine import precompute
from labeldist.engine.grow import append
from labeldist.store import STAGING_SIBLINGS, StoreError, StoreReader, sibling


def _build(poses, span: tuple[int, int], url: Path, client, overwrite: bool = False):
    return precompute(
        poses.subset(slice(*span)),
        PoseDistance(),
        url,
        dataset="mpii",
        k=10,
        dense=True,
        client=client,
        overwrite=overwrite,
        progress=False,
    )


@pytest.fixture
def linked(tmp_path: Path, mpii_poses, dask_client) -> tuple[Path, Path]:
    """A store of 120 poses in ``real/poses`` and the link ``stores/poses`` to it."""
    target = tmp_path / "real" / "poses"
    _build(mpii_poses, (0, 120), target, dask_client)
    link = tmp_path / "stores" / "poses"
    link.parent.mkdir()
    link.symlink_to(target, target_is_directory=True)
    return link, target


def _ids(url: Path) -> list[str]:
    return StoreReader(str(url)).ids.tolist()


def _nothing_beside(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_append_through_a_link_grows_the_target(linked, mpii_poses, dask_client, tmp_path) -> None:
    link, target = linked
    result = append(link, mpii_poses.subset(slice(120, 150)), client=dask_client, progress=False)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert result.url == str(target)
    assert _ids(target) == mpii_poses.ids[:150].tolist() == _ids(link)
    # equal to a precompute of the union, and the next run sees it whole (before: it failed on every later run)
    whole = tmp_path / "whole"
    _build(mpii_poses, (0, 150), whole, dask_client)
    for a, b in zip(StoreReader(str(target)).knn(), StoreReader(str(whole)).knn()):
        np.testing.assert_array_equal(a, b)
    again = append(link, mpii_poses.subset(slice(120, 150)), client=dask_client, progress=False)
    assert again.reused
    assert _nothing_beside(link.parent) == [] and _nothing_beside(target.parent) == []


def test_overwrite_through_a_link_replaces_the_target(linked, mpii_poses, dask_client) -> None:
    link, target = linked
    _build(mpii_poses, (200, 260), link, dask_client, overwrite=True)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert _ids(target) == mpii_poses.ids[200:260].tolist()
    assert _build(mpii_poses, (200, 260), link, dask_client).reused
    assert _nothing_beside(link.parent) == [] and _nothing_beside(target.parent) == []


@pytest.mark.parametrize("what", STAGING_SIBLINGS)
@pytest.mark.parametrize("planted", ["link", "file"])
def test_a_planted_staging_folder_is_refused(what, planted, mpii_poses, tmp_path) -> None:
    """A link (to a folder that must not be touched) or a file where a staging folder goes: refused before anything
    is written, naming it; what the link points at is untouched."""
    url = tmp_path / "poses"
    elsewhere = tmp_path / "precious"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    at = Path(sibling(str(url), what))
    if planted == "link":
        at.symlink_to(elsewhere, target_is_directory=True)
    else:
        at.write_text("not a folder")
    with pytest.raises(StoreError, match=f"{at}: (a symbolic link|not a folder).*never follows"):
        _build(mpii_poses, (0, 50), url, None)
    assert not url.exists()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep.txt"]
    assert (elsewhere / "keep.txt").read_text() == "mine"


def test_a_planted_staging_folder_is_one_line_from_the_cli(mpii_poses, tmp_path, capsys) -> None:
    from labeldist.cli import main
    from tests.conftest import DATA

    url = tmp_path / "poses"
    Path(sibling(str(url), "creating")).symlink_to(tmp_path, target_is_directory=True)
    status = main(["precompute", "pose", str(DATA / "mpii" / "mpii_valid_2958.csv"), "--out", str(url)])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and ".poses.creating: a symbolic link" in err, err


@pytest.mark.parametrize("job", ["precompute", "append"])
@pytest.mark.parametrize("what", ["creating", "overwrite", "append", "previous"])
def test_a_staging_link_planted_after_the_first_look_is_refused_under_the_lock(
    job, what, mpii_poses, dask_client, tmp_path, monkeypatch
) -> None:
    """Before: the check ran once, up front, before the job held the store's lock; a link planted between the two
    was met by ``shutil.rmtree`` ("cannot call rmtree on a symbolic link", naming nothing), or written through.
    Here the link is planted the moment the first look returns: the job refuses it once it holds the lock."""
    import labeldist.engine.build as build
    import labeldist.engine.grow as grow

    url = tmp_path / "poses"
    if job == "append":
        _build(mpii_poses, (0, 60), url, dask_client)
    elsewhere = tmp_path / "precious"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    module = build if job == "precompute" else grow
    first_look = module.writable_url

    def then_plant(path):
        resolved = first_look(path)
        Path(sibling(resolved, what)).symlink_to(elsewhere, target_is_directory=True)
        return resolved

    monkeypatch.setattr(module, "writable_url", then_plant)
    at = sibling(str(url), what)
    with pytest.raises(StoreError, match=f"{at}: a symbolic link.*never follows"):
        if job == "precompute":
            _build(mpii_poses, (0, 60), url, dask_client, overwrite=True)
        else:
            append(url, mpii_poses.subset(slice(60, 80)), client=dask_client, progress=False)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep.txt"]
    assert (elsewhere / "keep.txt").read_text() == "mine"
    if job == "append":
        assert _ids(url) == mpii_poses.ids[:60].tolist()  # the store as it was
