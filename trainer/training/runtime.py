"""Where and how a run computes: the device, the seeds, mixed precision (autocast), the threads and the loader
workers."""

from __future__ import annotations

import contextlib
import os
import random
from typing import Any

import numpy as np
import torch

from labeldist.core.threads import usable_cores
from labeldist.errors import UsageError
from labeldist.trainer.training.config import FitConfig


def pick_device(name: str = "auto") -> torch.device:
    """``auto``: CUDA when available, else CPU; or the device named."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - seeds third-party code that draws from the legacy global generator
    torch.manual_seed(seed)


PRECISIONS = ("auto", "bf16", "fp16", "fp32")


def autocast(
    device: torch.device, precision: str = "auto"
) -> tuple[contextlib.AbstractContextManager[Any], torch.amp.GradScaler | None]:
    """The forward pass's mixed precision: ``auto`` is bfloat16 on CUDA where supported, else float16 with a
    gradient scaler, and float32 on CPU; ``fp32`` never casts. The loss is computed outside, in float32."""
    if precision not in PRECISIONS:
        raise UsageError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "fp32" or (precision == "auto" and device.type != "cuda"):
        return contextlib.nullcontext(), None
    if precision == "auto":
        precision = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16), None
    if device.type != "cuda":
        raise UsageError("--precision fp16 needs CUDA (use bf16 or fp32 on the CPU)")
    return torch.autocast("cuda", dtype=torch.float16), torch.amp.GradScaler("cuda")


def default_loader_workers() -> int:
    """Image-decoding processes by default: three quarters of the CPU cores less one, at least 1, at most 16.

    The rest is the training loop's and the service's: on one H100 with 16 cores, ResNet-34 at 224 px ran at
    0.79 of the bare backbone's rate with 15 decoding processes, 0.87 with 13 and 0.89 with 11
    (benchmarks/bench_trainer.py, BENCHMARKS.md)."""
    return max(1, min((os.cpu_count() or 2) * 3 // 4 - 1, 16))


def default_threads(images: bool) -> int:
    """torch's intra-op threads on a CPU when ``--threads`` is not given: one for the MLP over features, every
    usable core for a CNN over images.

    The MLP's matrices are too small for intra-op threads to pay: on a busy 2-core machine 2 threads made a step
    50x slower than 1 (spinning workers). A CNN's convolutions are large enough: ResNet-18 at 64 px, minibatches
    of 32, 2 cores, took 3.83 steps/s on 2 threads against 2.65 on 1 on an idle machine, and 2.27 against 2.38
    with one core taken by another process (BENCHMARKS.md, "Threads")."""
    return usable_cores() if images else 1


def set_threads(config: FitConfig, device: torch.device) -> None:
    """torch's intra-op threads: ``config.threads``, else on a CPU :func:`default_threads` (on CUDA torch's
    default: the CPU only feeds the GPU)."""
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    elif device.type == "cpu":
        torch.set_num_threads(default_threads(config.images is not None))
