"""Pairwise minibatches/s (the ladder loss) from a kNN-only and a dense caption store, against a GPU step.

Can either store feed a GPU step of ResNet-34 on 50 images (about 10-20 ms, so 50-100 minibatches/s)?

    nice -n 10 .venv/bin/python benchmarks/bench_pairwise_batches.py --work /tmp/bench-pairwise

Builds what is missing under ``--work`` (and reuses what is there; ``--rebuild`` builds again):

1. ``trainer split data/coco/coco_karpathy_test.json --out WORK/coco --seed 0`` (4,000 training images);
2. two caption-set WMD stores of ``WORK/coco/train.json``, both timed: ``labeldist precompute captions ...
   --knn-only --k 100 --out WORK/stores/coco-train-knn`` (the service computes every pair not in a kNN list on
   demand) and the same without ``--knn-only`` (``WORK/stores/coco-train-dense``: the full 4000 x 4000 matrix,
   the way around on-demand WMDs, whose price is this precompute and its disk).

Then starts ``labeldist serve --stores WORK/stores`` on a free port of 127.0.0.1. It asks both stores for the
same 8 pairwise minibatches (same seed) and checks that they draw the same items and that the dense matrix holds
the values the kNN-only store computes on demand. It has the service read the dense matrix's row blocks once
(timed), then measures the minibatches/s the trainer receives: :class:`labeldist.client.data.MinibatchStream` (size 50,
5 neighbours, 8 anchors per request, prefetch depth 8 on 2 threads) over dummy features, a warm-up, then a fixed
number of steps, ``--repeats`` times, median. Each repeat uses a new seed, so few pairs come from the service's
cache of computed pairs. Each store is measured with and without the pairwise matrix (without: the
anchor-to-item distances only, the reference), with the CPU time per minibatch of the service (psutil) and of
this client process, which tells which side the time goes to. Prints the dense / kNN-only ratio of each, and
whether each path reaches the 50 and 100 minibatches/s that a 20 ms or 10 ms GPU step consumes. The machine is
shared: run it under ``nice``; the ratios are the figures to read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from serving import start_service, tree_cpu_seconds  # noqa: E402

from labeldist.client import FeatureInputs, LabelDistClient, MinibatchStream  # noqa: E402
from labeldist.store import read_manifest  # noqa: E402

KNN, DENSE = "coco-train-knn", "coco-train-dense"
TIMES = "build-times.json"  # wall seconds of each build step, kept in --work for runs that reuse the stores


# ---------------------------------------------------------------- building
def _run_timed(command: list[str], log: Path) -> float:
    """Run ``command`` (output to ``log``) and return its wall seconds; exit naming the log when it fails."""
    print(f"   $ {' '.join(command)}", flush=True)
    t0 = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"failed ({done.returncode}) after {seconds:.1f} s: {log}\n{log.read_text()[-3000:]}")
    return seconds


def _complete(path: Path) -> bool:
    manifest = read_manifest(str(path)) if path.exists() else None
    return bool(manifest and manifest.get("complete") is True)


def build(args: argparse.Namespace) -> dict[str, float]:
    """The split and both stores under ``args.work``; returns the wall seconds of each step (measured now, or
    read back from an earlier run that built it)."""
    work = Path(args.work)
    (work / "stores").mkdir(parents=True, exist_ok=True)
    times_file = work / TIMES
    times: dict[str, float] = json.loads(times_file.read_text()) if times_file.exists() else {}
    train = work / "coco" / "train.json"
    if args.rebuild or not train.exists():
        trainer_cli = [sys.executable, "-m", "labeldist.trainer.cli"]
        times["split"] = _run_timed(
            [*trainer_cli, "split", args.input, "--out", str(work / "coco"), "--seed", str(args.split_seed)],
            work / "split.log",
        )
        times_file.write_text(json.dumps(times, indent=1))
    for name, extra in ((KNN, ["--knn-only"]), (DENSE, [])):
        out = work / "stores" / name
        if _complete(out) and not args.rebuild:
            continue
        if out.exists():
            shutil.rmtree(out)
        command = [
            sys.executable,
            "-m",
            "labeldist.cli",
            "precompute",
            "captions",
            str(train),
            *extra,
            "--k",
            str(args.k),
            "--dataset",
            "coco-train",
            "--out",
            str(out),
            "--no-progress",
        ]
        if args.precompute_workers:
            command += ["--workers", str(args.precompute_workers)]
        load = os.getloadavg()[0]
        times[name] = _run_timed(command, work / f"{name}.log")
        times[f"{name}:load"] = load
        times_file.write_text(json.dumps(times, indent=1))
    return times


def disk_bytes(path: Path) -> tuple[int, int]:
    """(bytes on disk as ``du`` counts them, apparent bytes) of every file under ``path``."""
    used = apparent = 0
    for p in path.rglob("*"):
        if p.is_file():
            st = p.stat()
            used += st.st_blocks * 512
            apparent += st.st_size
    return used, apparent


# ---------------------------------------------------------------- the service
class CPUTime:
    """CPU seconds (user + system) of a process and its children."""

    def __init__(self, pid: int) -> None:
        self._pid = pid

    def __call__(self) -> float:
        return tree_cpu_seconds(self._pid)


# ---------------------------------------------------------------- measuring
def prime_dense(client: LabelDistClient, store: str, n_items: int, block_rows: int) -> tuple[float, int]:
    """Ask for one anchor in each row block of the dense matrix, so the service reads every block from disk into
    its row-block cache once, before any timing (else the first repeat alone pays the reads). Returns the seconds
    it took and the number of requests."""
    anchors = np.arange(0, n_items, block_rows)
    t0 = time.perf_counter()
    for start in range(0, anchors.size, 8):
        client.batches(store, anchors=anchors[start : start + 8], size=2, neighbors=1, seed=0)
    return time.perf_counter() - t0, -(-anchors.size // 8)


def measure(
    client: LabelDistClient,
    store: str,
    inputs: FeatureInputs,
    args: argparse.Namespace,
    *,
    pairwise: bool,
    steps: int,
    seed: int,
    server_cpu: CPUTime,
) -> dict[str, float]:
    """One repeat: minibatches/s the consumer receives over ``steps`` after ``args.warmup`` untimed ones, and
    the service's and this process's CPU ms per minibatch over the timed steps."""
    stream = MinibatchStream(
        client,
        store,
        inputs,
        size=args.size,
        neighbors=args.neighbors,
        pairwise=pairwise,
        anchors_per_request=args.anchors_per_request,
        prefetch=args.prefetch,
        workers=args.workers,
        epochs=1000,
        seed=seed,
    )
    it = iter(stream)
    for _ in range(args.warmup):  # connection, first requests, the prefetch queue filled
        next(it)
    s0, c0, t0 = server_cpu(), time.process_time(), time.perf_counter()
    for _ in range(steps):
        batch = next(it)
    elapsed = time.perf_counter() - t0
    s1, c1 = server_cpu(), time.process_time()
    it.close()
    expected = (args.size, args.size) if pairwise else None
    got = None if batch.pairwise is None else tuple(batch.pairwise.shape[-2:])
    if got != expected:
        raise SystemExit(f"{store}: pairwise matrix of shape {got}, expected {expected}")
    return {
        "rate": steps / elapsed,
        "server_ms": 1e3 * (s1 - s0) / steps,
        "client_ms": 1e3 * (c1 - c0) / steps,
    }


def verdict(rate: float, needs: tuple[float, float]) -> str:
    low, high = sorted(needs)
    if rate >= high:
        return f"yes, >= {high:.0f}/s"
    if rate >= low:
        return f"only >= {low:.0f}/s"
    return f"no ({rate / low:.2f}x of {low:.0f}/s)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--work", default="/tmp/bench-pairwise", help="folder for the split, the stores and logs")
    p.add_argument("--input", default="data/coco/coco_karpathy_test.json", help="caption file that is split")
    p.add_argument("--split-seed", type=int, default=0, help="seed of trainer split")
    p.add_argument("--k", type=int, default=100, help="neighbours per item in both stores")
    p.add_argument("--precompute-workers", type=int, default=0, help="LocalCluster workers (0: the CLI's default)")
    p.add_argument("--rebuild", action="store_true", help="build the split and both stores again (and time them)")
    p.add_argument("--size", type=int, default=50, help="minibatch size (Kim et al.: 50 for captions)")
    p.add_argument("--neighbors", type=int, default=5, help="nearest neighbours in each minibatch")
    p.add_argument("--anchors-per-request", type=int, default=8, help="minibatches per HTTP request")
    p.add_argument("--prefetch", type=int, default=8, help="prefetch queue depth (requests)")
    p.add_argument("--workers", type=int, default=2, help="prefetch threads")
    p.add_argument("--steps-dense", type=int, default=200, help="minibatches timed per repeat, dense store")
    p.add_argument("--steps-knn", type=int, default=60, help="minibatches timed per repeat, kNN-only store")
    p.add_argument("--warmup", type=int, default=16, help="minibatches received before timing, per repeat")
    p.add_argument("--repeats", type=int, default=3, help="repeats of each configuration (median)")
    p.add_argument("--seed", type=int, default=20261124, help="first minibatch seed (one more per repeat)")
    p.add_argument(
        "--gpu-step-ms",
        type=float,
        nargs=2,
        default=(10.0, 20.0),
        help="GPU step of ResNet-34 on one minibatch, fast and slow end",
    )
    args = p.parse_args(argv)
    os.chdir(REPO)  # --input and the CLIs are relative to the repository

    print(f"machine: {os.cpu_count()} CPU cores, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"\n1. building under {args.work} (what is missing)", flush=True)
    times = build(args)
    stores = Path(args.work) / "stores"
    n_items = read_manifest(str(stores / DENSE))["n_items"]
    print(f"   split: {n_items:,} training images")
    sizes: dict[str, tuple[int, int]] = {}
    for name in (KNN, DENSE):
        sizes[name] = disk_bytes(stores / name)
        load = times.get(f"{name}:load")
        when = f" (load average {load:.1f} at its start)" if load is not None else ""
        print(
            f"   precompute {name}: {times.get(name, float('nan')):.1f} s wall{when}; on disk "
            f"{sizes[name][0] / 2**20:.1f} MiB (du), {sizes[name][1] / 2**20:.1f} MiB apparent"
        )
    ratio_t = times.get(DENSE, float("nan")) / times.get(KNN, float("nan"))
    print(
        f"   dense / kNN-only precompute: {ratio_t:.2f}x the time, "
        f"{sizes[DENSE][0] / max(sizes[KNN][0], 1):.1f}x the disk"
    )

    inputs = FeatureInputs(np.zeros((n_items, 4), dtype=np.float32))
    needs = tuple(1e3 / ms for ms in args.gpu_step_ms)
    print(
        f"\n2. minibatches/s received by MinibatchStream (size {args.size}, {args.neighbors} neighbours, "
        f"{args.anchors_per_request} anchors per request, prefetch {args.prefetch} on {args.workers} threads; "
        f"{args.warmup} warm-up steps, median of {args.repeats} repeats)",
        flush=True,
    )
    proc, url = start_service(stores)
    results: dict[tuple[str, bool], list[dict[str, float]]] = {}
    try:
        server_cpu = CPUTime(proc.pid)
        with LabelDistClient(url, timeout=120) as client:
            available = {s["name"]: s.get("available") for s in client.stores()}
            for name in (KNN, DENSE):
                if not available.get(name):
                    raise SystemExit(f"the service does not serve {name}: {available}")
            block_rows = int(read_manifest(str(stores / DENSE))["block_rows"])
            secs, requests = prime_dense(client, DENSE, n_items, block_rows)
            print(
                f"   {DENSE}: the service read its {-(-n_items // block_rows)} row blocks of {block_rows} rows "
                f"({n_items:,} x {n_items:,} float32) from disk in {secs:.2f} s ({requests} requests), before "
                "the timed runs"
            )
            same = [
                client.batches(
                    name,
                    anchors=np.arange(8),
                    size=args.size,
                    neighbors=args.neighbors,
                    pairwise=True,
                    seed=args.seed - 1,
                )
                for name in (DENSE, KNN)
            ]
            if not np.array_equal(same[0].members, same[1].members):
                raise SystemExit("the two stores drew different minibatches for the same seed (kNN lists differ)")
            diff = float(np.abs(same[0].pairwise - same[1].pairwise).max())
            print(f"   same seed, both stores: the same 8 minibatches; pairwise matrices differ by at most {diff:.3g}")
            seed = args.seed
            for pairwise in (False, True):
                for name, steps in ((DENSE, args.steps_dense), (KNN, args.steps_knn)):
                    runs = results.setdefault((name, pairwise), [])
                    for _ in range(args.repeats):
                        runs.append(
                            measure(
                                client,
                                name,
                                inputs,
                                args,
                                pairwise=pairwise,
                                steps=steps,
                                seed=seed,
                                server_cpu=server_cpu,
                            )
                        )
                        seed += 1
                        print(
                            f"   {name:17s} pairwise={'yes' if pairwise else 'no ':3s} {runs[-1]['rate']:8.1f}/s",
                            flush=True,
                        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    def med(name: str, pairwise: bool, key: str) -> float:
        return statistics.median(r[key] for r in results[(name, pairwise)])

    print(f"\n   load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    header = (
        "| store | pairwise | minibatches/s (runs) | ms / minibatch | service CPU ms / mb | client CPU ms / mb "
        f"| dense / kNN-only | feeds a {args.gpu_step_ms[1]:.0f} / {args.gpu_step_ms[0]:.0f} ms GPU step |"
    )
    print("\n" + header)
    print("|" + "---|" * header.count(" | ") + "---|")
    for pairwise in (False, True):
        for name in (DENSE, KNN):
            rate = med(name, pairwise, "rate")
            runs = ", ".join(f"{r['rate']:.1f}" for r in results[(name, pairwise)])
            ratio = f"{rate / med(KNN, pairwise, 'rate'):.1f}x" if name != KNN else "1 (baseline)"
            print(
                f"| {name} | {'yes' if pairwise else 'no'} | **{rate:.1f}** ({runs}) | {1e3 / rate:.2f} "
                f"| {med(name, pairwise, 'server_ms'):.2f} | {med(name, pairwise, 'client_ms'):.2f} "
                f"| {ratio} | {verdict(rate, needs)} |"
            )
    print(
        f"\nGPU step of ResNet-34 on {args.size} images: {args.gpu_step_ms[0]:.0f}-{args.gpu_step_ms[1]:.0f} ms, "
        f"i.e. {min(needs):.0f}-{max(needs):.0f} minibatches/s needed. CPU ms are per minibatch received, "
        "summed over all threads (the service's includes its on-demand WMDs)."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
