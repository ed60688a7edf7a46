"""Compare two folders of stores built by two versions of labeldist from the same inputs: every array of every
store equal (values, dtype and shape, NaN equal to NaN) and the manifests equal but for what records a time.

    python tools/compare_stores.py OLD_FOLDER NEW_FOLDER

A change that must not alter what the engine writes (a refactor, a move) is checked by building the same stores
with the version before it and with it (``precompute`` and ``append`` of each kind), then this. Prints one line
per difference and a count; exits 1 when anything differs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import zarr

#: manifest keys that record when a store was made, or (``appended_to``) the digest of a manifest that holds one
TIMES = {"created", "appended_to"}


def arrays(group: zarr.Group, prefix: str = "") -> Iterator[tuple[str, zarr.Array]]:
    """Every array below ``group``, by its path."""
    for name, item in group.members():
        if isinstance(item, zarr.Array):
            yield prefix + name, item
        else:
            yield from arrays(item, prefix + name + "/")


def without_times(value: Any) -> Any:
    """``value`` with the :data:`TIMES` keys left out, at any depth."""
    if isinstance(value, dict):
        return {key: without_times(v) for key, v in value.items() if key not in TIMES}
    if isinstance(value, list):
        return [without_times(v) for v in value]
    return value


def differences(old: Path, new: Path) -> tuple[list[str], int]:
    """What differs between the stores of the two folders (by folder name), and how many arrays were compared."""
    found, compared = [], 0
    names = sorted({p.name for p in old.iterdir() if p.is_dir()} | {p.name for p in new.iterdir() if p.is_dir()})
    for name in names:
        if not (old / name).is_dir() or not (new / name).is_dir():
            found.append(f"{name}: in one folder only")
            continue
        a, b = zarr.open_group(str(old / name), mode="r"), zarr.open_group(str(new / name), mode="r")
        xa, xb = dict(arrays(a)), dict(arrays(b))
        found += [f"{name}/{path}: in one store only" for path in sorted(set(xa) ^ set(xb))]
        for path in sorted(set(xa) & set(xb)):
            compared += 1
            u, v = xa[path][...], xb[path][...]
            same = u.dtype == v.dtype and u.shape == v.shape
            if not same or not np.array_equal(u, v, equal_nan=u.dtype.kind == "f"):
                found.append(f"{name}/{path}: differs")
        ma, mb = without_times(dict(a.attrs)), without_times(dict(b.attrs))
        if ma != mb:
            found.append(f"{name}: manifests differ")
    return found, compared


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old", type=Path, help="the stores built by the version before")
    parser.add_argument("new", type=Path, help="the same stores built by the version after")
    args = parser.parse_args()
    found, compared = differences(args.old, args.new)
    for line in found:
        print(line)
    print(f"{compared} arrays compared; {len(found)} differences")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
