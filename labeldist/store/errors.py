"""The errors of a store: each names the store, and says whether it is incomplete, mismatched or damaged."""

from __future__ import annotations

from labeldist.errors import LabeldistError


class StoreError(LabeldistError, RuntimeError):
    """A store cannot be used as asked; the message names the store."""


class StoreIncompleteError(StoreError):
    """The store is still being written (or was abandoned half-way): it must not be served."""


class StoreMismatchError(StoreError):
    """A store already at the output path was made from other labels or parameters."""


class StoreCorruptError(StoreError):
    """A chunk of the store is missing, or failed its CRC32C checksum or its decoding: the bytes on disk are not
    the ones written. ``array`` names the damaged array, where one is known."""

    def __init__(self, message: str, array: str | None = None) -> None:
        super().__init__(message)
        self.array = array


class StoreChangedError(StoreError):
    """The store was replaced on disk (rebuilt, appended to, removed) after this reader opened it, so what it read
    next may be the new generation's: refused rather than mixed with what it read before. Open the store again
    (a service answers 503 and the next request reads the new store)."""

    def __init__(self, url: str, outcome: str = "nothing read after the change was used") -> None:
        super().__init__(
            f"{url}: the store changed on disk (rebuilt, appended to or removed) while it was being read; "
            f"{outcome}: run again to read the store now there"
        )
