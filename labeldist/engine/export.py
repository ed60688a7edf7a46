"""``labeldist export``: a store's neighbour lists as a Parquet or CSV table, one row per (item, rank).

Columns (docs/export.md, "Columns"): ``item_index``, ``item_id``, ``rank`` (1 for the nearest), ``neighbor_index``,
``neighbor_id`` and ``distance`` (float32; +infinity written as ``inf``), in item order, then rank order. CSV writes
each distance as the shortest decimal that reads back as the same float32, so the stored value comes back exactly.
The lists are read and written a row block at a time (:meth:`StoreReader.knn_rows`, about :data:`BLOCK_ENTRIES`
rows), and the file is written beside its destination and renamed into place once complete.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from labeldist.errors import UsageError
from labeldist.store import StoreChangedError, StoreReader
from labeldist.store.outputs import check_not_inputs, check_output_file, replacing

COLUMNS = ("item_index", "item_id", "rank", "neighbor_index", "neighbor_id", "distance")
FORMATS = ("parquet", "csv")
SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}
#: about how many rows (item, rank) one block holds: the memory of an export
BLOCK_ENTRIES = 1 << 18
#: seconds between two plain progress lines when stderr is not a terminal
PROGRESS_EVERY_S = 5.0
#: what to install for Parquet, in the one line that says it is missing
PYARROW_HINT = "pip install pyarrow"


@dataclass(frozen=True)
class ExportResult:
    out: str
    format: str
    rows: int
    items: int
    k: int
    seconds: float


def format_of(fmt: str | None, out: str | None) -> str:
    """The format asked, else CSV for standard output (``-``, the only format it takes), else the one ``out``'s
    suffix names, else Parquet.

    >>> format_of(None, "-"), format_of(None, "x.csv"), format_of(None, "x"), format_of("csv", "x.parquet")
    ('csv', 'csv', 'parquet', 'csv')
    """
    if fmt is not None:
        return fmt
    if out == "-":
        return "csv"
    if out is not None:
        return SUFFIXES.get(Path(out).suffix.lower(), "parquet")
    return "parquet"


def default_out(store: str, fmt: str) -> str:
    """``<store folder name>-neighbors.<format>`` in the current folder."""
    name = store.rstrip("/").rsplit("/", 1)[-1] or "store"
    return f"{name}-neighbors.{fmt}"


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401 - the writer
    except ImportError:
        raise UsageError(
            f"--format parquet needs pyarrow, which is not installed: {PYARROW_HINT} (or use "
            "--format csv, which needs nothing more)"
        ) from None
    return pyarrow


class Progress:
    """Items exported, on stderr: a bar on a terminal; elsewhere (a log file) a plain line every ``every``
    seconds (items done, rate, time left) and no carriage returns; nothing when ``enabled`` is False."""

    def __init__(self, total: int, enabled: bool, every: float = PROGRESS_EVERY_S, stream: TextIO | None = None):
        self.total, self.done, self.every = total, 0, every
        self.stream = stream if stream is not None else sys.stderr
        self.started = self.last = time.monotonic()
        self.bar = None
        self.enabled = enabled
        if enabled and getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="item", unit_scale=True, desc="export", file=self.stream)

    def update(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.monotonic()
        if now - self.last >= self.every or self.done == self.total:
            self.last = now
            rate = self.done / max(now - self.started, 1e-9)
            left = (self.total - self.done) / rate if rate > 0 else float("inf")
            print(
                f"export: {self.done:,} of {self.total:,} items ({self.done / max(self.total, 1):.1%}), "
                f"{rate:,.0f} items/s, {left:,.0f} s left",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _blocks(reader: StoreReader, k: int, rows: int) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """The table's rows, a block of ``rows`` items at a time: how many items, and one array per column (padding
    entries left out)."""
    ids = reader.ids
    for start in range(0, reader.n_items, rows):
        stop = min(start + rows, reader.n_items)
        indices, distances = reader.knn_rows(start, stop)
        yield stop - start, table_columns(ids, indices[:, :k], distances[:, :k], start)


def table_columns(ids: np.ndarray, indices: np.ndarray, distances: np.ndarray, start: int = 0) -> dict[str, np.ndarray]:
    """The table's columns for the neighbour lists ``indices`` and ``distances`` (rows, k) of the items ``start``,
    ``start + 1``, ... of a store whose ids are ``ids``: padding entries (-1) left out, item then rank order."""
    keep = indices >= 0
    item, position = np.nonzero(keep)  # row-major: item order, then rank order
    neighbor = indices[keep]
    item = (item + start).astype(np.int32)
    return {
        "item_index": item,
        "item_id": ids[item],
        "rank": (position + 1).astype(np.int32),
        "neighbor_index": neighbor.astype(np.int32),
        "neighbor_id": ids[neighbor],
        "distance": distances[keep].astype(np.float32),
    }


def block_rows(reader: StoreReader, k: int) -> int:
    """Items per block: a multiple of the store's kNN chunk rows holding about :data:`BLOCK_ENTRIES` rows."""
    chunk = max(reader.knn_block_rows, 1)
    return max(chunk, (BLOCK_ENTRIES // max(k, 1)) // chunk * chunk)


def _write_csv(stream: TextIO, blocks: Iterator[tuple[int, dict[str, np.ndarray]]], progress: Progress) -> int:
    writer = csv.writer(stream, lineterminator="\n")
    # Python 3.11's csv quotes a field for a delimiter, a quote or a character of the line terminator, so with "\n"
    # an id holding a lone carriage return would go out bare and split the row for every reader; such rows are
    # written fully quoted instead
    quoted = csv.writer(stream, lineterminator="\n", quoting=csv.QUOTE_ALL)
    writer.writerow(COLUMNS)
    rows = 0
    for items, block in blocks:
        # float32's shortest decimal (NumPy's repr of a float32): read back and rounded to float32, the same value
        distances = [str(d) for d in block["distance"]]
        item_ids, neighbor_ids = block["item_id"].tolist(), block["neighbor_id"].tolist()
        table = zip(
            block["item_index"].tolist(),
            item_ids,
            block["rank"].tolist(),
            block["neighbor_index"].tolist(),
            neighbor_ids,
            distances,
        )
        if "\r" in "".join(item_ids) or "\r" in "".join(neighbor_ids):
            for row in table:
                (quoted if "\r" in row[1] or "\r" in row[4] else writer).writerow(row)
        else:
            writer.writerows(table)
        rows += len(distances)
        progress.update(items)
    return rows


def _write_parquet(
    path: str, blocks: Iterator[tuple[int, dict[str, np.ndarray]]], progress: Progress, metadata: dict[str, Any]
) -> int:
    pa = _pyarrow()
    import pyarrow.parquet as pq

    schema = table_schema(metadata)
    rows = 0
    with pq.ParquetWriter(path, schema) as writer:
        for items, block in blocks:
            # one row group a block: a reader can take the file a block at a time too
            writer.write_table(pa.table({name: block[name] for name in COLUMNS}, schema=schema))
            rows += len(block["distance"])
            progress.update(items)
    return rows


def table_schema(metadata: dict[str, Any] | None = None) -> Any:
    """The table's pyarrow schema: int32 indices and ranks, string ids, float32 distances; ``metadata`` (the store,
    its kind, ``k``, ...) under the key ``labeldist``."""
    pa = _pyarrow()
    return pa.schema(
        [
            ("item_index", pa.int32()),
            ("item_id", pa.string()),
            ("rank", pa.int32()),
            ("neighbor_index", pa.int32()),
            ("neighbor_id", pa.string()),
            ("distance", pa.float32()),
        ],
        metadata=None if metadata is None else {"labeldist": json.dumps(metadata)},
    )


def neighbor_table(store: str, k: int | None = None) -> Any:
    """The neighbour lists of the complete store ``store`` as one pyarrow Table with the columns and rows
    :func:`export_neighbors` writes (the first ``k`` neighbours of each item; default all), in memory: what
    ``Store.to_pandas`` answers. UsageError for a ``k`` over the store's."""
    pa = _pyarrow()
    reader = StoreReader(store)
    k = _checked_k(reader, k)
    blocks = [block for _, block in _blocks(reader, k, block_rows(reader, k))]
    schema = table_schema()
    parts = [pa.table({name: block[name] for name in COLUMNS}, schema=schema) for block in blocks]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def table_of(ids: np.ndarray, indices: np.ndarray, distances: np.ndarray) -> Any:
    """The table of neighbour lists ``indices`` and ``distances`` (N, k) of items named ``ids`` (N,): padding
    entries (-1) left out, item then rank order, as :func:`neighbor_table` makes it from a store."""
    return _pyarrow().table(table_columns(ids, indices, distances), schema=table_schema())


def _checked_k(reader: StoreReader, k: int | None) -> int:
    """``k``, or the store's own when None; UsageError for one over the store's."""
    if k is None:
        return reader.k
    if k > reader.k:
        raise UsageError(f"--k {k} is more than the store's k={reader.k} (the length of its neighbour lists)")
    return k


def export_neighbors(
    store: str,
    out: str | None = None,
    fmt: str | None = None,
    *,
    k: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
    progress_every: float = PROGRESS_EVERY_S,
    items_per_block: int | None = None,
) -> ExportResult:
    """Write the neighbour lists of the complete store ``store`` (a path or an fsspec URL) to ``out`` (a file;
    ``"-"``: standard output, CSV only; default :func:`default_out`) in the long form of this module's table:
    the first ``k`` neighbours of each item (default: all the store has). Refuses an existing ``out`` unless
    ``overwrite``. Progress on stderr when ``progress``."""
    fmt = format_of(fmt, out)
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    if fmt == "parquet":
        _pyarrow()  # before anything is read: say what to install
    reader = StoreReader(store)
    k = _checked_k(reader, k)
    out = out if out is not None else default_out(store, fmt)
    to_stdout = out == "-"
    if to_stdout and fmt != "csv":
        raise UsageError("Parquet cannot be written to standard output: give --out FILE, or use --format csv")
    if not to_stdout:
        check_not_inputs([out], [("the store exported", store)])
        check_output_file(out, overwrite)
    rows = items_per_block or block_rows(reader, k)
    blocks = _blocks(reader, k, rows)
    bar = Progress(reader.n_items, progress, progress_every)
    started = time.monotonic()
    metadata = {
        "store": reader.url,
        "kind": reader.manifest.get("kind"),
        "dataset": reader.manifest.get("dataset"),
        "n_items": reader.n_items,
        "k": k,
        "columns": list(COLUMNS),
    }
    try:
        if to_stdout:
            try:
                written = _write_csv(sys.stdout, blocks, bar)
            except StoreChangedError as e:
                raise StoreChangedError(reader.url, "the CSV written to standard output is incomplete") from e
            sys.stdout.flush()
        else:
            try:
                with replacing(out, overwrite) as partial:
                    if fmt == "csv":
                        with open(partial, "w", encoding="utf-8", newline="") as f:
                            written = _write_csv(f, blocks, bar)
                    else:
                        written = _write_parquet(str(partial), blocks, bar, metadata)
            except StoreChangedError as e:
                raise StoreChangedError(reader.url, f"{out} was not written") from e
    finally:
        bar.close()
    return ExportResult(out, fmt, written, reader.n_items, k, time.monotonic() - started)
