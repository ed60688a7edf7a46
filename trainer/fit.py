"""The fit loop: minibatches from the service, an embedding model, a loss; seeded, checkpointed, resumable.

Device: CUDA when present (mixed precision: bfloat16 autocast where supported, else float16 with a gradient
scaler; losses run in float32), else CPU. Every step is one line of ``<out>/log.jsonl``; checkpoints go to
``<out>/checkpoint.pt`` (written aside, then renamed), and ``resume=True`` continues from the last one with the
same minibatches an uninterrupted run would have seen.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from trainer.client import LabelDistClient
from trainer.data import FeatureInputs, MinibatchStream
from trainer.losses import make_loss
from trainer.models import EmbeddingMLP, build_model

CHECKPOINT = "checkpoint.pt"
LOG = "log.jsonl"


@dataclass
class FitConfig:
    """Everything that changes a training run (saved in the checkpoint and the log)."""

    url: str
    store: str
    features: str
    out: str
    loss: str = "log_ratio"
    loss_options: dict[str, Any] = field(default_factory=dict)
    size: int = 150
    neighbors: int = 5
    batches_per_step: int = 1
    epochs: int = 1
    max_steps: int | None = None
    lr: float = 1e-3
    weight_decay: float = 0.0
    embedding_dim: int = 128
    hidden: tuple[int, ...] = (512,)
    seed: int = 0
    device: str = "auto"
    checkpoint_every: int = 500
    resume: bool = False
    progress: bool = True
    prefetch: int = 8
    workers: int = 2
    anchors_per_request: int = 8
    api_key: str | None = None
    threads: int | None = None


def pick_device(name: str = "auto") -> torch.device:
    """``auto``: CUDA when available, else CPU; or the device named."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - seeds third-party code that draws from the legacy global generator
    torch.manual_seed(seed)


def autocast(device: torch.device) -> tuple[contextlib.AbstractContextManager[Any], torch.amp.GradScaler | None]:
    """Mixed precision on CUDA (bfloat16 where supported, else float16 with a scaler); nothing on CPU."""
    if device.type != "cuda":
        return contextlib.nullcontext(), None
    if torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16), None
    return torch.autocast("cuda", dtype=torch.float16), torch.amp.GradScaler("cuda")


def _save(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str | Path) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The model of a checkpoint (on CPU, eval mode) and the whole checkpoint dict."""
    state = torch.load(path, map_location="cpu", weights_only=False)
    model = build_model(state["model_config"])
    model.load_state_dict(state["model"])
    return model.eval(), state


def fit(config: FitConfig) -> dict[str, Any]:
    """Train; returns ``steps``, ``loss`` (mean of the last 10 steps), ``seconds``, ``data_wait_s`` and
    ``checkpoint``."""
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    seed_everything(config.seed)
    device = pick_device(config.device)
    if config.threads is not None or device.type == "cpu":
        # The MLP's matrices are too small for intra-op threads to pay: on a busy 2-core machine 2 threads made
        # a step 50x slower than 1 (spinning workers). One by default on CPU.
        torch.set_num_threads(config.threads or 1)
    inputs = FeatureInputs(config.features)
    client = LabelDistClient(config.url, api_key=config.api_key)
    info = client.store(config.store)
    if info.get("n_items") != inputs.n_items:
        raise ValueError(f"features {config.features} have {inputs.n_items} rows but store {config.store!r} has "
                         f"{info.get('n_items')} items: inputs must be indexed like the store")  # fmt: skip
    # after the store: a proxy loss has one proxy per store item (and draws them before the model's weights)
    loss_fn = make_loss(config.loss, n_items=inputs.n_items, embedding_dim=config.embedding_dim,
                        **config.loss_options).to(device)  # fmt: skip
    model = EmbeddingMLP(int(np.prod(inputs.item_shape)), config.embedding_dim, config.hidden).to(device)
    groups = [{"params": list(model.parameters())}]
    if list(loss_fn.parameters()):  # a loss's own parameters (proxies) train with the model, at its lr scale
        groups.append({"params": list(loss_fn.parameters()), "lr": config.lr * loss_fn.lr_scale})
    optimizer = torch.optim.Adam(groups, lr=config.lr, weight_decay=config.weight_decay)
    amp, scaler = autocast(device)
    step = 0
    ckpt_path = out / CHECKPOINT
    if config.resume and ckpt_path.exists():
        state = torch.load(ckpt_path, map_location=device, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if state.get("loss_state") is not None:  # proxies, calibrated ladder thresholds
            loss_fn.load_state_dict(state["loss_state"])
        if scaler is not None and state.get("scaler"):
            scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["torch_rng"])
        step = int(state["step"])

    stream = MinibatchStream(
        client, config.store, inputs, size=config.size, neighbors=config.neighbors,
        pairwise=loss_fn.needs_pairwise, batches_per_step=config.batches_per_step,
        anchors_per_request=config.anchors_per_request, epochs=config.epochs, seed=config.seed,
        start_step=step, prefetch=config.prefetch, workers=config.workers,
    )  # fmt: skip
    total = stream.steps_per_epoch * config.epochs
    if config.max_steps is not None:
        total = min(total, config.max_steps)

    def checkpoint() -> None:
        _save(ckpt_path, {
            "model": model.state_dict(), "optimizer": optimizer.state_dict(), "loss_state": loss_fn.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None, "torch_rng": torch.get_rng_state(),
            "step": step, "config": asdict(config), "model_config": model.config, "loss": config.loss,
            "normalized": loss_fn.normalized, "store": info,
        })  # fmt: skip

    log = open(out / LOG, "a", encoding="utf-8")  # noqa: SIM115 - closed in the finally below
    start, recent, described = time.perf_counter(), [], False
    try:
        log.write(json.dumps({"event": "start", "step": step, "device": str(device), "config": asdict(config)}) + "\n")
        model.train()
        bar = tqdm(total=total, initial=step, disable=not config.progress, desc=f"fit {config.loss}", unit="step")
        batches = iter(stream)
        while step < total:
            t0 = time.perf_counter()
            try:
                batch = next(batches).to(device)
            except StopIteration:
                break
            t1 = time.perf_counter()
            with amp:
                embeddings = model(batch.inputs)
            loss = loss_fn(embeddings, batch.distances, batch.pairwise, indices=batch.indices)
            optimizer.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            value = float(loss.detach())
            step += 1
            recent = (recent + [value])[-10:]
            log.write(json.dumps({"event": "step", "step": step, "epoch": (step - 1) // stream.steps_per_epoch,
                                  "loss": value, "data_wait_s": round(t1 - t0, 6),
                                  "step_s": round(time.perf_counter() - t1, 6)}) + "\n")  # fmt: skip
            if not described and loss_fn.describe():  # what the first batch decided (ladder thresholds)
                log.write(json.dumps({"event": "loss", "step": step, **loss_fn.describe()}) + "\n")
                described = True
            bar.update(1)
            bar.set_postfix(loss=f"{np.mean(recent):.4f}")
            if step % config.checkpoint_every == 0:
                checkpoint()
        bar.close()
        checkpoint()
        summary = {"event": "end", "steps": step, "loss": float(np.mean(recent)) if recent else None,
                   "seconds": time.perf_counter() - start, "data_wait_s": stream.waited,
                   "checkpoint": str(ckpt_path)}  # fmt: skip
        if loss_fn.describe():
            summary["loss_info"] = loss_fn.describe()
        log.write(json.dumps(summary) + "\n")
    finally:
        if "batches" in locals():
            batches.close()  # stops the prefetch threads
        log.close()
        client.close()
    return summary
