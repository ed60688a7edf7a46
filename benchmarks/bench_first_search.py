"""The first search of a sentence store, the long call a user waits for: ``labeldist serve`` without and with
``--warm`` (the baseline beside it, in the same run), and ``LocalSource`` in a fresh process without and with
``warm()``. Each figure is the first search by a new sentence (one the store does not hold), then a second one.

Build the store first (3,500 COCO captions, the packaged bi-encoder), then run:

    .venv/bin/labeldist precompute sentences data/coco/coco_karpathy_test.json --limit 3500 \\
        --out /tmp/first-search/stores/s --workers 1 --no-progress
    .venv/bin/python benchmarks/bench_first_search.py --root /tmp/first-search
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

QUERIES = ("A dog runs on the beach.", "Two men play frisbee in a park.")
#: one search in a fresh process, timed there: (labels, warm seconds or None, first search, second search)
LOCAL = """
import sys, time
from labeldist.client import LocalSource
src = LocalSource(sys.argv[1])
warm = src.warm("s")["s"] if sys.argv[2] == "warm" else None
times = []
for q in sys.argv[3:]:
    t = time.perf_counter(); src.search("s", q, k=5); times.append(time.perf_counter() - t)
print(warm, *times)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(stores: Path, warm: bool) -> str:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "labeldist.cli", "serve", "--stores", str(stores), "--port", str(port)]
    started = time.perf_counter()
    proc = subprocess.Popen(
        command + (["--warm"] if warm else []), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        healthy = ready = None
        while ready is None:
            try:
                if healthy is None and httpx.get(f"{url}/healthz").status_code == 200:
                    healthy = time.perf_counter() - started
                if healthy is not None and httpx.get(f"{url}/readyz").status_code == 200:
                    ready = time.perf_counter() - started
            except httpx.TransportError:
                pass
            time.sleep(0.05)  # a benchmark's poll of the server's state
        times = []
        for query in QUERIES:
            t = time.perf_counter()
            answer = httpx.post(f"{url}/v1/stores/s/search", json={"label": query, "k": 5}, timeout=300)
            times.append(time.perf_counter() - t)
            answer.raise_for_status()
    finally:
        proc.terminate()
        proc.wait()
    return (
        f"serve {'--warm' if warm else '(cold)':7}: /healthz {healthy:5.1f} s, /readyz {ready:5.1f} s; first search "
        f"{times[0] * 1000:7.0f} ms, second {times[1] * 1000:5.0f} ms"
    )


def local(stores: Path, warm: bool) -> str:
    out = subprocess.run(
        [sys.executable, "-c", LOCAL, str(stores), "warm" if warm else "cold", *QUERIES],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    warmed = "" if out[0] == "None" else f"warm() {float(out[0]):5.1f} s, "
    first, second = float(out[1]), float(out[2])
    label = "LocalSource warm()" if warm else "LocalSource (cold)"
    return f"{label:20}: {warmed}first search {first * 1000:7.0f} ms, second {second * 1000:5.0f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="folder holding stores/s")
    args = parser.parse_args()
    stores = args.root / "stores"
    print(f"load average {os.getloadavg()[0]:.2f}")
    for line in (serve(stores, False), serve(stores, True), local(stores, False), local(stores, True)):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
