"""The work ``labeldist precompute`` and ``append`` and their Python face (:mod:`labeldist.library`) share once they
have the labels and the distance: the store built or grown, a full disk said as such, and workers that cannot start
from a script said with the fix."""

from __future__ import annotations

import contextlib
import errno
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from labeldist.core.clusters import ClusterSpec
from labeldist.core.options import check_k, check_output
from labeldist.errors import UsageError
from labeldist.store import StoreError

if TYPE_CHECKING:
    from labeldist.distances.base import LabelDistance
    from labeldist.engine import AppendResult, PrecomputeResult
    from labeldist.labels.base import LabelSet


def no_space(out: str, e: OSError) -> BaseException:
    """A StoreError saying what a full disk left behind (raised in a worker and re-raised here by Dask, with its
    errno); ``e`` itself for any other OSError."""
    if e.errno != errno.ENOSPC:
        return e
    return StoreError(
        f"{out}: no space left on device ({e.filename or 'while writing'}). The store is left incomplete, "
        "so it is never served as complete, and a store it was to replace is untouched. Free some space and "
        "rerun the same command: it resumes with the blocks not yet written."
    )


def build_store(
    labels: LabelSet,
    distance: LabelDistance,
    out: str,
    *,
    dataset: str,
    k: int,
    dense: bool,
    dense_limit: int | None,
    block_rows: int | None,
    cluster: ClusterSpec,
    client: Any = None,
    overwrite: bool = False,
    progress: bool | None = None,
) -> PrecomputeResult:
    """Build the store at ``out`` (:func:`labeldist.engine.precompute`): what ``labeldist precompute`` and
    :func:`precompute` run once they have the labels and the distance. ``k`` and ``out`` are checked first; a full
    disk is said as such."""
    from labeldist.engine import precompute as engine_precompute

    check_k(k, len(labels))
    check_output(out)
    try:
        return engine_precompute(
            labels,
            distance,
            out,
            dataset=dataset,
            k=k,
            dense=dense,
            dense_limit=dense_limit,
            block_rows=block_rows,
            cluster=cluster,
            client=client,
            overwrite=overwrite,
            progress=progress,
        )
    except OSError as e:
        raise no_space(out, e) from e


def grow_store(
    store: str,
    labels: LabelSet,
    *,
    distance: LabelDistance | None,
    dense_limit: int | None,
    cluster: ClusterSpec,
    client: Any = None,
    progress: bool | None = None,
) -> AppendResult:
    """Append ``labels`` to the store at ``store`` (:func:`labeldist.engine.append`): what ``labeldist append`` and
    :func:`append` run once they have the labels. A full disk is said as such."""
    from labeldist.engine import append as engine_append

    try:
        return engine_append(
            store, labels, distance=distance, dense_limit=dense_limit, cluster=cluster, client=client, progress=progress
        )
    except OSError as e:
        raise no_space(store, e) from e


@contextlib.contextmanager
def workers_started() -> Iterator[None]:
    """Around a job that may start a LocalCluster from a script: Dask starts its worker processes by *spawning*
    them, which imports the script again; a script whose calls are not under ``if __name__ == "__main__":`` then
    runs them again in each worker, which cannot start a cluster of its own ("Nanny failed to start"). Said in one
    line, with the fix."""
    try:
        yield
    except RuntimeError as e:
        script = getattr(sys.modules.get("__main__"), "__file__", None)
        if script is None or "failed to start" not in str(e):
            raise
        raise UsageError(
            f"the Dask workers could not start ({e}): they import {script} again, so put its work under "
            '`if __name__ == "__main__":` (or run it in a notebook, or give client= a running Dask client)'
        ) from e
