"""Files a command writes where the user names: never over something it was not asked to replace.

One rule for every command that writes a file the user names (``labeldist export --out``, ``trainer split``,
``trainer eval --out``, ``trainer plot --out``, ``trainer demo-inputs --out``, the files of ``trainer render``):

- an existing file is refused unless ``--overwrite`` (:func:`check_output_file`), and then only a regular file is
  replaced: never a link, a folder, a device or a FIFO;
- nothing is written inside a labeldist store, whose files only the engine writes (:func:`store_holding`);
- the file goes in whole or not at all: written to a hidden file of its own beside it, created exclusively under
  an unpredictable name (never through a link planted there), then renamed over it (:func:`replacing`, by
  :func:`labeldist.core.files.written_whole`), checked again just before the rename;
- a file that already holds exactly the bytes to be written is left as it is (:func:`write_bytes`);
- no output is one of the command's inputs, by resolved name or by device and inode, nor lies in a folder it reads,
  and no folder replaced whole holds one (:func:`check_not_inputs`, which every command calls before it writes or
  moves anything).

Errors are :class:`OutputError`, a :class:`~labeldist.core.options.UsageError` printed as one line naming the path.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from labeldist.core.files import written_whole
from labeldist.errors import UsageError
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
        part = os.path.relpath(os.path.realpath(path), store)
        where = "" if part == "." or part.startswith("..") else f" (at {part} in it)"
        raise OutputError(
            f"{path}: inside the labeldist store {store}{where}, whose files only labeldist's engine writes; "
            "write elsewhere"
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


# ---------------------------------------------------------------- no output is one of the command's inputs
def what_is(path: str | os.PathLike[str]) -> str:
    """What is at ``path``, in words, never following a link: ``"a file"``, ``"a folder"``, ``"a labeldist store"``,
    ``"a symbolic link to TARGET"``, ``"a FIFO"``, ``"a device"``, ``"a socket"`` or ``"nothing"``."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "nothing"
    except OSError:
        return "something that cannot be looked at"
    if stat.S_ISLNK(mode):
        return f"a symbolic link to {os.readlink(path)}"
    if stat.S_ISDIR(mode):
        return "a labeldist store" if is_store(path) else "a folder"
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a file or a folder"


def _identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    try:
        found = os.stat(path)  # through links: a link to an input is that input
    except (OSError, ValueError):
        return None
    return found.st_dev, found.st_ino


def same_path(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether ``a`` and ``b`` are one thing: the same name once links are resolved, or the same device and inode
    (a hard link, a bind mount, a folder reached by two routes)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    ia = _identity(a)
    return ia is not None and ia == _identity(b)


def lies_in(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """Whether ``path`` (which need not exist) lies inside the existing ``folder``, by name or by identity."""
    if not os.path.isdir(folder):
        return False
    return any(same_path(parent, folder) for parent in Path(os.path.realpath(path)).parents)


Paths = Iterable[str | os.PathLike[str] | None]


def check_not_inputs(
    outputs: Paths,
    inputs: Iterable[tuple[str, str | os.PathLike[str] | None]],
    *,
    replaced: Paths = (),
) -> None:
    """Refuse (:class:`OutputError`, one line naming both) an output that is one of the command's inputs: the one
    comparison every command makes before it writes or moves anything.

    ``outputs`` are the paths the command writes (a file, or a folder it writes into); ``replaced`` the folders it
    may replace whole (a store rebuilt by ``--overwrite`` or grown by ``append``: everything in them goes);
    ``inputs`` are ``(what, path)`` pairs of everything it reads (``("the label file", path)``; a None path is an
    input not given). An output is refused when it is an input (the same resolved name, or the same device and
    inode: a hard link or a link to it counts), when it lies in a folder the command reads, and a replaced folder
    when an input lies in it."""
    given = [(what, Path(path)) for what, path in inputs if path is not None and "://" not in os.fspath(path)]
    whole = [Path(p) for p in replaced if p is not None and "://" not in os.fspath(p)]
    for out in [Path(p) for p in outputs if p is not None and "://" not in os.fspath(p)] + whole:
        for what, path in given:
            if same_path(out, path):
                raise OutputError(
                    f"{out}: that is {what} ({path}, {what_is(path)}); a command never writes over its own input: "
                    "write it elsewhere"
                )
            if lies_in(out, path):
                refuse_inside_store(out)  # a store's own words: only labeldist's engine writes there
                raise OutputError(
                    f"{out}: inside {what} {path} ({what_is(path)}), which this command reads; a command never "
                    "writes into its own input: write it elsewhere"
                )
            if out in whole and lies_in(path, out):
                raise OutputError(
                    f"{out}: {what_is(out)} that holds {what} {path}, which replacing it would remove; a command "
                    "never replaces its own input: move the input out of it, or write elsewhere"
                )


def command_paths(values: dict[str, object], skip: Iterable[str] = ()) -> list[tuple[str, str]]:
    """The ``(what, path)`` inputs named on a command line (a parsed namespace's ``vars``): every string value, or
    string in a list, that names something that exists (``input`` is "the label file", another option
    "the --OPTION path"), but the keys in ``skip`` (the outputs)."""
    found = []
    for key, value in values.items():
        if key in set(skip):
            continue
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, (str, os.PathLike)) and "://" not in os.fspath(item) and os.path.lexists(item):
                what = f"the --{key.replace('_', '-')} path"
                if key == "input":
                    what = "the label folder" if os.path.isdir(item) else "the label file"
                found.append((what, os.fspath(item)))
    return found
