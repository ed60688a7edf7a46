"""``labeldist append``: a store's next generation, grown by new items without recomputing the old pairs.

A store of N items gets M new ones; the new store holds the N + M items in order (old first) and is what a
precompute of all N + M would give. Only pairs with a new item are computed (:func:`appended_pairs`): each new
item's row by the kind's own search, each old item's kNN list merged with its distances to the new items
(:func:`labeldist.core.knn.merge_topk`: exact; a lower bound, where the distance has one, prunes), and a dense matrix
grown by the new rows and columns (in the symmetric mode, the upper-triangle pairs with a new column only). The new
generation is built as a whole store in a hidden sibling (``.NAME.append``), resumed after a kill, and swapped into
place atomically; the manifest records every generation. Ids already in the store are refused (a changed label
needs ``precompute --overwrite``). docs/store-format.md, "Growing a store: ``labeldist append``", has the algorithm
and the pair counts.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from labeldist.core.clusters import ClusterSpec, check_workers
from labeldist.core.dense import DENSE_LIMIT, dense_bytes
from labeldist.core.knn import merge_topk, topk_rows
from labeldist.distances.base import LabelDistance
from labeldist.engine.blocks import blocks_to_compute, checked_block, compute_mirrored, knn_search, mirror_square
from labeldist.engine.build import check_labels_class
from labeldist.engine.lock import store_lock
from labeldist.engine.runner import BlockJob, block_job
from labeldist.engine.staging import append_url, finish_replacement, replace_with_staged
from labeldist.errors import UsageError
from labeldist.labels.base import LabelError, LabelSet
from labeldist.store import (
    StoreError,
    StoreMismatchError,
    StoreReader,
    block_range,
    build_manifest,
    check_not_nested,
    create_store,
    drop_work,
    exact_pairs_total,
    fingerprint_diff,
    generation_entry,
    is_local,
    manifest_digest,
    n_blocks,
    publish,
    read_manifest,
    record_generation_pairs,
    store_generations,
    writable_url,
    write_block,
    write_upper,
)
from labeldist.view.stored import stored_distance, stored_labels

log = logging.getLogger(__name__)

#: provenance keys that name the file the labels were read from rather than how their values were made: a file
#: appended may differ from the store's first one in these, and in nothing else the reader recorded (a pose file's
#: format and how it marks a joint not annotated: COCO keypoints appended to a CSV's poses of the same joints)
FILE_PROVENANCE = ("file", "format", "missing_joint")
#: memory the (rows, new items) float64 block of an old row block's distances to the new items may take at once
MERGE_BYTES = 128 * 2**20


@dataclass(frozen=True)
class AppendResult:
    url: str
    manifest: dict[str, Any]
    #: the generation the store is now at
    generation: int
    n_old: int
    n_new: int
    blocks_total: int
    blocks_computed: int
    #: distances computed by this generation (all of its blocks, also those computed before a resume)
    exact_pairs: int
    #: the items were already the store's last generation: nothing was done
    reused: bool = False


def appended_pairs(n_old: int, n_new: int, symmetric_dense: bool, block_rows: int = 1) -> int:
    """Distances an append computes when nothing is pruned. In the symmetric dense mode, the upper strips' entries
    with a new column, each block of ``block_rows`` rows computing its whole leading square (as precompute's
    strips do): about N M + M^2 / 2, exactly that with ``block_rows=1``. Otherwise the new rows against all items
    and the old rows against the new ones, whatever the blocks.

    >>> appended_pairs(100, 10, True), appended_pairs(100, 10, True, block_rows=16), appended_pairs(100, 10, False)
    (1055, 1100, 2100)
    """
    if not symmetric_dense:
        return n_new * (n_old + n_new) + n_old * n_new
    n = n_old + n_new
    starts = range(0, n, block_rows)
    return sum((min(s + block_rows, n) - s) * (n - max(s, n_old)) for s in starts)


# ---------------------------------------------------------------- the tasks
def old_rows_merged(
    labels: LabelSet,
    distance: LabelDistance,
    start: int,
    stop: int,
    n_old: int,
    k: int,
    indices: np.ndarray,
    distances: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int]:
    """The kNN lists of old rows ``start:stop`` (their lists before the append: ``indices``, ``distances``) merged
    with their distances to the new items, columns ``n_old:N``. Where the distance has a lower bound, only the new
    items whose bound does not rule them out of the list are computed (as :func:`labeldist.core.knn.pruned_topk` rules
    out: a bound above the list's k-th value, widened to the next float32). Returns indices, distances and the
    number of distances computed."""
    new = labels.subset(slice(n_old, len(labels)))
    lower = distance.lower_bound_block(labels.subset(slice(start, stop)), new)
    if lower is None:
        extra = checked_block(distance, labels, start, stop, n_old)
        computed = extra.size
    else:
        kth = np.nextafter(distances[:, -1].astype(np.float32), np.float32(np.inf)).astype(np.float64)
        rows, cols = np.nonzero(np.asarray(lower, dtype=np.float64) <= kth[:, None] * (1 + 1e-9))
        extra = np.full(lower.shape, np.inf, dtype=np.float32)
        if rows.size:
            extra[rows, cols] = distance.pairs(labels, rows + start, cols + n_old).astype(np.float32)
        computed = int(rows.size)
    merged_idx, merged_dist = merge_topk(indices, distances, extra, n_old, k)
    return merged_idx, merged_dist, computed


def merge_rows(n_new: int) -> int:
    """Old rows merged at a time: their (rows, new items) float64 block stays under :data:`MERGE_BYTES`."""
    return max(1, MERGE_BYTES // (8 * max(n_new, 1)))


def compute_appended_block(
    block: int,
    *,
    labels: LabelSet,
    distance: LabelDistance,
    url: str,
    old_url: str,
    n_old: int,
    k: int,
    block_rows: int,
    dense: bool,
) -> int:
    """One Dask task of an append (all but the symmetric dense mode): row block ``block`` of the grown store at
    ``url``, from the old store at ``old_url``. Old rows (below ``n_old``): their old dense rows and their
    distances to the new items, or their old lists merged with them; new rows: computed against every item."""
    n = len(labels)
    start, stop = block_range(block, n, block_rows)
    split = min(max(start, n_old), stop)  # rows start:split are old, split:stop new
    old = StoreReader(old_url)
    indices = np.empty((stop - start, k), dtype=np.int32)
    dists = np.empty((stop - start, k), dtype=np.float32)
    rows = np.empty((stop - start, n), dtype=np.float32) if dense else None
    pairs = 0
    if dense:
        if split > start:
            rows[: split - start, :n_old] = old.dense_rows(start, split)
            rows[: split - start, n_old:] = checked_block(distance, labels, start, split, n_old)
            pairs += (split - start) * (n - n_old)
        if stop > split:
            rows[split - start :] = checked_block(distance, labels, split, stop, 0)
            pairs += (stop - split) * n
        indices[:], dists[:] = topk_rows(rows, k, exclude=np.arange(start, stop))
    else:
        step = merge_rows(n - n_old)
        for a in range(start, split, step):
            b = min(a + step, split)
            old_idx, old_dist = old.knn_rows(a, b)
            indices[a - start : b - start], dists[a - start : b - start], computed = old_rows_merged(
                labels, distance, a, b, n_old, k, old_idx, old_dist
            )
            pairs += computed
        if stop > split:
            indices[split - start :], dists[split - start :], computed = knn_search(labels, distance, split, stop, k)
            pairs += computed
    write_block(url, start, indices, dists, rows, block, pairs)
    return block


def appended_upper_strip(
    labels: LabelSet, distance: LabelDistance, start: int, stop: int, n_old: int, old: StoreReader | None
) -> np.ndarray:
    """Phase 1 of a symmetric dense append: the upper strip of rows ``start:stop`` (columns ``start:N``), as
    precompute's :func:`labeldist.engine.blocks.upper_kernel` would compute it over all N items, but with its entries
    among old items (rows and columns below ``n_old``) read from the old matrix ``old`` and only the columns from
    ``max(start, n_old)`` computed. Entries below the diagonal (a new row against an old column of its own block)
    are mirrored from above it, as precompute mirrors them."""
    n = len(labels)
    strip = np.empty((stop - start, n - start), dtype=np.float32)
    first_new = max(start, n_old)
    if first_new < n:
        strip[:, first_new - start :] = checked_block(distance, labels, start, stop, first_new)
    if start < n_old:
        old_stop = min(stop, n_old)
        strip[: old_stop - start, : n_old - start] = old.dense_rows(start, old_stop)[:, start:n_old]
    return mirror_square(strip)


def compute_appended_upper(
    block: int, *, labels: LabelSet, distance: LabelDistance, url: str, old_url: str, n_old: int, block_rows: int
) -> int:
    """One Dask task of phase 1 of a symmetric dense append: block ``block``'s upper strip into ``work/upper``."""
    start, stop = block_range(block, len(labels), block_rows)
    old = StoreReader(old_url) if start < n_old else None
    write_upper(url, start, appended_upper_strip(labels, distance, start, stop, n_old, old), block)
    return block


# ---------------------------------------------------------------- the job
def check_same_distance(store: StoreReader, distance: LabelDistance) -> None:
    """StoreMismatchError unless ``distance`` is the store's kind with the store's parameters."""
    if distance.kind != store.manifest["kind"]:
        raise StoreMismatchError(
            f"{store.url}: a {store.manifest['kind']} store; the new items are of kind {distance.kind}"
        )
    recorded = {key: value for key, value in store.manifest["params"].items() if key != "labels"}
    given = distance.params()
    differ = sorted(key for key in {*recorded, *given} if recorded.get(key) != given.get(key))
    if differ:
        detail = "; ".join(f"{key}: store has {recorded.get(key)!r}, asked {given.get(key)!r}" for key in differ)
        raise StoreMismatchError(
            f"{store.url}: the store's distance has other parameters ({detail}); an append uses the store's own"
        )


def check_same_reading(store: StoreReader, labels: LabelSet) -> None:
    """StoreMismatchError unless ``labels`` were read as the store's were: their provenance equals the store's
    ``params["labels"]`` but for the keys that name the file (:data:`FILE_PROVENANCE`). Labels made in Python
    (no provenance) are taken as they are."""
    recorded = store.manifest["params"].get("labels") or {}
    if not labels.provenance or not recorded:
        return
    keys = {*recorded, *labels.provenance} - set(FILE_PROVENANCE)
    differ = sorted(key for key in keys if recorded.get(key) != labels.provenance.get(key))
    if differ:
        detail = "; ".join(
            f"{key}: store has {recorded.get(key)!r}, the new items {labels.provenance.get(key)!r}" for key in differ
        )
        raise StoreMismatchError(
            f"{store.url}: the new items were read with other settings than the store's "
            f"labels ({detail}); read them with the store's settings (`labeldist append STORE "
            "FILE` defaults to them)"
        )


def check_new_ids(store: StoreReader, labels: LabelSet) -> None:
    """LabelError naming the ids of ``labels`` that the store already holds (a changed item needs a rebuild)."""
    taken = labels.ids[np.isin(labels.ids, store.ids)]
    if taken.size:
        shown = ", ".join(repr(str(i)) for i in taken[:5]) + (f" and {taken.size - 5} more" if taken.size > 5 else "")
        raise LabelError(
            f"{taken.size} of the {len(labels)} new items are already in {store.url}: {shown}. An append "
            "adds items; an item whose label changed changes its row, its column and every list it is "
            "in, so rebuild the store instead (precompute ... --overwrite)"
        )


def numbered_after(store: StoreReader, labels: LabelSet) -> LabelSet:
    """``labels`` with the ids ``N``, ``N+1``, ... when the store's N ids are its row numbers ``0 .. N-1`` and the
    new labels' ids are their file's row numbers too (an ``.npy``, or a table without an id column): the rows
    appended go on with the store's numbering, as they would in a precompute of both files one after the other,
    instead of clashing with its first rows. Other labels are returned as they are.

    The same rows as the store's last generation are that generation again (nothing to do); the same rows as an
    earlier one (a file appended twice, another append between) are refused, StoreError naming the generation:
    numbered on, they would be added a second time as new items."""
    if not labels.ids_are_row_numbers:
        return labels
    n = store.n_items
    if not np.array_equal(store.ids, np.arange(n).astype(str)):
        return labels
    generations = store_generations(store.manifest)
    for number, generation in enumerate(generations, start=1):
        start, stop = generation["items"]
        if stop - start != len(labels):
            continue
        again = _numbered_from(labels, start)
        if again.sha256() != generation["labels_sha256"]:
            continue
        if number == len(generations) and number > 1:  # the same file again: the last appended generation
            return again
        raise StoreError(
            f"{store.url}: these {len(labels)} rows are already its items {start}..{stop - 1} (generation "
            f"{generation.get('generation', number)}); appended again they would be new items with the same labels"
        )
    return _numbered_from(labels, n)


def _numbered_from(labels: LabelSet, start: int) -> LabelSet:
    renumbered = type(labels).from_arrays(np.arange(start, start + len(labels)).astype(str), labels.to_arrays())
    renumbered.provenance = dict(labels.provenance)
    return renumbered


def already_appended(manifest: dict[str, Any], labels: LabelSet) -> bool:
    """Whether ``labels`` are the store's last generation already (the append ran to its end before)."""
    generations = store_generations(manifest)
    last = generations[-1]
    return (
        len(generations) > 1
        and last["labels_sha256"] == labels.sha256()
        and last["items"][1] - last["items"][0] == len(labels)
    )


def _same_generation(staged: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether a staged store (from an interrupted append) is the generation ``wanted``: same fingerprint and
    same generations (the pairs counted at its end aside)."""

    def plain(manifest: dict[str, Any]) -> list[dict[str, Any]]:
        return [{key: value for key, value in g.items() if key != "exact_pairs"} for g in store_generations(manifest)]

    return not fingerprint_diff(staged, wanted) and plain(staged) == plain(wanted)


def append(
    store: str | os.PathLike[str],
    labels: LabelSet,
    *,
    distance: LabelDistance | None = None,
    dense_limit: int | None = DENSE_LIMIT,
    scheduler: str | None = None,
    n_workers: int | None = None,
    cluster: ClusterSpec | None = None,
    client: Any | None = None,
    progress: bool | None = None,
) -> AppendResult:
    """Append the items ``labels`` to the complete store at ``store``: a new generation (module docstring).

    ``distance`` defaults to the store's own (its kind and parameters); one given must equal it. Refused before
    anything is written: ids already in the store (LabelError), labels read with other settings or a distance with
    other parameters (StoreMismatchError), a dense matrix that would grow past ``dense_limit`` bytes (ValueError).
    Rerunning the same append resumes it where it stopped, or does nothing once it is in the store
    (``reused``). Holds the store's lock throughout, as precompute does.
    """
    check_append_arguments(labels, n_workers)
    spec = ClusterSpec.of(cluster, scheduler, n_workers)
    url = _local_url(store)
    with store_lock(url, "append"):
        finish_replacement(url)
        old = StoreReader(url)
        labels = numbered_after(old, labels)
        layout = _Layout.of(old)
        distance = distance or stored_distance(old)
        check_same_distance(old, distance)
        if already_appended(old.manifest, labels):
            return _nothing_to_do(url, old.manifest, labels, layout)
        union = _grown_labels(old, labels, distance)
        _check_dense_growth(url, len(labels), len(union), layout.dense, dense_limit)
        entry, wanted = _plan_generation(url, old.manifest, layout, distance, union, labels)
        staged, action = _stage(url, wanted, union)
        total = n_blocks(len(union), layout.block_rows)
        upper_todo, todo = blocks_to_compute(staged, layout.symmetric)
        log.info(
            "%s: generation %d, %d new items on %d: %d of %d row blocks to compute (%s)",
            url,
            entry["generation"],
            len(labels),
            layout.n_old,
            len(todo),
            total,
            action,
        )
        if todo:
            with block_job(
                distance,
                union,
                layout.block_rows,
                client=client,
                cluster=spec,
                progress=progress,
            ) as job:
                run_append_blocks(job, union, distance, staged, url, upper_todo, todo, layout)
        pairs, final = _publish_and_swap(url, staged, layout.symmetric, entry["generation"], len(union))
        return AppendResult(url, final, int(entry["generation"]), layout.n_old, len(labels), total, len(todo), pairs)


@dataclass(frozen=True)
class _Layout:
    """What the grown store keeps of the store it grows: its items before the append, k, its row blocks and
    whether it is dense and symmetric."""

    n_old: int
    k: int
    block_rows: int
    dense: bool
    symmetric: bool

    @classmethod
    def of(cls, store: StoreReader) -> _Layout:
        """The layout of the store ``store`` reads, from its manifest."""
        manifest = store.manifest
        return cls(
            store.n_items,
            store.k,
            int(manifest["block_rows"]),
            bool(manifest["dense"]),
            bool(manifest.get("symmetric")),
        )


def check_append_arguments(labels: LabelSet, n_workers: int | None) -> None:
    """Refuse (ValueError) the arguments of :func:`append` that cannot make a generation, before the store is
    looked at: no items, and ``n_workers`` below 1."""
    if len(labels) < 1:
        raise UsageError("no items to append")
    check_workers(n_workers)


def _local_url(store: str | os.PathLike[str]) -> str:
    """The url of ``store`` (links resolved: :func:`~labeldist.store.writable_url`); StoreError unless it is a local
    path (the new generation is swapped in by a rename)."""
    url = writable_url(store)
    check_not_nested(url)
    if not is_local(url):
        raise StoreError(
            f"{url}: append grows a store on a local path (the new generation is swapped in by a "
            "rename, which an fsspec URL lacks); copy the store to a local folder, or precompute all the "
            "items there"
        )
    return url


def _nothing_to_do(url: str, manifest: dict[str, Any], labels: LabelSet, layout: _Layout) -> AppendResult:
    """The result of an append whose items are already the store's last generation (:func:`already_appended`),
    logged: nothing computed, the pairs counted those of that generation. The store's items (``layout.n_old``)
    include the new ones."""
    log.info("%s: these items are already its generation %d; nothing to do", url, manifest["generation"])
    total = n_blocks(layout.n_old, layout.block_rows)
    return AppendResult(
        url,
        manifest,
        int(manifest["generation"]),
        layout.n_old - len(labels),
        len(labels),
        total,
        0,
        int(store_generations(manifest)[-1].get("exact_pairs", 0)),
        reused=True,
    )


def _grown_labels(old: StoreReader, labels: LabelSet, distance: LabelDistance) -> LabelSet:
    """The store's labels followed by the new ``labels``, once the new ones are checked against the store, the
    first wrong thing refused: their class for ``distance`` (TypeError), how they were read
    (:func:`check_same_reading`), their ids (:func:`check_new_ids`), and the distance's own check of the new
    labels beside the stored ones (:meth:`LabelDistance.check_labels`). The stored labels carry the store's
    reading as their provenance."""
    check_labels_class(labels, distance)
    check_same_reading(old, labels)
    check_new_ids(old, labels)
    stored = stored_labels(old)  # with the store's reading as their provenance
    union = stored.concat(labels)
    distance.check_labels(labels, stored)
    return union


def _check_dense_growth(url: str, n_new: int, n: int, dense: bool, dense_limit: int | None) -> None:
    """ValueError when the dense matrix of the store at ``url``, grown by ``n_new`` items to ``n``, would take
    more than ``dense_limit`` bytes (None: no limit); nothing of a kNN-only store is checked."""
    if dense and dense_limit is not None and dense_bytes(n) > dense_limit:
        from dask.utils import format_bytes

        raise UsageError(
            f"{url}: appending {n_new:,} items grows its dense matrix to {n:,} x {n:,} "
            f"float32, {format_bytes(dense_bytes(n))}, over the dense limit of "
            f"{format_bytes(dense_limit)}; nothing was written. Raise --dense-limit (dense_limit=), "
            "or rebuild the store with --knn-only"
        )


def _plan_generation(
    url: str, manifest: dict[str, Any], layout: _Layout, distance: LabelDistance, union: LabelSet, labels: LabelSet
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The new generation of the store at ``url`` (``manifest``, ``layout``): its entry in ``generations``
    (bringing ``labels``, built on the store's manifest, which a resume checks) and the manifest of the grown store
    of ``union``, in the store's layout. The last generation's pairs are counted from its blocks where the manifest
    lacks them (a store made before they were recorded). StoreError if the grown store's parameters are not the
    store's, which would be a bug."""
    generations = store_generations(manifest)
    if "exact_pairs" not in generations[-1]:
        generations[-1]["exact_pairs"] = exact_pairs_total(url)
    entry = generation_entry(generations[-1]["generation"] + 1, layout.n_old, labels)
    entry["appended_to"] = manifest_digest(manifest)  # the generation it was built on: a resume checks it
    wanted = build_manifest(
        dataset=manifest["dataset"],
        kind=distance.kind,
        params=distance.params(),
        labels=union,
        k=layout.k,
        dense=layout.dense,
        block_rows=layout.block_rows,
        symmetric=layout.symmetric,
        generations=[*generations, entry],
    )
    if wanted["params"] != manifest["params"]:  # both from the store's: a bug, not an input to refuse
        raise StoreError(
            f"{url}: the grown store's parameters {wanted['params']} differ from the store's {manifest['params']}"
        )
    return entry, wanted


def _stage(url: str, wanted: dict[str, Any], union: LabelSet) -> tuple[str, str]:
    """The hidden sibling of ``url`` where the generation ``wanted`` is built, and what is done there:
    ``"resume"`` where an interrupted append of the same generation left it, else ``"new"``, the store of
    ``union`` created afresh (:func:`create_store`, replacing whatever was there)."""
    staged = append_url(url)
    previous = read_manifest(staged)
    if previous is not None and _same_generation(previous, wanted):
        return staged, "resume"
    create_store(staged, wanted, union)
    return staged, "new"


def run_append_blocks(
    job: BlockJob,
    union: LabelSet,
    distance: LabelDistance,
    staged: str,
    url: str,
    upper_todo: list[int],
    todo: list[int],
    layout: _Layout,
) -> None:
    """The tasks of an append, into the staged store from the old one at ``url``. All but the symmetric dense
    mode: one :func:`compute_appended_block` per row block of ``todo`` (a dense store grown by its new rows and
    columns, else the new rows' lists searched and the old ones merged with the new items). The symmetric dense
    mode: phase 1 (:func:`compute_appended_upper`, old entries copied) for the upper strips of ``upper_todo``,
    then, once all are written, precompute's phase 2 (:func:`~labeldist.engine.blocks.compute_mirrored`)."""
    common = {"url": staged, "block_rows": layout.block_rows, "n_old": layout.n_old}
    kind = f"{distance.kind} append"
    if not layout.symmetric:
        job.run(
            compute_appended_block,
            todo,
            kind,
            labels=job.scatter(union),
            distance=job.scatter(distance),
            old_url=url,
            k=layout.k,
            dense=layout.dense,
            **common,
        )
        return
    if upper_todo:  # the barrier, as in precompute: phase 2 reads strips of every block before it
        job.run(
            compute_appended_upper,
            upper_todo,
            f"{kind} upper",
            labels=job.scatter(union),
            distance=job.scatter(distance),
            old_url=url,
            **common,
        )
    job.run(compute_mirrored, todo, f"{kind} rows", loads=False, n_items=len(union), k=layout.k, **common)


def _publish_and_swap(
    url: str, staged: str, symmetric: bool, generation: int, n_items: int
) -> tuple[int, dict[str, Any]]:
    """Complete the staged store once every block is written (the work arrays of the symmetric mode deleted
    first, the generation's pairs counted, published) and swap it in place of the store at ``url``. Returns the
    pairs the generation computed and the final manifest."""
    if symmetric:
        drop_work(staged)
    pairs = record_generation_pairs(staged)
    final = publish(staged)
    replace_with_staged(url, "append")
    log.info("%s: generation %d in place, %d items", url, generation, n_items)
    return pairs, final
