"""One writer per store: the lock a precompute holds on its output for the whole job.

Two jobs writing one store race each other, so a job takes this lock before it touches anything at ``url`` and
keeps it to the end, the ``--overwrite`` swap included; a second job refuses at once, naming the holder. The lock is
``flock`` on a hidden file beside the store, ``.NAME.lock``, which the kernel drops when the holder dies, however it
dies; the host, pid and start time in the file only name the holder. Local paths only: an fsspec URL has no lock
that every writer would see, so a job writing one says that it takes none. docs/store-format.md, "Writing,
resuming, publishing", says why the file lies beside the store and how it is taken over and released.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import logging
import os
import socket
import stat
from collections.abc import Iterator
from typing import Any

from labeldist.store import StoreError, check_staging_folders, is_local, sibling, store_url

log = logging.getLogger(__name__)

#: attempts at locking the file at the path, each after the previous holder removed it under us
_ATTEMPTS = 20


class StoreLockedError(StoreError):
    """Another job holds the store's lock: it is writing the store now."""


def lock_path(url: str) -> str:
    """The lock file of the local store ``url``: ``.NAME.lock`` beside it."""
    return sibling(store_url(url), "lock")


@contextlib.contextmanager
def store_lock(url: str, job: str = "precompute") -> Iterator[None]:
    """Hold the lock of the store ``url`` for the ``with`` block as the command ``job`` (``precompute``, ``append``,
    ``split``: the holder record names it): StoreLockedError, naming the holder and its command, when another job
    holds it. On an fsspec URL no lock is taken, and a warning says so."""
    url = store_url(url)
    if not is_local(url):
        log.warning(
            "%s: no lock taken: one writer per store is enforced on local paths only; make sure no other "
            "job writes this store now",
            url,
        )
        yield
        return
    path = lock_path(url)
    made = _make_folders(os.path.dirname(path))
    try:
        fd = _take(path, url, job)
        try:
            check_staging_folders(url)  # again: a link planted after the job's first look, before it held the lock
            yield
        finally:
            _release(path, fd)
    finally:
        _remove_empty(made)


def _take(path: str, url: str, job: str) -> int:
    """The descriptor of ``path``, locked and holding this job's holder record."""
    for _ in range(_ATTEMPTS):
        fd = _open_lock_file(path, url)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read(fd)
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            raise StoreLockedError(
                f"{url}: {_whose(holder)} is writing this store ({_describe(holder)}); wait "
                f"for it to end, or stop it, then rerun (its lock: {path})"
            ) from None
        if _is_at(fd, path):
            _take_over(fd, url, job)
            return fd
        os.close(fd)  # the holder removed it as we locked it: lock the one now at the path
    raise StoreError(f"{url}: could not take the lock {path}: it was removed and made again {_ATTEMPTS} times")


def _open_lock_file(path: str, url: str) -> int:
    """``path`` opened (made if missing) for the lock, never through a link and only as a regular file: a lock file
    planted as a symlink would have the holder record written into the link's target, and a FIFO or device hangs
    or fails on the first read. StoreError naming the path and what to do for either."""
    try:
        # O_NONBLOCK: opening a planted FIFO must not wait for a writer; it is refused below
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise StoreError(
                f"{url}: its lock file {path} is a symbolic link, which is never followed: remove the link, then rerun"
            ) from None
        raise StoreError(f"{url}: cannot open its lock file {path}: {e.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StoreError(
            f"{url}: its lock file {path} is not a regular file (a FIFO, socket or device): remove it, then rerun"
        )
    return fd


def _is_at(fd: int, path: str) -> bool:
    """Whether the file open as ``fd`` is still the one at ``path`` (a releasing holder removes it)."""
    try:
        here = os.lstat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (here.st_dev, here.st_ino)


def _take_over(fd: int, url: str, job: str) -> None:
    """Write this job's holder record, after saying whose lock this was if its job died holding it."""
    previous = _read(fd)
    if previous is not None:
        log.warning("%s: %s; taking it over", url, _stale(previous))
    record = {
        "job": job,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "since": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)


def _release(path: str, fd: int) -> None:
    # removed while still locked, so that no one locks this file after us believing it is the store's lock
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    os.close(fd)


def _read(fd: int) -> dict[str, Any] | None:
    """The holder record in the lock file; None when there is none; ``{}`` when it cannot be read as one."""
    data = os.pread(fd, 4096, 0)
    if not data.strip():
        return None
    try:
        record = json.loads(data)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _holder(record: dict[str, Any]) -> str:
    return f"pid {record.get('pid', '?')} on host {record.get('host', '?')}, since {record.get('since', '?')}"


def _whose(holder: dict[str, Any] | None) -> str:
    """The holder's command as the refusal names it: ``another labeldist append``; ``another job`` for a record
    that does not say (it has not written it yet, or an older release wrote it)."""
    job = (holder or {}).get("job")
    return f"another labeldist {job}" if isinstance(job, str) and job.isidentifier() else "another job"


def _describe(holder: dict[str, Any] | None) -> str:
    """Who holds a lock this job could not take."""
    if holder is None:  # locked an instant ago; its holder has not written its record yet
        return "it has just started"
    return _holder(holder)


def _stale(record: dict[str, Any]) -> str:
    """What a record left in a lock no one holds says: a job that died without releasing it."""
    if not record:
        return "an unreadable lock file left by a job that is no longer running"
    if record.get("host") == socket.gethostname() and isinstance(record.get("pid"), int):
        status = "no longer running" if not _alive(record["pid"]) else "alive, but no longer holding it"
        return f"a stale lock of {_holder(record)} (pid {record['pid']} is {status})"
    return f"a stale lock of {_holder(record)}, which holds it no longer"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _make_folders(folder: str) -> list[str]:
    """Create ``folder`` and its missing parents (the lock must exist before the store); the ones made, deepest
    first, so that a job refused before writing anything leaves no folder behind."""
    made = []
    while folder and not os.path.isdir(folder):
        made.append(folder)
        folder = os.path.dirname(folder)
    for each in reversed(made):
        with contextlib.suppress(FileExistsError):
            os.mkdir(each)
    return made


def _remove_empty(folders: list[str]) -> None:
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:  # the store is in it (or another job's lock): it stays
            return
