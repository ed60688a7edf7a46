"""The label-set abstraction every label kind implements.

A label set is N labels of one kind with their item ids. The engine slices it into row blocks and ships the
blocks to Dask workers; the store keeps it as plain arrays so that any entry can be recomputed later.
"""

from __future__ import annotations

import hashlib
import math
from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
from typing_extensions import Self


def as_str_array(values: object) -> np.ndarray:
    """A fixed-width unicode array of ``values`` (also from Zarr's variable-width StringDType arrays)."""
    arr = np.asarray(values)
    return arr if arr.dtype.kind == "U" else arr.astype(object).astype(str)


class LabelError(ValueError):
    """Bad label input: the message names the file, row or item at fault."""


def json_number(value: object, where: str) -> float:
    """``value`` of a label's JSON form as a finite float; LabelError naming ``where`` for anything else (a
    string, a boolean, null, NaN or an infinity, which Python's JSON reader accepts)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LabelError(f"{where} is {json_repr(value)}, not a number")
    number = float(value)
    if not math.isfinite(number):
        raise LabelError(f"{where} is {number}, not a finite number")
    return number


def json_repr(value: object, limit: int = 40) -> str:
    """A short text of a JSON value for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class LabelSet(ABC):
    """N labels and their ids; immutable, picklable, sliceable.

    Subclasses hold their data in NumPy arrays and say how to turn them into a flat ``{name: array}`` dict
    (what the store writes) and back.
    """

    #: name of the label type, recorded in the store manifest (``labels_type``)
    label_type: ClassVar[str]

    def __init__(self, ids: np.ndarray) -> None:
        ids = as_str_array(ids)
        if ids.ndim != 1:
            raise LabelError(f"ids must be 1-d, got shape {ids.shape}")
        if len(np.unique(ids)) != len(ids):
            values, counts = np.unique(ids, return_counts=True)
            raise LabelError(f"duplicate item ids: {values[counts > 1][:5].tolist()}")
        self.ids = ids
        #: how the labels were read or made (reader options, generator settings): recorded in the store
        #: manifest as ``params["labels"]``; readers fill it, subsets need not carry it
        self.provenance: dict[str, object] = {}

    def __len__(self) -> int:
        return len(self.ids)

    @abstractmethod
    def subset(self, index: slice | np.ndarray) -> Self:
        """The labels at ``index`` (a slice or an integer array), ids included."""

    @abstractmethod
    def to_arrays(self) -> dict[str, np.ndarray]:
        """Every array needed to rebuild this set, ids excluded."""

    @classmethod
    @abstractmethod
    def from_arrays(cls, ids: np.ndarray, arrays: dict[str, np.ndarray]) -> Self:
        """Rebuild a set written by :meth:`to_arrays`."""

    @classmethod
    def from_json(cls, value: object, *, like: LabelSet) -> Self:
        """One label read from its JSON form (a parsed JSON value), as a set of one item (id ``"query"``), made
        exactly as the items of ``like`` were made, so that its distances to them are those a new item of that
        set would get: the search of a store by a new label (``POST /v1/stores/{store}/search``).

        ``like`` is the store's labels, with the manifest's ``params["labels"]`` as its ``provenance``: a kind
        takes from it what it needs (the number of joints, the dimension, a caption set's tokenizer and word
        vectors). Raises :class:`LabelError` naming what is wrong with ``value``; the default raises
        NotImplementedError: the kind cannot be searched by label.
        """
        raise NotImplementedError(f"labels of type {cls.label_type!r} cannot be read from JSON")

    def sha256(self) -> str:
        """Digest of ids and label arrays: two sets with the same digest give the same distances."""
        h = hashlib.sha256()
        h.update(self.label_type.encode())
        h.update("\x00".join(self.ids.tolist()).encode())
        for name, arr in sorted(self.to_arrays().items()):
            arr = np.ascontiguousarray(arr)
            h.update(f"{name}:{arr.dtype.str}:{arr.shape}".encode())
            h.update(arr.tobytes())
        return h.hexdigest()
