"""Zarr's local store, reading only what a labeldist store can hold: regular files, and metadata of bounded size
and depth.

A folder under ``--stores`` can be anything someone put there. Zarr's ``LocalStore`` opens each key's path and
reads it whole: a FIFO blocks the reader forever (and a signal does not stop it), a link to ``/dev/zero`` is read
until memory runs out, a link loop raises an OSError, and a ``zarr.json`` nested 100,000 deep raises Python's
RecursionError. :class:`CheckedLocalStore` opens each file without following a link at its name and without waiting
for a writer (``O_NOFOLLOW | O_NONBLOCK``), reads it only when it is a regular file, and refuses a metadata file
(``zarr.json``) above :data:`METADATA_MAX_BYTES` or nested deeper than :data:`METADATA_MAX_DEPTH`, each as
:class:`~labeldist.store.errors.StoreCorruptError` naming the file. labeldist writes every file of a store itself,
as a regular file: none of these refusals meets a store it made.
"""

from __future__ import annotations

import asyncio
import errno
import io
import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.storage import LocalStore

from labeldist.core.options import file_kind
from labeldist.store.errors import StoreCorruptError

#: the largest ``zarr.json`` read: a store's manifest and array metadata are a few KB
METADATA_MAX_BYTES = 16 << 20
#: the deepest nesting of lists and objects taken in a ``zarr.json`` (a manifest is about 5 deep)
METADATA_MAX_DEPTH = 64


def refused(path: Path, what: str) -> StoreCorruptError:
    """The error for a file of a store that is not read: ``what`` says why."""
    key = path.name if path.name == "zarr.json" else str(path)
    return StoreCorruptError(
        f"{path}: {what}, which no store labeldist writes holds: refusing to read it (rebuild the store, or move "
        "this folder out of the stores folder)",
        array=key,
    )


def json_depth(value: Any) -> int:
    """How deeply lists and objects nest in the parsed JSON ``value`` (a scalar: 0), without recursion.

    >>> json_depth({"a": [1, {"b": []}]}), json_depth(3)
    (4, 0)
    """
    deepest, todo = 0, [(value, 1)]
    while todo:
        node, depth = todo.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        todo.extend((child, depth + 1) for child in children)
    return deepest


def check_metadata(path: Path, data: bytes) -> None:
    """StoreCorruptError unless ``data``, the bytes of the metadata file ``path``, parse as JSON nested at most
    :data:`METADATA_MAX_DEPTH` deep (Python's reader raises RecursionError on deep nesting: caught here)."""
    try:
        parsed = json.loads(data)
    except RecursionError:
        raise refused(path, "its JSON is nested too deeply to read") from None
    except ValueError:
        return  # not JSON: Zarr's own error, which the readers turn into "cannot be read"
    if json_depth(parsed) > METADATA_MAX_DEPTH:
        raise refused(path, f"its JSON is nested more than {METADATA_MAX_DEPTH} deep")


def read_regular(path: Path, byte_range: ByteRequest | None = None) -> bytes:
    """The bytes of ``path`` (or of ``byte_range`` in it) when it is a regular file, not reached through a link at
    its own name; FileNotFoundError when it is absent, StoreCorruptError for anything else (see the module)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise refused(path, "a symbolic link") from None
        if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR):
            raise
        raise refused(path, f"cannot be opened ({os.strerror(e.errno or 0)})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        mode, size = st.st_mode, st.st_size
        if not stat.S_ISREG(mode):
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(str(path))  # a folder at a key: absent, as Zarr's own store says
            raise refused(path, f"{file_kind(mode)}, not a regular file")
        metadata = path.name == "zarr.json"
        if metadata and size > METADATA_MAX_BYTES:
            raise refused(path, f"metadata of {size:,} bytes (at most {METADATA_MAX_BYTES:,} are read)")
        data = read_range(f, size, byte_range)
    if metadata and byte_range is None:
        check_metadata(path, data)
    return data


def read_range(f: io.BufferedReader, size: int, byte_range: ByteRequest | None) -> bytes:
    """The bytes of an open file of ``size`` bytes that Zarr's ``byte_range`` asks for (all of them for None)."""
    if byte_range is None:
        return f.read()
    if isinstance(byte_range, RangeByteRequest):
        f.seek(byte_range.start)
        return f.read(max(byte_range.end - byte_range.start, 0))
    if isinstance(byte_range, OffsetByteRequest):
        f.seek(byte_range.offset)
    elif isinstance(byte_range, SuffixByteRequest):
        f.seek(max(0, size - byte_range.suffix))
    else:
        raise TypeError(f"unexpected byte range {byte_range!r}")
    return f.read()


class CheckedLocalStore(LocalStore):
    """Zarr's :class:`~zarr.storage.LocalStore` whose reads go through :func:`read_regular` (see the module); writes
    are Zarr's own."""

    def _read(self, key: str, prototype: BufferPrototype | None, byte_range: ByteRequest | None) -> Buffer | None:
        prototype = prototype or default_buffer_prototype()
        try:
            return prototype.buffer.from_bytes(read_regular(self.root / key, byte_range))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    async def get(
        self, key: str, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if not self._is_open:
            await self._open()
        return await asyncio.to_thread(self._read, key, prototype, byte_range)

    def get_sync(
        self, key: str, *, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self._ensure_open_sync()
        return self._read(key, prototype, byte_range)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return list(
            await asyncio.gather(
                *(asyncio.to_thread(self._read, key, prototype, byte_range) for key, byte_range in key_ranges)
            )
        )
