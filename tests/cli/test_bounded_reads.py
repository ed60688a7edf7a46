"""Everything read from a path the user names is bounded (labeldist.core.reading): a FIFO, a device or a socket is
refused in one line before anything could block or read without end, a scheduler file is read up to 16 MiB, and
the CSV readers take long fields, a byte-order mark, and name the file, line and encoding of a byte that is not
UTF-8.

A FIFO blocked each of these commands for good, and ``--scheduler-file /dev/zero`` read until the kernel killed
it: the commands run here as processes, bounded by a generous timeout (and an address-space limit), so that the
old behaviour fails the test instead of hanging it or the machine.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from labeldist.core.reading import (
    CSV_FIELD_LIMIT,
    SMALL_FILE_BYTES,
    TextFileError,
    open_regular,
    read_csv,
    read_regular,
)
from labeldist.labels.base import LabelError
from tests.cli.test_cli import run_cli
from tests.conftest import DATA
from tests.processes import REPO
from tests.trainer.conftest import STORE, pose_store  # noqa: F401 - a fixture: a store to append to

#: a command that blocks runs until this, then fails the test (each ends in a few seconds when it refuses)
BOUND = 300
CSV = DATA / "mpii" / "mpii_valid_2958.csv"
FIFO_SAYS = "a FIFO (named pipe), not a regular file"


def command(*args: object, module: str = "labeldist.cli", memory: int | None = None) -> subprocess.CompletedProcess:
    """``python -m module ARGS`` to its end, at most :data:`BOUND` seconds (TimeoutExpired fails the test), its
    address space limited to ``memory`` bytes when given."""

    def limit() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    env = {k: v for k, v in os.environ.items() if not k.startswith("LABELDIST_")}
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=BOUND,
        preexec_fn=limit,
    )


def one_line(done: subprocess.CompletedProcess, *words: str) -> str:
    """The one error line of a command that stopped with exit status 2, holding every word of ``words``."""
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.fixture
def fifo(tmp_path: Path):
    """A factory of FIFOs in tmp_path, by name."""

    def make(name: str) -> Path:
        path = tmp_path / name
        os.mkfifo(path)
        return path

    return make


# ---------------------------------------------------------------- the function every reader goes through
@pytest.mark.parametrize("where", ["fifo", "/dev/zero", "/dev/null", "socket", "folder"])
def test_only_a_regular_file_is_opened(where, tmp_path: Path) -> None:
    import socket

    path = {"/dev/zero": Path("/dev/zero"), "/dev/null": Path("/dev/null")}.get(where, tmp_path / where)
    if where == "fifo":
        os.mkfifo(path)
    elif where == "folder":
        path.mkdir()
    elif where == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
    said = {"fifo": FIFO_SAYS, "socket": "a socket, not a regular file", "folder": "a folder, not a label file"}
    with pytest.raises(OSError) as caught:
        open_regular(path, "label file")  # a FIFO without a writer would block here
    assert caught.value.filename == str(path)
    assert said.get(where, "a character device, not a regular file") in caught.value.strerror


def test_a_file_small_by_nature_is_read_up_to_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.json"
    path.write_bytes(b" " * (SMALL_FILE_BYTES + 1))
    with pytest.raises(OSError, match="a scheduler file is at most 16 MiB") as caught:
        read_regular(path, "scheduler file", limit=SMALL_FILE_BYTES)
    assert caught.value.filename == str(path)
    path.write_bytes(b" " * SMALL_FILE_BYTES)
    assert len(read_regular(path, "scheduler file", limit=SMALL_FILE_BYTES)) == SMALL_FILE_BYTES


# ---------------------------------------------------------------- a FIFO to every command that reads a named file
def test_a_fifo_as_the_label_file_of_precompute(fifo, tmp_path: Path) -> None:
    kinds = {"poses.csv": "pose", "vectors.npy": "vectors", "captions.json": "captions", "sentences.txt": "sentences"}
    for name, kind in kinds.items():
        path = fifo(name)
        one_line(command("precompute", kind, path, "--out", tmp_path / kind), str(path), FIFO_SAYS)
        assert not (tmp_path / kind).exists()


def test_a_fifo_as_the_label_file_of_append_and_split(pose_store, fifo, tmp_path: Path) -> None:  # noqa: F811
    path = fifo("more.csv")
    one_line(command("append", pose_store / STORE, path), str(path), FIFO_SAYS)
    for name in ("labels.csv", "labels.npy", "labels.json", "labels.txt"):
        path = fifo(name)
        one_line(command("split", path, "--out", tmp_path / "parts"), str(path), FIFO_SAYS)
    assert not (tmp_path / "parts").exists()


def test_a_fifo_as_the_features_or_split_of_the_trainer(pose_store, fifo, tmp_path: Path) -> None:  # noqa: F811
    features = tmp_path / "real.npy"
    np.save(features, np.zeros((300, 4), dtype=np.float32))
    path = fifo("features.npy")
    base = ("--stores", pose_store, "--store", STORE, "--no-progress")
    done = command("fit", *base, "--features", path, "--out", tmp_path / "run", module="labeldist.trainer.cli")
    one_line(done, str(path), FIFO_SAYS)
    split = fifo("split.json")
    done = command(
        "eval", *base, "--features", features, "--split", split, "--out", tmp_path / "e.json",
        module="labeldist.trainer.cli",
    )  # fmt: skip
    one_line(done, str(split), FIFO_SAYS)


def test_a_fifo_given_to_trainer_plot(fifo, tmp_path: Path) -> None:
    result, log = fifo("eval.json"), fifo("log.jsonl")
    done = command("plot", result, "--out", tmp_path / "p.png", module="labeldist.trainer.cli")
    one_line(done, f"cannot read {result}: {FIFO_SAYS}")
    done = command("plot", "--loss-curves", log, "--out", tmp_path / "p.png", module="labeldist.trainer.cli")
    one_line(done, f"cannot read {log}: {FIFO_SAYS}")
    assert not (tmp_path / "p.png").exists()


# ---------------------------------------------------------------- scheduler files
def test_a_fifo_as_the_scheduler_file(fifo, tmp_path: Path) -> None:
    path = fifo("scheduler.json")
    done = command("precompute", "pose", CSV, "--out", tmp_path / "s", "--scheduler-file", path, "--wait-timeout", "3")
    one_line(done, f"{path}: cannot read the scheduler file: {FIFO_SAYS}")


def test_a_device_as_the_scheduler_file(tmp_path: Path) -> None:
    """/dev/zero took 7.2 GB in 20 s, and 23 GB until the kernel killed it: here the process may have 4 GiB of
    address space, so the old way ends in a MemoryError instead of taking the machine."""
    args = ("precompute", "pose", CSV, "--out", tmp_path / "s", "--scheduler-file", "/dev/zero", "--wait-timeout", "3")
    done = command(*args, memory=4 * 2**30)
    one_line(done, "/dev/zero: cannot read the scheduler file: a character device, not a regular file")


def test_a_scheduler_file_past_its_bound_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.json"
    path.write_text(json.dumps({"address": "tcp://127.0.0.1:9", "padding": "x" * SMALL_FILE_BYTES}))
    done = command("precompute", "pose", CSV, "--out", tmp_path / "s", "--scheduler-file", path, "--wait-timeout", "3")
    one_line(done, f"{path}: cannot read the scheduler file:", "a scheduler file is at most 16 MiB")


# ---------------------------------------------------------------- CSV: long fields, byte-order marks, encodings
POSES = CSV.read_text(encoding="utf-8").splitlines()[:41]  # a header and 40 MPII poses


def _poses_with(tmp_path: Path, column: str, values: list[str], name: str = "poses.csv") -> Path:
    """The 40 poses with one more column, quoted."""
    path = tmp_path / name
    rows = [f"{POSES[0]},{column}"] + [f'{row},"{v}"' for row, v in zip(POSES[1:], values)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_a_csv_field_of_2_mb_is_read_by_every_csv_reader(tmp_path: Path) -> None:
    from labeldist.labels.pose_files import read_pose_csv
    from labeldist.labels.records import read_records
    from labeldist.labels.sentence_files import read_plain_sentences
    from labeldist.labels.vectors import read_vectors

    long = "x" * 2_000_000
    poses = _poses_with(tmp_path, "note", [long] + ["short"] * 39)
    assert len(read_pose_csv(poses)) == 40
    records = read_records(poses)
    assert len(records.ids) == 40
    vectors = tmp_path / "vectors.csv"
    vectors.write_text(f'id,a,b\n"{long}",1,2\nb,3,4\n', encoding="utf-8")
    assert [len(i) for i in read_vectors(vectors).ids] == [2_000_000, 1]
    sentences = tmp_path / "sentences.csv"
    sentences.write_text(f'id,text,note\na,A sentence.,"{long}"\nb,Another one.,short\n', encoding="utf-8")
    assert read_plain_sentences(sentences, "csv", "text", "id", empty="drop", limit=None)[1] == [
        "A sentence.",
        "Another one.",
    ]
    assert len(read_csv(poses)[1][-1]) == 2_000_000


def test_a_csv_field_past_the_bound_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "v.csv"
    path.write_text(f'id,a\na,1\nb,"{"y" * (CSV_FIELD_LIMIT + 1)}"\n', encoding="utf-8")
    with pytest.raises(TextFileError, match=f"{path}, line 3: a field longer than 67,108,864 characters"):
        read_csv(path)


def test_precompute_reads_a_2_mb_field(tmp_path: Path, capsys) -> None:
    """The campaign's case, through the command: `_csv.Error: field larger than field limit` was a traceback.
    The pose reader here stops at its option check (k too large for 40 poses) after reading the whole file."""
    poses = _poses_with(tmp_path, "note", ["x" * 2_000_000] + ["short"] * 39)
    rc, _, err = run_cli(capsys, "precompute", "pose", poses, "--out", tmp_path / "s", "--k", "40")
    assert rc == 2 and err.count("\n") == 1 and "--k 40: each of the 40 items has only 39 others" in err, err


def _encoded(tmp_path: Path, encoding: str, text: str, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    return path


@pytest.mark.parametrize(
    ("encoding", "said"),
    [
        ("latin-1", "line 3: not UTF-8 (byte 0xe9 at offset 16); it reads as Latin-1 or Windows-1252"),
        ("utf-16", "line 1: not UTF-8 (byte 0xff at offset 0); it is UTF-16 (its byte-order mark says so)"),
    ],
)
def test_a_csv_that_is_not_utf8_is_named_with_its_line_and_encoding(encoding, said, tmp_path: Path, capsys) -> None:
    path = _encoded(tmp_path, encoding, "id,a,b\nx,1,2\nJos\u00e9,3,4\n", "vectors.csv")
    rc, _, err = run_cli(capsys, "precompute", "vectors", path, "--out", tmp_path / "s")
    assert rc == 2 and err == f"labeldist: error: {path}, {said}: save it as UTF-8\n", err
    poses = _encoded(tmp_path, encoding, "\n".join(POSES[:3]) + "\nJos\u00e9\n", "poses.csv")
    line = 4 if encoding == "latin-1" else 1  # UTF-16's first byte is no UTF-8
    with pytest.raises(LabelError, match=f"{poses}, line {line}: not UTF-8"):
        from labeldist.labels.pose_files import read_pose_csv

        read_pose_csv(poses)


def test_a_bad_byte_far_into_a_csv_is_named_on_its_own_line(tmp_path: Path) -> None:
    """A text stream decodes in chunks and reports a bad byte in the chunk it was decoding: the line is found again
    from the file itself."""
    lines = [f"item{i},{i},{i + 1}" for i in range(20_000)]
    lines[15_000] = "Jos\u00e9,1,2"
    path = tmp_path / "v.csv"
    path.write_bytes(("id,a,b\n" + "\n".join(lines) + "\n").encode("latin-1"))
    offset = len(("id,a,b\n" + "\n".join(lines[:15_000]) + "\nJos").encode())
    with pytest.raises(TextFileError) as caught:
        read_csv(path)
    assert str(caught.value).startswith(f"{path}, line 15002: not UTF-8 (byte 0xe9 at offset {offset}); it reads as")


def test_a_byte_order_mark_is_read_and_dropped(tmp_path: Path, capsys) -> None:
    from labeldist.labels.pose_files import read_pose_csv
    from labeldist.labels.vectors import read_vectors

    vectors = _encoded(tmp_path, "utf-8-sig", "id,a,b\nx,1,2\ny,3,4\nz,5,6\n", "vectors.csv")
    labels = read_vectors(vectors)
    assert list(labels.ids) == ["x", "y", "z"]  # not "column '\ufeffid': 'x' is not a number"
    np.testing.assert_array_equal(labels.values, [[1, 2], [3, 4], [5, 6]])
    plain = read_pose_csv(CSV, normalization="none")
    marked = read_pose_csv(_encoded(tmp_path, "utf-8-sig", CSV.read_text(encoding="utf-8"), "poses.csv"))
    assert list(marked.ids) == list(plain.ids)
