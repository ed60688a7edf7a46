"""No folder under ``--stores`` can stop, hang or exhaust the service or a command.

Before: a ``zarr.json`` nested 100,000 deep stopped ``serve`` from starting and gave a RecursionError traceback in
every command; a FIFO as a ``zarr.json`` or as a chunk file hung the start-up (SIGTERM did not stop it); a
``zarr.json`` linked to ``/dev/zero`` was read until the process was killed at 19.5 GB; a link loop gave 500. Now
every read of a local store goes through :class:`labeldist.store.checkedfiles.CheckedLocalStore`: regular files
only, no link at a file's own name, metadata bounded in size and depth. A hostile folder is listed as unavailable
(or, holding no ``zarr.json`` at all, not listed), the other stores are served, and each command refuses it in
one line. The subprocesses carry a generous timeout only so that the old behaviour fails instead of hanging.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest

from labeldist.distances.vectors import VectorDistance
from labeldist.labels.vectors import Vectors
from labeldist.store import StoreCorruptError, StoreReader
from labeldist.store.checkedfiles import METADATA_MAX_BYTES, METADATA_MAX_DEPTH, json_depth, read_regular
from tests.api.api_helpers import start_server, stop_server
from tests.conftest import write_store
from tests.processes import free_port, wait_healthy

#: a generous deadline: each answer comes in well under a second; a hang is the failure looked for
TIMEOUT_S = 120


ROWS = np.random.default_rng(0).normal(size=(60, 4)).astype(np.float32)


def nearest(i: int, k: int) -> list[int]:
    """Item ``i``'s ``k`` nearest other rows, by brute force."""
    return [int(j) for j in np.argsort(np.linalg.norm(ROWS - ROWS[i], axis=1), kind="stable") if j != i][:k]


def good_store(url: Path) -> Path:
    rows = ROWS
    labels = Vectors([f"v{i}" for i in range(60)], rows)
    return write_store(url, labels, VectorDistance(), dataset="v60", k=5, dense=False, block_rows=20)


def plant(root: Path, good: Path) -> dict[str, str]:
    """Hostile folders beside ``good`` under ``root``: each one's name -> what its refusal says (a pattern)."""
    (root / "deep").mkdir()
    (root / "deep" / "zarr.json").write_text("[" * 100_000 + "]" * 100_000)
    (root / "nested").mkdir()
    (root / "nested" / "zarr.json").write_text("[" * (METADATA_MAX_DEPTH + 1) + "]" * (METADATA_MAX_DEPTH + 1))
    (root / "huge").mkdir()
    with open(root / "huge" / "zarr.json", "wb") as f:
        f.truncate(METADATA_MAX_BYTES + 1)  # sparse: no disk used
    (root / "fifo").mkdir()
    os.mkfifo(root / "fifo" / "zarr.json")
    (root / "zero").mkdir()
    os.symlink("/dev/zero", root / "zero" / "zarr.json")
    (root / "loop").mkdir()
    os.symlink("zarr.json", root / "loop" / "zarr.json")  # a link to itself
    os.symlink("folder-loop", root / "folder-loop")  # a store folder that is a link loop
    shutil.copytree(good, root / "fifo-chunk")
    chunk = next(
        p for p in sorted((root / "fifo-chunk" / "knn" / "indices").rglob("*")) if p.is_file() and p.name != "zarr.json"
    )
    chunk.unlink()
    os.mkfifo(chunk)
    fifo = re.escape("a FIFO (named pipe), not a regular file")
    return {
        "deep": "nested too deeply",
        "nested": f"nested more than {METADATA_MAX_DEPTH} deep",
        "huge": "metadata of",
        "fifo": fifo,
        "zero": "a symbolic link",
        "loop": "a symbolic link",
        "fifo-chunk": fifo,  # found by the walk of the store's folders on opening, by every command
    }


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("hostile") / "stores"
    root.mkdir()
    good = good_store(root / "good")
    return root, plant(root, good)


def test_the_reader_refuses_each_file_in_one_error(stores) -> None:
    root, refusals = stores
    for name, says in refusals.items():
        with pytest.raises(StoreCorruptError, match=says):
            StoreReader(str(root / name)).check_knn() if name == "fifo-chunk" else StoreReader(str(root / name))
    assert StoreReader(str(root / "good")).n_items == 60


def test_read_regular_reads_a_regular_file_and_its_ranges(tmp_path: Path) -> None:
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

    path = tmp_path / "c0"
    path.write_bytes(bytes(range(100)))
    assert read_regular(path) == bytes(range(100))
    assert read_regular(path, RangeByteRequest(10, 20)) == bytes(range(10, 20))
    assert read_regular(path, OffsetByteRequest(95)) == bytes(range(95, 100))
    assert read_regular(path, SuffixByteRequest(3)) == bytes(range(97, 100))
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "absent")
    assert json_depth({"a": [1, {"b": []}]}) == 4 and json_depth([[[]]]) == 3


def test_serve_starts_lists_each_hostile_folder_and_serves_the_good_store(stores) -> None:
    root, refusals = stores
    port = free_port()
    proc = start_server(root, port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base)
        listed = {s["name"]: s for s in httpx.get(f"{base}/v1/stores", timeout=TIMEOUT_S).json()["stores"]}
        assert listed["good"]["available"] is True
        # no folder to read, or a zarr.json that cannot even be looked at (a link loop): no store, not listed
        for name in ("folder-loop", "loop"):
            assert name not in listed
            assert httpx.get(f"{base}/v1/stores/{name}/items/0/neighbors?k=3", timeout=TIMEOUT_S).status_code == 404
        for name, says in refusals.items():
            if name == "loop":
                continue
            assert listed[name]["available"] is False and re.search(says, listed[name]["detail"]), listed[name]
            r = httpx.get(f"{base}/v1/stores/{name}/items/0/neighbors?k=3", timeout=TIMEOUT_S)
            assert r.status_code == 503 and re.search(says, r.json()["detail"]), r.text
        r = httpx.get(f"{base}/v1/stores/good/items/0/neighbors?k=3", timeout=TIMEOUT_S)
        assert r.status_code == 200 and r.json()["indices"] == nearest(0, 3)
        # a hostile folder added while it serves: listed, refused, the good store still answered
        (root / "late").mkdir()
        os.mkfifo(root / "late" / "zarr.json")
        listed = {s["name"]: s for s in httpx.get(f"{base}/v1/stores", timeout=TIMEOUT_S).json()["stores"]}
        assert listed["late"]["available"] is False and "FIFO" in listed["late"]["detail"]
        r = httpx.get(f"{base}/v1/stores/good/items/1/neighbors?k=3", timeout=TIMEOUT_S)
        assert r.status_code == 200 and r.json()["indices"] == nearest(1, 3)
    finally:
        stop_server(proc)
        if (root / "late").exists():
            shutil.rmtree(root / "late")


def run_command(capsys, args: list[str]) -> tuple[int, str, str]:
    """``labeldist ARGS`` in this process (a thread, so that a hang fails the test after :data:`TIMEOUT_S` instead
    of stopping the suite): its exit status, stdout and stderr. An exception it lets out fails the test, as a
    traceback would."""
    from labeldist.cli import main

    result: dict = {}

    def run() -> None:
        try:
            result["code"] = main(args)
        except SystemExit as e:
            result["code"] = e.code
        except BaseException as e:  # noqa: BLE001 - handed to the test below
            result["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(TIMEOUT_S)
    assert not thread.is_alive(), f"labeldist {' '.join(args)}: still running after {TIMEOUT_S} s (hung)"
    captured = capsys.readouterr()
    if "error" in result:
        raise result["error"]
    return int(result["code"] or 0), captured.out, captured.err


@pytest.mark.parametrize("command", ["info", "verify", "export", "split", "append"])
def test_each_command_refuses_each_hostile_folder_in_one_line(stores, tmp_path: Path, command: str, capsys) -> None:
    root, refusals = stores
    more = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    np.save(tmp_path / "more.npy", more)
    for name, says in refusals.items():
        args = [command, str(root / name)]
        if command in ("export", "split"):
            args += ["--out", str(tmp_path / f"{name}.csv" if command == "export" else tmp_path / name)]
        if command == "append":
            args += [str(tmp_path / "more.npy"), "--workers", "1"]
        code, out, err = run_command(capsys, args)
        assert code != 0, (name, out)  # split too: a store with a FIFO anywhere in it is damaged, never split
        if command == "verify" and not err.strip():  # the store opened; verify's report names the damage
            report = json.loads(out)
            assert report["ok"] is False and re.search(says, json.dumps(report["problems"])), report
        else:
            last = err.strip().splitlines()[-1]  # after any progress lines: the error, in one line
            assert last.startswith("labeldist") and re.search(says, last), err
        assert not (tmp_path / f"{name}.csv").exists() and not (tmp_path / name).exists()
