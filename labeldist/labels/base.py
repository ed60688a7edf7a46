"""The label-set abstraction every label kind implements.

A label set is N labels of one kind with their item ids. The engine slices it into row blocks and ships the
blocks to Dask workers; the store keeps it as plain arrays so that any entry can be recomputed later.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import ClassVar

import numpy as np
from typing_extensions import Self

from labeldist.core.reading import TextFileError, open_regular
from labeldist.errors import LabeldistError

log = logging.getLogger("labeldist.labels")


def as_str_array(values: object) -> np.ndarray:
    """A fixed-width unicode array of ``values`` (also from Zarr's variable-width StringDType arrays)."""
    arr = np.asarray(values)
    return arr if arr.dtype.kind == "U" else arr.astype(object).astype(str)


class LabelError(LabeldistError, ValueError):
    """Bad label input: the message names the file, row or item at fault."""


@contextlib.contextmanager
def label_file_errors(path: str | os.PathLike[str], cannot: str = "cannot read") -> Iterator[None]:
    """The errors of reading the file ``path`` in the ``with`` block as a LabelError: an OSError (missing, a
    folder, a FIFO, no permission) as ``PATH: cannot read: reason``, a
    :class:`~labeldist.core.reading.TextFileError` (not UTF-8, not CSV) as its own message, which names the file."""
    try:
        yield
    except OSError as e:
        raise LabelError(f"{path}: {cannot}: {e.strerror or e}") from None
    except TextFileError as e:
        raise LabelError(str(e)) from None


def json_number(value: object, where: str) -> float:
    """``value`` of a label's JSON form as a finite float; LabelError naming ``where`` for anything else (a
    string, a boolean, null, NaN or an infinity, which Python's JSON reader accepts, or an integer no float
    holds, which JSON allows and Python reads exactly)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LabelError(f"{where} is {json_repr(value)}, not a number")
    if isinstance(value, int):
        return _int_number(value, where)
    if not math.isfinite(value):
        raise LabelError(f"{where} is {value}, not a finite number")
    return float(value)


def _int_number(value: int, where: str) -> float:
    """The float of an integer; LabelError naming ``where`` and its digits where no float64 holds it."""
    try:
        return float(value)
    except OverflowError:
        try:
            digits = str(len(str(abs(value))))
        except ValueError:  # past Python's limit on writing out an integer (which JSON's reader applies too)
            digits = "thousands of"
        raise LabelError(
            f"{where} is an integer of {digits} digits, too large for a number (at most about 1.8e308)"
        ) from None


def json_text(value: object, where: str) -> str:
    """``value`` of a label's JSON form as a string of Unicode text; LabelError naming ``where`` for anything
    else, or a string holding a lone surrogate (``"\\ud800"``: JSON's escapes allow one; it is no text, and
    cannot be encoded, stored or tokenized)."""
    if not isinstance(value, str):
        raise LabelError(f"{where} is {json_repr(value)}, not a string")
    check_text(value, f"{where} {json_repr(value)}")
    return value


def check_text(text: str, where: str) -> None:
    """LabelError naming ``where`` where ``text`` holds a lone surrogate (U+D800..U+DFFF), so is no Unicode
    text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise LabelError(
            f"{where} holds a lone surrogate (U+{ord(text[e.start]):04X} at character {e.start}): not Unicode text"
        ) from None


#: why a JSON text deeper than Python's parser goes (about 1,000 levels) is refused
NESTED_TOO_DEEPLY = "JSON nested too deeply (over about 1,000 levels, more than any label file nests)"


def check_json_value(value: object, root: str = "", source: str = "") -> None:
    """Refuse what a parsed JSON value may hold and no label can use: a string (or an object's key) holding a
    lone surrogate (:func:`check_text`), or an integer no float64 holds (``1`` and 400 zeros). LabelError naming
    the place, as ``root`` and the path to it (``label[0][1]``, ``[3]['caption']``), after ``source`` (a file).

    Every label's JSON form goes through it before a kind reads it (:func:`labeldist.kinds.read_label`), and
    every JSON file a reader loads, so that no kind's parser, a plugin's included, meets such a value. A walk
    with its own stack: nesting deeper than Python's recursion limit is fine.
    """
    prefix = f"{source}: " if source else ""
    stack: list[tuple[object, str]] = [(value, root)]
    while stack:
        item, at = stack.pop()
        where = prefix + (at or "the value")
        if isinstance(item, str):
            check_text(item, f"{where} {json_repr(item)}")
        elif isinstance(item, int) and not isinstance(item, bool):
            _int_number(item, where)
        elif isinstance(item, list):
            stack.extend((v, f"{at}[{n}]") for n, v in reversed(list(enumerate(item))))
        elif isinstance(item, dict):
            for key in item:
                if isinstance(key, str):
                    check_text(key, f"{where} has the key {json_repr(key)}, which")
            stack.extend((v, f"{at}[{k!r}]") for k, v in reversed(list(item.items())))


def json_repr(value: object, limit: int = 40) -> str:
    """A short text of a JSON value for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- files, tables and ids: what every reader checks
def report_repeated(labels: Sequence[Hashable], ids: Sequence[str], source: str, what: str) -> int:
    """Log one warning naming how many items repeat an earlier item's label (equal ``labels``: a sentence's text,
    an image's caption list), and the first pair: they are kept as separate items, at distance 0 from each other,
    which a reader of the file may not expect. The number of repeats."""
    first: dict[Hashable, int] = {}
    repeats: list[tuple[int, int]] = []
    for n, label in enumerate(labels):
        if label in first:
            repeats.append((first[label], n))
        else:
            first[label] = n
    if repeats:
        a, b = repeats[0]
        log.warning(
            "%s: %d %s repeat an earlier one's (the first: items %r and %r); each is kept as its own item, at "
            "distance 0 from the other",
            source,
            len(repeats),
            what,
            str(ids[a]),
            str(ids[b]),
        )
    return len(repeats)


def read_npy(path: str | os.PathLike[str], what: str = "label file") -> np.ndarray:
    """The array of a ``.npy`` file, never unpickled; LabelError naming the file for one that cannot be read (a
    FIFO or device refused before it could block: :func:`~labeldist.core.reading.open_regular`), is no ``.npy``
    file, or holds Python objects (dtype object: reading them would mean unpickling the file, which could run any
    code). ``what`` the file is, in the message."""
    try:
        with open_regular(path, what) as f:
            return np.load(f, allow_pickle=False)
    except OSError as e:
        raise LabelError(f"{path}: cannot read as .npy ({e.strerror or e})") from None
    except (ValueError, EOFError) as e:
        header = _npy_header(path)
        if header is None:
            raise LabelError(f"{path}: cannot read as .npy: not a NumPy .npy file (it has no .npy header)") from None
        if header == np.dtype(object):
            raise LabelError(
                f"{path}: an array of Python objects (dtype object), which is not read: it would have "
                "to be unpickled, and labeldist never unpickles a file; save an array of numbers "
                "(np.save(path, array.astype(float)))"
            ) from None
        raise LabelError(f"{path}: cannot read as .npy ({e})") from None


def _npy_header(path: str | os.PathLike[str]) -> np.dtype | str | None:
    """The dtype in the header of a ``.npy`` file, read without its data: None where the file has no ``.npy``
    header, ``"?"`` where its version or header is not one this reader knows."""
    from numpy.lib import format as npy

    try:
        with open_regular(path) as f:
            try:
                version = npy.read_magic(f)
            except (ValueError, EOFError):
                return None
            header = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}.get(version)
            return header(f)[2] if header else "?"
    except (OSError, ValueError, EOFError):
        return "?"


def check_header(header: Sequence[str], where: str, what: str = "the header") -> None:
    """LabelError naming every column ``header`` names more than once, and where (1-based fields): a reader that
    finds its columns by name would read one of them and drop the others without a word."""
    fields: dict[str, list[int]] = {}
    for n, name in enumerate(header, start=1):
        fields.setdefault(name, []).append(n)
    twice = [(name, at) for name, at in fields.items() if len(at) > 1]
    if twice:
        said = ", ".join(
            f"column {name!r} {'twice' if len(at) == 2 else f'{len(at)} times'} (fields "
            f"{', '.join(map(str, at[:-1]))} and {at[-1]})"
            for name, at in twice
        )
        raise LabelError(f"{where}: {what} names {said}: each column needs a name of its own")


def item_id(value: object, where: str, *, allow_empty: bool = False) -> str:
    """One item id as a Python string (a number is written out); LabelError naming ``where`` for a null (None),
    an empty id (unless ``allow_empty``), or one holding a NUL character: a store keeps ids as NumPy strings,
    which drop trailing NULs (``'x\\x00'`` would be stored as ``'x'``, the id of another item)."""
    if value is None:
        raise LabelError(f"{where}: the item id is null")
    text = value if isinstance(value, str) else str(value)
    if not text and not allow_empty:
        raise LabelError(f"{where}: the item id is empty")
    if "\x00" in text:
        raise LabelError(f"{where}: the item id {text!r} holds a NUL character, which a store cannot keep")
    return text


def unique_ids(
    ids: Iterable[object],
    source: str = "",
    place: Callable[[int], str] = lambda i: f"item {i}",
    *,
    allow_empty: bool = False,
) -> list[str]:
    """``ids`` as Python strings (:func:`item_id` each), refused where one repeats another, compared as Python
    strings (never as a fixed-width NumPy array, which would drop trailing NULs). Errors name ``source`` (a file)
    and ``place(i)`` of the item (``line 3``, ``row 2``; default ``item 2``)."""
    at = (lambda i: f"{source}, {place(i)}") if source else place
    first: dict[str, int] = {}
    out = []
    for i, value in enumerate(ids):
        text = item_id(value, at(i), allow_empty=allow_empty)
        if text in first:
            raise LabelError(f"{at(i)}: duplicate item id {text!r} (first at {place(first[text])})")
        first[text] = i
        out.append(text)
    return out


class LabelSet(ABC):
    """N labels and their ids; immutable, picklable, sliceable.

    Subclasses hold their data in NumPy arrays and say how to turn them into a flat ``{name: array}`` dict
    (what the store writes) and back.
    """

    #: name of the label type, recorded in the store manifest (``labels_type``)
    label_type: ClassVar[str]
    #: whether the ids are the file's row numbers, "0" .. "N-1" (a reader sets it): labels appended to a store
    #: whose ids are row numbers too are numbered on from the store's N (:func:`labeldist.engine.grow.numbered_after`)
    ids_are_row_numbers: bool = False

    def __init__(self, ids: np.ndarray | Sequence[object]) -> None:
        if not (isinstance(ids, np.ndarray) and ids.dtype.kind == "U"):
            # Python objects (a reader's ids): checked as Python strings, before NumPy's fixed-width strings
            # could merge 'x\x00' with 'x' (a NumPy string array, as subsets and stores give, is checked below)
            given = np.asarray(ids, dtype=object)
            if given.ndim == 1:
                ids = np.array(unique_ids(given.tolist(), allow_empty=True), dtype=str)
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

    def to_json(self, i: int) -> object:
        """The label of item ``i`` in its kind's JSON form (a value ``json.dumps`` writes as it is: lists,
        strings, finite floats, ints, null): the label a service answer carries (``include_labels`` of
        ``POST /v1/stores/{store}/search`` and of the neighbours route). Where the kind reads labels from JSON
        (:meth:`from_json`) it is that form, so that ``from_json(to_json(i), like=self)`` is item ``i``'s label
        again. The default raises NotImplementedError: the kind has no per-item JSON form (the service then
        answers 422 saying so); :func:`has_json_form` tells from the class."""
        raise NotImplementedError(f"labels of type {self.label_type!r} have no JSON form")

    #: the axis names of each array of :meth:`to_arrays`, written as the array's Zarr ``dimension_names`` so that
    #: other readers (xarray) label its axes; one name means one length across the labels group (``item`` is N)
    array_dimensions: ClassVar[Mapping[str, tuple[str, ...]]] = {}

    def dimension_names(self, name: str, ndim: int) -> tuple[str, ...]:
        """The axis names of array ``name`` (:attr:`array_dimensions`); an array the kind does not name gets
        ``NAME_0``, ``NAME_1``, ... (names no other array shares, so a reader never aligns it by mistake)."""
        named = self.array_dimensions.get(name)
        if named is not None and len(named) == ndim:
            return tuple(named)
        return tuple(f"{name}_{axis}" for axis in range(ndim))

    #: arrays of :meth:`to_arrays` that describe the whole set rather than one row per item (a column list, a
    #: class count): :meth:`concat` requires them equal in both sets instead of joining them
    shared_arrays: ClassVar[tuple[str, ...]] = ()

    def concat(self, other: LabelSet) -> Self:
        """This set followed by ``other`` (same class): what reading both files as one would give, so that a store
        grown by ``labeldist append`` holds the labels, and the digest, of one made from the union at once.

        The default joins every array of :meth:`to_arrays` along its first axis (one row per item) and requires
        the :attr:`shared_arrays` equal; a kind whose arrays are laid out otherwise (a vocabulary, offsets into
        flat arrays) overrides it. Raises LabelError naming the first array that differs or cannot be joined, and
        on ids present in both sets. ``provenance`` is this set's.
        """
        if type(other) is not type(self):
            raise LabelError(f"cannot join {type(self).__name__} labels with {type(other).__name__} labels")
        both = np.intersect1d(self.ids, other.ids)
        if both.size:
            raise LabelError(f"{both.size} item ids are in both sets, e.g. {both[:3].tolist()}")
        mine, theirs = self.to_arrays(), other.to_arrays()
        if sorted(mine) != sorted(theirs):
            raise LabelError(f"the label arrays differ: {sorted(mine)} against {sorted(theirs)}")
        joined = {}
        for name, arr in mine.items():
            arr, more = np.asarray(arr), np.asarray(theirs[name])
            if name in self.shared_arrays:
                if arr.shape != more.shape or not np.array_equal(arr, more):
                    raise LabelError(
                        f"the labels' {name} differ: {json_repr(arr.tolist())} against {json_repr(more.tolist())}"
                    )
                joined[name] = arr
            elif arr.ndim == 0 or len(arr) != len(self) or len(more) != len(other) or arr.shape[1:] != more.shape[1:]:
                raise LabelError(
                    f"the labels' {name} cannot be joined item by item: shapes {arr.shape} (of "
                    f"{len(self)} items) and {more.shape} (of {len(other)})"
                )
            else:
                joined[name] = np.concatenate([arr, more.astype(arr.dtype, copy=False)])
        out = type(self).from_arrays(np.concatenate([self.ids, other.ids]), joined)
        out.provenance = dict(self.provenance)
        return out

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


def reads_json(labels_class: type) -> bool:
    """Whether a LabelSet class reads a new label from JSON (overrides :meth:`LabelSet.from_json`): whether a store
    of it can be searched by a new label, known from the class before any label is loaded. A subclass of one that
    does, and has no such form itself, declares LabelSet's own; one that still refuses (NotImplementedError) is
    answered as one without, once its labels are loaded."""
    return getattr(labels_class.from_json, "__func__", None) is not LabelSet.from_json.__func__


def has_json_form(labels_class: type) -> bool:
    """Whether a LabelSet class writes its items' labels as JSON (overrides :meth:`LabelSet.to_json`): known from
    the class, before any label is loaded."""
    return getattr(labels_class, "to_json", LabelSet.to_json) is not LabelSet.to_json
