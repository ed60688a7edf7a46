"""The engine: label distances computed on a Dask cluster into a store, and a store grown by new items.

- :mod:`~labeldist.engine.build`: :func:`precompute`, a store from a label set (reused, resumed, or rebuilt
  beside the old one with ``overwrite``);
- :mod:`~labeldist.engine.grow`: :func:`append`, a store's next generation, only the new pairs computed;
- :mod:`~labeldist.engine.blocks`: the row-block tasks both run (Dask-free, idempotent);
- :mod:`~labeldist.engine.runner`: the Dask client (a LocalCluster, a scheduler, a scheduler file or a job queue, as
  a :class:`~labeldist.core.clusters.ClusterSpec` says; its workers waited for) and the running of tasks, with progress;
- :mod:`~labeldist.engine.staging`: building beside a complete store and swapping it in;
- :mod:`~labeldist.engine.lock`: one writer per store.

docs/design.md describes the flow; docs/store-format.md the store and its two-phase symmetric mode.
"""

from labeldist.core.clusters import ClusterSpec
from labeldist.engine.blocks import default_block_rows
from labeldist.engine.build import PrecomputeResult, precompute
from labeldist.engine.grow import FILE_PROVENANCE, AppendResult, append
from labeldist.engine.lock import store_lock
from labeldist.engine.runner import dask_client
from labeldist.engine.staging import finish_replacement, replace_with_staged, staging_url

__all__ = [
    "FILE_PROVENANCE",
    "AppendResult",
    "ClusterSpec",
    "PrecomputeResult",
    "append",
    "dask_client",
    "default_block_rows",
    "finish_replacement",
    "precompute",
    "replace_with_staged",
    "staging_url",
    "store_lock",
]
