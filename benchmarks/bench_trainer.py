"""Can the data path keep a training step fed? Two modes.

**Images** (``--images ROOT``): the image trainer as a user runs it, against the bare backbone's step rate
measured in the same run (the baseline), on CPU or CUDA:

    .venv/bin/python benchmarks/bench_trainer.py --stores /tmp/bench/stores --store mpii-pose \
        --images /tmp/bench/mpii-128 --backbone resnet18 --input-size 64 128 --size 50 --steps 12

prints, per input size: (a) the bare backbone step (embedding head + log-ratio loss on uint8 images already on
the device: normalisation, mixed precision and channels-last as the trainer does; the median of steps timed
before and after the others, so that a change of load weighs on both sides), in images/s; (b) the data
path alone: the service's minibatches and the images decoded by the loader's worker processes, consumed as
fast as they come; (c) the service alone (indices and distances, no image); (d) ``trainer fit`` itself for
``--steps`` steps (after a warm-up), with each ``--image-cache`` (``on``: decoded once into a shared uint8
cache, each step a gather; ``off``: decoded in the loader's processes every step), the kind's augmentation
applied in batch on the device, its images/s as a ratio of (a) and the share of its wall time spent waiting
for data. What limits (d) is the slowest of (a), (b) and (c), plus the augmentation's own cost.

**Features** (``--features``): minibatches per second that the trainer's client delivers through HTTP (with
and without the prefetch queue) against the time of one training step of the MLP head.

    .venv/bin/python benchmarks/bench_trainer.py --stores /tmp/trainer-stores --store mpii-train-pose \\
        --features /tmp/trainer-runs/features/mpii-train-pose.npy

both modes start ``labeldist serve`` on a free port (or uses ``--url``), then measures:

1. minibatches/s of :class:`labeldist.client.data.MinibatchStream` (size 150, 5 neighbours, as Kim et al. for poses),
   with prefetch (threads x depth) and without (one request at a time, consumed as it arrives), and with the
   pairwise matrix the ladder loss needs;
2. one optimiser step of the MLP head (in -> 512 -> 128) with the log-ratio loss on 150 items, on this CPU
   (and on CUDA when present);
3. a ResNet-34 step on 150 images estimated from FLOPs (the images mode measures it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from serving import start_service  # noqa: E402

from labeldist.client import FeatureInputs, LabelDistClient, MinibatchStream  # noqa: E402
from labeldist.trainer.inputs.images import open_images  # noqa: E402
from labeldist.trainer.losses import LogRatioLoss  # noqa: E402
from labeldist.trainer.training.config import FitConfig  # noqa: E402
from labeldist.trainer.training.fit import fit, pick_device  # noqa: E402
from labeldist.trainer.training.models import EmbeddingMLP, ResNetEmbedding  # noqa: E402
from labeldist.trainer.training.runtime import autocast, default_loader_workers  # noqa: E402

RESNET34_GFLOPS = 3.6  # forward, one 224 x 224 image (He et al. 2016, Table 1)


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


def bare_step(args: argparse.Namespace, size: int, device: torch.device, repeats: int) -> list[float]:
    """Seconds of ``repeats`` steps of the backbone alone: uint8 images already on the device, the trainer's
    normalisation, precision, channels-last and loss, no data path."""
    torch.manual_seed(0)
    channels_last = device.type == "cuda"
    model = ResNetEmbedding(args.backbone, 128, channels_last=channels_last).to(device).train()
    forward = torch.compile(model) if args.compile else model
    opt = torch.optim.Adam(model.parameters())
    loss_fn = LogRatioLoss()
    amp, scaler = autocast(device, args.precision)
    x = torch.randint(0, 256, (1, args.size, 3, size, size), dtype=torch.uint8, device=device)
    y = torch.rand(1, args.size - 1, device=device) + 0.1

    def step() -> None:
        with amp:
            emb = forward(x)
        loss = loss_fn(emb.float(), y)
        opt.zero_grad(set_to_none=True)
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        float(loss.detach())  # as the fit loop: one sync per step

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times


def data_rate(
    client: LabelDistClient, args: argparse.Namespace, inputs, steps: int, seed: int, processes: int | None
) -> float:
    """Minibatches/s a consumer that does nothing else receives (images decoded when ``processes`` is set)."""
    stream = MinibatchStream(
        client,
        args.store,
        inputs,
        size=args.size,
        neighbors=5,
        epochs=100,
        seed=seed,
        anchors_per_request=1 if processes is not None else 8,
        prefetch=args.prefetch,
        processes=processes,
        pin_memory=False,
    )
    it = iter(stream)
    for _ in range(min(args.warmup, 3)):
        next(it)
    t0 = time.perf_counter()
    for _ in range(steps):
        next(it)
    rate = steps / (time.perf_counter() - t0)
    it.close()
    return rate


def fit_rate(
    url: str, args: argparse.Namespace, size: int, workers: int, cache: str = "auto"
) -> tuple[float, float, float]:
    """``trainer fit`` for warm-up + ``--steps`` steps: images/s, data-wait share and median step seconds of
    the timed steps (read from its log.jsonl)."""
    out = Path(tempfile.mkdtemp(prefix="bench-fit-"))
    try:
        config = FitConfig(
            url=url,
            store=args.store,
            out=str(out),
            images=args.images,
            backbone=args.backbone,
            input_size=size,
            size=args.size,
            max_steps=args.warmup + args.steps,
            seed=1,
            progress=False,
            checkpoint_every=10**9,
            loader_workers=workers,
            device=args.device,
            precision=args.precision,
            compile=args.compile,
            prefetch=args.prefetch,
            image_cache=cache,
            threads=args.threads,
        )
        fit(config)
        rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
        steps = [r for r in rows if r["event"] == "step"][args.warmup :]
        wait = sum(r["data_wait_s"] for r in steps)
        total = wait + sum(r["step_s"] for r in steps)
        return len(steps) * args.size / total, wait / total, float(np.median([r["step_s"] for r in steps]))
    finally:
        shutil.rmtree(out, ignore_errors=True)


def images_mode(args: argparse.Namespace, url: str) -> None:
    device = pick_device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    workers = default_loader_workers() if args.loader_workers is None else args.loader_workers
    name = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    print(
        f"device: {name}; {args.backbone}, minibatch {args.size}, precision {args.precision}, "
        f"{workers} loader processes, compile {args.compile}"
    )
    print(
        "| input px | image cache | bare backbone img/s (baseline) | data path alone img/s | service alone img/s | "
        "trainer fit img/s | fit / bare | data wait share | bare step ms | fit step ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    with LabelDistClient(url) as client:
        ids = client.ids(args.store)
        for i, size in enumerate(args.input_size):
            before = bare_step(args, size, device, args.repeats)
            inputs = open_images(args.images, ids, input_size=size)
            decoded = data_rate(client, args, inputs, args.data_steps, args.seed + 2 * i, workers) * args.size
            dummy = FeatureInputs(np.zeros((len(ids), 1), dtype=np.float32))
            # 8 minibatches a request and 8 requests ahead: time enough of them that the queue's fill does not count
            service = data_rate(client, args, dummy, 20 * args.data_steps, args.seed + 2 * i + 1, None) * args.size
            for cache in args.image_cache:
                # "off": decoded in the loader's processes every step; "on": decoded once into shared memory,
                # each step a gather, augmented on the device
                rate, wait, step = fit_rate(url, args, size, workers, cache)
                # the baseline measured before and after each fit, so that a change of load on a shared machine
                # weighs on both sides of the ratio
                after = bare_step(args, size, device, args.repeats)
                bare = float(np.median(before + after))
                before = after
                ratio = rate * bare / args.size
                print(
                    f"| {size} | {cache} | {args.size / bare:.0f} | {decoded:.0f} | {service:.0f} | {rate:.0f} | "
                    f"{ratio:.2f} | {wait:.1%} | {bare * 1e3:.1f} | {step * 1e3:.1f} |"
                )


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--stores", help="stores folder to serve (starts labeldist serve)")
    p.add_argument("--url", help="an already running service instead")
    p.add_argument("--store", default="mpii-train-pose")
    p.add_argument("--features", help="features mode: the feature array of the store")
    p.add_argument("--images", help="images mode: the store's images (trainer render --out)")
    p.add_argument("--backbone", default="resnet18", help="images: torchvision ResNet")
    p.add_argument("--input-size", type=int, nargs="+", default=[64, 128], help="images: input sides to measure")
    p.add_argument("--precision", default="auto", help="images: auto (bf16 on CUDA), bf16, fp16, fp32")
    p.add_argument("--compile", action="store_true", help="images: torch.compile the model")
    p.add_argument("--device", default="auto")
    p.add_argument("--loader-workers", type=int, help="images: decoding processes (default: the trainer's)")
    p.add_argument(
        "--image-cache",
        nargs="+",
        default=["on", "off"],
        choices=("on", "off", "auto"),
        help="images: fit with the decoded-once cache, without it, or both (default: %(default)s)",
    )
    p.add_argument("--threads", type=int, help="torch CPU threads of the fit and the bare step (default: torch's)")
    p.add_argument("--prefetch", type=int, default=8, help="requests in flight ahead of the consumer")
    p.add_argument("--warmup", type=int, default=3, help="images: steps before timing")
    p.add_argument("--repeats", type=int, default=10, help="images: bare backbone steps timed")
    p.add_argument("--data-steps", type=int, default=20, help="images: minibatches timed for the data path alone")
    p.add_argument(
        "--steps",
        type=int,
        default=2000,
        help="features: minibatches timed per configuration; images: trainer fit steps timed",
    )
    p.add_argument("--size", type=int, default=150, help="minibatch size (Kim et al.: 150 poses, 50 captions)")
    p.add_argument("--seed", type=int, default=12345, help="minibatch seed (a new one: nothing cached)")
    args = p.parse_args()
    if not (args.stores or args.url):
        p.error("give --stores or --url")
    if (args.features is None) == (args.images is None):
        p.error("give --features (features mode) or --images (images mode)")
    proc, url = start_service(args.stores) if args.url is None else (None, args.url)
    if args.images:
        try:
            print(
                f"machine: {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}; torch {torch.__version__}"
            )
            images_mode(args, url)
            print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=15)
        return 0
    torch.set_num_threads(1)  # as the fit loop on CPU
    inputs = FeatureInputs(args.features)
    print(f"machine: {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}; torch {torch.__version__}")
    try:
        with LabelDistClient(url) as client:
            print(f"\n1. minibatches/s through HTTP ({args.store}, size {args.size}, 5 neighbours, {args.steps} timed)")
            configs = [
                (
                    "no prefetch: 1 request in flight, 1 anchor per request",
                    dict(prefetch=1, workers=1, anchors_per_request=1),
                ),
                ("prefetch: 2 threads, depth 8, 8 anchors per request", dict(prefetch=8, workers=2)),
                ("prefetch: 4 threads, depth 16, 8 anchors per request", dict(prefetch=16, workers=4)),
                ("prefetch 2 x 8, with the batch's pairwise matrix", dict(prefetch=8, workers=2, pairwise=True)),
            ]
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
        print(
            f"   -> the prefetched stream delivers {best:.0f} minibatches/s: {best * cpu:.1f} x what the CPU "
            "step consumes"
        )
        flop = 150 * RESNET34_GFLOPS * 1e9 * 3
        print("\n3. ResNet-34 step on 150 images at 224 x 224: not measured (torchvision is not installed here)")
        print(
            f"   estimate: 150 x {RESNET34_GFLOPS} GFLOP forward x 3 (forward + backward) = {flop / 1e12:.2f} TFLOP"
            " per step"
        )
        for name, tflops in (
            ("GPU sustaining 100 TFLOP/s (bf16 convnet, good H100 case)", 100),
            ("GPU sustaining 30 TFLOP/s (A100-class, typical)", 30),
        ):
            t = flop / (tflops * 1e12)
            print(f"   {name}: {t * 1e3:.0f} ms/step -> needs {1 / t:.0f} minibatches/s (and {150 / t:.0f} images/s)")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
