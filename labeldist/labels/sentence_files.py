"""Plain files of sentences, one sentence an item: ``.txt`` (one a line), ``.csv``/``.tsv`` (a header row, then one
sentence a row) and ``.jsonl`` (a JSON string or object a line), read into ids, texts and line numbers for
:func:`labeldist.labels.sentences.read_sentences`, which documents the rules (ids, columns, blank lines, the
``empty`` policy). Bad input is a :class:`~labeldist.labels.base.LabelError` naming the file and the line.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labeldist.core.reading import allow_long_csv_fields, csv_error, read_regular_text
from labeldist.labels.base import (
    NESTED_TOO_DEEPLY,
    LabelError,
    check_header,
    check_json_value,
    item_id,
    label_file_errors,
)

#: the suffixes ``format="auto"`` reads as a plain file; any other suffix is read as COCO/Karpathy JSON
PLAIN_SUFFIXES = {".txt": "txt", ".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
#: the column (csv, tsv) or key (jsonl) read as the sentence when none is named: the first of these present
TEXT_COLUMNS = ("sentence", "text")
#: the column or key read as the item id when none is named, where there is one
ID_COLUMN = "id"


@dataclass(frozen=True)
class _Item:
    """One line (txt, jsonl) or row (csv, tsv) of a plain file: where it starts (1-based), its id, its text
    (None for a blank line, or a row with no field at all)."""

    line: int
    id: str
    text: str | None


def _read_text(path: Path) -> str:
    """The text of ``path`` (UTF-8, a byte-order mark tolerated); a LabelError naming it (a FIFO or device refused
    before it could block), and the line of a byte that is not UTF-8."""
    with label_file_errors(path):
        return read_regular_text(path, "label file")


def file_lines(text: str) -> list[str]:
    """The lines of ``text`` without their ends (``\\n`` or ``\\r\\n``); split on those only, so that a sentence
    may hold any other character (``str.splitlines`` would also split at U+2028 and form feeds)."""
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def _txt_items(path: Path, text: str, column: str | None, id_column: str | None) -> list[_Item]:
    if column is not None or id_column is not None:
        raise LabelError(
            f"{path}: a .txt file holds one sentence a line and has no columns "
            "(--column, --id-column are for .csv, .tsv and .jsonl)"
        )
    return [_Item(n, str(n - 1), line if line.strip() else None) for n, line in enumerate(file_lines(text), start=1)]


def _table_items(
    path: Path, text: str, delimiter: str, column: str | None, id_column: str | None
) -> tuple[list[_Item], dict[str, Any]]:
    """The rows of a CSV (or TSV) with a header row, standard quoting (a quoted field may hold the delimiter, a
    quote as ``""`` and line breaks); ids from the id column, else the row numbers 0, 1, ... below the header."""
    allow_long_csv_fields()
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows: list[tuple[int, list[str]]] = []
    end = 0
    try:
        for row in reader:
            rows.append((end + 1, row))  # a quoted field may span lines: the row starts after the last one's end
            end = reader.line_num
    except csv.Error as e:
        raise LabelError(str(csv_error(str(path), reader.line_num, e, delimiter))) from None
    if not rows:
        raise LabelError(f"{path}: no sentences: the file is empty (a header row naming the columns comes first)")
    header_line, header = rows[0][0], [h.strip() for h in rows[0][1]]
    check_header(header, f"{path}, line {header_line}")
    names = ", ".join(repr(h) for h in header)
    hint = " (tab-separated? pass --format tsv)" if delimiter == "," and "\t" in ",".join(rows[0][1]) else ""
    if column is None:
        column = next((c for c in TEXT_COLUMNS if c in header), None)
        if column is None:
            raise LabelError(
                f"{path}, line {header_line}: no column named 'sentence' or 'text'; name the "
                f"sentences' column with --column; the header's columns: {names}{hint}"
            )
    elif column not in header:
        raise LabelError(f"{path}, line {header_line}: no column {column!r}; the header's columns: {names}{hint}")
    if id_column is None:
        id_column = ID_COLUMN if ID_COLUMN in header and ID_COLUMN != column else None
    elif id_column not in header:
        raise LabelError(f"{path}, line {header_line}: no id column {id_column!r}; the header's columns: {names}")
    t = header.index(column)
    i = header.index(id_column) if id_column is not None else None
    items = []
    for number, (line, row) in enumerate(rows[1:]):
        if not row:  # a blank line
            items.append(_Item(line, str(number), None))
            continue
        if len(row) != len(header):
            raise LabelError(f"{path}, line {line}: {len(row)} fields where the header has {len(header)}{hint}")
        item = row[i].strip() if i is not None else str(number)
        if not item:
            raise LabelError(f"{path}, line {line}: the id column {id_column!r} is empty")
        items.append(_Item(line, item_id(item, f"{path}, line {line}"), row[t]))
    return items, {"column": column, "id_column": id_column}


def _json_type(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    names = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _jsonl_items(
    path: Path, text: str, column: str | None, id_column: str | None
) -> tuple[list[_Item], dict[str, Any]]:
    """One JSON value a line: every line a string (the sentence; ids the line numbers 0, 1, ...) or every line an
    object holding the sentence under ``column`` (default: ``sentence`` or ``text``, the first the first object
    has) and its id under ``id_column`` (default: ``id`` where the first object has it, else the line numbers)."""
    items: list[_Item] = []
    first: tuple[int, str] | None = None  # the first value's line and kind: every line must be of that kind
    keys: dict[str, Any] = {}
    for n, line in enumerate(file_lines(text), start=1):
        if not line.strip():
            items.append(_Item(n, str(n - 1), None))
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise LabelError(
                f"{path}, line {n}: not JSON: {e.msg} at column {e.colno} (one JSON object or string a line)"
            ) from None
        except ValueError as e:  # an integer past Python's limit on its digits
            raise LabelError(f"{path}, line {n}: {e}") from None
        except RecursionError:
            raise LabelError(f"{path}, line {n}: {NESTED_TOO_DEEPLY}") from None
        if not isinstance(value, (str, dict)):
            raise LabelError(f"{path}, line {n}: {_json_type(value)}, where a JSON object or string is expected")
        check_json_value(value, source=f"{path}, line {n}")  # no lone surrogate, no integer past a float64
        kind = "string" if isinstance(value, str) else "object"
        if first is None:
            first = (n, kind)
            if kind == "string" and (column is not None or id_column is not None):
                raise LabelError(
                    f"{path}, line {n}: a JSON string, not an object: --column and --id-column name "
                    "the keys of one object a line"
                )
            if kind == "object":
                text_key = column or next((c for c in TEXT_COLUMNS if c in value), None)
                if text_key is None:
                    raise LabelError(
                        f"{path}, line {n}: no key 'sentence' or 'text'; name the sentences' key "
                        f"with --column; the object's keys: {', '.join(map(repr, value))}"
                    )
                id_key = id_column or (ID_COLUMN if ID_COLUMN in value and ID_COLUMN != text_key else None)
                keys = {"column": text_key, "id_column": id_key}
        elif kind != first[1]:
            raise LabelError(
                f"{path}, line {n}: a JSON {kind}, where line {first[0]} holds a JSON {first[1]}: "
                "every line must hold the same (a string, or an object)"
            )
        if isinstance(value, str):
            items.append(_Item(n, str(n - 1), value))
            continue
        for key in (keys["column"], keys["id_column"]):
            if key is not None and key not in value:
                raise LabelError(
                    f"{path}, line {n}: no key {key!r}; the object's keys: {', '.join(map(repr, value)) or 'none'}"
                )
        sentence = value[keys["column"]]
        if not isinstance(sentence, str):
            raise LabelError(f"{path}, line {n}: {keys['column']!r} is {_json_type(sentence)}, not a string")
        item = value[keys["id_column"]] if keys["id_column"] is not None else n - 1
        if isinstance(item, bool) or not isinstance(item, (int, str)) or item == "":
            raise LabelError(
                f"{path}, line {n}: id {keys['id_column']!r} must be an integer or a non-empty "
                f"string, got {json.dumps(item)}"
            )
        items.append(_Item(n, item_id(item, f"{path}, line {n}"), sentence))
    return items, keys


def read_plain_sentences(
    path: Path, kind: str, column: str | None, id_column: str | None, *, empty: str, limit: int | None
) -> tuple[list[str], list[str], list[int], dict[str, Any]]:
    """The ids, sentences and line numbers (1-based, where each starts) of the plain file ``path`` of format
    ``kind`` (``txt``, ``csv``, ``tsv`` or ``jsonl``), and the columns (keys) read, as a store's provenance
    records them. Blank lines and empty sentences are left out under ``empty="drop"`` and refused otherwise;
    ``limit`` keeps the first N sentences; a repeated id is refused naming both lines."""
    text = _read_text(path)
    keys: dict[str, Any] = {}
    if kind == "txt":
        items = _txt_items(path, text, column, id_column)
    elif kind == "jsonl":
        items, keys = _jsonl_items(path, text, column, id_column)
    else:
        items, keys = _table_items(path, text, "," if kind == "csv" else "\t", column, id_column)
    while items and items[-1].text is None:  # blank lines at the end of the file
        items.pop()
    if not items:
        if kind in ("csv", "tsv"):
            why = "no row below the header"
        elif not text:
            why = "the file is empty"
        else:
            n = text.count("\n") + (not text.endswith("\n"))
            why = "its one line is blank" if n == 1 else f"its {n} lines are blank"
        raise LabelError(f"{path}: no sentences: {why}")
    ids: list[str] = []
    texts: list[str] = []
    lines: list[int] = []
    seen: dict[str, int] = {}
    for item in items:
        if limit is not None and len(ids) == limit:
            break
        if item.text is None or not item.text.strip():
            if empty == "drop":
                continue
            what = "a blank line" if item.text is None else f"sentence {item.id!r} is empty"
            raise LabelError(
                f"{path}, line {item.line}: {what}: no sentence to keep; pass --empty drop "
                "(empty='drop') to leave blank lines and empty sentences out (the other ids do not "
                "change)"
            )
        if item.id in seen:
            raise LabelError(f"{path}, line {item.line}: id {item.id!r} again (first on line {seen[item.id]})")
        seen[item.id] = item.line
        ids.append(item.id)
        texts.append(item.text)
        lines.append(item.line)
    return ids, texts, lines, keys
