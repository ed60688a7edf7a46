"""The errors of a store: each names the store, and says whether it is incomplete, mismatched or damaged."""

from __future__ import annotations


class StoreError(RuntimeError):
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
