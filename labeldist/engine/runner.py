"""The Dask side of the engine: a cluster to run on, and row-block tasks run on it with progress.

Every job (:func:`labeldist.engine.precompute`, :func:`labeldist.engine.append`) runs the same way: the distance
prepared in this process (:func:`prepare_distance`), a client opened for the job (:func:`job_client`), then one
task per row block through :meth:`BlockJob.run`, which returns once every task has finished (the barrier between
the phases of the symmetric mode) and raises the first task's error. Each task runs under the thread budget of a
Dask thread (:func:`run_block_task`): the kernels never ask Dask themselves (:mod:`labeldist.core.threads`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

from labeldist.core.clusters import JOB_QUEUES, ClusterError, ClusterSpec, check_job_queue
from labeldist.core.progress import FirstTasks
from labeldist.core.reading import SMALL_FILE_BYTES, read_regular
from labeldist.core.threads import limited_threads, usable_cores
from labeldist.distances.base import LabelDistance, Preparation
from labeldist.engine.exchange import PairExchange
from labeldist.labels.base import LabelSet

log = logging.getLogger(__name__)

#: block tasks of one run submitted again after the cluster cancelled them (a worker lost mid-gather), in all
RESUBMITS = 8


@contextlib.contextmanager
def dask_client(
    scheduler: str | None = None,
    n_workers: int | None = None,
    *,
    spec: ClusterSpec | None = None,
    quiet: bool = False,
) -> Iterator[Any]:
    """A distributed Client on the cluster ``spec`` names (:class:`ClusterSpec`; or the one of ``scheduler`` and
    ``n_workers``: a scheduler's address, else a LocalCluster of that many single-threaded worker processes,
    default one per core), once the workers it asks for have joined (:func:`wait_for_workers`, which prints what it
    waits for unless ``quiet``). A job-queue cluster is closed, its jobs cancelled, when the client is."""
    with cluster_client(ClusterSpec.of(spec, scheduler, n_workers), quiet) as client:
        yield client


@contextlib.contextmanager
def cluster_client(spec: ClusterSpec, quiet: bool = False) -> Iterator[Any]:
    """:func:`dask_client` on a resolved ``spec``: what a job's :func:`job_client` opens."""
    from distributed import Client, LocalCluster

    # The scheduler and nannies log every connection at INFO; keep the command's output to progress and errors.
    logging.getLogger("distributed").setLevel(logging.WARNING)
    # --wait-timeout bounds the whole wait, whatever it waits for: the scheduler file, the scheduler, the workers
    deadline = time.monotonic() + spec.wait_timeout
    with contextlib.ExitStack() as stack:
        where, cluster = "", None
        if spec.scheduler:
            where = spec.scheduler
            client = stack.enter_context(connect(spec.scheduler, spec.scheduler, deadline, spec.wait_timeout, quiet))
        elif spec.scheduler_file:
            address = scheduler_address(spec.scheduler_file, spec.wait_timeout, deadline)
            where = f"{address} (from {spec.scheduler_file})"
            client = stack.enter_context(connect(address, where, deadline, spec.wait_timeout, quiet))
        elif spec.cluster:
            cluster = stack.enter_context(job_queue_cluster(spec.cluster))
            cluster.scale(spec.n_workers)
            where = f"{cluster.scheduler_address} ({spec.cluster} jobs)"
            client = stack.enter_context(Client(cluster))
        else:
            stack.enter_context(distributed_log_levels())  # restored last, once the cluster is closed
            cluster = stack.enter_context(
                LocalCluster(
                    n_workers=spec.n_workers or os.cpu_count() or 1,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=":0",  # a free port: concurrent clusters never fight over 8787
                    # a failed task is re-raised in this process with its traceback; the workers need not print it
                    silence_logs=logging.CRITICAL,
                )
            )
            where = "a LocalCluster"
            client = stack.enter_context(Client(cluster))
            stack.callback(quiet_shutdown)  # the first thing on leaving: the client's and cluster's close say no more
        if spec.workers_to_wait_for is not None:
            wait_for_workers(client, spec, where, cluster, quiet, deadline)
        yield client


#: distributed's loggers that carry its own level (distributed's logging configuration): ``distributed`` itself and
#: those set apart from it
DISTRIBUTED_LOGGERS = ("distributed", "distributed.client", "distributed.gc")


@contextlib.contextmanager
def distributed_log_levels() -> Iterator[None]:
    """distributed's loggers' levels (:data:`DISTRIBUTED_LOGGERS`) as they were, put back on leaving."""
    levels = {name: logging.getLogger(name).level for name in DISTRIBUTED_LOGGERS}
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def quiet_shutdown() -> None:
    """Only errors from distributed while this process's LocalCluster shuts down, the job over (done or failed,
    said by the job itself). A nanny gives its worker process 4 s to exit, then kills it, saying "Worker process
    still alive after 4.0 seconds, killing" as a WARNING: a worker with nothing left to do, slow to exit on a busy
    machine (its interpreter's teardown: numba, torch), which leaves nothing undone. Such lines made a successful
    precompute end with warnings."""
    for name in DISTRIBUTED_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


@contextlib.contextmanager
def connect(
    address: str,
    where: str,
    deadline: float | None = None,
    wait_timeout: float | None = None,
    quiet: bool = True,
) -> Iterator[Any]:
    """A Client on the scheduler at ``address``, tried until ``deadline`` (``time.monotonic()``; None: distributed's
    connect timeout alone); ClusterError naming ``where`` and the wait (``wait_timeout`` s) if it cannot be reached.

    The first try is bounded by distributed's connect timeout too (``distributed.comm.timeouts.connect``, 30 s),
    so that a mistyped address is said soon; if the wait has time left, a line says so (unless ``quiet``) and the
    job waits for the scheduler the rest of it, as a batch script starts it just before the job."""
    import dask
    from dask.utils import parse_timedelta
    from distributed import Client

    usual = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), "s")
    left = usual if deadline is None else deadline - time.monotonic()
    try:
        client = Client(address, timeout=max(min(left, usual), 0.001))
    except OSError as e:  # distributed's own TimeoutError is an OSError too
        left = 0 if deadline is None else deadline - time.monotonic()
        if left <= 0:
            raise _unreachable(where, e, wait_timeout) from e
        if not quiet:
            tqdm.write(f"cannot reach the Dask scheduler at {where} yet; waiting up to {left:.0f} s", file=sys.stderr)
        try:
            client = Client(address, timeout=left)
        except OSError as e:
            raise _unreachable(where, e, wait_timeout) from e
    # The timeout given is the client's default for later calls too (a scatter of the labels): put back the usual
    client._timeout = usual
    with client:
        yield client


def _unreachable(where: str, e: OSError, wait_timeout: float | None) -> ClusterError:
    waited = f" in {wait_timeout:g} s (--wait-timeout)" if wait_timeout is not None else ""
    return ClusterError(
        f"cannot reach the Dask scheduler at {where}{waited}: {e}; is it running, and is its port open to this host?"
    )


def scheduler_address(path: str, timeout: float, deadline: float | None = None) -> str:
    """The address in the scheduler file at ``path``, once a scheduler has written it: up to ``timeout`` seconds
    (or until ``deadline``, ``time.monotonic()``), as a batch script starts the scheduler just before the job;
    ClusterError if none comes, or it has no address. The file is read only if it is a regular file of at most
    :data:`~labeldist.core.reading.SMALL_FILE_BYTES` (a FIFO would block, ``/dev/zero`` never end)."""
    deadline = time.monotonic() + timeout if deadline is None else deadline
    while True:
        try:
            raw = read_regular(path, "scheduler file", limit=SMALL_FILE_BYTES)
            address = json.loads(raw).get("address")
            if isinstance(address, str) and address:
                return address
        except FileNotFoundError:
            pass
        except (ValueError, AttributeError, RecursionError):  # being written, or not a scheduler file
            pass
        except OSError as e:
            raise ClusterError(f"{path}: cannot read the scheduler file: {os_error_text(e)}") from e
        if time.monotonic() > deadline:
            what = "no scheduler file there" if not os.path.exists(path) else "not a Dask scheduler file (no address)"
            raise ClusterError(
                f"{path}: {what} after {timeout:g} s; start the scheduler with `dask scheduler --scheduler-file "
                f"{path}` (on storage this host shares), or wait longer with --wait-timeout"
            )
        time.sleep(0.2)


def os_error_text(e: OSError) -> str:
    return e.strerror or str(e)


@contextlib.contextmanager
def job_queue_cluster(name: str) -> Iterator[Any]:
    """dask-jobqueue's cluster for job queue ``name``, made from dask's ``jobqueue.NAME`` configuration alone,
    closed at the end (its jobs cancelled); ClusterError when that configuration cannot make one."""
    check_job_queue(name)
    import dask_jobqueue

    cls_name = JOB_QUEUES[name][0]
    try:
        cluster = getattr(dask_jobqueue, cls_name)()
    except (ValueError, TypeError) as e:  # no cores or memory configured, an unknown keyword
        raise ClusterError(
            f"dask-jobqueue cannot make a {cls_name} from dask's jobqueue.{name} configuration: {e}; set it in "
            f"~/.config/dask/jobqueue.yaml or by DASK_JOBQUEUE__{name.upper()}__CORES=... variables (docs/cluster.md)"
        ) from e
    with cluster:
        yield cluster


def wait_for_workers(
    client: Any, spec: ClusterSpec, where: str, cluster: Any | None, quiet: bool, deadline: float | None = None
) -> None:
    """Return once :attr:`ClusterSpec.workers_to_wait_for` workers have joined ``client``'s scheduler, saying in one
    line what it waits for unless ``quiet``; ClusterError after ``spec.wait_timeout`` seconds (at ``deadline``,
    ``time.monotonic()``, when given: the job's whole wait), naming how many came and what to check."""
    from distributed.exceptions import WorkerStartTimeoutError

    wanted = spec.workers_to_wait_for or 1
    joined = running_workers(client)
    started = time.perf_counter()
    left = spec.wait_timeout if deadline is None else max(deadline - time.monotonic(), 0.001)
    if joined < wanted and not quiet:
        tqdm.write(
            f"waiting for {wanted} Dask worker{'s' if wanted > 1 else ''} on {where}: {joined} joined; "
            f"up to {spec.wait_timeout:g} s",
            file=sys.stderr,
        )
    try:
        client.wait_for_workers(wanted, timeout=left)
    except (WorkerStartTimeoutError, TimeoutError) as e:
        joined = getattr(e, "available_workers", None)
        joined = running_workers(client) if joined is None else joined
        raise ClusterError(
            f"{joined} of {wanted} Dask workers joined {where} in {spec.wait_timeout:g} s; "
            f"{what_to_check(spec, cluster)}; or wait longer (--wait-timeout) or for fewer (--min-workers)"
        ) from e
    log.info("%d Dask workers joined %s in %.1f s", running_workers(client), where, time.perf_counter() - started)


def running_workers(client: Any) -> int:
    """The workers that have joined ``client``'s scheduler."""
    return len(client.scheduler_info().get("workers", {}))


def what_to_check(spec: ClusterSpec, cluster: Any | None) -> str:
    """Where to look when the workers did not come, for the route ``spec`` names."""
    if spec.cluster is None:
        return "check that the `dask worker` processes are running, reach the scheduler, and their logs"
    queue = JOB_QUEUES[spec.cluster][2]
    jobs = [str(job.job_id) for job in getattr(cluster, "workers", {}).values() if getattr(job, "job_id", None)]
    logs = getattr(getattr(cluster, "_dummy_job", None), "log_directory", None) or f"the job logs in {os.getcwd()}"
    states = slurm_job_states(jobs) if spec.cluster == "slurm" else None
    listed = f"jobs {', '.join(jobs) or 'none submitted'}; pending ones wait for resources"
    listed = f"jobs {states}" if states else listed
    return f"check the queue ({queue}: {listed}) and the workers' logs ({logs})"


def slurm_job_states(jobs: list[str]) -> str | None:
    """SLURM's state of each job in ``jobs``, with the reason a pending one waits (``10 RUNNING, 11 PENDING
    (Resources)``), as ``squeue`` says it; None when squeue cannot say within a few seconds."""
    if not jobs:
        return None
    try:
        listed = subprocess.run(
            ["squeue", "-h", "-j", ",".join(jobs), "-o", "%i %T %r"], capture_output=True, text=True, timeout=15
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    states = []
    for line in listed.stdout.splitlines():
        job, state, reason = (line.split(maxsplit=2) + ["", ""])[:3]
        states.append(f"{job} {state}" + (f" ({reason})" if state == "PENDING" and reason else ""))
    return ", ".join(states) or None


@contextlib.contextmanager
def job_client(client: Any | None, cluster: ClusterSpec, quiet: bool) -> Iterator[Any]:
    """The Client a job runs on: ``client`` if given (left open), else a new one from :func:`cluster_client` on
    ``cluster``, its workers waited for, closed with the job, its dashboard's address printed unless ``quiet``."""
    if client is not None:
        yield client
        return
    with cluster_client(cluster, quiet) as client:
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
    cores = usable_cores()
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

    def scatter(self, value: Any) -> Any:
        """``value`` (the labels, the distance) sent once to every worker, instead of pickled into every task: a
        future the tasks take. Each worker then holds one object for the whole job, so what a distance prepares
        and caches of the labels (caption sets' word lists, the sentence search's matrices) is made once per
        worker, not once per task (a task's own copy would rebuild it and leave it to the allocator)."""
        return self.client.scatter(value, broadcast=True)

    def rows(self, block: int) -> int:
        """The rows of row block ``block`` (the last may be short)."""
        return min(self.block_rows, self.n_items - block * self.block_rows)

    def run(
        self,
        task: Callable[..., int],
        todo: list[int],
        desc: str,
        *,
        work: Callable[[int], int] | None = None,
        unit: str = "item",
        loads: bool = True,
        exchange: PairExchange | None = None,
        **kwargs: Any,
    ) -> None:
        """Run ``task(block, **kwargs)`` for every block of ``todo``; return once all have finished, raising the
        first task error (the other tasks cancelled). The progress counts items, not blocks: a user knows how many
        items the job has; or, with ``work`` (a block's work in ``unit``: the pairs of an upper strip, fewer from
        one strip to the next), that, so that the rate and the time left follow the work done. It is tqdm's bar on
        a terminal and plain lines every few seconds off one (:mod:`labeldist.core.progress`).

        Each worker's first task also loads and compiles what the distance needs (numba kernels, a model: up to a
        minute), which later tasks do not: a rate measured over them would promise many times the time left. So
        the estimate starts once every worker has finished one task (:class:`FirstTasks`); until then a line
        says why there is none yet, and a line as each of those tasks ends. ``loads=False``: tasks that run no
        distance (phase 2 of the symmetric mode), estimated from the start.

        ``exchange``: tasks that share exact pairs (:mod:`labeldist.engine.exchange`); each returns ``(block, pairs
        it computed)`` and is given ``known=`` the pairs kept for its block; they are submitted a few at a time
        (:meth:`window`) instead of all at once."""
        from distributed import KilledWorker, as_completed
        from distributed.client import FutureCancelledError

        started_with = worker_addresses(self.client)
        size = work or self.rows
        workers = len(self.client.scheduler_info().get("workers", {})) or 1
        first = min(workers, len(todo)) if loads else 0
        bar = FirstTasks(sum(size(block) for block in todo), desc, unit, first, workers, self.progress)
        # the tasks not finished, each with its block and what it was given beyond kwargs (the exchange's pairs); a
        # finished one is dropped, so that the cluster drops its result
        blocks: dict[Any, int] = {}
        given: dict[Any, dict[str, Any]] = {}
        queue = list(todo)

        def submit(block: int, extra: dict[str, Any]) -> Any:
            future = self.client.submit(run_block_task, block, pure=False, task=task, **kwargs, **extra)
            blocks[future], given[future] = block, extra
            return future

        if exchange is None:
            futures = self.client.map(run_block_task, queue, pure=False, task=task, **kwargs)
            blocks.update(zip(futures, queue))
            given.update((future, {}) for future in futures)
            queue = []
        else:
            # a few tasks a worker thread at a time: a block starts once most of those before it have finished and
            # is given what they computed
            futures = [submit(block, {"known": exchange.take(block)}) for block in queue[: self.window()]]
            del queue[: len(futures)]
        resubmitted = 0
        try:
            pending = as_completed(futures)
            del futures
            for future in pending:
                try:
                    result = future.result()  # re-raises a task's error here, with its traceback
                except FutureCancelledError:
                    # cancelled by the scheduler, not by this job: a worker died while its result was being
                    # gathered ("Couldn't gather ... rescheduling", then "cancelled for reason: unknown"), or with
                    # the job's scattered inputs (its only copy). A block task is idempotent: submitted again, a
                    # bounded number of times; then the cluster cannot run the job, said in one line.
                    resubmitted += 1
                    block = blocks[future]
                    if resubmitted > RESUBMITS:
                        raise cannot_run(
                            self.client,
                            block,
                            started_with,
                            f"its task was cancelled by the cluster after {RESUBMITS} tasks were submitted again",
                        ) from None
                    log.warning("block %d: its task was cancelled by the cluster; submitting it again", block)
                    pending.add(submit(block, given.pop(future)))
                    del blocks[future]
                    continue
                except KilledWorker as e:  # the scheduler's own bound: every worker that ran the task died
                    what = f"{e.allowed_failures + 1} workers died running its task (the last: {e.last_worker.address})"
                    raise cannot_run(self.client, blocks[future], started_with, what) from None
                bar.update(size(blocks.pop(future)))
                del given[future]
                if exchange is not None:
                    exchange.add(result[1])
                    if queue:
                        block = queue.pop(0)
                        pending.add(submit(block, {"known": exchange.take(block)}))
                del future, result
        except BaseException:
            self.client.cancel(list(blocks))  # finished blocks are marked in the store; the rest is redone on resume
            raise
        finally:
            bar.close()

    def window(self) -> int:
        """How many tasks a job that passes exact pairs between blocks keeps submitted: two a worker thread."""
        return max(2, 2 * sum(self.client.nthreads().values()))


def worker_addresses(client: Any) -> set[str]:
    """The addresses of the workers that have joined ``client``'s scheduler now."""
    return set(client.scheduler_info(n_workers=-1).get("workers", {}))


def cannot_run(client: Any, block: int, started_with: set[str], what: str) -> ClusterError:
    """The one line of a job its cluster cannot run: the block that failed and ``what`` happened to it, the workers
    lost since the job began (of ``started_with``), those left, and what to do."""
    try:
        now = worker_addresses(client)
    except Exception:  # noqa: BLE001 - the scheduler gone too: the line says what is known
        now = set()
    lost = sorted(started_with - now)
    named = f" ({', '.join(lost[:3])}{', ...' if len(lost) > 3 else ''})" if lost else ""
    return ClusterError(
        f"block {block}: {what}; the cluster lost {len(lost)} of the {len(started_with)} "
        f"worker{'s' * (len(started_with) != 1)} the job began with{named} and has {len(now)} now: the blocks "
        "done are kept in the store; run the same command again once the cluster has workers that stay (a worker "
        "that dies may lack memory: see its log), and it resumes at the first block not done"
    )


@contextlib.contextmanager
def block_job(
    distance: LabelDistance,
    labels: LabelSet,
    block_rows: int,
    *,
    client: Any | None,
    cluster: ClusterSpec,
    progress: bool | None,
) -> Iterator[BlockJob]:
    """The distance prepared for ``labels`` (:func:`prepare_distance`), then a :class:`BlockJob` over them on the
    job's client (:func:`job_client`)."""
    quiet = progress is False
    with job_client(client, cluster, quiet) as job:
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

    futures = client.map(
        run_prepare_task, list(preparation.items), pure=False, task=preparation.function, **preparation.kwargs
    )
    sizes = dict(zip(futures, preparation.sizes or [1] * len(futures)))
    workers = len(client.scheduler_info().get("workers", {})) or 1
    # each worker's first task loads the model: the time left is estimated from the tasks after those
    bar = FirstTasks(
        sum(sizes.values()), preparation.what, preparation.unit, min(workers, len(futures)), workers, progress
    )
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
