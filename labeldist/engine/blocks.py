"""The row-block tasks of the engine: each computes one block of rows of the distance matrix and writes it into a
store. A task is idempotent (a block written twice is written identically) and knows nothing of Dask.

- :func:`compute_block`: rows ``start:stop`` against every item; the whole rows in a dense store, else their k
  nearest (:func:`knn_search`: the distance's own search, lower-bound pruning, or whole rows).
- The symmetric dense mode, in two phases (docs/store-format.md, "The symmetric dense mode"):
  :func:`compute_upper` writes a block's upper strip (columns ``start:N``) into ``work/upper``; once every strip
  is written, :func:`compute_mirrored` assembles the block's full rows from its strip and the strips above it,
  each unordered pair computed once.

Neighbours are chosen on the float32 values the store keeps, so a kNN row is exactly the stable argsort of its
stored dense row (ties by index).
"""

from __future__ import annotations

import numpy as np

from labeldist.core.cascade import KnownPairs
from labeldist.core.knn import pruned_topk, topk_rows
from labeldist.distances.base import LabelDistance
from labeldist.labels.base import LabelSet
from labeldist.store import (
    StoreError,
    block_range,
    blocks_done,
    check_store_folders,
    is_local,
    read_upper,
    upper_done,
    write_block,
    write_upper,
)

#: memory one task's (block_rows, N) float64 distance block may take
BLOCK_BYTES = 128 * 2**20
MAX_BLOCK_ROWS = 256


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
    rows = checked_block(distance, labels, start, stop, 0)
    indices, dists = topk_rows(rows, k, exclude=np.arange(start, stop))
    return rows, indices, dists


def checked_block(distance: LabelDistance, labels: LabelSet, start: int, stop: int, col_start: int) -> np.ndarray:
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
    return mirror_square(checked_block(distance, labels, start, stop, start))


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


def compute_knn_shared(
    block: int, *, labels: LabelSet, distance: LabelDistance, url: str, k: int, block_rows: int, known: KnownPairs
) -> tuple[int, KnownPairs]:
    """One Dask task of a kNN-only store whose distance shares exact pairs (:mod:`labeldist.engine.exchange`): row
    block ``block``'s lists by :meth:`~labeldist.distances.base.LabelDistance.knn_block_shared`, given ``known``
    (pairs other blocks computed, rows in this block), written into the store at ``url``. Returns the block and the
    pairs whose exact distance it computed, for the blocks not yet started."""
    start, stop = block_range(block, len(labels), block_rows)
    indices, dists, n_exact, made = distance.knn_block_shared(labels, start, stop, k, known)
    write_block(url, start, indices, dists, None, block, n_exact)
    return block, made


def compute_upper(block: int, *, labels: LabelSet, distance: LabelDistance, url: str, block_rows: int) -> int:
    """One Dask task of phase 1: compute row block ``block``'s upper strip into ``work/upper``."""
    start, stop = block_range(block, len(labels), block_rows)
    write_upper(url, start, upper_kernel(labels, distance, start, stop), block)
    return block


def compute_mirrored(block: int, *, n_items: int, url: str, k: int, block_rows: int, n_old: int = 0) -> int:
    """One Dask task of phase 2: assemble row block ``block`` from the upper strips, pick its k nearest (on the
    float32 rows stored, as :func:`block_kernel`) and write it into the store. ``n_old``: the items of the
    generation before, whose strips among themselves were copied rather than computed (:mod:`labeldist.engine.grow`);
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


def blocks_to_compute(url: str, symmetric: bool) -> tuple[list[int], list[int]]:
    """The upper strips and the row blocks the store at ``url`` still needs: no strips outside the symmetric mode
    and every block not marked done; in it, :func:`symmetric_todo`. A store holding a link or a device (one that
    a resumed job would write through) is refused first (:func:`~labeldist.store.check_store_folders`)."""
    if is_local(url):
        check_store_folders(url)
    if symmetric:
        return symmetric_todo(url)
    return [], np.flatnonzero(~blocks_done(url)).tolist()
