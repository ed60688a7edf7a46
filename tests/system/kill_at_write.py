"""A small pose precompute run in one process, killed with SIGKILL just before its Nth write to the disk.

    python -m tests.system.kill_at_write N OUT [JOB]    # N = 0: no kill; prints the number of writes made
    python -m tests.system.kill_at_write serve           # the same, once per line "N OUT JOB LOG" of stdin

JOB is ``precompute`` (the default), or ``append-pose`` / ``append-vectors``: an append of items to the store
already at OUT (made by :func:`append_base`), a plain dense one for poses, a symmetric dense one for vectors.

Its Dask cluster is real (a scheduler and two workers) but in this process (``processes=False``), so that every
write of the job, from laying out the store to the last block and the publish, happens here and can be counted:
each chunk or metadata file Zarr stores, each file or folder deleted, each rename. Killing just before write N
leaves the disk exactly as a kill at any instant between write N - 1 and write N would (a write itself is atomic:
Zarr's LocalStore writes a file aside and renames it in). The test in test_kill_anywhere.py drives it.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading

N_ITEMS, K, BLOCK_ROWS = 120, 10, 16
CSV = os.path.join(os.path.dirname(__file__), "..", "..", "data", "mpii", "mpii_valid_2958.csv")


def job(out: str, client) -> object:
    """The job: the first N_ITEMS poses of the shipped MPII CSV, dense, k = K."""
    from labeldist.distances.pose import PoseDistance
    from labeldist.engine import precompute
    from labeldist.labels.pose_files import read_mpii_csv

    labels = read_mpii_csv(CSV).subset(slice(0, N_ITEMS))
    return precompute(
        labels,
        PoseDistance(),
        out,
        dataset="mpii120",
        k=K,
        dense=True,
        block_rows=BLOCK_ROWS,
        client=client,
        progress=False,
    )


#: items of the store an append job grows (the rest of the N_ITEMS are appended)
APPEND_BASE = 100


def append_labels(kind: str):
    """The N_ITEMS labels and the distance of an append job: poses (a plain dense store) or vectors (symmetric)."""
    import numpy as np

    if kind == "append-pose":
        from labeldist.distances.pose import PoseDistance
        from labeldist.labels.pose_files import read_mpii_csv

        return read_mpii_csv(CSV).subset(slice(0, N_ITEMS)), PoseDistance()
    from labeldist.distances.vectors import VectorDistance
    from labeldist.labels.vectors import Vectors

    values = np.random.default_rng(0).normal(size=(N_ITEMS, 6))
    return Vectors([f"v{i}" for i in range(N_ITEMS)], values, [f"x{j}" for j in range(6)]), VectorDistance()


def append_base(out: str, client, kind: str) -> object:
    """The store an append job grows: the first APPEND_BASE items, dense, k = K."""
    from labeldist.engine import precompute

    labels, distance = append_labels(kind)
    return precompute(
        labels.subset(slice(0, APPEND_BASE)),
        distance,
        out,
        dataset="base",
        k=K,
        dense=True,
        block_rows=BLOCK_ROWS,
        client=client,
        progress=False,
    )


def append_job(out: str, client, kind: str) -> object:
    """The append job: items APPEND_BASE..N_ITEMS into the store at ``out``."""
    from labeldist.engine.grow import append

    labels, distance = append_labels(kind)
    return append(out, labels.subset(slice(APPEND_BASE, N_ITEMS)), distance=distance, client=client, progress=False)


def count_writes(kill_at: int, folder: str) -> list[int]:
    """Wrap every kind of write with a counter that SIGKILLs this process at write ``kill_at`` (0: never); renames
    and deletions count only inside ``folder`` (Dask removes scratch folders of its own)."""
    import zarr.storage

    count, lock = [0], threading.Lock()

    def tick() -> None:
        with lock:
            count[0] += 1
            if count[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    def wrap_async(cls, name):
        original = getattr(cls, name)

        async def wrapped(self, *args, **kwargs):
            tick()
            return await original(self, *args, **kwargs)

        setattr(cls, name, wrapped)

    for name in ("set", "set_if_not_exists", "delete", "delete_dir"):
        wrap_async(zarr.storage.LocalStore, name)

    def wrap_sync(module, name):
        original = getattr(module, name)

        def wrapped(*args, **kwargs):
            if os.path.abspath(os.fspath(args[0])).startswith(folder):
                tick()
            return original(*args, **kwargs)

        setattr(module, name, wrapped)

    wrap_sync(os, "rename")
    wrap_sync(shutil, "rmtree")
    return count


def run(kill_at: int, out: str, which: str) -> int:
    """The job of ``which`` into ``out``, killed just before write ``kill_at`` (0: never); prints the writes made."""
    import logging

    from distributed import Client, LocalCluster

    logging.getLogger("distributed").setLevel(logging.ERROR)
    count = count_writes(kill_at, os.path.dirname(os.path.abspath(out)))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        with Client(cluster) as client:
            job(out, client) if which == "precompute" else append_job(out, client, which)
    print(f"writes={count[0]}")
    return 0


def serve() -> int:
    """One forked child per line ``N OUT JOB LOG`` of stdin, which runs :func:`run` with its output in LOG; each line
    answered with the child's exit status as subprocess gives it (-9: killed). The imports (numpy, numba, zarr,
    Dask, labeldist) are made once, here, before any thread: a child starts where a new interpreter would be after
    a second of imports, and is killed at its write as a process of its own would be."""
    import traceback

    import distributed  # noqa: F401  (imported for the children)

    import labeldist.distances.pose  # noqa: F401
    import labeldist.distances.vectors  # noqa: F401
    import labeldist.engine  # noqa: F401
    import labeldist.engine.grow  # noqa: F401
    import labeldist.labels.pose_files  # noqa: F401

    for line in sys.stdin:
        kill_at, out, which, log = line.split()
        if threading.active_count() != 1:  # a fork keeps only the calling thread: nothing else may be running
            raise RuntimeError(f"threads before a fork: {threading.enumerate()}")
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                code = run(int(kill_at), out, which)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)
    return 0


def main() -> int:
    if sys.argv[1] == "serve":
        return serve()
    return run(int(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "precompute")


if __name__ == "__main__":
    sys.exit(main())
