"""The Dask side of the engine: a cluster to run on, and row-block tasks run on it with progress.

Every job (:func:`labeldist.engine.precompute`, :func:`labeldist.engine.append`) runs the same way: the distance
prepared in this process (:func:`prepare_distance`), a client opened for the job (:func:`job_client`), then one
task per row block through :meth:`BlockJob.run`, which returns once every task has finished (the barrier between
the phases of the symmetric mode) and raises the first task's error. Each task runs under the thread budget of a
Dask thread (:func:`run_block_task`): the kernels never ask Dask themselves (:mod:`labeldist.threads`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

from labeldist.distances.base import LabelDistance, Preparation
from labeldist.labels.base import LabelSet
from labeldist.threads import limited_threads


def check_workers(n_workers: int | None) -> None:
    """ValueError unless ``n_workers`` is None (one per core) or at least 1."""
    if n_workers is not None and n_workers < 1:
        raise ValueError(f"n_workers must be at least 1 (or None for one per core), got {n_workers}")


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


@contextlib.contextmanager
def job_client(client: Any | None, scheduler: str | None, n_workers: int | None, quiet: bool) -> Iterator[Any]:
    """The Client a job runs on: ``client`` if given (left open), else a new one from :func:`dask_client`, closed
    with the job, its dashboard's address printed unless ``quiet``."""
    if client is not None:
        yield client
        return
    with dask_client(scheduler, n_workers) as client:
        if not quiet:
            tqdm.write(f"Dask dashboard: {client.dashboard_link}", file=sys.stderr)
        yield client


def prepare_distance(distance: LabelDistance, labels: LabelSet, quiet: bool) -> None:
    """``distance.prepare(labels)``, which can be the slow phase (the sentence kind embeds every sentence here);
    its time is printed when over a second, unless ``quiet``."""
    started = time.perf_counter()
    distance.prepare(labels)
    if not quiet and time.perf_counter() - started > 1:
        tqdm.write(
            f"{distance.kind}: prepared {len(labels):,} labels in {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
        )


def worker_threads() -> int | None:
    """OpenMP threads for one task: None (the library's default, every core) outside a Dask worker.

    In a Dask worker, each of its threads runs one task at a time, and Dask is set up to run one task per core:
    labeldist's LocalCluster has one single-threaded worker process per core, ``dask worker`` one thread per core.
    So one task gets the OpenMP threads of its process (the nanny sets ``OMP_NUM_THREADS=1``, else its cores)
    divided by the worker's threads: 1 in both set-ups. FAISS's default there would start every core's worth of
    threads in every task at once: 2 workers x 2 threads on this 2-core machine.
    """
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):  # ValueError: not in a worker
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    setting = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()  # "4,2": 4 at the outer level
    budget = int(setting) if setting.isdigit() and int(setting) > 0 else cores
    return max(1, budget // max(1, int(getattr(worker.state, "nthreads", 1))))


def run_block_task(block: int, *, task: Callable[..., int], **kwargs: Any) -> int:
    """``task(block, **kwargs)`` on a worker, under the thread budget of one Dask thread (:func:`worker_threads`)."""
    with limited_threads(worker_threads()):
        return task(block, **kwargs)


@dataclass
class BlockJob:
    """The row-block tasks of one job on ``client``: ``n_items`` items in blocks of ``block_rows`` rows, its
    progress shown unless ``progress`` is False (None: a bar on a terminal, lines off one)."""

    client: Any
    n_items: int
    block_rows: int
    progress: bool | None

    def scatter(self, labels: LabelSet) -> Any:
        """``labels`` sent once to every worker, instead of pickled into every task: a future the tasks take."""
        return self.client.scatter(labels, broadcast=True)

    def rows(self, block: int) -> int:
        """The rows of row block ``block`` (the last may be short)."""
        return min(self.block_rows, self.n_items - block * self.block_rows)

    def run(self, task: Callable[..., int], todo: list[int], desc: str, **kwargs: Any) -> None:
        """Run ``task(block, **kwargs)`` for every block of ``todo``; return once all have finished, raising the
        first task error (the other tasks cancelled). The progress counts items, not blocks: a user knows how many
        items the job has. It is tqdm's bar on a terminal and plain lines every few seconds off one
        (:mod:`labeldist.progress`)."""
        from distributed import as_completed

        from labeldist.progress import progress_bar

        futures = self.client.map(run_block_task, todo, pure=False, task=task, **kwargs)
        sizes = dict(zip(futures, (self.rows(b) for b in todo)))
        bar = progress_bar(sum(sizes.values()), desc, unit="item", unit_scale=True, enabled=self.progress)
        try:
            for future in as_completed(futures):
                future.result()  # re-raises a task's error here, with its traceback
                bar.update(sizes[future])
        except BaseException:
            self.client.cancel(futures)  # finished blocks are marked in the store; the rest is redone on resume
            raise
        finally:
            bar.close()


@contextlib.contextmanager
def block_job(
    distance: LabelDistance,
    labels: LabelSet,
    block_rows: int,
    *,
    client: Any | None,
    scheduler: str | None,
    n_workers: int | None,
    progress: bool | None,
) -> Iterator[BlockJob]:
    """The distance prepared for ``labels`` (:func:`prepare_distance`), then a :class:`BlockJob` over them on the
    job's client (:func:`job_client`)."""
    quiet = progress is False
    with job_client(client, scheduler, n_workers, quiet) as job:
        run_preparation(job, distance.preparation(labels), progress)
        prepare_distance(distance, labels, quiet)
        yield BlockJob(job, len(labels), block_rows, progress)


def run_preparation(client: Any, preparation: Preparation | None, progress: bool | None) -> None:
    """A distance's :class:`~labeldist.distances.base.Preparation` run as tasks on ``client``'s workers, with
    progress, its results handed to its ``finish`` in order; then every worker that cannot see what it left
    (``visible``) is named on the console, unless ``progress`` is False. Nothing to do for None."""
    if preparation is None:
        return
    from distributed import as_completed

    from labeldist.progress import progress_bar

    futures = client.map(
        run_prepare_task, list(preparation.items), pure=False, task=preparation.function, **preparation.kwargs
    )
    sizes = dict(zip(futures, preparation.sizes or [1] * len(futures)))
    bar = progress_bar(sum(sizes.values()), preparation.what, unit=preparation.unit, unit_scale=True, enabled=progress)
    try:
        for future in as_completed(futures):
            future.result()
            bar.update(sizes[future])
        results = client.gather(futures)
    except BaseException:
        client.cancel(futures)
        raise
    finally:
        bar.close()
    del futures, sizes
    preparation.finish(results)
    if preparation.visible is not None and progress is not False:
        seen = client.run(preparation.visible)
        blind = sorted(worker for worker, ok in seen.items() if not ok)
        if blind:
            tqdm.write(
                f"{len(blind)} of {len(seen)} workers ({', '.join(blind[:3])}) {preparation.unseen}", file=sys.stderr
            )


def run_prepare_task(item: Any, *, task: Callable[..., Any], **kwargs: Any) -> Any:
    """``task(item, **kwargs)`` on a worker, under the thread budget of one Dask thread (:func:`worker_threads`)."""
    with limited_threads(worker_threads()):
        return task(item, **kwargs)
