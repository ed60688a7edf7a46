"""Plain numeric labels: one vector per item (attributes, embeddings) or one number (an age, a year).

Read from ``.npy`` (N x D, or N for scalar labels), ``.csv`` (a header row; the numeric columns, or those named)
or ``.parquet``. Ids come from an id column (``--id-column``, or a column named ``id`` when there is one), else
they are the row numbers ``0 .. N-1``. A value that is not a finite number, a row of another length, or a
column that is not numeric is refused, naming its row and column: a NaN would make every distance to its item
NaN, and nothing of it would be written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from typing_extensions import Self

from labeldist.core.reading import open_regular
from labeldist.core.reading import read_csv as read_csv_rows
from labeldist.labels.base import (
    LabelError,
    LabelSet,
    check_header,
    json_number,
    json_repr,
    label_file_errors,
    read_npy,
    unique_ids,
)

FORMATS = ("auto", "npy", "csv", "parquet")


class Vectors(LabelSet):
    """N labels that are vectors of D float64 numbers (D = 1 for scalar labels); ``columns`` names them."""

    label_type = "vectors"

    def __init__(
        self,
        ids: np.ndarray | Sequence[object],
        values: np.ndarray,
        columns: Sequence[str] | None = None,
        *,
        checked: bool = True,
    ) -> None:
        """``checked=False`` leaves the finite-values check to the caller (a reader, to name its file)."""
        super().__init__(ids)
        values = np.asarray(values, dtype=np.float64)
        if values.ndim == 1:
            values = values[:, None]
        if values.ndim != 2 or len(values) != len(self.ids):
            raise LabelError(f"vectors must be (N, D) with N = {len(self.ids)} ids, got shape {values.shape}")
        if values.shape[1] == 0:
            raise LabelError("vectors have no columns (D = 0)")
        self.values = values
        self.columns = list(columns) if columns is not None else [str(c) for c in range(values.shape[1])]
        if checked:
            check_finite(self)

    @property
    def dim(self) -> int:
        return int(self.values.shape[1])

    def subset(self, index: slice | np.ndarray) -> Self:
        return type(self)(self.ids[index], self.values[index], self.columns)

    shared_arrays: ClassVar[tuple[str, ...]] = ("columns",)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"values": self.values, "columns": np.asarray(self.columns, dtype=str)}

    array_dimensions: ClassVar[Mapping[str, tuple[str, ...]]] = {"values": ("item", "column"), "columns": ("column",)}

    @classmethod
    def from_arrays(cls, ids: np.ndarray, arrays: dict[str, np.ndarray]) -> Self:
        columns = [str(c) for c in np.asarray(arrays["columns"]).tolist()] if "columns" in arrays else None
        return cls(ids, arrays["values"], columns)

    @classmethod
    def from_json(cls, value: object, *, like: LabelSet) -> Self:
        """A vector from JSON: a list of the store's D numbers (``like.dim``), or one number when D = 1."""
        if not isinstance(like, Vectors):
            raise TypeError(f"like must be Vectors, got {type(like).__name__}")
        d = like.dim
        names = f" ({', '.join(like.columns)})" if d <= 8 else ""
        if not isinstance(value, list):
            if d == 1 and not isinstance(value, (dict, str)) and value is not None:
                value = [value]
            else:
                want = "a number or a list of 1 number" if d == 1 else f"a list of {d} numbers{names}"
                raise LabelError(f"the vector must be {want}, got {json_repr(value)}")
        if not value:
            raise LabelError(f"the vector is empty: the store's labels have {d} number{'s' * (d > 1)}{names}")
        if len(value) != d:
            raise LabelError(
                f"the vector has {len(value)} number{'s' * (len(value) > 1)}, the store's labels have {d}{names}"
            )
        numbers = [json_number(x, f"number {t} of the vector") for t, x in enumerate(value)]
        return cls(np.array(["query"]), np.array([numbers], dtype=np.float64), like.columns)

    def to_json(self, i: int) -> list[float]:
        """Vector ``i`` in the JSON form :meth:`from_json` reads: a list of its D numbers (a list of one when
        D = 1), in the order of :attr:`columns`."""
        return self.values[i].tolist()


def check_finite(labels: Vectors, source: str = "") -> None:
    """LabelError naming ``source`` (a file), the first row (and its id) and column holding a value that is not a
    finite number, and how many there are."""
    bad = np.argwhere(~np.isfinite(labels.values))
    if len(bad):
        row, col = bad[0]
        where = f"{source}: " if source else ""
        raise LabelError(
            f"{where}row {row} (id {str(labels.ids[row])!r}), column {labels.columns[col]!r}: "
            f"{labels.values[row, col]} is not a finite number ({len(bad)} such values)"
        )


def _finite(text: str, line: int, column: str, path: Path) -> float:
    try:
        value = float(text)
    except ValueError:
        raise LabelError(f"{path}, line {line}, column {column!r}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise LabelError(f"{path}, line {line}, column {column!r}: {text!r} is not a finite number")
    return value


def _pick(
    header: Sequence[str], columns: Sequence[str] | None, id_column: str | None, path: Path
) -> tuple[list[str], str | None]:
    """The value columns and the id column of a table with ``header``."""
    if id_column is None and "id" in header:
        id_column = "id"
    if id_column is not None and id_column not in header:
        raise LabelError(f"{path}: no id column {id_column!r}; columns: {', '.join(header)}")
    if columns:
        missing = [c for c in columns if c not in header]
        if missing:
            raise LabelError(f"{path}: no column {missing[0]!r}; columns: {', '.join(header)}")
        return list(columns), id_column
    return [c for c in header if c != id_column], id_column


def read_csv(path: Path, columns: Sequence[str] | None, id_column: str | None) -> Vectors:
    with label_file_errors(path):
        rows = read_csv_rows(path, "label file")
    if not rows:
        raise LabelError(f"{path}: empty file")
    header, body = [h.strip() for h in rows[0]], rows[1:]
    check_header(header, f"{path}, line 1")
    value_columns, id_column = _pick(header, columns, id_column, path)
    if not body:
        raise LabelError(f"{path}: a header and no rows")
    where = {c: header.index(c) for c in header}
    ids, values = [], []
    for n, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise LabelError(f"{path}, line {n}: {len(row)} fields where the header has {len(header)}")
        ids.append(row[where[id_column]].strip() if id_column else str(n - 2))
        values.append([_finite(row[where[c]].strip(), n, c, path) for c in value_columns])
    ids = unique_ids(ids, str(path), lambda i: f"line {i + 2}")
    labels = Vectors(ids, np.asarray(values, dtype=np.float64), value_columns)
    labels.ids_are_row_numbers = not id_column
    return labels


def _numeric(column: Any) -> bool:
    """Whether a Parquet (Arrow) column holds numbers: integers, floating point, decimals or booleans (a string
    of digits, a timestamp or a date does not)."""
    import pyarrow.types as types

    kind = column.type
    return types.is_integer(kind) or types.is_floating(kind) or types.is_decimal(kind) or types.is_boolean(kind)


def read_parquet(path: Path, columns: Sequence[str] | None, id_column: str | None) -> Vectors:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with open_regular(path, "label file") as f:  # a FIFO or device refused before it could block
            check_header(pq.read_schema(f).names, str(path), "the table")  # before pyarrow refuses them unnamed
            table = pq.read_table(f)
    except (pa.ArrowException, OSError) as e:
        raise LabelError(f"{path}: cannot read as Parquet: {str(e).splitlines()[0]}") from None
    value_columns, id_column = _pick(table.column_names, columns, id_column, path)
    values = []
    for c in value_columns:
        column = table.column(c)
        if not _numeric(column):
            raise LabelError(
                f"{path}: column {c!r} has type {column.type}, not a number (integer, floating point, "
                "decimal or boolean)"
            )
        values.append(column.to_numpy(zero_copy_only=False).astype(np.float64))
    ids = (
        unique_ids(table.column(id_column).to_pylist(), str(path), lambda i: f"row {i}")
        if id_column
        else np.arange(table.num_rows).astype(str)
    )
    labels = Vectors(ids, np.stack(values, axis=1), value_columns, checked=False)
    labels.ids_are_row_numbers = not id_column
    check_finite(labels, str(path))
    return labels


def read_npy_vectors(path: Path) -> Vectors:
    return vectors_from_array(read_npy(path), source=str(path))


def vectors_from_array(values: np.ndarray, *, source: str = "array") -> Vectors:
    """Numeric labels from an array, as a ``.npy`` file of it is read: row ``i`` is item ``"i"``.

    Parameters
    ----------
    values : array-like of shape (N, D) or (N,)
        One vector, or one number, per item; finite.
    source : str, default "array"
        What the values are, for the errors.

    Returns
    -------
    Vectors
        Ids ``"0"``, ``"1"``, ... (row numbers: an append numbers its items after the store's).

    Raises
    ------
    LabelError
        For values that are not numbers, of another shape, empty, or not finite (the first named).

    Examples
    --------
    >>> labels = vectors_from_array(np.eye(3))
    >>> len(labels), labels.ids.tolist()
    (3, ['0', '1', '2'])
    """
    values = np.asarray(values)
    if values.dtype.kind not in "biuf":
        raise LabelError(f"{source}: dtype {values.dtype} is not numeric")
    if values.ndim not in (1, 2):
        raise LabelError(f"{source}: shape {values.shape}: give N values or an N x D array")
    if len(values) == 0:
        raise LabelError(f"{source}: shape {values.shape}: no rows, no items to read")
    labels = Vectors(np.arange(len(values)).astype(str), values, checked=False)
    labels.ids_are_row_numbers = True
    check_finite(labels, source)
    return labels


def read_vectors(
    path: str | Path, *, format: str = "auto", columns: Sequence[str] | None = None, id_column: str | None = None
) -> Vectors:
    """Numeric labels of a file (see the module docstring); :class:`LabelError` names what is wrong."""
    path = Path(path)
    kind = path.suffix.lower().lstrip(".") if format == "auto" else format
    if kind not in FORMATS[1:]:
        raise LabelError(f"{path}: unknown format {kind!r}; known: .npy, .csv, .parquet (or --format)")
    if kind == "npy":
        if id_column:
            raise LabelError(f"{path}: an .npy file has no id column (--id-column): its ids are its row numbers")
        labels = read_npy_vectors(path)
        if columns:  # names for its columns (an append to an .npy store gives the store's own: 0, 1, ...)
            if len(columns) != labels.values.shape[1]:
                width = labels.values.shape[1]
                raise LabelError(
                    f"{path}: {width} column{'s' * (width != 1)} (shape {read_npy(path).shape}), where "
                    f"{len(columns)} are named ({', '.join(columns[:8])}{', ...' * (len(columns) > 8)}: the "
                    "columns of the store appended to, or --columns)"
                )
            labels = Vectors(labels.ids, labels.values, columns, checked=False)
            labels.ids_are_row_numbers = True
    elif kind == "csv":
        labels = read_csv(path, columns, id_column)
    else:
        labels = read_parquet(path, columns, id_column)
    labels.provenance = {"file": path.name, "format": kind, "columns": labels.columns, "id_column": id_column}
    return labels
