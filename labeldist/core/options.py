"""Option values and paths of the command line, checked before any work: what ``labeldist`` and each kind's
``precompute`` command (:mod:`labeldist.kinds`) parse their options with."""

from __future__ import annotations

import argparse
import errno
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labeldist.errors import UsageError


# ---------------------------------------------------------------- option values, checked as they are parsed
# Every numeric option has a range: a bad value is refused by argparse, naming the option, before any file is read
# or written (a negative --block-rows would leave a half-made store; --workers 0 must not mean "default").
def _bounds(minimum: float | None, maximum: float | None, above: bool, below: bool) -> str:
    """The range in words, e.g. ``at least 1``, ``from 0 to 10``, ``above 0 and at most 1``."""
    if minimum is not None and maximum is not None and not (above or below):
        return f"from {minimum} to {maximum}"
    words = [f"{'above' if above else 'at least'} {minimum}"] if minimum is not None else []
    words += [f"{'below' if below else 'at most'} {maximum}"] if maximum is not None else []
    return " and ".join(words)


def number_option(
    kind: type,
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    above: bool = False,
    below: bool = False,
) -> Callable[[str], Any]:
    """An argparse ``type=``: a finite ``kind`` (int or float) in [minimum, maximum]; ``above``/``below`` leave
    out the bound itself. argparse turns its ArgumentTypeError into ``argument --name: ...``, exit status 2."""
    noun = "an integer" if kind is int else "a finite number"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        low = minimum is not None and (value <= minimum if above else value < minimum)
        high = maximum is not None and (value >= maximum if below else value > maximum)
        if not math.isfinite(value) or low or high:
            raise argparse.ArgumentTypeError(f"must be {noun} {_bounds(minimum, maximum, above, below)}, got {text}")
        return value

    parse.__name__ = f"{kind.__name__} {_bounds(minimum, maximum, above, below)}"  # argparse's fallback wording
    return parse


positive_int = number_option(int, 1)
nonnegative_int = number_option(int, 0)
#: a random seed: NumPy's generators refuse negative ones
seed_int = nonnegative_int
port_number = number_option(int, 1, 65535)
positive_float = number_option(float, 0, above=True)
nonnegative_float = number_option(float, 0)
finite_float = number_option(float)
#: a share of something: above 0 (a share of nothing selects nothing), at most all of it
share_float = number_option(float, 0, 1, above=True)
#: a part of something that leaves some of it: above 0 and below 1
part_float = number_option(float, 0, 1, above=True, below=True)
#: processes or threads to start: each costs memory, so a typo (1e20) is refused rather than tried
worker_count = number_option(int, 1, 256)
#: a side of an image in pixels
image_side = number_option(int, 8, 8192)
#: a width of a layer or an embedding
layer_width = number_option(int, 1, 65536)


def byte_size(text: str) -> int:
    """An argparse ``type=``: a size in bytes, a number or with a unit as ``dask.utils.parse_bytes`` reads it
    (``1GiB``, ``500MB``, ``2e9``); at least 0."""
    from dask.utils import parse_bytes

    try:
        value = parse_bytes(text)
    except (ValueError, TypeError, OverflowError):  # OverflowError: 1e400 is infinity
        raise argparse.ArgumentTypeError(f"expected a size such as 1GiB, 500MB or 2e9, got {text!r}") from None
    if not 0 <= value <= 2**62:  # NaN and infinity fail too
        raise argparse.ArgumentTypeError(f"must be a size from 0 bytes to 4 EiB, got {text}")
    return int(value)


def check_k(k: int, n_items: int) -> None:
    """ValueError naming ``--k`` when a kNN list of ``k`` cannot be filled: an item has only N - 1 others."""
    if n_items >= 2 and k >= n_items:  # fewer than 2 items: precompute() says that itself
        raise UsageError(
            f"--k {k}: each of the {n_items} items has only {n_items - 1} others to be its neighbours; "
            f"ask for --k {n_items - 1} or fewer"
        )


# ---------------------------------------------------------------- paths, checked before any work
# A missing or wrong path is an OSError naming it; main() prints any OSError as one line `labeldist: error: PATH:
# reason`, exit status 2, never a traceback.
def check_file(path: str | os.PathLike[str], what: str = "label file") -> None:
    """An OSError naming ``path`` unless it is a regular file (links followed) this process may read: a FIFO, a
    device or a socket is refused here, before anything could block on it or read it without end (each reader
    opens it through :func:`labeldist.core.reading.open_regular`, which checks again on the opened file)."""
    name = os.fspath(path)
    if not os.path.exists(name):
        raise FileNotFoundError(errno.ENOENT, "no such file", name)
    if os.path.isdir(name):
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", name)
    mode = os.stat(name).st_mode
    if not stat.S_ISREG(mode):
        raise irregular_file_error(mode, name, what)
    if not os.access(name, os.R_OK):
        raise PermissionError(errno.EACCES, "permission denied (cannot read it)", name)


def irregular_file_error(mode: int, name: str, what: str) -> OSError:
    """The error of ``name``, a file of ``st_mode`` ``mode`` that is not regular, where a ``what`` is read: a
    FIFO, a device or a socket could block or never end."""
    return OSError(
        errno.EINVAL,
        f"{file_kind(mode)}, not a regular file: a {what} is read only from a regular file (this could block or "
        "never end)",
        name,
    )


def check_regular_file(path: str | os.PathLike[str], what: str = "file") -> None:
    """An OSError naming ``path`` unless it is a regular file (links followed) this process may read.

    For the paths a store's manifest names (word vectors, a sentence model's files, cached embeddings), which are
    input like any other: a FIFO there blocks whoever opens it, and a device or socket is nothing to read, so a
    search of a served store would hold a computation slot until someone wrote to the FIFO. A path the user types
    on the command line is checked by :func:`check_file`, which refuses the same."""
    name = os.fspath(path)
    try:
        mode = os.stat(name).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, f"no such {what}", name) from None
    if not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, f"{file_kind(mode)}, not a regular file: a {what} must be a regular file", name)
    if not os.access(name, os.R_OK):
        raise PermissionError(errno.EACCES, "permission denied (cannot read it)", name)


_FILE_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, by its ``st_mode``: "a FIFO (named pipe)", "a folder", ...

    >>> file_kind(stat.S_IFIFO | 0o644)
    'a FIFO (named pipe)'
    """
    return _FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")


def check_regular_tree(folder: str | os.PathLike[str], what: str) -> None:
    """:func:`check_regular_file` for every file under ``folder`` (links followed, folders descended): a model folder
    that a manifest names, whose files a library opens one by one."""
    for root, _, files in os.walk(folder):  # "files": every entry that is not a folder (FIFOs, devices, links)
        for name in files:
            check_regular_file(os.path.join(root, name), what)


def check_folder(path: str | os.PathLike[str], missing: str = "no such folder", what: str = "") -> None:
    """An OSError naming ``path`` unless it is a folder this process may list; ``missing`` and ``what`` (say,
    " (a store is a folder)") word the reason."""
    name = os.fspath(path)
    if not os.path.exists(name):
        raise FileNotFoundError(errno.ENOENT, missing, name)
    if not os.path.isdir(name):
        raise NotADirectoryError(errno.ENOTDIR, f"not a folder{what}", name)
    if not os.access(name, os.R_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "permission denied (cannot list it)", name)


def check_output(out: str) -> None:
    """An OSError naming the file when a local ``out`` is a file or lies under one: no store folder can be made
    there. URLs (``s3://``, ``memory://``) are left to their filesystem; a folder that may not be written fails
    at the first write, with the same one-line error."""
    if "://" in out:
        return
    path = Path(out)
    existing = next(p for p in (path, *path.parents) if os.path.lexists(p))  # "." or "/" ends the walk
    if os.path.islink(existing):
        try:
            os.stat(existing)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise OSError(
                    errno.ELOOP, "a loop of symbolic links: no store can be written there", str(existing)
                ) from None
            raise FileNotFoundError(
                errno.ENOENT,
                f"a symbolic link to {os.readlink(existing)!r}, which does not exist: make that folder, or give "
                "another --out",
                str(existing),
            ) from None
    if not existing.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "a file, not a folder: no store can be written there", str(existing))


def check_store_path(store: str) -> None:
    """An OSError naming a local ``store`` path that is missing or not a folder (a folder that is no store is
    left to the store reader, which says so)."""
    if "://" not in store:
        check_folder(store, missing="no store there", what=" (a store is a folder)")


def os_error_message(e: OSError) -> str:
    """``PATH: reason`` for an OSError that names a path, else its text: the body of the command's error line."""
    reason = e.strerror or str(e)
    reason = reason[:1].lower() + reason[1:]
    if e.filename is None:
        return reason
    where = f"{e.filename} -> {e.filename2}" if e.filename2 is not None else str(e.filename)
    return f"{where}: {reason}"


# ---------------------------------------------------------------- --help shows every default
def _no_default(action: argparse.Action) -> bool:
    # identity, not equality: a default of 0 is a default worth showing, False (a flag that is off) is not
    return action.default is None or action.default is False or action.default is argparse.SUPPRESS


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help unless the help already says it, or the default is None or
    False (an option given no value, a flag that is off)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or "default:" in text or _no_default(action):
            return text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"
        return text


def show_defaults(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` and every sub-command parser under it with :class:`DefaultsHelpFormatter`."""
    parser.formatter_class = DefaultsHelpFormatter
    for action in parser._actions:
        if action.help is None and action.option_strings and not _no_default(action):
            action.help = "(default: %(default)s)"  # argparse prints nothing of an option with no help
    for action in parser._actions:  # argparse keeps sub-command parsers only here
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                show_defaults(sub)
    return parser
