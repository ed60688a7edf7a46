"""Where a job's Dask tasks run: :class:`ClusterSpec`, the one rule for the options ``precompute`` and ``append``
share (``--scheduler``, ``--scheduler-file``, ``--cluster``, ``--workers``, ``--min-workers``, ``--wait-timeout``).

Foundation: no labeldist imports and nothing heavy, so that the command line can check these options before it
reads a label file. :mod:`labeldist.engine.runner` opens the cluster a spec names; docs/cluster.md is the user's
side of it.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import shutil
from dataclasses import dataclass
from typing import Any

from labeldist.core.options import positive_float, worker_count
from labeldist.errors import LabeldistError, UsageError


def check_workers(n_workers: int | None) -> None:
    """ValueError unless ``n_workers`` is None (one per core) or at least 1."""
    if n_workers is not None and n_workers < 1:
        raise UsageError(f"n_workers must be at least 1 (or None for one per core), got {n_workers}")


#: the job queues ``--cluster`` names, through dask-jobqueue: its cluster class, the command that submits a job
#: (which must be on PATH) and the one that lists the queue (named when the workers do not come)
JOB_QUEUES = {
    "slurm": ("SLURMCluster", "sbatch", "squeue --me"),
    "pbs": ("PBSCluster", "qsub", "qstat -u $USER"),
    "sge": ("SGECluster", "qsub", "qstat"),
    "lsf": ("LSFCluster", "bsub", "bjobs"),
}
#: seconds a job waits for its workers by default: a job queue starts them minutes late on a busy cluster
DEFAULT_WAIT_TIMEOUT = 600.0


class ClusterError(LabeldistError, RuntimeError):
    """The cluster cannot run the job: its job queue cannot be used here, its scheduler cannot be reached, or its
    workers did not join in time. The message says what to check, in one line."""


@dataclass(frozen=True)
class ClusterSpec:
    """Where a job's tasks run, the one rule for every route (checked on creation, :meth:`check`):

    - nothing: a LocalCluster of ``n_workers`` single-threaded worker processes (default: one per core);
    - ``scheduler``: a running Dask scheduler's address (``tcp://host:8786``), its workers started by others;
    - ``scheduler_file``: the JSON file a scheduler wrote (``dask scheduler --scheduler-file``, dask-mpi), waited
      for up to ``wait_timeout`` seconds, as a batch script starts the scheduler just before the job;
    - ``cluster``: a job queue (:data:`JOB_QUEUES`) through dask-jobqueue, configured by dask's own ``jobqueue``
      configuration (``~/.config/dask/jobqueue.yaml``, ``DASK_JOBQUEUE__SLURM__CORES=...``), scaled to
      ``n_workers`` worker processes and closed (its jobs cancelled) with the job.

    Before any task is submitted the job waits, up to ``wait_timeout`` seconds, until ``min_workers`` workers have
    joined (:attr:`workers_to_wait_for`: by default all ``n_workers`` of a job queue, 1 of a scheduler's; a
    LocalCluster starts its own before the job begins)."""

    scheduler: str | None = None
    scheduler_file: str | None = None
    cluster: str | None = None
    n_workers: int | None = None
    min_workers: int | None = None
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """ValueError for options that cannot make a cluster, the first wrong one named; ClusterError for a job
        queue this machine cannot use (dask-jobqueue missing, its submit command not on PATH)."""
        given = [flag for flag, value in self._routes() if value]
        if len(given) > 1:
            raise UsageError(
                f"{' and '.join(given)} exclude each other: give one of --scheduler, --scheduler-file, --cluster"
            )
        check_workers(self.n_workers)
        if self.min_workers is not None and self.min_workers < 1:
            raise UsageError(f"min_workers must be at least 1, got {self.min_workers}")
        if not (self.wait_timeout > 0 and math.isfinite(self.wait_timeout)):
            raise UsageError(f"wait_timeout must be a number of seconds above 0, got {self.wait_timeout}")
        if (self.scheduler or self.scheduler_file) and self.n_workers is not None:
            raise UsageError(
                f"{given[0]} names a cluster whose workers are started elsewhere: --workers (n_workers) starts "
                "workers only on a LocalCluster or a job queue (--cluster); --min-workers waits for some"
            )
        if self.cluster is not None:
            if self.cluster not in JOB_QUEUES:
                raise UsageError(f"cluster must be one of {', '.join(JOB_QUEUES)}, got {self.cluster!r}")
            if self.n_workers is None:
                raise UsageError(f"--cluster {self.cluster} needs --workers N: the worker processes to ask it for")
            check_job_queue(self.cluster)
        if self.min_workers is not None and not (self.scheduler or self.scheduler_file):
            most = self.n_workers or os.cpu_count() or 1  # a LocalCluster's default: one per core
            if self.min_workers > most:
                raise UsageError(
                    f"--min-workers {self.min_workers} is more than the {most} workers this job starts (--workers)"
                )

    def _routes(self) -> list[tuple[str, Any]]:
        return [("--scheduler", self.scheduler), ("--scheduler-file", self.scheduler_file), ("--cluster", self.cluster)]

    @property
    def workers_to_wait_for(self) -> int | None:
        """The workers the job waits for before it submits a task: ``min_workers``, else all those a job queue was
        asked for, else 1 on a scheduler; None on a LocalCluster without ``min_workers`` (it has started them)."""
        if self.min_workers is not None:
            return self.min_workers
        if self.cluster is not None:
            return self.n_workers
        return 1 if self.scheduler or self.scheduler_file else None

    @classmethod
    def of(cls, cluster: ClusterSpec | None, scheduler: str | None, n_workers: int | None) -> ClusterSpec:
        """The spec of a job given ``cluster=`` or the older ``scheduler=``/``n_workers=`` keywords, not both."""
        if cluster is None:
            return cls(scheduler=scheduler, n_workers=n_workers)
        if scheduler is not None or n_workers is not None:
            raise UsageError("give the cluster as cluster=ClusterSpec(...) or as scheduler=/n_workers=, not both")
        return cluster


def check_job_queue(name: str) -> None:
    """ClusterError unless dask-jobqueue is installed and job queue ``name``'s submit command is on PATH."""
    submit = JOB_QUEUES[name][1]
    if importlib.util.find_spec("dask_jobqueue") is None:
        raise ClusterError(
            f"--cluster {name} needs the dask-jobqueue package, which is not installed: pip install dask-jobqueue"
        )
    if shutil.which(submit) is None:
        raise ClusterError(
            f"--cluster {name} submits the workers with {submit}, which is not on PATH: run the job on a host of "
            f"the {name} cluster (a login node), or pass --scheduler / --scheduler-file of a running scheduler"
        )


# ---------------------------------------------------------------- the commands' options
def add_cluster_options(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The options of where a job's tasks run, shared by ``precompute``, ``append`` and ``split``: one of a
    LocalCluster (the default), ``--scheduler``, ``--scheduler-file`` or ``--cluster``, and the workers to start and
    wait for (:class:`ClusterSpec`, which :func:`cluster_spec` makes of them; docs/cluster.md)."""
    p.add_argument(
        "--scheduler",
        help="address of a running Dask scheduler, e.g. tcp://host:8786 (default: a LocalCluster on this machine)",
    )
    p.add_argument(
        "--scheduler-file",
        metavar="PATH",
        help="the JSON file a running Dask scheduler wrote (dask scheduler --scheduler-file PATH, dask-mpi), "
        "waited for up to --wait-timeout",
    )
    p.add_argument(
        "--cluster",
        choices=list(JOB_QUEUES),
        help="start --workers Dask workers as jobs of this job queue (dask-jobqueue, configured by dask's jobqueue "
        "configuration: ~/.config/dask/jobqueue.yaml), cancelled at the end",
    )
    p.add_argument(
        "--workers",
        type=worker_count,
        help="worker processes of the LocalCluster (default: one per core), or to ask --cluster's job queue for",
    )
    p.add_argument(
        "--min-workers",
        type=worker_count,
        metavar="N",
        help="workers to wait for before the first task (default: all of --cluster's, 1 of a scheduler's)",
    )
    p.add_argument(
        "--wait-timeout",
        type=positive_float,
        default=f"{DEFAULT_WAIT_TIMEOUT:g}",  # a string goes through type=: --help shows 600
        metavar="SECONDS",
        help="how long to wait for the scheduler (its file, its address) and the workers, in all; then the job stops, "
        "saying what did not come (default: %(default)s)",
    )


def cluster_spec(args: argparse.Namespace) -> ClusterSpec:
    """The :class:`ClusterSpec` of the options :func:`add_cluster_options` added, checked: a
    ValueError or ClusterError (one line) before the label file is read."""
    return ClusterSpec(
        scheduler=args.scheduler,
        scheduler_file=args.scheduler_file,
        cluster=args.cluster,
        n_workers=args.workers,
        min_workers=args.min_workers,
        wait_timeout=args.wait_timeout,
    )
