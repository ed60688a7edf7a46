"""``labeldist verify``: check that every chunk of every array is there and passes its checksum, that the labels are
those the manifest's digests name (every generation's), then recompute a random sample of entries with the slow
reference."""

from __future__ import annotations

from typing import Any

import numpy as np

from labeldist.labels.base import LabelSet
from labeldist.store import StoreCorruptError, StoreReader, store_generations

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
    reader = StoreReader(url)
    damaged = reader.damaged()
    if damaged:
        return _damage_report(reader.url, damaged)
    try:
        return _recompute_sample(reader, sample, seed)
    except StoreCorruptError as e:  # what the chunk scan cannot see (an array's metadata lost), or damage since
        return _damage_report(reader.url, [{"array": e.array or "?", "rows": [0, 0], "error": str(e)}])


def _damage_report(url: str, damaged: list[dict[str, Any]]) -> dict[str, Any]:
    problems = [f"{d['array']} rows {d['rows'][0]}:{d['rows'][1]}: {d['error']}" for d in damaged]
    return {"store": url, "damaged": damaged, "entries_checked": 0, "problems": problems, "ok": False}


def _recompute_sample(reader: StoreReader, sample: int, seed: int) -> dict[str, Any]:
    labels, distance = reader.labels(), reader.distance()
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
    for i in np.unique(rows[: min(sample, 50)]).tolist():
        row = dists[i][indices[i] >= 0]
        if np.any(np.diff(row) < 0):
            problems.append(f"knn row {i} is not sorted")
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
