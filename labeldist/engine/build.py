"""``precompute``: a store of label distances built from a label set, on a Dask cluster.

One task per row block (:mod:`labeldist.engine.blocks`) computes its rows against all N items, picks each row's k
nearest and writes the kNN rows (and the dense rows when asked) straight into the Zarr store, marking the block
done. When the distance is symmetric and the dense matrix is asked for, each unordered pair is computed once, in
two phases (docs/store-format.md); the finished store has the plain layout either way.

Resume: the per-block marks live in the store, so a rerun of the same command submits only the blocks not yet
marked, and a finished store is the same whichever way it was reached. Tasks are idempotent, which is also what
makes Dask's retry after a lost worker safe. The job holds the store's lock (:mod:`labeldist.engine.lock`) from
its first look at the output to the end; ``--overwrite`` builds beside a complete store and swaps it in
(:mod:`labeldist.engine.staging`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labeldist.core.clusters import ClusterSpec, check_workers
from labeldist.core.dense import DENSE_LIMIT, check_dense_size
from labeldist.distances.base import LabelDistance
from labeldist.engine.blocks import (
    blocks_to_compute,
    compute_block,
    compute_knn_shared,
    compute_mirrored,
    compute_upper,
    default_block_rows,
)
from labeldist.engine.exchange import PairExchange
from labeldist.engine.lock import store_lock
from labeldist.engine.runner import BlockJob, block_job
from labeldist.engine.staging import finish_replacement, occupied, replace_with_staged, staging_url
from labeldist.errors import UsageError
from labeldist.labels.base import LabelSet
from labeldist.store import (
    StoreError,
    StoreMismatchError,
    build_manifest,
    check_not_nested,
    create_store,
    drop_work,
    fingerprint_diff,
    is_local,
    n_blocks,
    publish,
    read_manifest,
    skeleton_whole,
    store_has_checksums,
    writable_url,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrecomputeResult:
    url: str
    manifest: dict[str, Any]
    blocks_total: int
    blocks_computed: int
    reused: bool
    #: symmetric dense mode (upper triangle computed, then mirrored)
    symmetric: bool = False
    #: upper strips (phase 1 of the symmetric mode) computed by this run
    upper_computed: int = 0


def prepare_store(
    url: str, manifest: dict[str, Any], labels: LabelSet, overwrite: bool
) -> tuple[str, dict[str, Any] | None, str]:
    """Decide what to do at ``url``: ``("reuse", manifest, url)`` for a finished store with the same fingerprint,
    ``("resume", None, where)`` for an unfinished one, ``("new", None, where)`` after laying out a fresh store.

    ``where`` is the store the job writes: ``url`` itself, except when ``overwrite`` replaces a complete local
    store made with other parameters. Then the new store is built at :func:`staging_url` and swapped in only
    once complete, so that a job that fails half-way (a full disk, a kill) leaves the old store whole and
    served; rerunning the same command resumes the staged store.
    """
    existing = read_manifest(url)
    if (
        existing is not None
        and existing.get("complete") is not True
        and not (skeleton_whole(url) and store_has_checksums(url))
    ):
        # laid out by a labeldist before 0.2: killed before its progress marks were made (creation was not yet
        # atomic), or without checksums on ids and labels; nothing of it is worth resuming
        log.warning("%s: an unfinished store of an older layout; laying it out again", url)
        create_store(url, manifest, labels)
        return "new", None, url
    if existing is not None:
        diff = fingerprint_diff(existing, manifest)
        if not diff:
            if existing.get("complete") is not True:
                return "resume", None, url
            if not store_has_checksums(url):
                if not overwrite:
                    raise StoreMismatchError(
                        f"{url}: made by labeldist before 0.2, whose ids and labels carry no checksum; "
                        "pass --overwrite to rebuild it"
                    )
                diff = ["format"]
            else:
                return "reuse", existing, url
        if not overwrite:
            detail = "; ".join(
                f"{key}: store has {existing.get(key)!r}, asked {manifest.get(key)!r}"
                for key in diff
                if key != "labels_sha256"
            )
            if "labels_sha256" in diff:
                detail = "; ".join(filter(None, [detail, "the labels differ"]))
            raise StoreMismatchError(
                f"{url}: a store made with other parameters is already there ({detail}); "
                "choose another output or pass --overwrite"
            )
        if existing.get("complete") is True and not is_local(url):
            # the swap renames folders, which an object store cannot do atomically: readers would see a mix
            raise StoreError(
                f"{url}: --overwrite replaces a complete store by building the new one beside it and renaming it "
                "into place, which an fsspec URL cannot do atomically; write the new store under another name "
                "(then delete the old one), or rebuild it on a local or shared file system (docs/cluster.md)"
            )
        if existing.get("complete") is True:
            staged = staging_url(url)
            previous = read_manifest(staged)
            if previous is not None and not fingerprint_diff(previous, manifest):
                return "resume", None, staged
            create_store(staged, manifest, labels)
            return "new", None, staged
    elif occupied(url):
        raise StoreError(f"{url}: exists and is not a labeldist store; refusing to write over it")
    create_store(url, manifest, labels)
    return "new", None, url


def precompute(
    labels: LabelSet,
    distance: LabelDistance,
    output: str | os.PathLike[str],
    *,
    dataset: str,
    k: int = 100,
    dense: bool = True,
    dense_limit: int | None = DENSE_LIMIT,
    block_rows: int | None = None,
    scheduler: str | None = None,
    n_workers: int | None = None,
    cluster: ClusterSpec | None = None,
    client: Any | None = None,
    overwrite: bool = False,
    progress: bool | None = None,
) -> PrecomputeResult:
    """Compute the kNN lists (and the dense matrix if ``dense``) of ``labels`` under ``distance`` into a store.

    Reuses a finished store made from the same labels and parameters, resumes an unfinished one, and refuses
    (StoreMismatchError) to touch a store made with other ones unless ``overwrite``. ``client`` runs on an
    existing distributed Client; otherwise ``cluster`` (a :class:`~labeldist.engine.runner.ClusterSpec`: a
    LocalCluster, a scheduler's address or file, or a job queue, and the workers to wait for) or the same from
    ``scheduler`` and ``n_workers`` (a scheduler's address, else a LocalCluster of that many workers). The job
    holds the store's lock (:mod:`labeldist.engine.lock`) throughout: a second job on the same local output is
    refused (StoreLockedError).

    A dense matrix larger than ``dense_limit`` bytes (:data:`DENSE_LIMIT`, 1 GiB; None for no limit) is refused
    with a ValueError before anything is written. ``block_rows`` defaults to the distance's own choice for its kNN
    search in a kNN-only store (:meth:`LabelDistance.knn_block_rows`), else to :func:`default_block_rows`.
    """
    # every argument checked before anything is written: a bad one must not leave a half-made store behind
    check_precompute_arguments(labels, distance, k, dense, dense_limit, block_rows, n_workers)
    spec = ClusterSpec.of(cluster, scheduler, n_workers)
    url = writable_url(output)
    check_not_nested(url)
    probe_new_store(url, labels, distance)
    block_rows = resolve_block_rows(labels, distance, dense, block_rows)
    symmetric = dense and distance.symmetric
    manifest = build_manifest(
        dataset=dataset,
        kind=distance.kind,
        params=distance.params(),
        labels=labels,
        k=k,
        dense=dense,
        block_rows=block_rows,
        symmetric=symmetric,
    )
    total = n_blocks(len(labels), block_rows)
    # one writer per store, from the first look at what is there to the swap of a staged store (engine.lock)
    with store_lock(url):
        finish_replacement(url)
        target = url
        action, existing, url = prepare_store(target, manifest, labels, overwrite)
        if action == "reuse":
            log.info("%s: complete store with the same labels and parameters; reusing it", url)
            return PrecomputeResult(url, existing or manifest, total, 0, reused=True, symmetric=symmetric)
        upper_todo, todo = blocks_to_compute(url, symmetric)
        log_todo(url, action, total, upper_todo, todo, symmetric)
        if todo:
            with block_job(distance, labels, block_rows, client=client, cluster=spec, progress=progress) as job:
                run_precompute_blocks(
                    job, labels, distance, url, upper_todo, todo, k=k, dense=dense, symmetric=symmetric
                )
        final = finish_store(url, target, symmetric)
        return PrecomputeResult(
            target, final, total, len(todo), reused=False, symmetric=symmetric, upper_computed=len(upper_todo)
        )


def check_precompute_arguments(
    labels: LabelSet,
    distance: LabelDistance,
    k: int,
    dense: bool,
    dense_limit: int | None,
    block_rows: int | None,
    n_workers: int | None,
) -> None:
    """Refuse (ValueError, TypeError) the arguments of :func:`precompute` that cannot make a store, the first wrong
    one named: k, the number of items, ``block_rows``, ``n_workers``, the labels' class for ``distance``,
    ``dense_limit``, and a dense matrix over it (:func:`labeldist.core.dense.check_dense_size`). Nothing is written."""
    if k < 1:
        raise UsageError(f"k must be at least 1, got {k}")
    if len(labels) < 2:
        raise UsageError(f"need at least 2 items to compute distances, got {len(labels)}")
    if k >= len(labels):  # the lists would be padded with -1 / inf: nothing a caller asking for k can use
        raise UsageError(
            f"k={k} neighbours asked of {len(labels)} items, each of which has only {len(labels) - 1} "
            f"others; ask for k <= {len(labels) - 1}"
        )
    if block_rows is not None and block_rows < 1:  # 0 must not quietly mean "default"
        raise UsageError(f"block_rows must be at least 1 (or None for the default), got {block_rows}")
    check_workers(n_workers)
    check_labels_class(labels, distance)
    if dense_limit is not None and dense_limit < 0:
        raise UsageError(f"dense_limit must be at least 0 bytes (or None for no limit), got {dense_limit}")
    if dense:
        check_dense_size(len(labels), dense_limit)


def probe_new_store(url: str, labels: LabelSet, distance: LabelDistance) -> None:
    """Where no store is at ``url`` yet, try ``distance`` on a few of ``labels`` (:func:`labeldist.kinds.probe`):
    a distance that misbehaves (a plugin's) is refused before anything is written."""
    if read_manifest(url) is None:
        from labeldist.kinds import probe

        probe(distance, labels)


def resolve_block_rows(labels: LabelSet, distance: LabelDistance, dense: bool, block_rows: int | None) -> int:
    """``block_rows`` if given, else the distance's own choice for a kNN-only store
    (:meth:`LabelDistance.knn_block_rows`), else :func:`default_block_rows`."""
    return block_rows or (None if dense else distance.knn_block_rows(labels)) or default_block_rows(len(labels))


def finish_store(url: str, target: str, symmetric: bool) -> dict[str, Any]:
    """Publish the store at ``url`` once every block is written (the work arrays of the symmetric mode deleted
    first) and, where it was built beside ``target`` (``--overwrite``), swap it in. Returns its final manifest."""
    if symmetric:
        drop_work(url)  # before publish: a store seen complete has the plain layout
    final = publish(url)
    if url != target:
        replace_with_staged(target)
        log.info("%s: replaced by the new store", target)
    return final


def check_labels_class(labels: LabelSet, distance: LabelDistance) -> None:
    """TypeError unless ``labels`` are of the class ``distance`` compares."""
    if not isinstance(labels, distance.labels_class):
        raise TypeError(
            f"{type(distance).__name__} needs {distance.labels_class.__name__} labels, got {type(labels).__name__}"
        )


def run_precompute_blocks(
    job: BlockJob,
    labels: LabelSet,
    distance: LabelDistance,
    url: str,
    upper_todo: list[int],
    todo: list[int],
    *,
    k: int,
    dense: bool,
    symmetric: bool,
) -> None:
    """The tasks of a precompute. The plain mode: one :func:`compute_block` per row block of ``todo``; a kNN-only store
    of a distance that shares exact pairs, :func:`compute_knn_shared` with the pairs passed between blocks
    (:mod:`labeldist.engine.exchange`). The symmetric dense mode: phase 1 (:func:`compute_upper`) for the upper
    strips of ``upper_todo``, then, once all are written, phase 2 (:func:`compute_mirrored`) for the row blocks of
    ``todo``."""
    common = {"url": url, "block_rows": job.block_rows}
    if not dense and distance.shares_exact_pairs:
        exchange = PairExchange(len(labels), job.block_rows, todo)
        job.run(
            compute_knn_shared,
            todo,
            distance.kind,
            labels=job.scatter(labels),
            distance=job.scatter(distance),
            k=k,
            exchange=exchange,
            **common,
        )
        log.info("exact pairs passed between row blocks: at most %d held at once", exchange.peak)
        return
    if not symmetric:
        job.run(
            compute_block,
            todo,
            distance.kind,
            labels=job.scatter(labels),
            distance=job.scatter(distance),
            k=k,
            dense=dense,
            **common,
        )
        return
    # the barrier: run returns only once every phase-1 task has finished, so no phase-2 task reads a strip still
    # being written
    if upper_todo:
        job.run(
            compute_upper,
            upper_todo,
            f"{distance.kind} upper",
            work=upper_work(len(labels), job.block_rows),  # strip b: rows x the columns from its first row on
            unit="pair",
            labels=job.scatter(labels),
            distance=job.scatter(distance),
            **common,
        )
    job.run(compute_mirrored, todo, f"{distance.kind} rows", loads=False, n_items=len(labels), k=k, **common)


def upper_work(n_items: int, block_rows: int) -> Callable[[int], int]:
    """The pairs upper strip ``b`` computes: its rows against the columns from its first row to the last, fewer
    from one strip to the next (the first has ``n_items`` columns, the last one block's).

    >>> work = upper_work(10, 4)
    >>> [work(b) for b in range(3)], sum(work(b) for b in range(3))
    ([40, 24, 4], 68)
    """

    def work(block: int) -> int:
        start = block * block_rows
        return max(0, min(block_rows, n_items - start)) * (n_items - start)

    return work


def log_todo(url: str, action: str, total: int, upper_todo: list[int], todo: list[int], symmetric: bool) -> None:
    """Log what a precompute at ``url`` computes (``action``: ``"new"`` or ``"resume"``)."""
    if symmetric:
        log.info(
            "%s: symmetric dense (upper triangle, mirrored): %d of %d upper strips and %d of %d row blocks "
            "to compute (%s)",
            url,
            len(upper_todo),
            total,
            len(todo),
            total,
            action,
        )
    else:
        log.info("%s: %d of %d row blocks to compute (%s)", url, len(todo), total, action)
