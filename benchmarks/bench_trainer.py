"""Can the data path keep a training step fed? Minibatches per second that the trainer's client delivers
through HTTP (with and without the prefetch queue) against the time of one training step.

    .venv/bin/python benchmarks/bench_trainer.py --stores /tmp/trainer-stores --store mpii-train-pose \\
        --features /tmp/trainer-runs/features/mpii-train-pose.npy

starts ``labeldist serve`` on a free port (or uses ``--url``), then measures:

1. minibatches/s of :class:`trainer.data.MinibatchStream` (size 150, 5 neighbours, as Kim et al. for poses),
   with prefetch (threads x depth) and without (one request at a time, consumed as it arrives), and with the
   pairwise matrix the ladder loss needs;
2. one optimiser step of the MLP head (in -> 512 -> 128) with the log-ratio loss on 150 items, on this CPU
   (and on CUDA when present);
3. a ResNet-34 step on 150 images cannot be measured without torchvision (not installed here): it is
   estimated from FLOPs instead.
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
import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trainer.client import LabelDistClient  # noqa: E402
from trainer.data import FeatureInputs, MinibatchStream  # noqa: E402
from trainer.losses import LogRatioLoss  # noqa: E402
from trainer.models import EmbeddingMLP  # noqa: E402

RESNET34_GFLOPS = 3.6  # forward, one 224 x 224 image (He et al. 2016, Table 1)


def start_service(stores: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "labeldist.cli", "serve", "--stores", stores, "--port", str(port)],
        cwd=REPO, env={**os.environ, "LABELDIST_ACCESS_LOG": "false"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.3)
    proc.terminate()
    raise TimeoutError(f"labeldist serve at {url} did not come up")


def stream_rate(
    client: LabelDistClient, store: str, inputs: FeatureInputs, steps: int, size: int, seed: int, **kw
) -> float:
    """Minibatches per second a consumer that does nothing else receives."""
    stream = MinibatchStream(client, store, inputs, size=size, neighbors=5, epochs=100, seed=seed, **kw)
    it = iter(stream)
    next(it)  # warm-up: connection, first request
    t0 = time.perf_counter()
    for _ in range(steps):
        next(it)
    rate = steps / (time.perf_counter() - t0)
    it.close()
    return rate


def step_time(in_dim: int, size: int, device: torch.device, repeats: int) -> float:
    """Seconds of one optimiser step of the MLP head with the log-ratio loss on one minibatch."""
    torch.manual_seed(0)
    model = EmbeddingMLP(in_dim, 128, (512,)).to(device)
    opt = torch.optim.Adam(model.parameters())
    loss_fn = LogRatioLoss()
    x = torch.randn(1, size, in_dim, device=device)
    y = torch.rand(1, size - 1, device=device) + 0.1

    def step() -> None:
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(10):
        step()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stores", help="stores folder to serve (starts labeldist serve)")
    p.add_argument("--url", help="an already running service instead")
    p.add_argument("--store", default="mpii-train-pose")
    p.add_argument("--features", required=True)
    p.add_argument("--steps", type=int, default=2000, help="minibatches timed per configuration")
    p.add_argument("--size", type=int, default=150, help="minibatch size (Kim et al.: 150 poses, 50 captions)")
    p.add_argument("--seed", type=int, default=12345, help="minibatch seed (a new one: nothing cached)")
    args = p.parse_args()
    if not (args.stores or args.url):
        p.error("give --stores or --url")
    proc, url = start_service(args.stores) if args.url is None else (None, args.url)
    torch.set_num_threads(1)  # as the fit loop on CPU
    inputs = FeatureInputs(args.features)
    print(f"machine: {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}; torch {torch.__version__}")
    try:
        with LabelDistClient(url) as client:
            print(f"\n1. minibatches/s through HTTP ({args.store}, size {args.size}, 5 neighbours, {args.steps} timed)")
            configs = [
                ("no prefetch: 1 request in flight, 1 anchor per request", dict(prefetch=1, workers=1,
                                                                                 anchors_per_request=1)),
                ("prefetch: 2 threads, depth 8, 8 anchors per request", dict(prefetch=8, workers=2)),
                ("prefetch: 4 threads, depth 16, 8 anchors per request", dict(prefetch=16, workers=4)),
                ("prefetch 2 x 8, with the batch's pairwise matrix", dict(prefetch=8, workers=2, pairwise=True)),
            ]  # fmt: skip
            rates = {}
            for i, (name, kw) in enumerate(configs):  # a seed each: no configuration reuses another's cached pairs
                rates[name] = stream_rate(client, args.store, inputs, args.steps, args.size, args.seed + i, **kw)
                print(f"   {rates[name]:8.1f} minibatches/s   {name}")
        in_dim = int(np.prod(inputs.item_shape))
        cpu = step_time(in_dim, args.size, torch.device("cpu"), 500)
        print(f"\n2. one training step, MLP {in_dim}->512->128 + log-ratio on {args.size} items")
        print(f"   CPU (1 thread): {cpu * 1e3:.2f} ms  = {1 / cpu:.0f} steps/s")
        if torch.cuda.is_available():
            gpu = step_time(in_dim, args.size, torch.device("cuda"), 500)
            print(f"   CUDA ({torch.cuda.get_device_name()}): {gpu * 1e3:.2f} ms = {1 / gpu:.0f} steps/s")
        best = max(rates.values())
        print(f"   -> the prefetched stream delivers {best:.0f} minibatches/s: {best * cpu:.1f} x what the CPU "
              "step consumes")  # fmt: skip
        flop = 150 * RESNET34_GFLOPS * 1e9 * 3
        print("\n3. ResNet-34 step on 150 images at 224 x 224: not measured (torchvision is not installed here)")
        print(f"   estimate: 150 x {RESNET34_GFLOPS} GFLOP forward x 3 (forward + backward) = {flop / 1e12:.2f} TFLOP"
              " per step")  # fmt: skip
        for name, tflops in (("GPU sustaining 100 TFLOP/s (bf16 convnet, good H100 case)", 100),
                             ("GPU sustaining 30 TFLOP/s (A100-class, typical)", 30)):  # fmt: skip
            t = flop / (tflops * 1e12)
            print(f"   {name}: {t * 1e3:.0f} ms/step -> needs {1 / t:.0f} minibatches/s (and {150 / t:.0f} images/s)")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
