"""The engine through a real job queue: a one-node SLURM (``../shared/tools/slurm-setup``, Debian's slurm-wlm and
munge started by hand) on this machine.

- ``labeldist precompute --cluster slurm --workers 2``: dask-jobqueue's SLURMCluster, configured by dask's own
  ``jobqueue`` configuration (here ``DASK_JOBQUEUE__SLURM__*`` variables, as a user's jobqueue.yaml would), submits
  two worker jobs with ``sbatch``; the job waits for both, then runs. Then ``labeldist append --cluster slurm``.
  Both stores equal, array for array and manifest for manifest (``tools/compare_stores.py``), the same commands
  run on a LocalCluster. The worker jobs are cancelled at the end: the queue empties.
- ``examples/slurm/precompute.sbatch``, submitted with ``sbatch --wait``: a scheduler and one worker per task
  started inside the allocation, the client on ``--scheduler-file``; its store equals the local one.

The module's fixture runs the setup script (idempotent; as root, which CI is) and skips, saying why, where it is
missing, where it fails, or where ``sinfo`` is absent afterwards. It stops the daemons afterwards only if it
started them, by their PIDs. The jobs ask for what the node has (:func:`layout`): two single-core jobs where it
has two cores, else one job of two worker processes (a 1-core, 2-thread machine: SLURM gives a job whole cores),
512 MiB a worker. A failure says what SLURM said: the node, every job's state and why it waits, the logs' tails.
The measured times (the precompute from submission to its end, the workers' joining) are printed: run with ``-s``
to see them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import DATA

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT.parent / "shared" / "tools" / "slurm-setup"
SBATCH_SCRIPT = ROOT / "examples" / "slurm" / "precompute.sbatch"
CSV = DATA / "mpii" / "mpii_valid_2958.csv"
JOB = ["--k", "10", "--block-rows", "50", "--normalization", "center_scale"]
#: generous: a loaded 2-core machine, a job queue that starts its workers late
TIMEOUT = 900
#: how long a job waits for its workers: minutes on a loaded machine, seconds (2 s measured here) when it is idle
WAIT = 300
#: a worker's memory: a Dask worker with labeldist's pose kind imported holds about 130 MB
WORKER_MIB = 512

pytestmark = pytest.mark.slow


def _daemons() -> dict[str, set[int]]:
    """The PIDs of slurmctld, slurmd (from their pid files) and munged running now."""
    found: dict[str, set[int]] = {}
    for name in ("slurmctld", "slurmd"):
        try:
            pid = int(Path(f"/run/{name}.pid").read_text().strip())
            os.kill(pid, 0)
            found[name] = {pid}
        except (OSError, ValueError):
            found[name] = set()
    munge = subprocess.run(["pgrep", "-u", "munge", "-x", "munged"], capture_output=True, text=True)
    found["munged"] = {int(p) for p in munge.stdout.split()}
    return found


@pytest.fixture(scope="module")
def slurm():
    """A one-node SLURM, started by ``../shared/tools/slurm-setup`` unless it runs already."""
    if not SETUP.is_file():
        pytest.skip(f"no {SETUP}: the one-node SLURM cannot be set up here")
    if os.geteuid() != 0:
        pytest.skip(
            f"{SETUP.name} installs and starts slurm-wlm and munge as root; this test runs as uid {os.geteuid()}"
        )
    before = _daemons()
    setup = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=TIMEOUT)
    if setup.returncode != 0:
        tail = " | ".join((setup.stdout + setup.stderr).strip().splitlines()[-3:])
        pytest.skip(f"{SETUP.name} could not start SLURM (exit {setup.returncode}): {tail}")
    for command in ("sinfo", "sbatch", "squeue", "scontrol", "scancel"):
        if shutil.which(command) is None:
            pytest.skip(f"{command} is not on PATH after {SETUP.name}: no SLURM to submit to")
    yield
    started = {name: pids - before[name] for name, pids in _daemons().items()}
    for name in ("slurmd", "slurmctld", "munged"):  # only what this fixture started, by PID
        for pid in started[name]:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """400 poses to precompute and 60 more to append, as files every process reads at the same path."""
    root = tmp_path_factory.mktemp("slurm-inputs")
    lines = CSV.read_text().splitlines()
    (root / "first.csv").write_text("\n".join([lines[0], *lines[1:401]]) + "\n")
    (root / "more.csv").write_text("\n".join([lines[0], *lines[401:461]]) + "\n")
    return {"first": root / "first.csv", "more": root / "more.csv"}


def _labeldist(*args: object, env: dict[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("LABELDIST_", "DASK_"))}
    return subprocess.run(
        [sys.executable, "-m", "labeldist.cli", *map(str, args)],
        cwd=cwd,
        env={**inherited, **(env or {})},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


@pytest.fixture(scope="module")
def local(inputs, tmp_path_factory) -> dict[str, Path]:
    """The same jobs on a LocalCluster: a folder holding the precomputed store, one holding it appended to."""
    root = tmp_path_factory.mktemp("slurm-local")
    made = {"precompute": root / "precompute", "append": root / "append"}
    for folder in made.values():
        done = _labeldist("precompute", "pose", inputs["first"], "--out", folder / "poses", "--workers", "1", *JOB)
        assert done.returncode == 0, done.stderr
    grown = _labeldist("append", made["append"] / "poses", inputs["more"], "--workers", "1", "--no-progress")
    assert grown.returncode == 0, grown.stderr
    return made


def _same_stores(a: Path, b: Path) -> None:
    """Every array of the stores of folders ``a`` and ``b`` equal, and their manifests but for times."""
    compared = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "compare_stores.py"), str(a), str(b)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert compared.returncode == 0, compared.stdout + compared.stderr


def _node() -> dict[str, str]:
    """The one node as ``scontrol show node`` says it: ``CPUTot``, ``ThreadsPerCore``, ``RealMemory``, ..."""
    shown = subprocess.run(["scontrol", "show", "node", "-o"], capture_output=True, text=True, timeout=60)
    line = shown.stdout.splitlines()[0] if shown.stdout.strip() else ""
    return dict(field.split("=", 1) for field in line.split() if "=" in field)


def _what_slurm_says(*logs: Path) -> str:
    """For a failure's message: the node, the queue with each job's state and reason, the last lines of ``logs``
    (files, or folders of them)."""
    node = _node()
    shown = {key: node.get(key) for key in ("State", "CPUTot", "CPUAlloc", "ThreadsPerCore", "RealMemory", "AllocMem")}
    queue = subprocess.run(["squeue", "-h", "-o", "%i %j %T %r"], capture_output=True, text=True, timeout=60)
    tails = []
    for path in logs:
        for file in sorted(path.rglob("*") if path.is_dir() else [path]):
            if file.is_file():
                tails.append(f"--- {file.name}:\n" + "\n".join(file.read_text(errors="replace").splitlines()[-15:]))
    return f"\nnode: {shown}\nqueue: {queue.stdout.strip() or 'empty'}\n" + "\n".join(tails)


@pytest.fixture(scope="module")
def layout(slurm) -> dict[str, int]:
    """Two workers as the node can hold them at once: ``processes`` worker processes a job, ``cores`` a job.

    Two single-core jobs where the node has two cores; else one job of two processes (``CR_Core`` gives a job whole
    cores, so two single-core jobs on one core with two threads wait for each other). Skips where the node has
    under 2 CPUs or 2 workers' memory, or where other jobs hold it past a generous wait."""
    node = _node()
    cpus, threads = int(node.get("CPUTot", 0)), max(1, int(node.get("ThreadsPerCore", 1)))
    memory = int(node.get("RealMemory", 0))
    if cpus < 2 or memory < 2 * WORKER_MIB:
        pytest.skip(f"two workers need 2 CPUs and {2 * WORKER_MIB} MiB; the one-node SLURM has {cpus}, {memory} MiB")
    deadline = time.monotonic() + TIMEOUT
    while int(_node().get("CPUAlloc", 0)) > 0:  # another's jobs: ours would wait behind them
        if time.monotonic() > deadline:
            pytest.skip(f"the one-node SLURM stays busy with other jobs: {_what_slurm_says()}")
        time.sleep(2)
    processes = 1 if cpus // threads >= 2 else 2
    return {"processes": processes, "cores": processes * threads if processes == 2 else 1}


def _jobqueue_env(tmp: Path, layout: dict[str, int]) -> dict[str, str]:
    """dask's jobqueue.slurm configuration for the test, as variables (a user's ~/.config/dask/jobqueue.yaml)."""
    config = {
        "CORES": str(layout["cores"]),
        "PROCESSES": str(layout["processes"]),
        "MEMORY": f"{WORKER_MIB * layout['processes']}MiB",
        "PYTHON": sys.executable,  # the venv's: labeldist is installed there (editable)
        "LOCAL_DIRECTORY": str(tmp / "worker-space"),
        "LOG_DIRECTORY": str(tmp / "worker-logs"),
        "WALLTIME": "00:30:00",
        "SCHEDULER_OPTIONS": "{'dashboard_address': ':0'}",
    }
    return {f"DASK_JOBQUEUE__SLURM__{key}": value for key, value in config.items()}


def _queue_empties(job_name: str) -> bool:
    """Whether no job named ``job_name`` is left in the queue, waiting up to a generous timeout for cancelled ones
    to leave it."""
    deadline = time.monotonic() + 120
    while True:
        left = subprocess.run(["squeue", "-h", "-n", job_name, "-o", "%i %T"], capture_output=True, text=True)
        if not left.stdout.strip():
            return True
        if time.monotonic() > deadline:
            print(f"left in the queue: {left.stdout.strip()}")
            return False
        time.sleep(1)


def _joined(log: str) -> str:
    found = re.search(r"(\d+) Dask workers joined .* in ([\d.]+) s", log)
    return f"{found.group(1)} workers joined in {found.group(2)} s" if found else "no join time logged"


def test_precompute_and_append_through_slurm_equal_local_builds(layout, inputs, local, tmp_path) -> None:
    env = _jobqueue_env(tmp_path, layout)
    stores, wait = tmp_path / "slurm", ["--cluster", "slurm", "--workers", "2", "--wait-timeout", str(WAIT)]
    started = time.perf_counter()
    made = _labeldist(
        "-v", "precompute", "pose", inputs["first"], "--out", stores / "poses", *wait, *JOB, env=env, cwd=tmp_path
    )  # fmt: skip
    took = time.perf_counter() - started
    assert made.returncode == 0, made.stdout + made.stderr + _what_slurm_says(tmp_path / "worker-logs")
    assert re.search(
        rf"^waiting for 2 Dask workers on tcp://\S+ \(slurm jobs\): \d joined; up to {WAIT} s$", made.stderr, re.M
    )
    print(f"\nSLURM precompute of 400 poses, submit to done: {took:.1f} s; {_joined(made.stderr)}")
    _same_stores(stores, local["precompute"])

    started = time.perf_counter()
    grown = _labeldist(
        "-v", "append", stores / "poses", inputs["more"], *wait, "--no-progress", env=env, cwd=tmp_path
    )  # fmt: skip
    took = time.perf_counter() - started
    assert grown.returncode == 0, grown.stdout + grown.stderr + _what_slurm_says(tmp_path / "worker-logs")
    assert "waiting for" not in grown.stderr  # --no-progress: quiet
    print(f"SLURM append of 60 poses, submit to done: {took:.1f} s; {_joined(grown.stderr)}")
    _same_stores(stores, local["append"])
    assert _queue_empties("dask-worker"), "the worker jobs were not cancelled at the end of the job"


def test_split_of_a_knn_only_store_through_slurm_equals_a_local_split(layout, inputs, tmp_path) -> None:
    """``labeldist split --cluster slurm``: the options where precompute's and append's tasks run are split's too,
    and the parts of a kNN-only store (precomputed from their labels) equal those of a split on a LocalCluster."""
    source = tmp_path / "knn-only"
    made = _labeldist("precompute", "pose", inputs["first"], "--out", source, "--knn-only", "--workers", "1", *JOB)
    assert made.returncode == 0, made.stderr
    here = _labeldist("split", source, "--out", tmp_path / "local", "--seed", "3", "--workers", "1")
    assert here.returncode == 0, here.stderr
    env = _jobqueue_env(tmp_path, layout)
    wait = ["--cluster", "slurm", "--workers", "2", "--wait-timeout", str(WAIT)]
    there = _labeldist("split", source, "--out", tmp_path / "slurm", "--seed", "3", *wait, env=env, cwd=tmp_path)
    assert there.returncode == 0, there.stdout + there.stderr + _what_slurm_says(tmp_path / "worker-logs")
    _same_stores(tmp_path / "slurm", tmp_path / "local")  # the train and test stores
    slurm_split, local_split = (
        json.loads((tmp_path / where / "split.json").read_text()) for where in ("slurm", "local")
    )
    assert {k: v for k, v in slurm_split.items() if k != "stores"} == {
        k: v for k, v in local_split.items() if k != "stores"
    }
    assert _queue_empties("dask-worker"), "the worker jobs were not cancelled at the end of the job"


def test_the_example_batch_script_makes_the_same_store(layout, inputs, local, tmp_path) -> None:
    out = tmp_path / "sbatch" / "poses"
    command = [
        "sbatch", "--wait", "--ntasks=2", f"--mem-per-cpu={WORKER_MIB}M", "--time=00:30:00",
        f"--output={tmp_path}/precompute-%j.out", str(SBATCH_SCRIPT),
        "pose", str(inputs["first"]), "--out", str(out), *JOB, "--wait-timeout", str(WAIT),
    ]  # fmt: skip
    started = time.perf_counter()
    try:  # the scheduler file goes to the submission folder
        submitted = subprocess.run(
            command, cwd=tmp_path, env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True,
            timeout=TIMEOUT,
        )  # fmt: skip
    except subprocess.TimeoutExpired as e:
        said = _what_slurm_says(*tmp_path.glob("precompute-*.out"))
        job = re.search(r"Submitted batch job (\d+)", (e.stdout or b"").decode())
        if job:
            subprocess.run(["scancel", job.group(1)], timeout=60)
        pytest.fail(f"sbatch --wait did not end in {TIMEOUT} s; cancelled job {job and job.group(1)}{said}")
    took = time.perf_counter() - started
    logs = "\n".join(p.read_text() for p in tmp_path.glob("precompute-*.out"))
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr + logs + _what_slurm_says()
    assert f"{out}: complete, 400 items" in logs
    print(f"\nsbatch --wait {SBATCH_SCRIPT.name} (400 poses, 2 tasks), submit to done: {took:.1f} s")
    _same_stores(out.parent, local["precompute"])
    assert not list(tmp_path.glob("dask-scheduler-*.json")), "the batch script leaves no scheduler file behind"


def test_workers_the_node_cannot_hold_are_named_pending_and_cancelled(layout, inputs, tmp_path) -> None:
    whole = int(_node()["CPUTot"])  # two jobs of every CPU the node has: the second waits for the first
    env = _jobqueue_env(tmp_path, {"cores": whole, "processes": 1})
    made = _labeldist(
        "precompute", "pose", inputs["first"], "--out", tmp_path / "poses", "--cluster", "slurm", "--workers", "2",
        "--wait-timeout", "15", *JOB, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 2, made.stdout + made.stderr
    error = made.stderr.splitlines()[-1]
    assert re.search(r"Dask workers joined .* in 15 s; check the queue \(squeue --me: jobs .*\d+ PENDING \(", error)
    assert _queue_empties("dask-worker"), "the worker jobs were not cancelled when the job gave up"
