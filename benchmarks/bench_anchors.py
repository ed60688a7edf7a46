"""What every member of a minibatch as an anchor costs: pairwise minibatches against one-anchor ones, and the step.

    nice -n 10 .venv/bin/python benchmarks/bench_anchors.py --work /tmp/bench-anchors

``--anchors all`` needs each minibatch's pairwise label distances (n x n instead of the anchor's n - 1). Builds
what is missing under ``--work``: ``trainer split`` of the shipped MPII poses (2,366 training poses, seed 0) and
two pose stores of the training split, one dense and one ``--knn-only`` (whose pairs outside the kNN lists are
computed on demand). Then measures, each ``--repeats`` times (median):

1. **The data path**: minibatches/s that :class:`labeldist.client.MinibatchStream` delivers (size 32, 5
   neighbours, the trainer's prefetch over dummy features) with the pairwise matrix (``all``) and without it
   (``first``, the baseline), from each store, read in this process (:class:`labeldist.client.LocalSource`,
   ``trainer fit --stores``) and through ``labeldist serve`` on 127.0.0.1. Each repeat draws from a new seed.
2. **The step**: one training step of ResNet-18 at 64 px on a minibatch of 32 (forward, loss, backward, Adam), and
   the loss alone (forward and backward on fixed embeddings), for the log-ratio and dense triplet losses with one
   anchor (the baseline) and with every member an anchor.

Prints each figure beside its baseline from the same run and the ratio. The machine is shared: run it under
``nice``, idle otherwise; the ratios are the figures to read (BENCHMARKS.md, "Every member an anchor").
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from serving import start_service  # noqa: E402

from labeldist.client import FeatureInputs, LabelDistClient, LocalSource, MinibatchStream  # noqa: E402
from labeldist.trainer.losses import make_loss  # noqa: E402
from labeldist.trainer.training.models import ResNetEmbedding  # noqa: E402

DENSE, KNN = "mpii-train-pose", "mpii-train-pose-knn"


def build(work: Path) -> None:
    """The split and the two stores, unless they are there."""
    python = sys.executable
    if not (work / "mpii" / "split.json").exists():
        subprocess.run(
            [
                python,
                "-m",
                "labeldist.trainer.cli",
                "split",
                "data/mpii/mpii_valid_2958.csv",
                "--out",
                str(work / "mpii"),
            ],
            cwd=REPO,
            check=True,
        )
    for name, extra in ((DENSE, []), (KNN, ["--knn-only"])):
        if (work / "stores" / name / "zarr.json").exists():
            continue
        command = [python, "-m", "labeldist.cli", "precompute", "pose", str(work / "mpii" / "train.csv")]
        command += ["--normalization", "center_scale", "--k", "100", "--out", str(work / "stores" / name)]
        subprocess.run([*command, *extra, "--no-progress"], cwd=REPO, check=True)


def stream_rate(source: object, store: str, inputs: FeatureInputs, *, pairwise: bool, seed: int, steps: int) -> float:
    """Minibatches/s the trainer's stream delivers over ``steps`` after 20 untimed ones."""
    stream = MinibatchStream(
        source, store, inputs, size=32, neighbors=5, pairwise=pairwise, epochs=1000, seed=seed, anchors_per_request=8
    )
    it = iter(stream)
    for _ in range(20):
        next(it)
    t0 = time.perf_counter()
    for _ in range(steps):
        batch = next(it)
    rate = steps / (time.perf_counter() - t0)
    it.close()
    if (batch.pairwise is not None) != pairwise:
        raise SystemExit(f"{store}: asked pairwise={pairwise}, got {batch.pairwise is not None}")
    return rate


def data_path(work: Path, repeats: int, steps: int) -> None:
    print("1. data path: minibatches/s of 32 (5 neighbours), median of", repeats, "repeats")
    print(f"{'store':>24} {'read by':>12} {'first':>9} {'all':>9} {'all/first':>10}")
    inputs = FeatureInputs(np.zeros((2366, 8), dtype=np.float32))
    proc, url = start_service(work / "stores")
    try:
        sources = {"LocalSource": LocalSource(work / "stores"), "service": LabelDistClient(url)}
        for store in (DENSE, KNN):
            for name, source in sources.items():
                rates = {
                    pairwise: statistics.median(
                        stream_rate(source, store, inputs, pairwise=pairwise, seed=100 + r, steps=steps)
                        for r in range(repeats)
                    )
                    for pairwise in (False, True)
                }
                print(
                    f"{store:>24} {name:>12} {rates[False]:9.0f} {rates[True]:9.0f} {rates[True] / rates[False]:10.2f}"
                )
    finally:
        proc.terminate()
        proc.wait()


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def step_time(repeats: int) -> None:
    print(f"\n2. step: ResNet-18, 64 px, minibatch of 32, {torch.get_num_threads()} threads, median of {repeats}")
    print(f"{'loss':>14} {'what':>22} {'first ms':>9} {'all ms':>9} {'all/first':>10}")
    g = torch.Generator().manual_seed(0)
    images = torch.rand(32, 3, 64, 64, generator=g)
    points = torch.rand(32, 16, generator=g)
    pairwise = torch.cdist(points, points)[None]
    distances = pairwise[:, 0, 1:]
    for name in ("log_ratio", "dense_triplet"):
        times = {}
        for anchors in ("first", "all"):
            torch.manual_seed(0)
            model = ResNetEmbedding("resnet18", 128)
            loss_fn = make_loss(name, anchors=anchors)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

            def step(model=model, loss_fn=loss_fn, optimizer=optimizer) -> None:
                loss = loss_fn(model(images)[None], distances, pairwise)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

            fixed = torch.randn(1, 32, 128, generator=g, requires_grad=True)

            def loss_only(loss_fn=loss_fn, fixed=fixed) -> None:
                loss_fn(fixed, distances, pairwise).backward()

            step()  # first call: allocations
            times[anchors] = (median_seconds(step, repeats), median_seconds(loss_only, repeats * 10))
        for i, what in enumerate(("training step", "loss forward+backward")):
            first, every = times["first"][i] * 1e3, times["all"][i] * 1e3
            print(f"{name:>14} {what:>22} {first:9.2f} {every:9.2f} {every / first:10.2f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/bench-anchors"))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=300, help="timed minibatches per repeat")
    args = p.parse_args(argv)
    build(args.work)
    data_path(args.work, args.repeats, args.steps)
    step_time(args.repeats * 4)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
