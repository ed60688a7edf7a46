"""Shared by the benchmark scripts that measure through a live service (run as ``python benchmarks/<script>.py``):
``labeldist serve`` started on a free port of 127.0.0.1, and the CPU time of a process tree."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def start_service(stores: str | Path, timeout: float = 120) -> tuple[subprocess.Popen, str]:
    """``labeldist serve --stores STORES`` on a free port (access log off); the process and its URL once
    ``/healthz`` answers. Its stderr goes to a temporary file (a pipe nobody reads could fill and stall it), whose
    end is shown if it exits or does not come up."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "labeldist.cli",
            "serve",
            "--stores",
            str(stores),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=REPO,
        env={**os.environ, "LABELDIST_ACCESS_LOG": "false"},
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise SystemExit(f"labeldist serve exited with {proc.returncode}: {log.read()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.3)
    proc.terminate()
    raise SystemExit(f"labeldist serve at {url} did not come up in {timeout:.0f} s")


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` and every process under it."""
    import psutil

    root, total = psutil.Process(pid), 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:  # a process that went away
            pass
    return total
