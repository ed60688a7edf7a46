"""Writing one file whole: a temporary file of its own beside it, renamed over it.

Every file labeldist writes outside a store's engine (exports, plots, renders and their index, checkpoints, run
logs, the embedding cache) goes through :func:`written_whole`, so that:

- the temporary file is *created* here, with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and an unpredictable name: a link
  or a file planted beside the target is never opened, followed or truncated (a predictable ``NAME.tmp`` or
  ``NAME.partial-PID`` would be, by whoever can write in the folder);
- the target is replaced by a rename, so a reader (or a kill) sees the old file or the new one whole;
- only a regular file (or nothing) is replaced: a link, a folder, a FIFO or a device at the target is refused.

Whether a file may be replaced at all (``--overwrite``, never inside a store) is the caller's rule
(:mod:`labeldist.store.outputs`); this module is the mechanism.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

#: attempts at a fresh temporary name before giving up (each collision is a file someone else made there)
_ATTEMPTS = 16


def create_beside(path: str | os.PathLike[str]) -> Path:
    """A new empty file in ``path``'s folder, named ``.NAME.RANDOM.tmp``, created exclusively (never an existing
    file, never through a link) with the permissions a plain ``open`` would give (0o666 less the umask).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     made = create_beside(os.path.join(d, "x.csv"))
    ...     made.name.startswith(".x.csv.") and made.stat().st_size == 0
    True
    """
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_ATTEMPTS):
        candidate = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            os.close(os.open(candidate, flags, 0o666))
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(17, f"no fresh temporary name after {_ATTEMPTS} tries", str(path.parent))


def check_replaceable(path: str | os.PathLike[str]) -> None:
    """OSError naming ``path`` unless it is absent or a regular file (a link is refused, not followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        what = "a symbolic link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise IsADirectoryError(21, f"{what}: only a regular file is replaced", str(path))


@contextlib.contextmanager
def written_whole(path: str | os.PathLike[str], sync: bool = False) -> Iterator[Path]:
    """The temporary file (:func:`create_beside`) to write ``path``'s new contents to, by its name; renamed over
    ``path`` when the block ends without an error (after an fsync of it when ``sync``), removed otherwise.
    ``path`` must be absent or a regular file, before and just before the rename (:func:`check_replaceable`).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     with written_whole(os.path.join(d, "a.txt")) as tmp:
    ...         _ = tmp.write_text("whole")
    ...     sorted(os.listdir(d)), open(os.path.join(d, "a.txt")).read()
    (['a.txt'], 'whole')
    """
    check_replaceable(path)
    temporary = create_beside(path)
    renamed = False
    try:
        yield temporary
        if sync:
            fd = os.open(temporary, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        check_replaceable(path)
        os.replace(temporary, path)
        renamed = True
    finally:
        if not renamed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
