"""Load test of the HTTP service on loopback: neighbours and minibatches at 1, 16 and 64 concurrent clients.

    .venv/bin/labeldist precompute pose data/mpii/mpii_valid_2958.csv --out stores/mpii-pose
    .venv/bin/python benchmarks/bench_api.py --stores stores --store mpii-pose --workers 2

Starts ``labeldist serve`` (uvicorn, ``--workers`` processes) on 127.0.0.1 over the stores folder, then, for
each scenario and number of concurrent clients, a load generator in *other* processes (``--client-procs``;
httpx sync clients in threads, one keep-alive connection each, each client sending its next request when
the previous one is answered) for ``--duration`` seconds. Prints throughput, p50/p99 latency and the
server's resident memory (psutil, workers included) with every store loaded. Server and load generator
share this machine's cores, so on a 2-core machine the figures are a lower bound of what the server alone
would do; ``healthz`` (no store, no parameters) shows the framework's own floor on the same machine.
Every run is bounded in time and targets 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"neighbors": 2000.0, "batches": 500.0}  # requests/s on the 2-core machine; p99 <= 50 ms at 64 clients
P99_TARGET_MS = 50.0


# ---------------------------------------------------------------- load generator (its own process)
def _request(scenario: str, store: str, n_items: int, rng: np.random.Generator) -> tuple[str, str, bytes | None]:
    index = int(rng.integers(n_items))
    if scenario == "healthz":  # the framework's floor: no store, no parameters
        return "GET", "/healthz", None
    if scenario == "neighbors":
        return "GET", f"/v1/stores/{store}/items/{index}/neighbors?k=30", None
    body = {"anchors": [index], "size": 151, "neighbors": 5, "seed": int(rng.integers(2**31))}
    path = f"/v1/stores/{store}/batches"
    if scenario.startswith("batches-pairwise"):
        body["pairwise"] = True
        if scenario.endswith("npz"):
            path += "?format=npz"
    return "POST", path, json.dumps(body).encode()


def _load(url: str, scenario: str, store: str, n_items: int, clients: int, duration: float, seed: int) -> dict:
    """``clients`` threads, each with its own httpx.Client (one keep-alive connection), each sending its next
    request when the previous one is answered. (httpx's sync client costs about a third of the CPU per
    request of its asyncio client here, and the load generator shares the cores with the server.)"""
    import httpx

    headers = {"content-type": "application/json"}
    barrier = threading.Barrier(clients)
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    window: list[float] = []

    def client(c: int) -> None:
        rng = np.random.default_rng([seed, c])
        with httpx.Client(base_url=url, timeout=30.0) as http:
            warm_until = time.perf_counter() + min(1.0, duration / 4)  # connect, warm the caches
            while time.perf_counter() < warm_until:
                method, path, body = _request(scenario, store, n_items, rng)
                http.request(method, path, content=body, headers=headers if body else None).read()
            barrier.wait()
            if c == 0:
                window.append(time.perf_counter())
            until = window[0] + duration if window else time.perf_counter() + duration
            while time.perf_counter() < until:
                method, path, body = _request(scenario, store, n_items, rng)
                t0 = time.perf_counter()
                response = http.request(method, path, content=body, headers=headers if body else None)
                response.read()
                latencies[c].append(time.perf_counter() - t0)
                errors[c] += response.status_code != 200

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - window[0]
    return {"latencies": [x for lat in latencies for x in lat], "errors": sum(errors), "elapsed": elapsed}


def _client_main(args: argparse.Namespace) -> int:
    # Hand the GIL over every 0.5 ms rather than 5 ms: a thread whose answer has arrived should not wait
    # behind 30 others for its turn, or the load generator's own queueing shows up as server latency.
    sys.setswitchinterval(0.0005)
    result = _load(args.url, args.scenario, args.store, args.n_items, args.clients, args.duration, args.seed)
    print(json.dumps(result))
    return 0


def _measure(url: str, scenario: str, store: str, n_items: int, clients: int, duration: float, procs: int) -> dict:
    """Run the load generator in ``procs`` processes (clients split among them); merge their latencies."""
    shares = [clients // procs + (p < clients % procs) for p in range(min(procs, clients))]
    running = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "_client",
                "--url",
                url,
                "--scenario",
                scenario,
                "--store",
                store,
                "--n-items",
                str(n_items),
                "--clients",
                str(share),
                "--duration",
                str(duration),
                "--seed",
                str(p),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for p, share in enumerate(shares)
    ]
    outs = [proc.communicate(timeout=duration + 120) for proc in running]
    for proc, (_, err) in zip(running, outs):
        if proc.returncode:
            raise SystemExit(f"load generator failed: {err[-2000:]}")
    parts = [json.loads(out) for out, _ in outs]
    lat = np.array([x for part in parts for x in part["latencies"]]) * 1e3
    elapsed = max(part["elapsed"] for part in parts)
    return {
        "requests": int(lat.size),
        "errors": sum(part["errors"] for part in parts),
        "rps": lat.size / elapsed,
        "p50_ms": float(np.percentile(lat, 50)) if lat.size else float("nan"),
        "p99_ms": float(np.percentile(lat, 99)) if lat.size else float("nan"),
    }


# ---------------------------------------------------------------- driver
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(stores: str, port: int, workers: int) -> subprocess.Popen:
    env = {**os.environ, "LABELDIST_ACCESS_LOG": "false", "LABELDIST_WORKERS": str(workers)}
    command = [sys.executable, "-m", "labeldist.cli", "serve", "--stores", stores, "--host", "127.0.0.1",
               "--port", str(port)]  # fmt: skip
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.3)
    raise SystemExit(f"server not healthy after {timeout} s")


def _server_rss(proc: subprocess.Popen) -> float:
    """Resident memory of the server and its worker processes, MiB."""
    import psutil

    parent = psutil.Process(proc.pid)
    return sum(p.memory_info().rss for p in [parent, *parent.children(recursive=True)]) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode")
    client = sub.add_parser("_client", help=argparse.SUPPRESS)
    for name, kind in (("url", str), ("scenario", str), ("store", str), ("n_items", int), ("clients", int),
                       ("duration", float), ("seed", int)):  # fmt: skip
        client.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, required=True)
    parser.add_argument("--stores", default="stores", help="stores folder to serve (default: %(default)s)")
    parser.add_argument("--store", help="store to query (default: the first complete one)")
    parser.add_argument("--clients", default="1,16,64", help="concurrent clients (default: %(default)s)")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument("--client-procs", type=int, default=2, help="load generator processes (clients split)")
    parser.add_argument(
        "--scenarios",
        default="healthz,neighbors,batches,batches-pairwise,batches-pairwise-npz",
        help="healthz is the framework's floor (no store, no parameters); pairwise: 151x151 matrices",
    )
    args = parser.parse_args(argv)
    if args.mode == "_client":
        return _client_main(args)

    import httpx

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start_server(args.stores, port, args.workers)
    try:
        _wait(url, proc)
        stores = httpx.get(f"{url}/v1/stores").json()["stores"]
        served = [s for s in stores if s["available"]]
        if not served:
            raise SystemExit(f"no complete store in {args.stores!r}; build one, e.g.\n  {__doc__.splitlines()[2]}")
        info = next((s for s in served if s["name"] == args.store), None) if args.store else served[0]
        if info is None:
            raise SystemExit(f"store {args.store!r} is not served; served: {[s['name'] for s in served]}")
        for s in served:  # load every store's labels and caches before measuring memory
            httpx.post(f"{url}/v1/stores/{s['name']}/batches", json={"count": 4, "size": 32, "pairwise": True})
        import httpcore
        import uvicorn

        extras = [m for m in ("httptools", "uvloop", "orjson") if _importable(m)]
        kind = "dense" if info.get("has_dense") else "kNN only"
        print(f"labeldist API load test: store {info['name']!r} ({info['kind']}, {info['n_items']} items, "
              f"k={info['k']}, {kind}); {len(served)} store(s) served")  # fmt: skip
        print(f"server: uvicorn {uvicorn.__version__}, {args.workers} worker(s), access log off, with "
              f"{', '.join(extras) or 'no httptools/uvloop/orjson'}")  # fmt: skip
        print(f"load generator: httpx {httpx.__version__} (httpcore {httpcore.__version__}) sync clients in "
              f"threads, in {args.client_procs} separate processes; {os.cpu_count()} CPU cores shared by server "
              "and load generator")  # fmt: skip
        print(f"neighbours: k=30; batches: 1 batch of 150 items (size 151), 5 nearest; {args.duration:g} s each\n")
        print(f"{'scenario':<24}{'clients':>8}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}  target")
        failed = []
        for scenario in args.scenarios.split(","):
            for clients in map(int, args.clients.split(",")):
                r = _measure(url, scenario, info["name"], info["n_items"], clients, args.duration, args.client_procs)
                target = TARGETS.get(scenario)
                verdict = ""
                if target is not None and clients > 1:  # one client is bound by its own round trip, not the server
                    ok = r["rps"] >= target and (clients < 64 or r["p99_ms"] <= P99_TARGET_MS)
                    verdict = f">= {target:g}/s{', p99 <= 50 ms' if clients >= 64 else ''}: {'ok' if ok else 'MISSED'}"
                    if not ok:
                        failed.append(f"{scenario}@{clients}")
                print(f"{scenario:<24}{clients:>8}{r['rps']:>10.0f}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}"
                      f"{r['errors']:>8}  {verdict}", flush=True)  # fmt: skip
        print(f"\nserver RSS with {len(served)} store(s) loaded: {_server_rss(proc):.0f} MiB")
        print("targets missed: " + ", ".join(failed) if failed else "all targets met")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


if __name__ == "__main__":
    sys.exit(main())
