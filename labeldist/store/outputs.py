"""Files a command writes where the user names: never over something it was not asked to replace.

One rule for every command that writes a file the user names (``labeldist export --out``, ``trainer split``,
``trainer eval --out``, ``trainer plot --out``, ``trainer demo-inputs --out``, the files of ``trainer render``):

- an existing file is refused unless ``--overwrite`` (:func:`check_output_file`), and then only a regular file is
  replaced: never a link, a folder, a device or a FIFO;
- nothing is written inside a labeldist store, whose files only the engine writes (:func:`store_holding`);
- the file goes in whole or not at all: written to a hidden file of its own beside it, created exclusively under
  an unpredictable name (never through a link planted there), then renamed over it (:func:`replacing`, by
  :func:`labeldist.core.files.written_whole`), checked again just before the rename;
- a file that already holds exactly the bytes to be written is left as it is (:func:`write_bytes`).

Errors are :class:`OutputError`, a :class:`~labeldist.core.options.UsageError` printed as one line naming the path.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from labeldist.core.files import written_whole
from labeldist.core.options import UsageError
from labeldist.store.manifest import is_store


class OutputError(UsageError):
    """A file cannot be written where the user asked; the message names it and says what to do."""


def store_holding(path: str | os.PathLike[str]) -> Path | None:
    """The labeldist store that ``path`` lies in (or is), with links resolved, or None; a damaged store counts
    (:func:`labeldist.store.is_store`), and so do its hidden staging folders."""
    here = Path(os.path.realpath(path))
    for folder in (here, *here.parents):
        if is_store(folder):
            return folder
        if folder.name.startswith(".") and is_store(folder.parent / folder.name[1:].rpartition(".")[0]):
            return folder  # a store's staging folder (.NAME.overwrite, .NAME.append, ...)
    return None


def check_output_file(path: str | os.PathLike[str], overwrite: bool, option: str = "--overwrite") -> None:
    """Refuse (:class:`OutputError`, or the OSError of a missing folder) to write the file ``path`` unless it may be
    written: not a folder, not inside a store, not existing unless ``overwrite``, and then a regular file."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(21, "a folder, not a file: give the file to write", str(path))
    refuse_inside_store(path)
    if os.path.lexists(path):
        if not overwrite:
            raise OutputError(f"{path}: exists; give {option} to replace it")
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):
            what = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
            raise OutputError(f"{path}: {what}; {option} replaces regular files only: remove it, or write elsewhere")
    if not path.parent.is_dir():
        raise FileNotFoundError(2, "no such folder for the output file", str(path.parent))


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], overwrite: bool, option: str = "--overwrite") -> Iterator[Path]:
    """The hidden file to write ``path``'s contents to, renamed over ``path`` when the block ends without an error
    (and removed otherwise): the file appears whole or not at all. Checked (:func:`check_output_file`) before and
    again just before the rename."""
    path = Path(path)
    check_output_file(path, overwrite, option)
    try:
        with written_whole(path) as partial:
            yield partial
            check_output_file(path, overwrite, option)
    except OSError as e:
        hidden = Path(str(e.filename)) if e.filename is not None else None
        if hidden is None or hidden.parent != path.parent or not hidden.name.startswith(f".{path.name}."):
            raise
        # named by the file the user asked for, not the hidden one beside it (a read-only folder, a full disk)
        raise OSError(e.errno, f"cannot write there: {(e.strerror or str(e)).lower()}", str(path)) from None


def refuse_inside_store(path: str | os.PathLike[str]) -> None:
    """:class:`OutputError` naming ``path`` when it is, or lies in, a labeldist store (:func:`store_holding`)."""
    store = store_holding(path)
    if store is not None:
        raise OutputError(
            f"{path}: inside the labeldist store {store}, whose files only labeldist's engine writes; write elsewhere"
        )


def make_folder(path: str | os.PathLike[str]) -> Path:
    """The folder ``path``, made with its parents where missing; refused (:class:`OutputError`) inside a store."""
    path = Path(path)
    refuse_inside_store(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def make_parent(path: str | os.PathLike[str]) -> Path:
    """The folder of the file ``path``, made where missing; refused (:class:`OutputError`, naming the file) when the
    file would lie in a store. ``path`` as a Path."""
    path = Path(path)
    refuse_inside_store(path)  # the file's place and every folder above it
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def holds(path: str | os.PathLike[str], data: bytes) -> bool:
    """Whether ``path`` is a regular file holding exactly ``data``."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        with open(path, "rb") as f:
            return f.read(len(data) + 1) == data
    except OSError:
        return False


def write_bytes(path: str | os.PathLike[str], data: bytes, overwrite: bool, option: str = "--overwrite") -> bool:
    """Write ``data`` to the file ``path`` by :func:`replacing`, its folder made (:func:`make_parent`); a file that
    already holds exactly ``data`` is left alone. Whether anything was written."""
    make_parent(path)
    if holds(path, data):
        return False
    with replacing(path, overwrite, option) as partial:
        partial.write_bytes(data)
    return True


def write_text(path: str | os.PathLike[str], text: str, overwrite: bool, option: str = "--overwrite") -> bool:
    """:func:`write_bytes` of ``text`` in UTF-8."""
    return write_bytes(path, text.encode("utf-8"), overwrite, option)
