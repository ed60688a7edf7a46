"""One way to write a file (``labeldist.core.files``): a temporary file of its own, created exclusively beside the
target under an unpredictable name, renamed over it; never through a link planted beside it (RELIABILITY.md, "The
fifth adversarial run": ``export --out`` followed a link planted at ``.NAME.partial-PID``, ``trainer render`` one at
``IMG.png.tmp``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import labeldist.core.files as files
from labeldist.core.files import create_beside, written_whole
from tests.cli.test_cli import run_cli


def test_a_planted_link_at_the_temporary_name_is_never_followed(tmp_path, monkeypatch) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    names = iter(["aaaa", "aaaa", "bbbb"])  # the first name taken by a planted link: another is drawn
    monkeypatch.setattr(files.secrets, "token_hex", lambda n: next(names))
    (tmp_path / ".out.txt.aaaa.tmp").symlink_to(victim)
    with written_whole(tmp_path / "out.txt") as tmp:
        assert tmp.name == ".out.txt.bbbb.tmp" and not tmp.is_symlink()
        tmp.write_text("new\n")
    assert victim.read_text() == "precious\n" and (tmp_path / "out.txt").read_text() == "new\n"
    assert not (tmp_path / "out.txt").is_symlink()


def test_the_target_is_replaced_whole_or_left_as_it_was(tmp_path) -> None:
    out = tmp_path / "out.txt"
    out.write_text("old\n")
    with pytest.raises(RuntimeError), written_whole(out) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert out.read_text() == "old\n" and sorted(os.listdir(tmp_path)) == ["out.txt"]
    with written_whole(out, sync=True) as tmp:
        tmp.write_text("new\n")
    assert out.read_text() == "new\n" and sorted(os.listdir(tmp_path)) == ["out.txt"]


@pytest.mark.parametrize("planted", ["link", "folder", "fifo"])
def test_only_a_regular_file_is_replaced(tmp_path, planted) -> None:
    out, victim = tmp_path / "out.txt", tmp_path / "victim.txt"
    victim.write_text("precious\n")
    {"link": lambda: out.symlink_to(victim), "folder": out.mkdir, "fifo": lambda: os.mkfifo(out)}[planted]()
    with pytest.raises(OSError, match="only a regular file is replaced"), written_whole(out) as tmp:
        tmp.write_text("new\n")
    assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt", "victim.txt"]


def test_the_temporary_file_has_the_permissions_of_a_plain_open(tmp_path) -> None:
    old = os.umask(0o022)
    try:
        made = create_beside(tmp_path / "x")
    finally:
        os.umask(old)
    assert made.stat().st_mode & 0o777 == 0o644


def test_export_does_not_write_through_a_link_at_its_old_temporary_name(tmp_path, capsys) -> None:
    """The reproduction of the issue: a link planted at the name ``export`` used to write first."""
    import numpy as np

    np.save(tmp_path / "a.npy", np.random.default_rng(0).normal(size=(60, 4)))
    rc, _, err = run_cli(capsys, "precompute", "vectors", tmp_path / "a.npy", "--out", tmp_path / "va", "--k", "5")
    assert rc == 0, err
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / f".n.csv.partial-{os.getpid()}").symlink_to(victim)
    rc, _, err = run_cli(capsys, "export", tmp_path / "va", "--out", tmp_path / "n.csv")
    assert rc == 0, err
    assert victim.read_text() == "precious\n"
    out = Path(tmp_path / "n.csv")
    assert not out.is_symlink() and out.read_text().count("\n") == 60 * 5 + 1
