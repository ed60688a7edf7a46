"""Reading a file the user names: a regular file only, bounded where it is small by nature, UTF-8 named on error.

Every reader of a path a user gives (label files, features, split files, scheduler files, image indexes) opens it
through :func:`open_regular`, so that:

- a FIFO, a device or a socket is refused in one line before anything could block or never end (a FIFO's
  ``open`` waits for a writer; ``/dev/zero`` never ends): ``os.stat`` before the open, and the open itself with
  ``O_NONBLOCK`` and checked again by ``fstat`` on the descriptor, so that a file swapped in between is caught;
- a file that is small by nature (a scheduler file, a JSON record, a configuration; a split) is read only up to
  a stated bound (:data:`SMALL_FILE_BYTES`; :data:`SPLIT_FILE_BYTES`), said in the message, never whole whatever
  its size;
- text is UTF-8 (a byte-order mark read and dropped); a byte that is not is named with the file, its line and
  what the file seems to be instead (:func:`decode_utf8`);
- a CSV field may be long, up to :data:`CSV_FIELD_LIMIT` characters (:func:`read_csv`), and a longer one is named.

The errors are an OSError naming the path (each command prints it as ``PATH: reason``) for what cannot be read,
and a :class:`TextFileError` for text that is not what it must be.
"""

from __future__ import annotations

import codecs
import csv
import errno
import io
import os
import stat
from typing import BinaryIO

from labeldist.core.options import file_kind, irregular_file_error
from labeldist.errors import LabeldistError

#: the most bytes read of a file that is small by nature: a scheduler file, a split, a JSON record, a configuration
SMALL_FILE_BYTES = 16 * 2**20
#: the most bytes read of a split file (``split.json``): it lists every item's position and id, about 40 bytes an
#: item, so this takes a split of some 6 million items
SPLIT_FILE_BYTES = 256 * 2**20
#: the longest CSV field read, in characters (Python's csv module stops at 131,072 by default: a long sentence,
#: caption list or path cell can be longer)
CSV_FIELD_LIMIT = 64 * 2**20


class TextFileError(LabeldistError, ValueError):
    """A text file that is not UTF-8, or not CSV: the message names the file, the line and what to do."""


def size_words(n: int) -> str:
    """``n`` bytes in words: ``16 MiB``, ``512 KiB``, ``100 bytes``.

    >>> size_words(16 * 2**20), size_words(3000)
    ('16 MiB', '2.9 KiB')
    """
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.{0 if n % scale == 0 else 1}f} {unit}"
    return f"{n} bytes"


def _refuse(mode: int, name: str, what: str) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, f"{file_kind(mode)}, not a {what}", name)
    raise irregular_file_error(mode, name, what)


def open_regular(path: str | os.PathLike[str], what: str = "file", *, limit: int | None = None) -> BinaryIO:
    """``path`` opened for reading (binary, buffered) if it is a regular file (links followed), of at most
    ``limit`` bytes when given; else an OSError naming it, raised before anything could block.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     fifo = os.path.join(d, "f")
    ...     os.mkfifo(fifo)
    ...     open_regular(fifo, "label file")
    Traceback (most recent call last):
    OSError: [Errno 22] a FIFO (named pipe), not a regular file: a label file is read only from a regular file ...
    """
    name = os.fspath(path)
    _refuse(os.stat(name).st_mode, name, what)  # FileNotFoundError, PermissionError name the path themselves
    # O_NONBLOCK: a FIFO swapped in after the stat must not block the open (fstat refuses it next)
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        _refuse(info.st_mode, name, what)
        if limit is not None and info.st_size > limit:
            raise _too_large(name, what, limit, info.st_size)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _too_large(name: str, what: str, limit: int, size: int | None) -> OSError:
    size_said = f"{size_words(size)}" if size is not None else "more than that"
    return OSError(
        errno.EFBIG,
        f"{size_said}: a {what} is at most {size_words(limit)}, and a larger one is not read (is it the right file?)",
        name,
    )


def read_regular(path: str | os.PathLike[str], what: str = "file", *, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`), never more than ``limit`` read: a file that
    grows past it while it is read is refused too."""
    with open_regular(path, what, limit=limit) as f:
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise _too_large(os.fspath(path), what, limit, None)
    return data


def read_regular_text(path: str | os.PathLike[str], what: str = "file", *, limit: int | None = None) -> str:
    """The UTF-8 text of the regular file ``path`` (a byte-order mark dropped): :func:`read_regular` and
    :func:`decode_utf8`."""
    return decode_utf8(read_regular(path, what, limit=limit), os.fspath(path))


def decode_utf8(raw: bytes, where: str) -> str:
    """``raw`` decoded as UTF-8, a byte-order mark dropped; a :class:`TextFileError` naming ``where``, the line of
    the first byte that is not UTF-8, and what the file seems to be instead.

    >>> try:
    ...     decode_utf8("id\\nJos\\u00e9\\n".encode("latin-1"), "a.csv")
    ... except TextFileError as e:
    ...     print(e)
    a.csv, line 2: not UTF-8 (byte 0xe9 at offset 6); it reads as Latin-1 or Windows-1252: save it as UTF-8
    """
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise not_utf8(where, raw[: e.start].count(b"\n") + 1, raw[e.start], e.start, raw[:4096]) from None


def not_utf8(where: str, line: int, byte: int, offset: int, head: bytes) -> TextFileError:
    """The error of a file that is not UTF-8 at ``offset`` (``byte``, on ``line``), ``head`` its first bytes."""
    return TextFileError(f"{where}, line {line}: not UTF-8 (byte 0x{byte:02x} at offset {offset}); {_guess(head)}")


def _guess(head: bytes) -> str:
    """What a file that is not UTF-8 seems to be, from its first bytes, and what to do."""
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "it is UTF-16 (its byte-order mark says so): save it as UTF-8"
    if head.count(b"\0") * 4 >= len(head) > 0:
        return "it looks like UTF-16 (a zero byte in every other): save it as UTF-8"
    return "it reads as Latin-1 or Windows-1252: save it as UTF-8"


def _decode_error_at(f: BinaryIO, where: str) -> TextFileError:
    """The :func:`not_utf8` error of the opened file ``f``, found by decoding it again from its start in chunks:
    a text stream reports a bad byte only as an offset in the chunk it was decoding."""
    f.seek(0)
    head = f.read(4096)
    f.seek(0)
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, lines = 0, 1
    while True:
        chunk = f.read(2**20)
        try:
            decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as e:
            # e.start counts in the decoder's buffered bytes (up to 3 left from the previous chunk) plus this one
            pending = len(e.object) - len(chunk)
            at = offset - pending + e.start
            lines += e.object[: e.start].count(b"\n")
            return not_utf8(where, lines, e.object[e.start], at, head)
        if not chunk:
            return TextFileError(f"{where}: not UTF-8")  # the stream said so; it decodes now (it changed)
        lines += chunk.count(b"\n")
        offset += len(chunk)


def read_csv(path: str | os.PathLike[str], what: str = "CSV file", *, delimiter: str = ",") -> list[list[str]]:
    """Every row of the CSV file ``path`` (blank lines as empty rows, as ``csv.reader`` gives them), read as UTF-8
    with a byte-order mark dropped and fields up to :data:`CSV_FIELD_LIMIT` characters; an OSError for a path that
    is not a regular file, a :class:`TextFileError` naming the file and line of a byte that is not UTF-8, a field
    too long or a line that is not CSV."""
    name = os.fspath(path)
    with open_regular(name, what) as f:
        text = io.TextIOWrapper(f, encoding="utf-8-sig", newline="")
        reader = csv.reader(text, delimiter=delimiter)
        allow_long_csv_fields()
        try:
            return list(reader)
        except UnicodeDecodeError:
            raise _decode_error_at(f, name) from None
        except csv.Error as e:
            raise csv_error(name, reader.line_num, e, delimiter) from None
        finally:
            text.detach()  # f is closed by its own block


def csv_error(where: str, line: int, e: csv.Error, delimiter: str = ",") -> TextFileError:
    """A csv.Error at ``line`` of ``where`` in words; a field over the limit says the limit."""
    table = "CSV" if delimiter == "," else "TSV" if delimiter == "\t" else "a table"
    if "field larger than field limit" in str(e):
        return TextFileError(
            f"{where}, line {line}: a field longer than {CSV_FIELD_LIMIT:,} characters, the most a {table} field may "
            "hold (an unclosed quote makes the rest of the file one field)"
        )
    return TextFileError(f"{where}, line {line}: not {table}: {e}")


def allow_long_csv_fields() -> None:
    """Let Python's csv module read fields up to :data:`CSV_FIELD_LIMIT` characters (its default is 131,072). The
    limit is the process's: raised, never lowered."""
    if csv.field_size_limit() < CSV_FIELD_LIMIT:
        csv.field_size_limit(CSV_FIELD_LIMIT)
