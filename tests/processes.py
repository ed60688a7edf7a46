"""Real processes for the system tests: a Dask scheduler and workers, ``labeldist serve``, labeldist commands.

Every process binds 127.0.0.1 and starts in its own session, so that a test can kill it with everything it
started (a worker's nanny and its worker process, uvicorn's workers) in one signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
#: the example plugin kind (``angles``)
EXAMPLE_PLUGIN = REPO / "examples" / "labeldist-angles"
#: a busy 2-core machine can take a while to import Dask or the app
STARTUP_TIMEOUT = 120.0


def install_example_plugin(target: Path) -> Path:
    """pip-install the example plugin, without its dependencies or the network, into the folder ``target`` (to be
    put on a ``sys.path`` or ``PYTHONPATH``), as a user's ``pip install`` would: its entry point included."""
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*command, "--target", str(target), str(EXAMPLE_PLUGIN)], check=True, capture_output=True)
    return target


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(args: list[str], *, cwd: Path = REPO, output: int = subprocess.PIPE, **env: str) -> subprocess.Popen:
    """A Python module run in a new session with the test's interpreter, in ``cwd``, its output captured (text;
    ``output=subprocess.DEVNULL`` for a process whose output nobody reads, which would otherwise fill the pipe)."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("LABELDIST_")}
    return subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=cwd,
        env={**inherited, **env},
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Signal the process and everything in its session; wait for it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)


def labeldist(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run a labeldist command to its end."""
    return subprocess.run(
        [sys.executable, "-m", "labeldist.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def wait_healthy(proc: subprocess.Popen, url: str, timeout: float = STARTUP_TIMEOUT) -> None:
    """Until ``GET url/healthz`` answers 200; RuntimeError if the server process exits first."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            output = proc.stdout.read() if proc.stdout else ""
            raise RuntimeError(f"server exited with {proc.returncode}:\n{output}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/healthz", timeout=2.0).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"server at {url} not healthy after {timeout} s")
        time.sleep(0.2)


class Cluster:
    """A real ``dask scheduler`` and ``dask worker`` processes (one thread each, with a nanny) on 127.0.0.1."""

    def __init__(self, n_workers: int = 2) -> None:
        port = free_port()
        self.address = f"tcp://127.0.0.1:{port}"
        self.scheduler = spawn(
            ["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"]
        )
        self.workers: list[subprocess.Popen] = []
        try:
            for _ in range(n_workers):
                self.start_worker()
            self.wait_for_workers(n_workers)
        except BaseException:
            self.close()
            raise

    def start_worker(self) -> subprocess.Popen:
        proc = spawn(
            [
                "distributed.cli.dask_worker",
                self.address,
                "--host",
                "127.0.0.1",
                "--nworkers",
                "1",
                "--nthreads",
                "1",
                "--no-dashboard",
                "--death-timeout",
                "60",
            ]
        )
        self.workers.append(proc)
        return proc

    def n_workers(self) -> int:
        from distributed import Client

        with Client(self.address, timeout=30) as client:
            return len(client.scheduler_info(n_workers=-1)["workers"])

    def wait_for_workers(self, n: int) -> None:
        from distributed import Client

        with Client(self.address, timeout=STARTUP_TIMEOUT) as client:
            client.wait_for_workers(n, timeout=STARTUP_TIMEOUT)

    def kill_worker(self, i: int) -> None:
        kill(self.workers[i])

    def close(self) -> None:
        for proc in [*self.workers, self.scheduler]:
            if proc.poll() is None:
                kill(proc, signal.SIGTERM)


class Service:
    """``labeldist serve`` over a stores folder on a fixed 127.0.0.1 port; restartable on the same port."""

    def __init__(self, stores: Path, port: int | None = None, **env: str) -> None:
        self.stores, self.port, self.env = stores, port or free_port(), {"LABELDIST_ACCESS_LOG": "false", **env}
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Service:
        self.proc = spawn(
            ["labeldist.cli", "serve", "--stores", str(self.stores), "--host", "127.0.0.1", "--port", str(self.port)],
            **self.env,
        )
        wait_healthy(self.proc, self.url)
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None:
            kill(self.proc, sig)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill(signal.SIGTERM)

    def __enter__(self) -> Service:
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
