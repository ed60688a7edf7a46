"""The compute queue bound under a flood: many concurrent caption searches against a live
``labeldist serve``, while a cheap sync route (``GET .../items/{i}/label``) is asked again and again.

Each search of a new caption set computes caption-set WMDs against the store on demand, so it needs one of the
``LABELDIST_COMPUTE_WORKERS`` slots; a search that cannot get one within ``LABELDIST_COMPUTE_QUEUE_S`` must be
answered 503 at about that time, and the label route must stay fast meanwhile. Prints, from the same run:

  - the statuses of the flood, and the time of its slowest 503 against the queue time (ratio: about 1 is the
    bound kept; 0.2 answered its slowest 503 after 9.4 s with a queue time of 2 s);
  - the label route's median and slowest latency during the flood, against the same route on the idle server
    (the baseline, measured first).

The store (``--items`` COCO test images, kNN-only) is built in a temporary folder with ``labeldist precompute``:

    .venv/bin/python benchmarks/bench_flood.py [--clients 150] [--items 1000] [--queue-s 2] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving import REPO, start_service  # noqa: E402

COCO = REPO / "data" / "coco" / "coco_karpathy_test.json"
K = 100


def build_store(folder: Path, items: int) -> tuple[Path, list[str]]:
    """A kNN-only caption store of the first ``items`` COCO test images, and a caption set the store does not
    hold: what the flood searches for."""
    images = json.loads(COCO.read_text())
    (folder / "coco.json").write_text(json.dumps(images[:items]))
    stores = folder / "stores"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "labeldist.cli",
            "precompute",
            "captions",
            str(folder / "coco.json"),
            "--knn-only",
            "--k",
            str(K),
            "--out",
            str(stores / "captions"),
            "--no-progress",
        ],
        cwd=REPO,
        check=True,
    )
    # a worst case for the search's lower-bound pruning: one caption of each of 5 unrelated images, k = 100
    query = [images[items + 37 * t]["caption"][0] for t in range(5)]
    return stores, query


async def label_latencies(client: httpx.AsyncClient, stop: asyncio.Event, pause: float = 0.05) -> list[float]:
    """Seconds of each ``GET .../items/{i}/label``, one after the other, until ``stop``."""
    out: list[float] = []
    i = 0
    while not stop.is_set():
        t = time.perf_counter()
        r = await client.get(f"/v1/stores/captions/items/{i % 50}/label")
        out.append(time.perf_counter() - t)
        r.raise_for_status()
        i += 1
        await asyncio.sleep(pause)
    return out


async def flood(url: str, query: list[str], clients: int) -> tuple[list[tuple[int, float]], list[float]]:
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        stop = asyncio.Event()

        async def search() -> tuple[int, float]:
            t = time.perf_counter()
            r = await client.post("/v1/stores/captions/search", json={"label": query, "k": K})
            return r.status_code, time.perf_counter() - t

        labels = asyncio.create_task(label_latencies(client, stop))
        results = await asyncio.gather(*(search() for _ in range(clients)))
        stop.set()
        return list(results), await labels


async def idle_labels(url: str, count: int = 40) -> list[float]:
    """The baseline: the same label requests on the idle server, one after the other."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        out = []
        for i in range(count):
            t = time.perf_counter()
            (await client.get(f"/v1/stores/captions/items/{i % 50}/label")).raise_for_status()
            out.append(time.perf_counter() - t)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=150, help="concurrent searches (default: 150)")
    parser.add_argument("--items", type=int, default=1000, help="images in the store (default: 1000)")
    parser.add_argument("--queue-s", type=float, default=2.0, help="LABELDIST_COMPUTE_QUEUE_S (default: 2)")
    parser.add_argument("--workers", type=int, default=2, help="LABELDIST_COMPUTE_WORKERS (default: 2)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stores, query = build_store(Path(tmp), args.items)
        os.environ.update(LABELDIST_COMPUTE_QUEUE_S=str(args.queue_s), LABELDIST_COMPUTE_WORKERS=str(args.workers))
        proc, url = start_service(stores)
        try:
            httpx.post(f"{url}/v1/stores/captions/search", json={"label": query, "k": K}, timeout=600)  # warm up
            idle = asyncio.run(idle_labels(url))
            results, during = asyncio.run(flood(url, query, args.clients))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    statuses: dict[int, int] = {}
    for status, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    slowest_503 = max((t for s, t in results if s == 503), default=float("nan"))
    slowest_200 = max((t for s, t in results if s == 200), default=float("nan"))
    print(
        f"load average {os.getloadavg()[0]:.1f}; {args.clients} concurrent caption searches on {args.items} items, "
        f"{args.workers} compute slots, queue time {args.queue_s:g} s"
    )
    print(f"statuses: {', '.join(f'{n} x {s}' for s, n in sorted(statuses.items()))}")
    print(
        f"slowest 503: {slowest_503:.2f} s = {slowest_503 / args.queue_s:.2f} x the queue time; "
        f"slowest 200: {slowest_200:.2f} s"
    )
    print(
        f"label route, idle (baseline): median {statistics.median(idle) * 1e3:.1f} ms, slowest "
        f"{max(idle) * 1e3:.1f} ms ({len(idle)} requests)"
    )
    print(
        f"label route, during the flood: median {statistics.median(during) * 1e3:.1f} ms, slowest "
        f"{max(during) * 1e3:.1f} ms ({len(during)} requests); median ratio "
        f"{statistics.median(during) / statistics.median(idle):.1f}x idle"
    )


if __name__ == "__main__":
    main()
