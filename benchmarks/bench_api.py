"""Load test of the HTTP service on loopback: neighbours and minibatches at 1, 16 and 64 concurrent clients.

    .venv/bin/labeldist precompute pose data/mpii/mpii_valid_2958.csv --out stores/mpii-pose
    .venv/bin/python benchmarks/bench_api.py --stores stores --store mpii-pose --workers 2

A big store next to a small one, in the same run (target: a 1,000,000-item store served within 500 MiB a
worker, p99 <= 10 ms at 64 clients):

    .venv/bin/python benchmarks/bench_api.py --stores stores --store mpii-pose,vec1m --scenarios neighbors \
        --workers 2 --repeats 3 --p99-target-ms 10 --worker-rss-target-mib 500

Starts ``labeldist serve`` (uvicorn, ``--workers`` processes) on 127.0.0.1 over the stores folder, then, for
each scenario and number of concurrent clients, a closed-loop load generator (each client sends its next
request when the previous one is answered, on its own keep-alive connection) for ``--duration`` seconds:

- ``--generator wrk`` (the default when ``wrk`` is installed: ``make bench-tools``): the C load generator,
  ``wrk -t1 -cCLIENTS -dDURATIONs --latency --timeout 5s`` with a generated Lua script that sends each request
  to a different item (a table of a few thousand requests on random items, cycled), and counts every answer
  that is not 200 (``response()``; reported by ``done()``). About 20-50 us of CPU a request.
- ``--generator httpx``: httpx sync clients in threads in ``--client-procs`` separate Python processes, about
  0.45 ms of CPU a request: on a 2-core machine it takes half the cores from the server it measures.

With ``--store A,B``, each scenario is measured on each store in turn (``--repeats R``: R times, the stores
alternating, and the medians reported), and each figure is also given as a ratio to the first store's, measured
in the same minutes. When a store has more items than the wrk script's table, every request draws its own item
(uniformly, in wrk's Lua), for every store of the run: a table cycled over a million items would ask the same
4,096 again and again, and measure a cache that holds them all.

Prints throughput and p50/p99 latency, each with its ratio to the issue's target (2,000 neighbour requests/s,
500 minibatches/s, p99 <= 50 ms at 64 clients, or ``--p99-target-ms``) and to ``healthz`` (no store, no
parameters, through FastAPI's routing: the framework's floor on the same machine, always measured first in the same
run; the neighbour and batch requests that api/routers/fastpath.py answers skip that routing, and can beat it); the
server's CPU time per request (psutil, workers included; steadier than throughput on a shared machine) and the load
generator's; the load average before and after; how long the server took to come up (every worker opens every
store, and checks every chunk of its kNN lists); the resident memory of the server and of each worker (now and its
peak) after the runs, against ``--worker-rss-target-mib``. Before measuring, one request of each scenario opens
what it needs on each measured store (labels for distances computed on demand). ``--setting NAME=VALUE`` passes
``LABELDIST_NAME`` to the server (e.g. ``knn_cache_mb=64``). A scenario with any answer other than 200 is reported
as FAILED and makes the script exit with status 1. Server and load generator share
this machine's cores, so the figures are a lower bound of what the server alone would do. Every run is bounded
in time (``--duration``) and targets 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from serving import tree_cpu_seconds  # benchmarks/serving.py (scripts run from benchmarks/)

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"neighbors": 2000.0, "batches": 500.0}  # requests/s on the 2-core machine; p99 <= 50 ms at 64 clients
P99_TARGET_MS = 50.0
P99_CLIENTS = 64  # the p99 target holds from this many concurrent clients on
FLOOR = "healthz"
#: distinct requests in a wrk script's table (cycled): each on a random item
WRK_TABLE = 4096
WRK_TIMEOUT_S = 5
#: seconds of load before each scenario's measurements (connections made, caches warm), not counted
WARMUP_S = 1


def _request(scenario: str, store: str, n_items: int, rng: np.random.Generator) -> tuple[str, str, bytes | None]:
    """One request of ``scenario`` on a random item: (method, path, body)."""
    index = int(rng.integers(n_items))
    if scenario == FLOOR:  # the framework's floor: no store, no parameters
        return "GET", "/healthz", None
    if scenario == "neighbors":
        return "GET", f"/v1/stores/{store}/items/{index}/neighbors?k=30", None
    if not scenario.startswith("batches"):
        raise SystemExit(f"unknown scenario {scenario!r}")
    body = {"anchors": [index], "size": 151, "neighbors": 5, "seed": int(rng.integers(2**31))}
    path = f"/v1/stores/{store}/batches"
    if scenario.startswith("batches-pairwise"):
        body["pairwise"] = True
        if scenario.endswith("npz"):
            path += "?format=npz"
    return "POST", path, json.dumps(body).encode()


# ---------------------------------------------------------------- wrk (C load generator, Lua script)
_WRK_LUA = r"""-- generated by benchmarks/bench_api.py: %(count)d requests on random items, cycled
local methods = {%(methods)s}
local paths = {%(paths)s}
local bodies = {%(bodies)s}
local prepared, i = {}, 0
non200, statuses, sample = 0, {}, ""

function init(args)
  for t = 1, #paths do
    local headers = {}
    if bodies[t] ~= "" then headers["Content-Type"] = "application/json" end
    prepared[t] = wrk.format(methods[t], paths[t], headers, bodies[t] ~= "" and bodies[t] or nil)
  end
end

function request()
  i = i %% #prepared + 1
  return prepared[i]
end

function response(status, headers, body)
  if status ~= 200 then
    non200 = non200 + 1
    statuses[status] = (statuses[status] or 0) + 1
    if sample == "" then sample = (string.gsub(string.sub(body or "", 1, 300), '[%%c"\\]', " ")) end
  end
end

local threads = {}
function setup(thread) table.insert(threads, thread) end

function done(summary, latency, requests)
  local bad, codes, first = 0, {}, ""
  for _, thread in ipairs(threads) do
    bad = bad + thread:get("non200")
    for code, n in pairs(thread:get("statuses")) do codes[#codes + 1] = string.format('"%%d": %%d', code, n) end
    if first == "" then first = thread:get("sample") end
  end
  local e = summary.errors
  io.write(string.format('LABELDIST_WRK {"requests": %%d, "duration_us": %%d, "non200": %%d, "statuses": {%%s}, ' ..
    '"connect": %%d, "read": %%d, "write": %%d, "status": %%d, "timeout": %%d, "p50_us": %%d, "p99_us": %%d, ' ..
    '"sample": "%%s"}\n', summary.requests, summary.duration, bad, table.concat(codes, ", "), e.connect, e.read,
    e.write, e.status, e.timeout, latency:percentile(50), latency:percentile(99), first))
end
"""


def _lua_string(text: str) -> str:
    if not text.isascii():
        raise SystemExit(f"not ASCII, cannot go into the wrk script: {text!r}")
    return json.dumps(text)  # a JSON string of ASCII text is a valid Lua string literal


#: what replaces the table's init() and request() when each request draws its own item (math.random in wrk's Lua)
_WRK_LUA_RANDOM = r"""
math.randomseed(%(seed)d)
function init(args) end

function request()
  local index = math.random(0, %(n_items)d - 1)
  if %(kind)s == "neighbors" then
    return wrk.format("GET", %(prefix)s .. index .. "/neighbors?k=30")
  elseif %(kind)s == "healthz" then
    return wrk.format("GET", "/healthz")
  end
  local body = string.format(%(body)s, index, math.random(0, 2147483646))
  return wrk.format("POST", %(path)s, {["Content-Type"] = "application/json"}, body)
end
"""


def _wrk_script(folder: Path, scenario: str, store: str, n_items: int, seed: int, uniform: bool = False) -> Path:
    """The Lua script of a scenario: a table of :data:`WRK_TABLE` requests on random items, cycled; or, with
    ``uniform``, a new random item drawn for every request (by wrk's Lua: a few us a request), so that a store with
    far more items than the table is asked for all of them, as a training job would (a table cycled over a
    million-item store would ask the same 4,096 items again and again: all of them cached after one round)."""
    rng = np.random.default_rng(seed)
    reqs = [_request(scenario, store, n_items, rng) for _ in range(WRK_TABLE)]
    text = _WRK_LUA % {
        "count": len(reqs),
        "methods": ", ".join(_lua_string(m) for m, _, _ in reqs),
        "paths": ", ".join(_lua_string(p) for _, p, _ in reqs),
        "bodies": ", ".join(_lua_string((b or b"").decode()) for _, _, b in reqs),
    }
    if uniform:
        method, path, body = _request(scenario, store, n_items, rng)
        template = json.loads(body) if body else {}
        if body:
            template.update(anchors=["ANCHOR"], seed="SEED")
        body_format = json.dumps(template).replace('["ANCHOR"]', "[%d]").replace('"SEED"', "%d")
        kind = FLOOR if scenario == FLOOR else ("neighbors" if scenario == "neighbors" else "batches")
        start, end = text.index("function init(args)"), text.index("function response(")
        prefix = _lua_string(f"/v1/stores/{store}/items/")
        text = (
            text[:start]
            + _WRK_LUA_RANDOM
            % {
                "seed": seed,
                "n_items": n_items,
                "kind": _lua_string(kind),
                "prefix": prefix,
                "body": _lua_string(body_format),
                "path": _lua_string(path),
            }
            + "\n"
            + text[end:]
        )
    path = folder / f"{scenario}-{store}.lua"
    path.write_text(text)
    return path


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def parse_wrk(text: str) -> dict:
    """Requests/s and the ``--latency`` distribution (ms) from wrk's text output, plus the ``done()`` summary
    line of the generated script."""
    out: dict = {}
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    if rps:
        out["rps"] = float(rps.group(1))
    for pct, value, unit in re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s|m|h)\s*$", text, re.M):
        out[f"p{pct}_ms"] = float(value) * _UNITS[unit]
    summary = re.search(r"^LABELDIST_WRK (.*)$", text, re.M)
    if summary:
        out["summary"] = json.loads(summary.group(1))
    return out


def _run_wrk(url: str, script: Path, clients: int, seconds: int) -> tuple[dict, str, float]:
    """One wrk run: its parsed output, its text, and its CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = [
        "wrk",
        "-t1",
        f"-c{clients}",
        f"-d{seconds}s",
        "--latency",
        f"--timeout={WRK_TIMEOUT_S}s",
        "-s",
        str(script),
        url,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode:
        raise SystemExit(f"wrk failed ({done.returncode}): {done.stderr[-2000:]}{done.stdout[-2000:]}")
    return parse_wrk(done.stdout), done.stdout, cpu


def _measure_wrk(url: str, script: Path, clients: int, duration: int, server: ServerCPU) -> dict:
    server.start()
    parsed, text, cpu = _run_wrk(url, script, clients, duration)
    server_cpu = server.stop()
    summary = parsed.get("summary")
    if summary is None or "rps" not in parsed or "p99_ms" not in parsed:
        raise SystemExit(f"could not read wrk's output:\n{text}")
    requests = summary["requests"]
    socket_errors = {k: summary[k] for k in ("connect", "read", "write", "timeout") if summary[k]}
    return {
        "requests": requests,
        "rps": parsed["rps"],
        "p50_ms": parsed["p50_ms"],
        "p99_ms": parsed["p99_ms"],
        "non200": summary["non200"],
        "statuses": summary["statuses"],
        "sample": summary["sample"],
        "socket_errors": socket_errors,
        "server_us": 1e6 * server_cpu / max(requests, 1),
        "client_us": 1e6 * cpu / max(requests, 1),
        "text": text,
    }


# ---------------------------------------------------------------- httpx (Python clients in their own processes)
def _load(url: str, scenario: str, store: str, n_items: int, clients: int, duration: float, seed: int) -> dict:
    """``clients`` threads, each with its own httpx.Client (one keep-alive connection), each sending its next
    request when the previous one is answered. (httpx's sync client costs about a third of the CPU per
    request of its asyncio client here, and the load generator shares the cores with the server.)"""
    import httpx

    headers = {"content-type": "application/json"}
    barrier = threading.Barrier(clients)
    latencies: list[list[float]] = [[] for _ in range(clients)]
    statuses: list[dict[int, int]] = [{} for _ in range(clients)]
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
                if response.status_code != 200:
                    statuses[c][response.status_code] = statuses[c].get(response.status_code, 0) + 1

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - window[0]
    merged: dict[str, int] = {}
    for s in statuses:
        for code, n in s.items():
            merged[str(code)] = merged.get(str(code), 0) + n
    return {"latencies": [x for lat in latencies for x in lat], "statuses": merged, "elapsed": elapsed}


def _client_main(args: argparse.Namespace) -> int:
    # Hand the GIL over every 0.5 ms rather than 5 ms: a thread whose answer has arrived should not wait
    # behind 30 others for its turn, or the load generator's own queueing shows up as server latency.
    sys.setswitchinterval(0.0005)
    result = _load(args.url, args.scenario, args.store, args.n_items, args.clients, args.duration, args.seed)
    print(json.dumps(result))
    return 0


def _measure_httpx(
    url: str, scenario: str, store: str, n_items: int, clients: int, duration: float, procs: int, server: ServerCPU
) -> dict:
    """Run the load generator in ``procs`` processes (clients split among them); merge their latencies."""
    shares = [clients // procs + (p < clients % procs) for p in range(min(procs, clients))]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
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
        )
        for p, share in enumerate(shares)
    ]
    server.start()  # includes the clients' warm-up: the server CPU per request reads a little high
    outs = [proc.communicate(timeout=duration + 120) for proc in running]
    server_cpu = server.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    for proc, (_, err) in zip(running, outs):
        if proc.returncode:
            raise SystemExit(f"load generator failed: {err[-2000:]}")
    parts = [json.loads(out) for out, _ in outs]
    lat = np.array([x for part in parts for x in part["latencies"]]) * 1e3
    elapsed = max(part["elapsed"] for part in parts)
    statuses: dict[str, int] = {}
    for part in parts:
        for code, n in part["statuses"].items():
            statuses[code] = statuses.get(code, 0) + n
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "requests": int(lat.size),
        "rps": lat.size / elapsed,
        "p50_ms": float(np.percentile(lat, 50)) if lat.size else float("nan"),
        "p99_ms": float(np.percentile(lat, 99)) if lat.size else float("nan"),
        "non200": sum(statuses.values()),
        "statuses": statuses,
        "sample": "",
        "socket_errors": {},
        "server_us": 1e6 * server_cpu / max(lat.size, 1),
        "client_us": 1e6 * cpu / max(lat.size, 1),
    }


# ---------------------------------------------------------------- the server
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(stores: str, port: int, workers: int, settings: dict[str, str], log: Any) -> subprocess.Popen:
    """``labeldist serve`` with ``settings`` (``LABELDIST_<NAME>`` variables); its stderr into the file ``log`` (a pipe
    nobody reads could fill and stall it)."""
    env = {
        **os.environ,
        "LABELDIST_ACCESS_LOG": "false",
        "LABELDIST_WORKERS": str(workers),
        **{f"LABELDIST_{name.upper()}": value for name, value in settings.items()},
    }
    command = [
        sys.executable,
        "-m",
        "labeldist.cli",
        "serve",
        "--stores",
        stores,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log, text=True)


def _wait(url: str, proc: subprocess.Popen, log: Any, timeout: float = 900.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise SystemExit(f"server exited with {proc.returncode}: {log.read()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.3)
    raise SystemExit(f"server not healthy after {timeout} s")


class ServerCPU:
    """CPU seconds (user + system) used by the server process and its workers between start() and stop()."""

    def __init__(self, proc: subprocess.Popen) -> None:
        import psutil

        self._parent = psutil.Process(proc.pid)
        self._t0 = 0.0

    def _now(self) -> float:
        return tree_cpu_seconds(self._parent.pid)

    def start(self) -> None:
        self._t0 = self._now()

    def stop(self) -> float:
        return self._now() - self._t0

    def rss_mib(self) -> float:
        """Resident memory of the server and its worker processes, MiB."""
        procs = [self._parent, *self._parent.children(recursive=True)]
        return sum(p.memory_info().rss for p in procs) / 2**20

    def workers(self) -> list[dict]:
        """Each process that serves requests (uvicorn's workers; the server itself when it runs one): its pid,
        resident memory now and its peak (VmHWM), MiB."""
        children = [p for p in self._parent.children(recursive=True) if "spawn_main" in " ".join(p.cmdline())]
        out = []
        for p in children or [self._parent]:
            status = Path(f"/proc/{p.pid}/status").read_text()
            peak = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
            out.append(
                {
                    "pid": p.pid,
                    "rss_mib": p.memory_info().rss / 2**20,
                    "peak_mib": int(peak.group(1)) / 1024 if peak else float("nan"),
                }
            )
        return out


# ---------------------------------------------------------------- driver
def _ratio(value: float, base: float | None) -> str:
    if base is None or not base or not np.isfinite(value) or not np.isfinite(base):
        return "-"
    return f"{value / base:.2f}x"


def _load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode")
    client = sub.add_parser("_client", help=argparse.SUPPRESS)
    for name, kind in (
        ("url", str),
        ("scenario", str),
        ("store", str),
        ("n_items", int),
        ("clients", int),
        ("duration", float),
        ("seed", int),
    ):
        client.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, required=True)
    parser.add_argument("--stores", default="stores", help="stores folder to serve (default: %(default)s)")
    parser.add_argument(
        "--store",
        help="store(s) to query, comma-separated: each scenario is measured on each, in turn, and compared with the "
        "first (default: the first complete one)",
    )
    parser.add_argument("--clients", default="1,16,64", help="concurrent clients (default: %(default)s)")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measurement (whole seconds for wrk)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="measurements of each case, alternating stores; the medians are reported (default: %(default)s)",
    )
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a service setting, as LABELDIST_NAME=VALUE in its environment (e.g. knn_cache_mb=128); repeatable",
    )
    parser.add_argument(
        "--generator",
        choices=("wrk", "httpx"),
        help="load generator (default: wrk when installed, else httpx)",
    )
    parser.add_argument("--client-procs", type=int, default=2, help="httpx: load generator processes (clients split)")
    parser.add_argument(
        "--scenarios",
        default="neighbors,batches,batches-pairwise,batches-pairwise-npz",
        help="besides healthz, always measured first (the framework's floor: no store, no parameters); "
        "pairwise: 151x151 matrices (default: %(default)s)",
    )
    parser.add_argument(
        "--p99-target-ms",
        type=float,
        default=P99_TARGET_MS,
        help=f"the p99 target at {P99_CLIENTS}+ clients (default: %(default)s)",
    )
    parser.add_argument(
        "--worker-rss-target-mib",
        type=float,
        help="the most resident memory of a worker at the end (default: not checked)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random items asked")
    parser.add_argument("--verbose", action="store_true", help="print wrk's own output of every run")
    args = parser.parse_args(argv)
    if args.mode == "_client":
        return _client_main(args)

    generator = args.generator or ("wrk" if shutil.which("wrk") else "httpx")
    if generator == "wrk" and not shutil.which("wrk"):
        raise SystemExit(
            "wrk is not installed: `make bench-tools` (as root: apt-get install wrk), or --generator httpx"
        )
    scenarios = [FLOOR] + [s for s in args.scenarios.split(",") if s and s != FLOOR]
    client_counts = [int(c) for c in args.clients.split(",")]
    seconds = max(1, round(args.duration)) if generator == "wrk" else args.duration
    settings = dict(_setting(text) for text in args.setting)
    p99_target = args.p99_target_ms

    import httpx

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    load_before = _load_average()
    log = tempfile.TemporaryFile(mode="w+")
    t_start = time.perf_counter()
    proc = _start_server(args.stores, port, args.workers, settings, log)
    failed: list[str] = []
    broken: list[str] = []
    try:
        _wait(url, proc, log)
        up_s = time.perf_counter() - t_start
        server = ServerCPU(proc)
        stores = httpx.get(f"{url}/v1/stores").json()["stores"]
        served = [s for s in stores if s["available"]]
        if not served:
            raise SystemExit(f"no complete store in {args.stores!r}; build one, e.g.\n  {__doc__.splitlines()[2]}")
        by_name = {s["name"]: s for s in served}
        names = args.store.split(",") if args.store else [served[0]["name"]]
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise SystemExit(f"store(s) {unknown} not served; served: {sorted(by_name)}")
        infos = [by_name[n] for n in names]
        uniform = generator == "wrk" and max(i["n_items"] for i in infos) > WRK_TABLE
        for info in infos:  # open what the scenarios use (labels, caches' first blocks) before measuring
            for scenario in scenarios[1:]:
                method, path, body = _request(scenario, info["name"], info["n_items"], np.random.default_rng(0))
                httpx.request(
                    method,
                    f"{url}{path}",
                    content=body,
                    timeout=600,
                    headers={"content-type": "application/json"} if body else None,
                )
        import uvicorn

        extras = [m for m in ("httptools", "uvloop", "orjson") if _importable(m)]
        for info in infos:
            kind = "dense" if info.get("has_dense") else "kNN only"
            print(
                f"labeldist API load test: store {info['name']!r} ({info['kind']}, {info['n_items']:,} items, "
                f"k={info['k']}, {kind})"
            )
        print(f"{len(served)} store(s) served; server up (stores opened and checked) in {up_s:.1f} s")
        print(
            f"server: uvicorn {uvicorn.__version__}, {args.workers} worker(s), access log off, with "
            f"{', '.join(extras) or 'no httptools/uvloop/orjson'}; 127.0.0.1:{port}"
            + (f"; settings {settings}" if settings else "")
        )
        if generator == "wrk":
            version = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.splitlines()[:1]
            asked = (
                "each request on an item drawn at random by wrk's Lua"
                if uniform
                else f"{WRK_TABLE} requests on random items cycled"
            )
            print(
                f"load generator: wrk ({' '.join(version).strip()}), 1 thread, one keep-alive connection per "
                f"client, {asked}, --timeout {WRK_TIMEOUT_S}s"
            )
        else:
            import httpcore

            print(
                f"load generator: httpx {httpx.__version__} (httpcore {httpcore.__version__}) sync clients in "
                f"threads, in {args.client_procs} separate processes"
            )
        print(
            f"{os.cpu_count()} CPU cores shared by server and load generator; load average (1, 5, 15 min) before: "
            f"{load_before}"
        )
        repeats = f"; medians of {args.repeats} runs, stores alternating" if args.repeats > 1 else ""
        print(f"neighbours: k=30; batches: 1 batch of 150 items (size 151), 5 nearest; {seconds:g} s each{repeats}\n")
        base_name = infos[0]["name"]
        header = (
            f"{'scenario':<22}{'store':<16}{'clients':>7}{'req/s':>8}{'/target':>8}{'/floor':>7}{'/first':>7}"
            f"{'p50 ms':>8}{'p99 ms':>8}{'/p99 t':>7}{'/floor':>7}{'/first':>7}{'non200':>7}{'srv us':>8}"
            f"{'gen us':>7}  verdict"
        )
        print(header)
        print("-" * len(header))
        floor: dict[int, dict] = {}
        with tempfile.TemporaryDirectory(prefix="bench_api-") as tmp:
            for scenario in scenarios:
                targets = [infos[0]] if scenario == FLOOR else infos
                scripts = {}
                if generator == "wrk":
                    for info in targets:
                        scripts[info["name"]] = script = _wrk_script(
                            Path(tmp), scenario, info["name"], info["n_items"], args.seed, uniform
                        )
                        _run_wrk(url, script, max(client_counts), WARMUP_S)  # connect, warm the caches; not counted
                for clients in client_counts:
                    runs: dict[str, list[dict]] = {info["name"]: [] for info in targets}
                    for _ in range(args.repeats):
                        for info in targets:
                            if generator == "wrk":
                                r = _measure_wrk(url, scripts[info["name"]], clients, seconds, server)
                            else:
                                r = _measure_httpx(
                                    url,
                                    scenario,
                                    info["name"],
                                    info["n_items"],
                                    clients,
                                    seconds,
                                    args.client_procs,
                                    server,
                                )
                            runs[info["name"]].append(r)
                    medians = {name: _median(rs) for name, rs in runs.items()}
                    for info in targets:
                        r = medians[info["name"]]
                        first = medians[base_name] if info["name"] != base_name else None
                        if scenario == FLOOR:
                            floor[clients] = r
                        base = floor.get(clients) if scenario != FLOOR else None
                        case = f"{scenario}@{info['name']}@{clients}"
                        line, missed, bad = _row(scenario, info["name"], clients, r, base, first, p99_target)
                        print(line, flush=True)
                        failed += [case] if missed else []
                        broken += [case] if bad else []
                        if args.verbose and generator == "wrk":
                            for run in runs[info["name"]]:
                                print(run.get("text", ""))
        print(
            f"\n/target: req/s over the target; /p99 t: p99 over {p99_target:g} ms (at {P99_CLIENTS}+ clients); "
            f"/floor: over healthz at the same clients; /first: over the first store ({base_name}) at the same "
            "clients; srv us / gen us: CPU microseconds per request of the server (workers included) and of the "
            "load generator"
        )
        print(f"load average (1, 5, 15 min) after: {_load_average()}")
        print(f"server RSS with {len(served)} store(s) open, after the runs: {server.rss_mib():.0f} MiB")
        for w in server.workers():
            verdict = ""
            if args.worker_rss_target_mib is not None:
                ok = w["rss_mib"] <= args.worker_rss_target_mib
                verdict = f"  <= {args.worker_rss_target_mib:g} MiB: {'ok' if ok else 'MISSED'}"
                if not ok:
                    failed.append(f"RSS of worker {w['pid']}")
            print(f"  worker pid {w['pid']}: RSS {w['rss_mib']:.0f} MiB, peak {w['peak_mib']:.0f} MiB{verdict}")
        if failed:
            print("targets missed: " + ", ".join(failed))
        elif not broken:
            print("all targets met")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    if broken:
        print(f"FAILED: answers other than 200 in {', '.join(broken)}", file=sys.stderr)
        return 1
    return 0


def _row(
    scenario: str, store: str, clients: int, r: dict, floor: dict | None, first: dict | None, p99_target: float
) -> tuple[str, bool, bool]:
    """One line of the table, whether it missed its target, and whether it had answers other than 200."""
    target = TARGETS.get(scenario)
    verdict, missed = "", False
    if target is not None and clients > 1:  # one client is bound by its own round trip
        missed = not (r["rps"] >= target and (clients < P99_CLIENTS or r["p99_ms"] <= p99_target))
        p99 = f", p99 <= {p99_target:g} ms" if clients >= P99_CLIENTS else ""
        verdict = f">= {target:g}/s{p99}: {'MISSED' if missed else 'ok'}"
    bad = bool(r["non200"] or r["socket_errors"])
    if bad:
        verdict = (
            f"FAILED: {r['non200']} of {r['requests']} answers not 200 {r['statuses']} "
            f"{r['socket_errors'] or ''} {r['sample'][:200]!r}"
        )
    p99_vs = _ratio(r["p99_ms"], p99_target) if clients >= P99_CLIENTS else "-"
    store_col = "-" if scenario == FLOOR else store[:15]
    line = (
        f"{scenario:<22}{store_col:<16}{clients:>7}{r['rps']:>8.0f}{_ratio(r['rps'], target):>8}"
        f"{_ratio(r['rps'], floor and floor['rps']):>7}{_ratio(r['rps'], first and first['rps']):>7}"
        f"{r['p50_ms']:>8.2f}{r['p99_ms']:>8.2f}{p99_vs:>7}{_ratio(r['p99_ms'], floor and floor['p99_ms']):>7}"
        f"{_ratio(r['p99_ms'], first and first['p99_ms']):>7}{r['non200']:>7}{r['server_us']:>8.0f}"
        f"{r['client_us']:>7.0f}  {verdict}"
    )
    return line, missed, bad


def _setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise SystemExit(f"--setting wants NAME=VALUE, got {text!r}")
    return name.strip().removeprefix("LABELDIST_").removeprefix("labeldist_"), value


def _median(runs: list[dict]) -> dict:
    """The median of each figure over repeated runs (counts summed); one run is itself."""
    if len(runs) == 1:
        return runs[0]
    out = dict(runs[0])
    for key in ("rps", "p50_ms", "p99_ms", "server_us", "client_us"):
        out[key] = float(np.median([r[key] for r in runs]))
    out["requests"] = sum(r["requests"] for r in runs)
    out["non200"] = sum(r["non200"] for r in runs)
    statuses: dict[str, int] = {}
    errors: dict[str, int] = {}
    for r in runs:
        for code, n in r["statuses"].items():
            statuses[code] = statuses.get(code, 0) + n
        for kind, n in r["socket_errors"].items():
            errors[kind] = errors.get(kind, 0) + n
    out["statuses"], out["socket_errors"] = statuses, errors
    out["sample"] = next((r["sample"] for r in runs if r["sample"]), "")
    return out


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


if __name__ == "__main__":
    sys.exit(main())
