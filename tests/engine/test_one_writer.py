"""One writer per store: a precompute takes a lock beside its ``--out`` for the whole job.

Found: two precomputes on one ``--out`` took no lock. With the same parameters both computed every block; with
different ones, started together, both failed with ``.diff.creating -> diff: no such file or directory`` and left no
store. Now the second job refuses at once (exit status 2) naming the holder's host, pid and start time; a lock left
by a process that died is taken over, saying so; ``info`` and ``verify`` never wait for it.

No test here depends on timing: a job is held at a known point of its run by :mod:`tests.held_precompute` while
the second one runs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from labeldist.store import read_manifest
from tests.conftest import DATA, check_store
from tests.held_precompute import HeldJob

CSV = DATA / "mpii" / "mpii_valid_2958.csv"
HOST = socket.gethostname()


def labeldist(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "labeldist.cli", *map(str, args)], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 120 poses of the shipped MPII CSV: a job of three blocks."""
    path = tmp_path_factory.mktemp("csv") / "mpii120.csv"
    path.write_text("\n".join(CSV.read_text().splitlines()[:121]) + "\n")
    return path


def job(csv: Path, out: Path, k: int = 10, *extra: str) -> list[object]:
    return [
        "precompute",
        "pose",
        csv,
        "--k",
        k,
        "--block-rows",
        "40",
        "--workers",
        "1",
        "--no-progress",
        "--out",
        out,
        *extra,
    ]


def lock_file(out: Path) -> Path:
    """Where the lock of the store ``out`` lives: a hidden file beside it (the store folder itself is made by a
    rename, so nothing inside it can exist first)."""
    return out.parent / f".{out.name}.lock"


def assert_refused_by(proc: subprocess.CompletedProcess, holder_pid: int) -> None:
    """Exit status 2 and one error line naming the holder: its host, its pid, since when."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("labeldist: error: "), proc.stderr
    assert f"pid {holder_pid}" in lines[0] and f"host {HOST}" in lines[0] and "since " in lines[0], lines[0]
    assert "blocks computed" not in proc.stdout


def test_a_second_precompute_on_the_same_out_refuses_naming_the_holder(csv: Path, tmp_path: Path) -> None:
    """Same parameters: the second job used to resume the first one's store and publish it under its feet."""
    out = tmp_path / "stores" / "mpii120"
    held = HeldJob("publish", job(csv, out), tmp_path / "held.log")
    held.wait_held()  # every block written; not yet published
    try:
        second = labeldist(*job(csv, out))
        holder = json.loads(lock_file(out).read_text()) if lock_file(out).exists() else None
    finally:
        rc, stdout, stderr = held.release()
    assert_refused_by(second, held.proc.pid)
    assert holder is not None and holder["host"] == HOST and holder["pid"] == held.proc.pid and holder["since"]
    assert rc == 0, stdout + stderr
    assert "3 of 3 blocks computed" in stdout
    check_store(out)
    assert os.listdir(out.parent) == ["mpii120"], "the lock is released at the end"


def test_the_lock_covers_the_overwrite_swap_and_info_and_verify_do_not_wait(csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "stores" / "mpii120"
    assert labeldist(*job(csv, out, 10)).returncode == 0
    held = HeldJob("replace_with_staged", job(csv, out, 5, "--overwrite"), tmp_path / "held.log")
    held.wait_held()  # the new store complete beside the old one, not yet swapped in
    try:
        info = labeldist("info", out, "--json")
        verify = labeldist("verify", out, "--sample", "20")
        second = labeldist(*job(csv, out, 5, "--overwrite"))
    finally:
        rc, stdout, stderr = held.release()
    assert info.returncode == 0 and json.loads(info.stdout)["manifest"]["k"] == 10, info.stderr
    assert verify.returncode == 0 and json.loads(verify.stdout)["ok"], verify.stdout + verify.stderr
    assert_refused_by(second, held.proc.pid)
    assert rc == 0, stdout + stderr
    assert read_manifest(str(out))["k"] == 5
    check_store(out)
    assert os.listdir(out.parent) == ["mpii120"], "no lock, no staged or replaced store left"


def test_a_stale_lock_of_a_dead_process_is_taken_over_saying_so(csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "stores" / "mpii120"
    out.parent.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid names no process now
    lock_file(out).write_text(json.dumps({"host": HOST, "pid": gone.pid, "since": "2020-01-01T00:00:00Z"}))
    proc = labeldist(*job(csv, out))
    assert proc.returncode == 0, proc.stderr
    assert "stale lock" in proc.stderr and f"pid {gone.pid}" in proc.stderr and "taking it over" in proc.stderr
    check_store(out)
    assert os.listdir(out.parent) == ["mpii120"]


def test_a_job_with_other_parameters_is_refused_while_the_first_lays_out_its_store(csv: Path, tmp_path: Path) -> None:
    """The two jobs of the issue, made to meet deterministically: the first is held just before it lays out its
    store, the second (other parameters) runs then. It used to build its store there, which the first then
    replaced (or, when they overlapped, both failed on the other's ``.creating`` folder)."""
    out = tmp_path / "stores" / "mpii120"
    held = HeldJob("create_store", job(csv, out, 10), tmp_path / "held.log")
    held.wait_held()
    try:
        second = labeldist(*job(csv, out, 5))
    finally:
        rc, stdout, stderr = held.release()
    assert_refused_by(second, held.proc.pid)
    assert not out.exists() or read_manifest(str(out))["k"] == 10
    assert rc == 0, stdout + stderr
    assert read_manifest(str(out))["k"] == 10
    check_store(out)
    assert os.listdir(out.parent) == ["mpii120"]


def test_two_jobs_with_different_parameters_started_together_leave_one_store(csv: Path, tmp_path: Path) -> None:
    """Whichever takes the lock first builds its store; the other one refuses, with a one-line message: the lock
    held, or (if the first had already finished) a store made with other parameters. Never a missing file."""
    out = tmp_path / "stores" / "mpii120"
    jobs = {
        k: subprocess.Popen(
            [sys.executable, "-m", "labeldist.cli", *map(str, job(csv, out, k))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in (10, 5)
    }
    results = {k: (p.communicate(timeout=600), p.returncode) for k, p in jobs.items()}
    winners = [k for k, (_, rc) in results.items() if rc == 0]
    assert len(winners) == 1, results
    ((_, refusal), rc) = results[15 - winners[0]]
    assert rc == 2 and refusal.startswith("labeldist: error: ") and len(refusal.strip().splitlines()) == 1, refusal
    assert "another labeldist precompute is writing" in refusal or "made with other parameters" in refusal, refusal
    assert read_manifest(str(out))["k"] == winners[0]
    check_store(out)
    assert os.listdir(out.parent) == ["mpii120"]


# ---------------------------------------------------------------- the lock itself, in this process
def test_the_lock_names_its_holder_and_refuses_a_second_taker(tmp_path: Path) -> None:
    """flock is per open file, so a second take in the same process is refused as another process's would be."""
    from labeldist.engine.lock import StoreLockedError, store_lock

    url = str(tmp_path / "store")
    with store_lock(url):
        holder = json.loads(lock_file(Path(url)).read_text())
        assert holder["host"] == HOST and holder["pid"] == os.getpid()
        refused = rf"another labeldist precompute is writing this store \(pid {os.getpid()} on host "
        with pytest.raises(StoreLockedError, match=refused), store_lock(url):
            pass
    with store_lock(url, "append"):  # the fifth adversarial run: an append's lock was "another precompute"
        assert json.loads(lock_file(Path(url)).read_text())["job"] == "append"
        with pytest.raises(StoreLockedError, match="another labeldist append is writing this store"), store_lock(url):
            pass
    assert os.listdir(tmp_path) == []
    with store_lock(url):  # released: free to take again
        pass


def test_a_lock_left_by_a_process_on_another_host_is_taken_over_once_free(tmp_path: Path, caplog) -> None:
    """The kernel's lock decides whether a job holds it; the file's host and pid only tell the user whose it was."""
    from labeldist.engine.lock import store_lock

    url = tmp_path / "store"
    lock_file(url).write_text(json.dumps({"host": "elsewhere", "pid": 4242, "since": "2020-01-01T00:00:00Z"}))
    with store_lock(str(url)):
        assert json.loads(lock_file(url).read_text())["pid"] == os.getpid()
    assert "pid 4242 on host elsewhere" in caplog.text and "taking it over" in caplog.text


def test_an_fsspec_url_is_written_without_a_lock_saying_so(tmp_path: Path, caplog) -> None:
    from labeldist.engine.lock import store_lock

    with store_lock("memory://somewhere/store"):
        pass
    assert "no lock" in caplog.text and "local paths only" in caplog.text


def test_a_lock_file_planted_as_a_link_or_a_fifo_is_refused_and_nothing_is_written(csv: Path, tmp_path: Path) -> None:
    """A lock file that is a symlink would have the holder record written into its target (any file, as root); a
    FIFO hung the job or failed with "illegal seek" naming nothing. Both are refused in one line naming the lock."""
    from labeldist.engine.lock import store_lock
    from labeldist.store import StoreError

    url = tmp_path / "store"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    lock_file(url).symlink_to(victim)
    with pytest.raises(StoreError, match=r"lock file .*\.store\.lock is a symbolic link, which is never followed"):
        with store_lock(str(url)):
            pass
    assert victim.read_text() == "precious\n" and lock_file(url).is_symlink()
    # the command says it in one line, exit 2, and writes no store
    proc = labeldist(*job(csv, url))
    assert proc.returncode == 2 and "is a symbolic link, which is never followed" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not url.exists() and victim.read_text() == "precious\n"
    lock_file(url).unlink()
    os.mkfifo(lock_file(url))
    with pytest.raises(StoreError, match=r"lock file .*\.store\.lock is not a regular file"):
        with store_lock(str(url)):
            pass
