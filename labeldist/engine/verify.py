"""``labeldist verify``: check that every chunk of every array is there and passes its checksum, that the labels are
those the manifest's digests name (every generation's), that the lists keep the store contract (every row), then
recompute a random sample of entries with the slow reference."""

from __future__ import annotations

from typing import Any

import numpy as np

from labeldist.labels.base import LabelSet
from labeldist.store import (
    StoreCorruptError,
    StoreReader,
    foreign_entries,
    foreign_entry_error,
    store_generations,
    store_url,
)
from labeldist.view.stored import stored_distance, stored_labels

#: stored values are float32: allow its rounding (2^-24 ~ 6e-8) with room for summation order
RTOL = 1e-5
ATOL = 1e-6


def verify_store(url: str, sample: int = 200, seed: int = 0) -> dict[str, Any]:
    """Check that every chunk of every array exists and passes its CRC32C checksum; if all are whole, recompute
    ``sample`` kNN entries (and ``sample`` dense entries, if stored) with ``reference``.

    Also checks that each sampled kNN row is sorted and agrees with its dense row, and that the stored labels are
    the ones the manifest records (:func:`generation_problems`). Returns a report with the damaged regions (array,
    rows, what is wrong), the generations, the largest absolute and relative errors, and ``ok``.
    """
    try:
        reader = StoreReader(url)
    except StoreCorruptError:
        url = store_url(url)
        found = foreign_entries(url) if "://" not in url else []
        if not found:
            raise
        # a link, FIFO or device inside the store (refused on opening): each one named, as damage
        return _damage_report(url, [foreign_damage(url, path, what) for path, what in found])
    damaged = reader.damaged()
    if damaged:
        return _damage_report(reader.url, damaged)
    try:
        return _recompute_sample(reader, sample, seed)
    except StoreCorruptError as e:  # what the chunk scan cannot see (an array's metadata lost), or damage since
        return _damage_report(reader.url, [{"array": e.array or "?", "rows": [0, 0], "error": str(e)}])


def foreign_damage(url: str, path: str, what: str) -> dict[str, Any]:
    """The report's entry of ``path``, which is ``what`` (a link, a FIFO, a device) inside the store ``url``."""
    error = foreign_entry_error(url, path, what)
    return {"array": error.array, "rows": [0, 0], "error": str(error)}


def _damage_report(url: str, damaged: list[dict[str, Any]]) -> dict[str, Any]:
    problems = [f"{d['array']} rows {d['rows'][0]}:{d['rows'][1]}: {d['error']}" for d in damaged]
    return {"store": url, "damaged": damaged, "entries_checked": 0, "problems": problems, "ok": False}


def _recompute_sample(reader: StoreReader, sample: int, seed: int) -> dict[str, Any]:
    labels, distance = stored_labels(reader), stored_distance(reader)
    n, k = reader.n_items, reader.k
    rng = np.random.default_rng(seed)
    indices, dists = reader.knn()
    rows = rng.integers(0, n, size=sample)
    ranks = rng.integers(0, k, size=sample)
    stored, recomputed, problems = [], [], []
    for i, r in zip(rows.tolist(), ranks.tolist()):
        j = int(indices[i, r])
        if j < 0:
            continue
        stored.append(float(dists[i, r]))
        recomputed.append(distance.reference(labels, i, labels, j))
    problems.extend(generation_problems(reader.manifest, labels))
    problems.extend(contract_problems(n, indices, dists))
    if reader.has_dense:
        pairs = rng.integers(0, n, size=(sample, 2))
        for i, j in pairs.tolist():
            stored.append(reader.dense_value(i, j))
            recomputed.append(distance.reference(labels, i, labels, j))
        for i in np.unique(rows[: min(sample, 20)]).tolist():
            drow = reader.dense_rows(i, i + 1)[0]
            valid = indices[i] >= 0
            if not np.array_equal(drow[indices[i][valid]], dists[i][valid]):
                problems.append(f"knn row {i} does not match dense row {i}")
            if drow[i] != 0:
                problems.append(f"dense[{i}, {i}] is {drow[i]}, not 0")
    s, c = np.asarray(stored), np.asarray(recomputed)
    both_inf = np.isinf(s) & np.isinf(c) & (np.sign(s) == np.sign(c))
    abs_err = np.where(both_inf, 0.0, np.abs(s - c))
    rel_err = abs_err / np.maximum(np.abs(c), 1e-12)
    bad = np.flatnonzero(~both_inf & ~np.isclose(s, c, rtol=RTOL, atol=ATOL))
    if bad.size:
        problems.append(f"{bad.size} of {s.size} sampled entries differ from the reference beyond rtol={RTOL}")
    return {
        "store": reader.url,
        "damaged": [],
        "generations": store_generations(reader.manifest),
        "entries_checked": int(s.size),
        "max_abs_error": float(abs_err.max(initial=0.0)),
        "max_rel_error": float(np.where(np.abs(c) > ATOL, rel_err, 0.0).max(initial=0.0)),
        "problems": problems,
        "ok": not problems,
    }


def contract_problems(n: int, indices: np.ndarray, distances: np.ndarray) -> list[str]:
    """What the neighbour lists of a store of ``n`` items break of the store contract (docs/store-format.md, "The
    arrays"), over every row: shapes and types (N, k) int32 and float32; each index in [0, N) or -1, -1 only at a
    row's end; no item in its own list; each row sorted nearest first; no distance NaN or negative. Each breach is
    one line with how many rows break it and the first. The repository's tools/check_store.py checks the same with
    zarr alone (the contract's independent checker)."""
    problems = []
    if indices.dtype != np.int32 or distances.dtype != np.float32:
        problems.append(f"knn dtypes are {indices.dtype} and {distances.dtype}, not int32 and float32")
    if indices.ndim != 2 or indices.shape != distances.shape or indices.shape[0] != n:
        return problems + [f"knn shapes {indices.shape} and {distances.shape}, not ({n}, k) both"]
    valid = indices >= 0
    finite_order = np.where(valid, distances, np.inf)
    checks = {
        "holds an index outside [0, N) other than -1": (indices >= n) | (indices < -1),
        "holds its own item": indices == np.arange(n)[:, None],
        "has -1 padding before a neighbour": np.pad(valid[:, 1:] & ~valid[:, :-1], ((0, 0), (0, 1))),
        "is not sorted nearest first": np.pad(np.diff(finite_order, axis=1) < 0, ((0, 0), (0, 1))),
        "holds a NaN or negative distance": valid & (np.isnan(distances) | (distances < 0)),
    }
    for what, bad in checks.items():
        rows = np.flatnonzero(bad.any(axis=1))
        if rows.size:
            problems.append(f"{rows.size} knn row{'s' * (rows.size != 1)} {what} (the first: row {rows[0]})")
    return problems


def generation_problems(manifest: dict[str, Any], labels: LabelSet) -> list[str]:
    """What is wrong with a store's record of its generations against its labels: they must be numbered 1, 2, ...
    (``generation`` the last), cover the items 0..N in order, and each generation's ``labels_sha256`` must be the
    digest of its own items' labels (those of the file it was made or appended from); the manifest's own
    ``labels_sha256`` the digest of them all."""
    problems = []
    generations = store_generations(manifest)
    if labels.sha256() != manifest["labels_sha256"]:
        problems.append("the stored labels are not those the manifest's labels_sha256 names")
    numbers = [g.get("generation") for g in generations]
    if numbers != list(range(1, len(generations) + 1)) or manifest.get("generation", 1) != numbers[-1]:
        problems.append(f"generations are numbered {numbers} (the manifest's latest: {manifest.get('generation')})")
    ends = [0] + [g["items"][1] for g in generations]
    if [g["items"][0] for g in generations] != ends[:-1] or ends[-1] != len(labels):
        problems.append(f"generations cover items {[g['items'] for g in generations]}, not 0..{len(labels)} in order")
        return problems
    for g in generations:
        start, stop = g["items"]
        if labels.subset(slice(start, stop)).sha256() != g["labels_sha256"]:
            problems.append(
                f"generation {g['generation']} (items {start}:{stop}): its labels are not those its labels_sha256 names"
            )
    return problems
