"""The manifest (``attrs["labeldist"]``, docs/store-format.md, "The manifest"): built for a store about to be written,
read back, compared by its fingerprint keys, digested, and the generations it records."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import zarr

from labeldist import __version__
from labeldist.errors import UsageError
from labeldist.labels.base import LabelSet
from labeldist.store.checkedfiles import read_regular
from labeldist.store.errors import StoreCorruptError, StoreError
from labeldist.store.identity import root_metadata_path
from labeldist.store.layout import FINGERPRINT_KEYS, FORMAT, MANIFEST_KEY, is_local, open_group, store_url


def build_manifest(
    *,
    dataset: str,
    kind: str,
    params: Mapping[str, Any],
    labels: LabelSet,
    k: int,
    dense: bool,
    block_rows: int,
    symmetric: bool = False,
    generations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The manifest of a store about to be written (``complete`` false), as JSON types (tuples become lists,
    as they will when read back), so that it compares equal to the stored one.

    ``symmetric`` (dense stores only) records ``"symmetric": true``: the matrix is computed as its upper
    triangle and mirrored. The key is left out otherwise, so that other manifests stay as they were; it is a
    fingerprint key, because a store half-written one way must not be finished the other way.

    ``generations`` lists the store's generations (:func:`store_generations`), the last one being written; by
    default the store's first: all its items. ``generation`` names the last.
    """
    if symmetric and not dense:
        raise UsageError("symmetric applies to dense stores only")
    manifest = {
        "format": FORMAT,
        "dataset": dataset,
        "kind": kind,
        # reader/generator settings change numbers too: recorded beside the distance's own parameters
        "params": {**params, "labels": labels.provenance} if labels.provenance else dict(params),
        "n_items": len(labels),
        "k": int(k),
        "labels_sha256": labels.sha256(),
        "labels_type": labels.label_type,
        "dense": bool(dense),
        "block_rows": int(block_rows),
        "engine_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "complete": False,
    }
    if symmetric:
        manifest["symmetric"] = True
    if generations is None:
        generations = [generation_entry(1, 0, labels)]
    manifest["generation"] = int(generations[-1]["generation"])
    manifest["generations"] = generations
    return json.loads(json.dumps(manifest))


def generation_entry(generation: int, start: int, labels: LabelSet) -> dict[str, Any]:
    """The manifest's record of one generation: its number, the items it brought (rows ``start:start + len``)
    and the digest of their labels (:meth:`LabelSet.sha256` of those items alone: the file they were read from,
    as precompute of that file alone would record it)."""
    return {
        "generation": int(generation),
        "items": [int(start), int(start + len(labels))],
        "labels_sha256": labels.sha256(),
    }


def store_generations(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The generations a store's manifest records; one, every item, for a store made before generations were
    recorded."""
    recorded = manifest.get("generations")
    if isinstance(recorded, list) and recorded:
        return [dict(g) for g in recorded]
    return [{"generation": 1, "items": [0, int(manifest["n_items"])], "labels_sha256": manifest["labels_sha256"]}]


def fingerprint_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Names of the fingerprint keys on which two manifests differ."""
    return [key for key in FINGERPRINT_KEYS if a.get(key) != b.get(key)]


def read_manifest(url: str) -> dict[str, Any] | None:
    """The manifest at ``url``, or None when there is no labeldist store there; StoreCorruptError when the
    group's metadata cannot be parsed (a store damaged on disk is not "no store": it must not be written over)."""
    try:
        group = open_group(url, mode="r")
    except (FileNotFoundError, NotADirectoryError, zarr.errors.GroupNotFoundError, zarr.errors.NodeTypeValidationError):
        return None
    except zarr.errors.ContainsArrayError:  # an array's folder (a store's ids/): no store, and not a damaged one
        return None
    except ValueError as e:  # zarr.json that is not JSON, or not Zarr metadata
        raise StoreCorruptError(
            f"{store_url(url)}: its metadata (zarr.json) cannot be read ({e}): the store is damaged; rebuild it"
        ) from e
    man = group.attrs.get(MANIFEST_KEY)
    return dict(man) if isinstance(man, Mapping) else None


def is_store(path: str | os.PathLike[str]) -> bool:
    """Whether the local folder ``path`` holds a labeldist store, complete or not. A store whose metadata cannot be
    read counts as one (damaged, not absent: nothing may be written into or over it); a folder with no root
    ``zarr.json`` is answered without opening anything; one whose ``zarr.json`` is a FIFO, a device or a link is a
    damaged store, refused when read."""
    if not os.path.lexists(root_metadata_path(path)):
        return False
    try:
        return read_manifest(os.fspath(path)) is not None
    except StoreError:
        return True


def check_not_nested(url: str) -> None:
    """StoreError unless the local store folder ``url`` (links resolved) is neither inside another labeldist store
    nor holds one: a store inside another is deleted with it by the outer one's next append or ``--overwrite``,
    and the outer one's ``verify`` would not see it. Only folders holding a ``zarr.json`` are opened."""
    if not is_local(url):
        return
    here = os.path.realpath(url)
    outer = next((p for p in Path(here).parents if is_store(p)), None)
    if outer is not None:
        raise StoreError(
            f"{url}: inside the labeldist store {outer}, which an append or --overwrite of it would delete with "
            "everything in it: write the store elsewhere"
        )
    if not os.path.isdir(here):
        return
    for folder, dirs, files in os.walk(here):
        if "zarr.json" in files and _is_array(os.path.join(folder, "zarr.json")):
            dirs[:] = []  # an array, whose chunk folders hold no store: not walked
        elif folder != here and "zarr.json" in files and is_store(folder):
            raise StoreError(
                f"{url}: holds another labeldist store, {folder}, which replacing or growing {url} would delete: "
                "move it out first"
            )


def _is_array(metadata: str) -> bool:
    """Whether the Zarr metadata file ``metadata`` describes an array (a regular file of bounded size, read
    through :func:`~labeldist.store.checkedfiles.read_regular`: a FIFO or device there is no array)."""
    try:
        node = json.loads(read_regular(Path(metadata)))
    except (OSError, ValueError, StoreError):
        return False
    return isinstance(node, dict) and node.get("node_type") == "array"


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """SHA-256 of the manifest as canonical JSON (sorted keys): names what a store holds, so that a client can
    tell which store answered it; two stores with different parameters, labels or creation times differ."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
