"""The Dask graph: row blocks of the distance matrix computed on a cluster and written into a store.

The graph is one task per row block. A task computes its rows against all N items with the distance's
``block`` kernel, picks each row's k nearest, writes the kNN rows (and the dense rows when asked) straight into
the Zarr store, and marks the block done. The kernel never sees Dask; the graph never looks inside a label.

Symmetric dense mode: when the distance says ``symmetric`` (d(a, b) == d(b, a)) and the dense matrix is asked
for, each unordered pair is computed once, in two phases of one task per row block:

1. block b (rows start:stop) computes its *upper strip*, rows start:stop against columns start:N only, makes
   its diagonal square exactly symmetric (its upper triangle mirrored), writes the strip into the work array
   ``work/upper`` and marks ``progress/upper[b]``. The strips of all blocks cover the upper triangle.
2. after every phase-1 task has finished (a barrier), block b assembles its full rows: columns >= start from
   its own strip, columns < start from the transpose of ``work/upper[0:start, start:stop]`` (the strips of the
   blocks above it); then top-k and write exactly as in the plain mode, marking ``progress/blocks[b]``.

The kernel work is about half the plain mode's, and the stored matrix is exactly symmetric (the plain mode
stores the kernel's float64 values for (a, b) and (b, a) separately rounded). Phase 2 reads column strips
from a separate work array rather than from ``dense/distances`` because its tasks rewrite whole shards of
``dense/distances`` concurrently: a read of a shard being rewritten could pair one version's shard index with
another version's chunk. ``work/upper`` is written only in phase 1 and read only in phase 2. Once every block
is final the work arrays are deleted, then the store is published, so a finished store has the plain layout;
its manifest records ``"symmetric": true``.

Resume: the per-block marks live in the store, so a rerun of the same command submits only the blocks not yet
marked (in symmetric mode: phase 1 for blocks with neither mark, then phase 2 for blocks not final), and a
finished store is the same whichever way it was reached. Tasks are idempotent (a block written twice is
written identically), which is also what makes Dask's retry after a lost worker safe.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from labeldist.dense import DENSE_LIMIT, check_dense_size
from labeldist.distances.base import LabelDistance
from labeldist.knn import pruned_topk, topk_rows
from labeldist.labels.base import LabelSet
from labeldist.lock import store_lock
from labeldist.store import (
    StoreError,
    StoreMismatchError,
    block_range,
    blocks_done,
    build_manifest,
    create_store,
    drop_work,
    fingerprint_diff,
    is_local,
    n_blocks,
    publish,
    read_manifest,
    read_upper,
    sibling,
    skeleton_whole,
    store_has_checksums,
    upper_done,
    writable_url,
    write_block,
    write_upper,
)

log = logging.getLogger(__name__)

#: memory one task's (block_rows, N) float64 distance block may take
BLOCK_BYTES = 128 * 2**20
MAX_BLOCK_ROWS = 256


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


def default_block_rows(n_items: int) -> int:
    """Rows per task: at most 256, and small enough that one (rows, N) float64 block stays under 128 MiB."""
    return int(max(1, min(MAX_BLOCK_ROWS, BLOCK_BYTES // (8 * max(n_items, 1)))))


def block_kernel(
    labels: LabelSet, distance: LabelDistance, start: int, stop: int, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ``start:stop`` of the matrix (float32, as stored) and their k nearest, the item itself excluded.

    Neighbours are chosen on the float32 values the store keeps, so that a kNN row is exactly the stable
    argsort of its stored dense row.
    """
    rows = _checked_block(distance, labels, start, stop, 0)
    indices, dists = topk_rows(rows, k, exclude=np.arange(start, stop))
    return rows, indices, dists


def _checked_block(distance: LabelDistance, labels: LabelSet, start: int, stop: int, col_start: int) -> np.ndarray:
    """``distance.block`` of rows ``start:stop`` against columns ``col_start:N``, as float32, refused unless a float
    array of the right shape with no NaN (:func:`labeldist.kinds.check_block`, naming the items and the kind):
    a NaN must not be written, where a store's NaN means a value never written."""
    from labeldist.kinds import check_block

    cols = labels if col_start == 0 else labels.subset(slice(col_start, len(labels)))
    rows = labels.subset(slice(start, stop))
    block = distance.block(rows, cols)
    check_block(distance.kind, block, len(rows), len(cols), row_ids=rows.ids, col_ids=cols.ids)
    return block.astype(np.float32)


def mirror_square(strip: np.ndarray) -> np.ndarray:
    """``strip`` (rows start:stop, columns start:N) with its leading square made exactly symmetric: entries
    below the diagonal replaced by those above it, the diagonal as computed. Returns a new array.

    >>> mirror_square(np.array([[0.0, 1.0, 5.0], [2.0, 0.0, 6.0]])).tolist()
    [[0.0, 1.0, 5.0], [1.0, 0.0, 6.0]]
    """
    out = np.array(strip, copy=True)
    below = np.tril_indices(len(strip), -1)
    out[below] = out[below[1], below[0]]
    return out


def upper_kernel(labels: LabelSet, distance: LabelDistance, start: int, stop: int) -> np.ndarray:
    """Phase 1 of the symmetric mode: the upper strip of rows ``start:stop`` (columns ``start:N``), float32 as
    stored, its diagonal square exactly symmetric."""
    return mirror_square(_checked_block(distance, labels, start, stop, start))


def assemble_rows(strip: np.ndarray, above: np.ndarray) -> np.ndarray:
    """Full rows ``start:stop`` of a symmetric matrix from their upper strip (columns ``start:N``) and ``above``,
    the rectangle rows ``0:start`` x columns ``start:stop`` of the upper strips of the blocks before.

    >>> assemble_rows(np.array([[0.0, 4.0]]), np.array([[2.0], [3.0]])).tolist()
    [[2.0, 3.0, 0.0, 4.0]]
    """
    return np.concatenate([above.T, strip], axis=1)


def pruned_block_kernel(
    labels: LabelSet, distance: LabelDistance, start: int, stop: int, k: int
) -> tuple[np.ndarray, np.ndarray, int] | None:
    """The k nearest of rows ``start:stop`` with lower-bound pruning, or None if the distance has no bound.

    Returns indices, distances and the number of exact distances computed (for the store's pruning figures).
    """
    lower = distance.lower_bound_block(labels.subset(slice(start, stop)), labels)
    if lower is None:
        return None

    def exact(r: np.ndarray, c: np.ndarray) -> np.ndarray:
        return distance.pairs(labels, r + start, c)

    return pruned_topk(lower, exact, k, exclude=np.arange(start, stop))


def knn_search(
    labels: LabelSet, distance: LabelDistance, start: int, stop: int, k: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """The k nearest of rows ``start:stop`` among all items, as a kNN-only store finds them: the distance's own
    search where it has one (:meth:`LabelDistance.knn_block`: FAISS for vectors), else lower-bound pruning where
    it has a bound, else whole rows. Returns indices, distances and the number of exact distances computed."""
    searched = distance.knn_block(labels, start, stop, k)
    if searched is None:
        searched = pruned_block_kernel(labels, distance, start, stop, k)
    if searched is not None:
        return searched
    _, indices, dists = block_kernel(labels, distance, start, stop, k)
    return indices, dists, (stop - start) * len(labels)


def compute_block(
    block: int, *, labels: LabelSet, distance: LabelDistance, url: str, k: int, block_rows: int, dense: bool
) -> int:
    """One Dask task: compute row block ``block`` and write it into the store at ``url``: whole rows in a dense
    store, else the lists of :func:`knn_search`."""
    start, stop = block_range(block, len(labels), block_rows)
    if dense:
        rows, indices, dists = block_kernel(labels, distance, start, stop, k)
        n_exact = (stop - start) * len(labels)
    else:
        rows = None
        indices, dists, n_exact = knn_search(labels, distance, start, stop, k)
    write_block(url, start, indices, dists, rows, block, n_exact)
    return block


def compute_upper(block: int, *, labels: LabelSet, distance: LabelDistance, url: str, block_rows: int) -> int:
    """One Dask task of phase 1: compute row block ``block``'s upper strip into ``work/upper``."""
    start, stop = block_range(block, len(labels), block_rows)
    write_upper(url, start, upper_kernel(labels, distance, start, stop), block)
    return block


def compute_mirrored(block: int, *, n_items: int, url: str, k: int, block_rows: int, n_old: int = 0) -> int:
    """One Dask task of phase 2: assemble row block ``block`` from the upper strips, pick its k nearest (on the
    float32 rows stored, as :func:`block_kernel`) and write it into the store. ``n_old``: the items of the
    generation before, whose strips among themselves were copied rather than computed (:mod:`labeldist.append`);
    only the pairs computed are counted."""
    start, stop = block_range(block, n_items, block_rows)
    # a guard, not a wait: the engine runs phase 2 only after phase 1; reading strips never written would
    # store NaN silently
    if not upper_done(url)[: block + 1].all():
        raise StoreError(f"{url}: row block {block} needs the upper strips of blocks 0..{block}, not all written")
    strip = read_upper(url, slice(start, stop), slice(start, n_items))
    above = read_upper(url, slice(0, start), slice(start, stop))
    rows = assemble_rows(strip, above)
    indices, dists = topk_rows(rows, k, exclude=np.arange(start, stop))
    write_block(url, start, indices, dists, rows, block, (stop - start) * (n_items - max(start, n_old)))
    return block


def symmetric_todo(url: str) -> tuple[list[int], list[int]]:
    """The blocks a (re)run of a symmetric dense store must still do: phase 1 for blocks with neither mark,
    phase 2 for blocks not final. Every block final: nothing, and the work arrays may already be gone."""
    final = blocks_done(url)
    if final.all():
        return [], []
    upper = upper_done(url)
    return np.flatnonzero(~final & ~upper).tolist(), np.flatnonzero(~final).tolist()


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, n_workers: int | None = None) -> Iterator[Any]:
    """A distributed Client: on ``scheduler`` (``tcp://host:port``) if given, else on a new LocalCluster of
    ``n_workers`` single-threaded worker processes (default: one per CPU core)."""
    from distributed import Client, LocalCluster

    # The scheduler and nannies log every connection at INFO; keep the command's output to progress and errors.
    logging.getLogger("distributed").setLevel(logging.WARNING)
    if scheduler:
        with Client(scheduler) as client:
            yield client
        return
    with (
        LocalCluster(
            n_workers=n_workers or os.cpu_count() or 1,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",  # a free port: concurrent clusters never fight over 8787
            # a failed task is re-raised in this process with its traceback; the workers need not print it too
            silence_logs=logging.CRITICAL,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def _occupied(url: str) -> bool:
    """True when a local ``url`` holds something (a file, or a non-empty folder) that is not a store."""
    if not is_local(url) or not os.path.exists(url):
        return False
    return not os.path.isdir(url) or bool(os.listdir(url))


def staging_url(url: str) -> str:
    """Where ``--overwrite`` builds the new store beside the old one: a hidden sibling (the service skips
    folders whose name starts with a dot)."""
    return sibling(url, "overwrite")


def append_url(url: str) -> str:
    """Where ``labeldist append`` builds a store's next generation: a hidden sibling, swapped in once complete."""
    return sibling(url, "append")


#: the two ways a complete store is replaced by one built beside it: (where the new one is built, where the old one
#: is moved while they swap) for ``--overwrite`` and for an appended generation
_SWAPS = {"overwrite": ("overwrite", "replaced"), "append": ("append", "previous")}


def finish_replacement(url: str) -> None:
    """Complete a swap of a staged store into ``url`` (``--overwrite``'s or an appended generation's) that was
    interrupted between its two renames, and remove the replaced store once the new one is in place. Idempotent;
    nothing to do in the usual case."""
    if not is_local(url):
        return
    for staged_name, aside_name in _SWAPS.values():
        staged, aside = sibling(url, staged_name), sibling(url, aside_name)
        if not os.path.exists(url) and os.path.exists(aside) and (read_manifest(staged) or {}).get("complete"):
            os.rename(staged, url)
        if os.path.exists(url) and os.path.exists(aside):
            shutil.rmtree(aside)


def replace_with_staged(url: str, how: str = "overwrite") -> None:
    """Swap the complete staged store (``how``: ``"overwrite"`` or ``"append"``) into ``url``: the old store is
    renamed aside, the new one renamed into place, then the old one removed. At every moment one complete store
    is at ``url`` or recoverable by :func:`finish_replacement`."""
    staged_name, aside_name = _SWAPS[how]
    os.rename(url, sibling(url, aside_name))
    os.rename(sibling(url, staged_name), url)
    shutil.rmtree(sibling(url, aside_name))


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
    elif _occupied(url):
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
    client: Any | None = None,
    overwrite: bool = False,
    progress: bool | None = None,
) -> PrecomputeResult:
    """Compute the kNN lists (and the dense matrix if ``dense``) of ``labels`` under ``distance`` into a store.

    Reuses a finished store made from the same labels and parameters, resumes an unfinished one, and refuses
    (StoreMismatchError) to touch a store made with other ones unless ``overwrite``. ``client`` runs on an
    existing distributed Client; otherwise ``scheduler`` or a new LocalCluster is used. The job holds the store's
    lock (:mod:`labeldist.lock`) throughout: a second job on the same local output is refused (StoreLockedError).

    A dense matrix larger than ``dense_limit`` bytes (:data:`DENSE_LIMIT`, 1 GiB; None for no limit) is refused
    with a ValueError before anything is written. ``block_rows`` defaults to the distance's own choice for its kNN
    search in a kNN-only store (:meth:`LabelDistance.knn_block_rows`), else to :func:`default_block_rows`.
    """
    # every argument checked before anything is written: a bad one must not leave a half-made store behind
    _check_arguments(labels, distance, k, dense, dense_limit, block_rows, n_workers)
    url = writable_url(output)
    _probe_new_store(url, labels, distance)
    block_rows = _resolve_block_rows(labels, distance, dense, block_rows)
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
    # one writer per store, from the first look at what is there to the swap of a staged store: see labeldist.lock
    with store_lock(url):
        finish_replacement(url)
        target = url
        action, existing, url = prepare_store(target, manifest, labels, overwrite)
        if action == "reuse":
            log.info("%s: complete store with the same labels and parameters; reusing it", url)
            return PrecomputeResult(url, existing or manifest, total, 0, reused=True, symmetric=symmetric)
        upper_todo, todo = _blocks_to_compute(url, action, total, symmetric)
        if todo:
            quiet = progress is False
            _prepare_distance(distance, labels, quiet)
            with _job_client(client, scheduler, n_workers, quiet) as job:
                if symmetric:
                    _run_symmetric(
                        job, labels, distance, url, upper_todo, todo, k=k, block_rows=block_rows, progress=progress
                    )
                else:
                    _run_blocks(
                        job, labels, distance, url, todo, k=k, dense=dense, block_rows=block_rows, progress=progress
                    )
        final = _finish_store(url, target, symmetric)
        return PrecomputeResult(
            target, final, total, len(todo), reused=False, symmetric=symmetric, upper_computed=len(upper_todo)
        )


def _check_arguments(
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
    ``dense_limit``, and a dense matrix over it (:func:`labeldist.dense.check_dense_size`). Nothing is written."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if len(labels) < 2:
        raise ValueError(f"need at least 2 items to compute distances, got {len(labels)}")
    if k >= len(labels):  # the lists would be padded with -1 / inf: nothing a caller asking for k can use
        raise ValueError(
            f"k={k} neighbours asked of {len(labels)} items, each of which has only {len(labels) - 1} "
            f"others; ask for k <= {len(labels) - 1}"
        )
    if block_rows is not None and block_rows < 1:  # 0 must not quietly mean "default"
        raise ValueError(f"block_rows must be at least 1 (or None for the default), got {block_rows}")
    if n_workers is not None and n_workers < 1:
        raise ValueError(f"n_workers must be at least 1 (or None for one per core), got {n_workers}")
    if not isinstance(labels, distance.labels_class):
        raise TypeError(
            f"{type(distance).__name__} needs {distance.labels_class.__name__} labels, got {type(labels).__name__}"
        )
    if dense_limit is not None and dense_limit < 0:
        raise ValueError(f"dense_limit must be at least 0 bytes (or None for no limit), got {dense_limit}")
    if dense:
        check_dense_size(len(labels), dense_limit)


def _probe_new_store(url: str, labels: LabelSet, distance: LabelDistance) -> None:
    """Where no store is at ``url`` yet, try ``distance`` on a few of ``labels`` (:func:`labeldist.kinds.probe`):
    a distance that misbehaves (a plugin's) is refused before anything is written."""
    if read_manifest(url) is None:
        from labeldist.kinds import probe

        probe(distance, labels)


def _resolve_block_rows(labels: LabelSet, distance: LabelDistance, dense: bool, block_rows: int | None) -> int:
    """``block_rows`` if given, else the distance's own choice for a kNN-only store
    (:meth:`LabelDistance.knn_block_rows`), else :func:`default_block_rows`."""
    return block_rows or (None if dense else distance.knn_block_rows(labels)) or default_block_rows(len(labels))


def _blocks_to_compute(url: str, action: str, total: int, symmetric: bool) -> tuple[list[int], list[int]]:
    """The upper strips and the row blocks of the store at ``url`` still to compute (no strips outside the
    symmetric mode, :func:`symmetric_todo` in it), logged with ``action`` (``"new"`` or ``"resume"``)."""
    if symmetric:
        upper_todo, todo = symmetric_todo(url)
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
        upper_todo, todo = [], np.flatnonzero(~blocks_done(url)).tolist()
        log.info("%s: %d of %d row blocks to compute (%s)", url, len(todo), total, action)
    return upper_todo, todo


def _prepare_distance(distance: LabelDistance, labels: LabelSet, quiet: bool) -> None:
    """``distance.prepare(labels)``, which can be the slow phase (the sentence kind embeds every sentence here);
    its time is printed when over a second, unless ``quiet``."""
    started = time.perf_counter()
    distance.prepare(labels)
    if not quiet and time.perf_counter() - started > 1:
        tqdm.write(
            f"{distance.kind}: prepared {len(labels):,} labels in {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
        )


@contextlib.contextmanager
def _job_client(client: Any | None, scheduler: str | None, n_workers: int | None, quiet: bool) -> Iterator[Any]:
    """The Client a job runs on: ``client`` if given (left open), else a new one from :func:`dask_client`, closed
    with the job, its dashboard's address printed unless ``quiet``."""
    if client is not None:
        yield client
        return
    with dask_client(scheduler, n_workers) as client:
        if not quiet:
            tqdm.write(f"Dask dashboard: {client.dashboard_link}", file=sys.stderr)
        yield client


def _block_sizes(n_items: int, block_rows: int) -> Callable[[int], int]:
    """The number of rows of each row block (the last may be short), for the progress of :func:`_run_tasks`."""

    def rows(block: int) -> int:
        return min(block_rows, n_items - block * block_rows)

    return rows


def _run_blocks(
    client: Any,
    labels: LabelSet,
    distance: LabelDistance,
    url: str,
    todo: list[int],
    *,
    k: int,
    dense: bool,
    block_rows: int,
    progress: bool | None,
) -> None:
    """The plain mode: one :func:`compute_block` task per row block of ``todo``: its whole rows in a dense store,
    else its kNN lists (:func:`knn_search`)."""
    _run_tasks(
        client,
        compute_block,
        todo,
        progress,
        distance.kind,
        rows=_block_sizes(len(labels), block_rows),
        labels=_scatter(client, labels),
        distance=distance,
        url=url,
        k=k,
        block_rows=block_rows,
        dense=dense,
    )


def _run_symmetric(
    client: Any,
    labels: LabelSet,
    distance: LabelDistance,
    url: str,
    upper_todo: list[int],
    todo: list[int],
    *,
    k: int,
    block_rows: int,
    progress: bool | None,
) -> None:
    """The symmetric dense mode: phase 1 (:func:`compute_upper`) for the upper strips of ``upper_todo``, then, once
    all are written, phase 2 (:func:`compute_mirrored`) for the row blocks of ``todo``."""
    rows = _block_sizes(len(labels), block_rows)
    # the barrier: _run_tasks returns only once every phase-1 task has finished, so no phase-2 task reads a strip
    # still being written
    if upper_todo:
        _run_tasks(
            client,
            compute_upper,
            upper_todo,
            progress,
            f"{distance.kind} upper",
            rows=rows,
            labels=_scatter(client, labels),
            distance=distance,
            url=url,
            block_rows=block_rows,
        )
    _run_tasks(
        client,
        compute_mirrored,
        todo,
        progress,
        f"{distance.kind} rows",
        rows=rows,
        n_items=len(labels),
        url=url,
        k=k,
        block_rows=block_rows,
    )


def _finish_store(url: str, target: str, symmetric: bool) -> dict[str, Any]:
    """Publish the store at ``url`` once every block is written (the work arrays of the symmetric mode deleted
    first) and, where it was built beside ``target`` (``--overwrite``), swap it in. Returns its final manifest."""
    if symmetric:
        drop_work(url)  # before publish: a store seen complete has the plain layout
    final = publish(url)
    if url != target:
        replace_with_staged(target)
        log.info("%s: replaced by the new store", target)
    return final


def _scatter(client: Any, labels: LabelSet) -> Any:
    # one copy of the labels per worker, instead of one pickled into every task
    return client.scatter(labels, broadcast=True)


def _run_tasks(
    client: Any,
    func: Any,
    todo: list[int],
    progress: bool | None,
    desc: str,
    *,
    rows: Callable[[int], int],
    **kwargs: Any,
) -> None:
    """Run ``func(block, **kwargs)`` for every block of ``todo`` on ``client``; return once all have finished,
    raising the first task error (the other tasks cancelled). The progress counts items (``rows(block)`` of
    each), not blocks: a user knows how many items the job has. It is tqdm's bar on a terminal and plain lines
    every few seconds off one (labeldist.progress); ``progress=False``: none."""
    from distributed import as_completed

    from labeldist.progress import progress_bar

    futures = client.map(func, todo, pure=False, **kwargs)
    sizes = dict(zip(futures, (rows(b) for b in todo)))
    bar = progress_bar(sum(sizes.values()), desc, unit="item", unit_scale=True, enabled=progress)
    try:
        for future in as_completed(futures):
            future.result()  # re-raises a task's error here, with its traceback
            bar.update(sizes[future])
    except BaseException:
        client.cancel(futures)  # finished blocks are marked in the store; the rest is redone on resume
        raise
    finally:
        bar.close()
