"""The Dask graph: row blocks of the distance matrix computed on a cluster and written into a store.

The graph is one task per row block. A task computes its rows against all N items with the distance's
``block`` kernel, picks each row's k nearest, writes the kNN rows (and the dense rows when asked) straight into
the Zarr store, and marks the block done. The kernel never sees Dask; the graph never looks inside a label.

Resume: the per-block marks live in the store, so a rerun of the same command submits only the blocks not yet
marked, and a finished store is the same whichever way it was reached. Tasks are idempotent (a block written
twice is written identically), which is also what makes Dask's retry after a lost worker safe.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from labeldist.distances.base import LabelDistance
from labeldist.knn import pruned_topk, topk_rows
from labeldist.labels.base import LabelSet
from labeldist.store import (
    StoreError,
    StoreMismatchError,
    block_range,
    blocks_done,
    build_manifest,
    create_store,
    fingerprint_diff,
    n_blocks,
    publish,
    read_manifest,
    store_url,
    write_block,
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
    rows = distance.block(labels.subset(slice(start, stop)), labels).astype(np.float32)
    if rows.shape != (stop - start, len(labels)):
        raise ValueError(f"{type(distance).__name__}.block returned shape {rows.shape}, expected "
                         f"{(stop - start, len(labels))}")  # fmt: skip
    indices, dists = topk_rows(rows, k, exclude=np.arange(start, stop))
    return rows, indices, dists


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


def compute_block(
    block: int, *, labels: LabelSet, distance: LabelDistance, url: str, k: int, block_rows: int, dense: bool
) -> int:
    """One Dask task: compute row block ``block`` and write it into the store at ``url``."""
    start, stop = block_range(block, len(labels), block_rows)
    pruned = None if dense else pruned_block_kernel(labels, distance, start, stop, k)
    if pruned is not None:
        indices, dists, n_exact = pruned
        rows = None
    else:
        rows, indices, dists = block_kernel(labels, distance, start, stop, k)
        n_exact = (stop - start) * len(labels)
    write_block(url, start, indices, dists, rows if dense else None, block, n_exact)
    return block


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
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def _occupied(url: str) -> bool:
    """True when a local ``url`` holds something (a file, or a non-empty folder) that is not a store."""
    if "://" in url or not os.path.exists(url):
        return False
    return not os.path.isdir(url) or bool(os.listdir(url))


def prepare_store(
    url: str, manifest: dict[str, Any], labels: LabelSet, overwrite: bool
) -> tuple[str, dict[str, Any] | None]:
    """Decide what to do at ``url``: ``("reuse", manifest)`` for a finished store with the same fingerprint,
    ``("resume", None)`` for an unfinished one, ``("new", None)`` after laying out a fresh store."""
    existing = read_manifest(url)
    if existing is not None:
        diff = fingerprint_diff(existing, manifest)
        if not diff:
            return ("reuse", existing) if existing.get("complete") is True else ("resume", None)
        if not overwrite:
            detail = "; ".join(f"{key}: store has {existing.get(key)!r}, asked {manifest.get(key)!r}"
                               for key in diff if key != "labels_sha256")  # fmt: skip
            if "labels_sha256" in diff:
                detail = "; ".join(filter(None, [detail, "the labels differ"]))
            raise StoreMismatchError(
                f"{url}: a store made with other parameters is already there ({detail}); "
                "choose another output or pass --overwrite"
            )
    elif _occupied(url):
        raise StoreError(f"{url}: exists and is not a labeldist store; refusing to write over it")
    create_store(url, manifest, labels)
    return "new", None


def precompute(
    labels: LabelSet,
    distance: LabelDistance,
    output: str | os.PathLike[str],
    *,
    dataset: str,
    k: int = 100,
    dense: bool = True,
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
    existing distributed Client; otherwise ``scheduler`` or a new LocalCluster is used.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if len(labels) < 2:
        raise ValueError(f"need at least 2 items to compute distances, got {len(labels)}")
    if not isinstance(labels, distance.labels_class):
        raise TypeError(f"{type(distance).__name__} needs {distance.labels_class.__name__} labels, "
                        f"got {type(labels).__name__}")  # fmt: skip
    url = store_url(output)
    block_rows = block_rows or default_block_rows(len(labels))
    manifest = build_manifest(
        dataset=dataset, kind=distance.kind, params=distance.params(), labels=labels, k=k, dense=dense,
        block_rows=block_rows,
    )  # fmt: skip
    total = n_blocks(len(labels), block_rows)
    action, existing = prepare_store(url, manifest, labels, overwrite)
    if action == "reuse":
        log.info("%s: complete store with the same labels and parameters; reusing it", url)
        return PrecomputeResult(url, existing or manifest, total, 0, reused=True)
    todo = np.flatnonzero(~blocks_done(url)).tolist()
    log.info("%s: %d of %d row blocks to compute (%s)", url, len(todo), total, action)
    if todo:
        with contextlib.ExitStack() as stack:
            if client is None:
                client = stack.enter_context(dask_client(scheduler, n_workers))
            _run_blocks(client, todo, labels, distance, url, k, block_rows, dense, progress)
    final = publish(url)
    return PrecomputeResult(url, final, total, len(todo), reused=False)


def _run_blocks(
    client: Any,
    todo: list[int],
    labels: LabelSet,
    distance: LabelDistance,
    url: str,
    k: int,
    block_rows: int,
    dense: bool,
    progress: bool | None,
) -> None:
    from distributed import as_completed

    labels_future = client.scatter(labels, broadcast=True)
    futures = client.map(
        compute_block, todo, labels=labels_future, distance=distance, url=url, k=k, block_rows=block_rows,
        dense=dense, pure=False,
    )  # fmt: skip
    bar = tqdm(total=len(todo), unit="block", desc=distance.kind, disable=None if progress is None else not progress)
    try:
        for future in as_completed(futures):
            future.result()  # re-raises a task's error here, with its traceback
            bar.update(1)
    except BaseException:
        client.cancel(futures)  # finished blocks are marked in the store; the rest is redone on resume
        raise
    finally:
        bar.close()
