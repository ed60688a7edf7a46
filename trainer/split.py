"""Train/test splits of a label file, so that train and test stores share no item.

A store's batches draw neighbours and random others from the whole store, so a leak-free evaluation needs two
stores: one built from the training items, one from the test items. :func:`split_labels` writes the two label
files (same format as the input, items in their original order) and ``split.json``, which names the query and
gallery positions inside the test store.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

FORMATS = (".json", ".csv")
#: what ``trainer split`` takes, for its errors
TAKES = (
    "split takes a label file (a Karpathy JSON list, .json, or an MPII CSV, .csv) and writes train and test "
    "label files to build the two stores from"
)


class SplitError(ValueError):
    """A label file that cannot be split (one line naming it and what split takes)."""


def split_indices(
    n: int, *, test_fraction: float = 0.2, query_fraction: float = 0.2, seed: int = 0
) -> dict[str, list[int]]:
    """A seeded split of ``n`` items: ``train`` and ``test`` (row numbers of the input, ascending), and
    ``queries`` / ``gallery`` (positions inside the test items, ascending).

    >>> s = split_indices(10, test_fraction=0.5, query_fraction=0.4, seed=0)
    >>> len(s["train"]), len(s["test"]), len(s["queries"]), len(s["gallery"])
    (5, 5, 2, 3)
    """
    for name, value in (("test_fraction", test_fraction), ("query_fraction", query_fraction)):
        if not 0.0 < value < 1.0:
            raise ValueError(f"{name} must lie in (0, 1), got {value}")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    n_test = round(n * test_fraction)
    n_query = round(n_test * query_fraction)
    if n_test < 2 or n - n_test < 1 or n_query < 1 or n_test - n_query < 1:
        raise ValueError(f"{n} items are too few for test_fraction={test_fraction}, query_fraction={query_fraction}")
    test = np.sort(perm[:n_test])
    in_test = rng.permutation(n_test)
    return {
        "train": np.sort(perm[n_test:]).tolist(),
        "test": test.tolist(),
        "queries": np.sort(in_test[:n_query]).tolist(),
        "gallery": np.sort(in_test[n_query:]).tolist(),
    }


def _check_input(path: Path) -> None:
    """Refuse, naming ``path`` and what split takes, what is no label file (a store folder, most likely)."""
    if path.is_dir():
        what = "a store" if (path / "zarr.json").exists() else "a folder"  # a store is a Zarr group
        raise SplitError(f"{path} is {what}, not a label file: {TAKES}")
    if path.suffix not in FORMATS:
        raise SplitError(f"{path}: unknown label file type {path.suffix!r} (known: {', '.join(FORMATS)}); {TAKES}")
    if not path.exists():
        raise SplitError(f"{path}: no such file; {TAKES}")


def _read(path: Path) -> tuple[Any, list[Any]]:
    try:
        if path.suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, list):
                raise SplitError(f"{path}: expected a Karpathy-style JSON list of images")
            return None, data
        with open(path, newline="", encoding="utf-8") as f:
            rows = [row for row in csv.reader(f) if row]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, csv.Error) as e:
        raise SplitError(f"{path}: cannot read it as a label file ({type(e).__name__}: {e})") from None
    if not rows:
        raise SplitError(f"{path}: empty, no header and no rows")
    return rows[0], rows[1:]


def _write(path: Path, header: Any, rows: list[Any]) -> None:
    if path.suffix == ".json":
        path.write_text(json.dumps(rows), encoding="utf-8")
        return
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])


def split_labels(
    path: str | Path, out: str | Path, *, test_fraction: float = 0.2, query_fraction: float = 0.2, seed: int = 0
) -> dict[str, Any]:
    """Write ``out/train<ext>``, ``out/test<ext>`` and ``out/split.json`` for a Karpathy JSON list or an MPII CSV.

    Returns the split (also in ``split.json``, with ``source``, ``seed`` and the fractions)."""
    path, out = Path(path), Path(out)
    _check_input(path)
    header, rows = _read(path)
    try:
        split = split_indices(len(rows), test_fraction=test_fraction, query_fraction=query_fraction, seed=seed)
    except ValueError as e:  # too few items, fractions out of range
        raise SplitError(f"{path}: {e}") from None
    out.mkdir(parents=True, exist_ok=True)
    for name in ("train", "test"):
        _write(out / f"{name}{path.suffix}", header, [rows[i] for i in split[name]])
    info = {"source": str(path), "seed": seed, "test_fraction": test_fraction, "query_fraction": query_fraction}
    info.update(split)
    (out / "split.json").write_text(json.dumps(info), encoding="utf-8")
    return info
