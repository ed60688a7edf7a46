"""The fit loop: minibatches from the service, an embedding model, a loss; seeded, checkpointed, resumable.

Inputs are a feature array indexed like the store (an MLP head learns over it) or images (``images``: a
torchvision ResNet with an embedding head, images decoded and augmented in DataLoader worker processes, see
:mod:`labeldist.trainer.inputs.images` and :mod:`labeldist.client.loader`).

Device: CUDA when present (mixed precision: bfloat16 autocast where supported, else float16 with a gradient
scaler; the loss always in float32; channels-last convolutions; optional ``torch.compile``), else CPU. Every
step is one line of ``<out>/log.jsonl``; checkpoints go to ``<out>/checkpoint.pt`` (tensors and plain data, see
:mod:`labeldist.trainer.training.checkpoints`; the log is flushed to disk first), and ``resume=True`` continues from the
last one with the same minibatches (and random crops) an uninterrupted run would have seen, the log cut back to
its step.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from labeldist.client import FeatureInputs, InputError, Inputs, LabelDistClient, Minibatch, MinibatchStream, Source
from labeldist.client.local import StoreMovedOn
from labeldist.core.progress import progress_bar
from labeldist.errors import UsageError
from labeldist.store.outputs import make_folder
from labeldist.trainer.inputs.augment import augment, check_crop_scale, resolve_augmentation, step_generator
from labeldist.trainer.inputs.images import device_images
from labeldist.trainer.losses import BatchLoss, make_loss
from labeldist.trainer.training.checkpoints import save_checkpoint
from labeldist.trainer.training.config import CHECKPOINT, LOG, FitConfig, input_config, recorded_config
from labeldist.trainer.training.models import (
    EmbeddingMLP,
    ResNetEmbedding,
)
from labeldist.trainer.training.monitor import (
    CHANCE_WINDOW,
    TrainingWatch,
    embedding_spread,
    parameter_vector,
    rank_agreement,
    relative_change,
    stuck_advice,
)
from labeldist.trainer.training.recipes import lr_factor
from labeldist.trainer.training.resuming import check_run_folder, earlier_warnings, resume_from, rewind_log, sync
from labeldist.trainer.training.runtime import (
    autocast,
    default_loader_workers,
    pick_device,
    seed_everything,
    set_threads,
)


def open_source(stores: str | None, url: str, api_key: str | None = None) -> Source:
    """Where minibatches and label distances come from: stores read in this process from the folder ``stores``
    (:class:`labeldist.client.LocalSource`: the same minibatches for the same seed, no server; pinned to the
    generation first opened, so a store rebuilt or appended to during the run stops it), else the service at
    ``url``."""
    if stores is not None:
        from labeldist.client.local import LocalSource

        if not Path(stores).is_dir():
            raise InputError(f"--stores {stores}: not a folder of stores")
        return LocalSource(stores, pinned=True)
    return LabelDistClient(url, api_key=api_key)


def make_optimizer(config: FitConfig, groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
    """Adam, or SGD with momentum (Kim et al.'s code: momentum 0.9, weight decay 5e-4), over ``groups``."""
    if config.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    if config.optimizer == "adam":
        return torch.optim.Adam(groups, lr=config.lr, weight_decay=config.weight_decay)
    raise UsageError(f"unknown optimizer {config.optimizer!r}; known: adam, sgd")


def make_scheduler(
    config: FitConfig, optimizer: torch.optim.Optimizer, steps_per_epoch: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """The learning rate of each step (:func:`labeldist.trainer.training.recipes.lr_factor`), stepped once per optimizer
    step; its state goes into the checkpoint, so a resumed run continues the decay where it was."""
    factor = functools.partial(
        lr_factor,
        schedule=config.lr_schedule,
        decay=config.lr_decay,
        step_epochs=tuple(config.lr_step_epochs),
        steps_per_epoch=steps_per_epoch,
        epochs=config.epochs,
    )
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def make_inputs(
    config: FitConfig, client: Source, store: str, info: dict[str, Any], *, encoded: bool = False
) -> Inputs:
    """The store's inputs: its feature array, or its images (every file found and its header read first): decoded
    once into a shared cache when they fit in memory (``config.image_cache``), else decoded each step, on the
    device when ``encoded`` (CUDA: nvJPEG), else in loader processes."""
    if (config.features is None) == (config.images is None):
        raise InputError("give exactly one of --features (a feature array) or --images (a folder of images)")
    if config.features is not None:
        inputs = FeatureInputs(config.features)
        what = f"features {config.features} have {inputs.n_items} rows"
    else:
        from labeldist.trainer.inputs.images import open_images

        check_crop_scale(config.crop_scale)  # refused up front, whichever augmentation the run takes
        # decoded and resized only: the augmentation runs on the step's device (labeldist.trainer.inputs.augment)
        inputs = open_images(
            config.images,
            client.ids(store),
            pattern=config.image_pattern,
            index=config.image_index,
            input_size=config.input_size,
            transform="resize",
            cache=config.image_cache,
            encoded=encoded,
            progress=config.progress,
        )
        what = f"images under {config.images} are {inputs.n_items}"
    if info.get("n_items") != inputs.n_items:
        raise InputError(
            f"{what} but store {store!r} has {info.get('n_items')} items: inputs must be indexed like the store"
        )
    return inputs


def make_model(config: FitConfig, inputs: Inputs, device: torch.device) -> torch.nn.Module:
    """The MLP head over features, or the ResNet backbone with its embedding head over images."""
    if config.images is None:
        return EmbeddingMLP(int(np.prod(inputs.item_shape)), config.embedding_dim, config.hidden)
    channels_last = device.type == "cuda" if config.channels_last is None else config.channels_last
    return ResNetEmbedding(config.backbone, config.embedding_dim, weights=config.weights, channels_last=channels_last)


@dataclass
class Run:
    """One training run, as :func:`build` makes it from a :class:`FitConfig`: where it writes, its device, source,
    inputs, loss, model and optimizer. ``step`` is the number of steps done: a resumed run's checkpoint step at
    first (:func:`resume`), then one more each training step (:func:`train`)."""

    config: FitConfig
    out: Path
    device: torch.device
    client: Source
    #: the store's description, as the source gives it (kept in each checkpoint)
    info: dict[str, Any]
    inputs: Inputs
    #: the images' augmentation (:func:`labeldist.trainer.inputs.augment.resolve_augmentation`); None over features
    augmentation: Any
    loss_fn: BatchLoss
    model: torch.nn.Module
    #: what the loop calls: the model, or ``torch.compile`` of it
    forward: Any
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    #: the forward pass's mixed precision and its gradient scaler (:func:`autocast`)
    amp: contextlib.AbstractContextManager[Any]
    scaler: torch.amp.GradScaler | None
    step: int = 0

    @property
    def checkpoint_path(self) -> Path:
        return self.out / CHECKPOINT


def open_inputs(config: FitConfig, client: Source, device: torch.device) -> tuple[dict[str, Any], Inputs, Any]:
    """The store's description, its inputs and, over images, their augmentation (refused before any image is
    read); the source is closed when any of them fails."""
    augmentation = None
    try:
        info = client.store(config.store)
        if config.images is not None:  # refused before any image is read
            augmentation = resolve_augmentation(
                config.augment,
                str(info.get("kind")),
                allow_image_flip=config.allow_image_flip,
                flip=config.flip,
                crop_scale=tuple(config.crop_scale),
            )
        encoded = device.type == "cuda" if config.decode_on_device is None else config.decode_on_device
        inputs = make_inputs(config, client, config.store, info, encoded=encoded)
    except BaseException:
        client.close()
        raise
    return info, inputs, augmentation


def build(config: FitConfig) -> Run:
    """A run from its config: the output folder made, every generator seeded, the device and its threads, the
    source and the store's inputs, then the loss, the model (in that order: both draw from torch's generator),
    the optimizer over both, the learning-rate schedule and the mixed precision."""
    out = make_folder(config.out)  # refused inside a store
    check_run_folder(out, config.resume, config.overwrite)
    seed_everything(config.seed)
    device = pick_device(config.device)
    set_threads(config, device)
    client = open_source(config.stores, config.url, config.api_key)
    info, inputs, augmentation = open_inputs(config, client, device)
    # after the store: a proxy loss has one proxy per store item (and draws them before the model's weights)
    anchors = {} if config.anchors is None else {"anchors": config.anchors}
    loss_fn = make_loss(
        config.loss, n_items=inputs.n_items, embedding_dim=config.embedding_dim, **anchors, **config.loss_options
    ).to(device)
    model = make_model(config, inputs, device).to(device)
    forward = torch.compile(model) if config.compile else model
    groups = [{"params": list(model.parameters())}]
    if list(loss_fn.parameters()):  # a loss's own parameters (proxies) train with the model, at its lr scale
        groups.append({"params": list(loss_fn.parameters()), "lr": config.lr * loss_fn.lr_scale})
    optimizer = make_optimizer(config, groups)
    scheduler = make_scheduler(config, optimizer, max(inputs.n_items // config.batches_per_step, 1))
    amp, scaler = autocast(device, config.precision)
    return Run(
        config=config,
        out=out,
        device=device,
        client=client,
        info=info,
        inputs=inputs,
        augmentation=augmentation,
        loss_fn=loss_fn,
        model=model,
        forward=forward,
        optimizer=optimizer,
        scheduler=scheduler,
        amp=amp,
        scaler=scaler,
    )


def resume(run: Run) -> None:
    """With ``config.resume`` and a checkpoint in the output folder: the run continues from it (:func:`resume_from`;
    the source is closed when it is refused). The log is cut back to the step the run starts from
    (:func:`rewind_log`)."""
    config = run.config
    if config.resume and run.checkpoint_path.exists():
        try:
            run.step = resume_from(
                run.checkpoint_path,
                config,
                run.model,
                run.optimizer,
                run.loss_fn,
                run.scaler,
                run.device,
                run.scheduler,
                store_info=run.info,
            )
        except BaseException:
            run.client.close()
            raise
    rewind_log(run.out / LOG, run.step if config.resume else None)


def checkpoint(run: Run, log: Any) -> None:
    """Save the run at its step, the log flushed to disk first: model, optimizer, loss, scaler, generator and
    schedule states, with the config, the store's description and what evaluation must know of the inputs
    (:func:`input_config`)."""
    config, loss_fn, scaler = run.config, run.loss_fn, run.scaler
    sync(log)  # first: a kill between the two leaves the log ahead of the checkpoint, never behind
    save_checkpoint(
        run.checkpoint_path,
        {
            "model": run.model.state_dict(),
            "optimizer": run.optimizer.state_dict(),
            "loss_state": loss_fn.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "torch_rng": torch.get_rng_state(),
            "scheduler": run.scheduler.state_dict(),
            "step": run.step,
            "config": recorded_config(config),
            "model_config": run.model.config,
            "loss": config.loss,
            "normalized": loss_fn.normalized,
            "store": run.info,
            "inputs": input_config(run.inputs, run.augmentation),
        },
    )


def make_stream(run: Run) -> MinibatchStream:
    """The run's training steps from its step on: feature inputs prefetched in threads, images made in DataLoader
    worker processes; a note (with progress shown) when a loss that needs pairwise distances trains on a kNN-only
    store."""
    config, inputs = run.config, run.inputs
    stream = MinibatchStream(
        run.client,
        config.store,
        inputs,
        size=config.size,
        neighbors=config.neighbors,
        pairwise=run.loss_fn.needs_pairwise,
        batches_per_step=config.batches_per_step,
        anchors_per_request=config.anchors_per_request or (8 if config.images is None else config.batches_per_step),
        epochs=config.epochs,
        seed=config.seed,
        start_step=run.step,
        prefetch=config.prefetch,
        workers=config.workers,
        processes=None
        if not getattr(inputs, "needs_processes", False)
        else (default_loader_workers() if config.loader_workers is None else config.loader_workers),
        pin_memory=run.device.type == "cuda",
    )
    if run.loss_fn.needs_pairwise and not run.info.get("has_dense") and config.progress:
        tqdm.write(
            f"note: store {config.store!r} is kNN-only, so the service computes each minibatch's pairwise "
            "label distances on demand (for caption WMDs 9-20 minibatches/s); a dense store of the "
            "training split serves them from disk (BENCHMARKS.md, pairwise minibatches)"
        )
    return stream


@dataclass
class StepResult:
    """What one optimizer step reports: its loss, the loss's chance level on its minibatches
    (:meth:`BatchLoss.chance_level`; None where the loss has none), the embeddings' spread
    (:func:`labeldist.trainer.training.monitor.embedding_spread`), the learning rate it used and how well the
    embeddings ordered the labels (``order``)."""

    loss: float
    chance: float | None
    spread: dict[str, float]
    lr: float
    #: :func:`~labeldist.trainer.training.monitor.rank_agreement` of the step's embeddings with its label distances
    order: float = float("nan")


def train_step(run: Run, batch: Minibatch) -> StepResult:
    """One optimizer step on ``batch`` (on the device): images decoded and augmented there, the forward pass in
    the run's precision, the loss in float32, the schedule stepped."""
    config, inputs, optimizer, scaler = run.config, run.inputs, run.optimizer, run.scaler
    inputs_now = batch.inputs
    if run.augmentation is not None:  # decoded (nvJPEG on CUDA) and augmented in batch on the device
        inputs_now = device_images(inputs_now, inputs, run.device)
        inputs_now = augment(inputs_now, run.augmentation, step_generator(config.seed, run.step), inputs.size)
    with run.amp:
        embeddings = run.forward(inputs_now)
    # the loss in float32 whatever the forward pass ran in: log-ratios of small distances need it
    loss = run.loss_fn(embeddings.float(), batch.distances.float(), batch.pairwise, indices=batch.indices)
    optimizer.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    lr_used = optimizer.param_groups[0]["lr"]  # the rate of this step, before the schedule moves on
    run.scheduler.step()
    chance = run.loss_fn.chance_level(batch.distances, batch.pairwise)
    return StepResult(
        loss=float(loss.detach()),
        chance=None if chance is None else float(chance),
        spread=embedding_spread(embeddings),
        lr=lr_used,
        order=rank_agreement(embeddings, batch.distances, run.loss_fn.normalized),
    )


def start_log(run: Run, log: Any) -> None:
    """The log's ``start`` line (and, with progress shown, the recipe and why, the anchors and the augmentation in
    words)."""
    config, augmentation = run.config, run.augmentation
    start_row = {
        "event": "start",
        "step": run.step,
        "device": str(run.device),
        "threads": torch.get_num_threads(),
        "anchors": run.loss_fn.anchors,
        "config": recorded_config(config),
    }
    if config.progress:
        why = f" ({config.recipe_reason})" if config.recipe_reason else ""
        tqdm.write(f"recipe: {config.recipe}{why}")
        tqdm.write(f"loss: {config.loss}, {describe_anchors(run.loss_fn)}")
    if augmentation is not None:
        start_row["augmentation"] = asdict(augmentation)
        if config.progress:
            tqdm.write(f"augmentation: {augmentation.description}")
    log.write(json.dumps(start_row) + "\n")


def describe_anchors(loss_fn: BatchLoss) -> str:
    """The loss's anchors in words, for the run's first lines."""
    if loss_fn.anchors == "all":
        return "every member of a minibatch an anchor (--anchors all)"
    return "the first member of a minibatch its anchor (--anchors first)"


class LoopState:
    """What the training loop keeps of the steps it has done: when it started, the last 10 losses, the watch of
    losses at their chance level and collapsed embeddings, and whether the loss has described what its first batch
    decided."""

    def __init__(self, config: FitConfig, loss_fn: BatchLoss, earlier: Sequence[dict[str, Any]] = ()) -> None:
        self.start = time.perf_counter()
        self.recent: list[float] = []
        #: the chance levels of the same steps (None where the loss has none)
        self.recent_chance: list[float | None] = []
        self.described = False
        advice = stuck_advice(
            config.loss, anchors=loss_fn.anchors, optimizer=config.optimizer, pretrained=config.weights is not None
        )
        # a resumed run refills the watch's windows from its own steps, but keeps what it has already warned of
        self.watch = TrainingWatch(config.loss, advice=advice)
        self.watch.restore(earlier)
        #: the weights at the start of the current window of the watch (how far they move over it)
        self.weights_then: torch.Tensor | None = None

    def weights_moved(self, model: torch.nn.Module, step: int) -> float | None:
        """Every :data:`CHANCE_WINDOW` steps, how far the weights moved since the last time
        (:func:`relative_change`); None at other steps and the first time."""
        if step % CHANCE_WINDOW:
            return None
        now = parameter_vector(model)
        then, self.weights_then = self.weights_then, now
        return None if then is None else relative_change(then, now)


def log_step(
    run: Run,
    log: Any,
    state: LoopState,
    result: StepResult,
    *,
    steps_per_epoch: int,
    t0: float,
    t1: float,
) -> None:
    """The ``step`` line of the step just done (its batch waited for from ``t0`` to ``t1``, trained from ``t1``),
    then the watch's warning (printed, and a ``warning`` line per kind) and, after the first batch, the loss's
    description (a ``loss`` line)."""
    step, spread = run.step, result.spread
    state.recent = (state.recent + [result.loss])[-10:]
    state.recent_chance = (state.recent_chance + [result.chance])[-10:]
    log.write(
        json.dumps(
            {
                "event": "step",
                "step": step,
                "epoch": (step - 1) // steps_per_epoch,
                "loss": result.loss,
                "chance_level": result.chance,
                "lr": result.lr,
                "mean_cosine": round(spread["mean_cosine"], 6),
                "rank_agreement": round(result.order, 6),
                "spread_var": round(spread["variance"], 6),
                "data_wait_s": round(t1 - t0, 6),
                "step_s": round(time.perf_counter() - t1, 6),
            }
        )
        + "\n"
    )
    said = len(state.watch.warnings)
    warning = state.watch.update(
        step,
        result.loss,
        spread,
        chance=result.chance,
        order=result.order,
        moved=state.weights_moved(run.model, step),
    )
    if warning:  # printed whether or not the bar shows: a run going wrong is worth saying in any log
        tqdm.write(warning, file=sys.stderr)
        for row in state.watch.warnings[said:]:  # one row per kind seen (collapse, flat), the same message
            log.write(json.dumps({"event": "warning", **row}) + "\n")
    if not state.described and run.loss_fn.describe():  # what the first batch decided (ladder thresholds)
        log.write(json.dumps({"event": "loss", "step": step, **run.loss_fn.describe()}) + "\n")
        state.described = True


def summarize(run: Run, stream: MinibatchStream, state: LoopState) -> dict[str, Any]:
    """The log's ``end`` line, which :func:`fit` returns."""
    recent, loss_fn = state.recent, run.loss_fn
    seconds = time.perf_counter() - state.start
    summary = {
        "event": "end",
        "steps": run.step,
        "epochs": round(run.step / stream.steps_per_epoch, 4),
        "loss": float(np.mean(recent)) if recent else None,
        "seconds": seconds,
        "data_wait_s": stream.waited,
        "data_wait_share": stream.waited / seconds if seconds > 0 else None,
        "checkpoint": str(run.checkpoint_path),
    }
    if loss_fn.describe():
        summary["loss_info"] = loss_fn.describe()
    if state.watch.warnings:
        summary["warnings"] = state.watch.warnings
    return summary


def train(run: Run, stream: MinibatchStream) -> dict[str, Any]:
    """The training loop, from the run's step to its last (the stream's epochs, at most ``config.max_steps``):
    each step logged, a checkpoint every ``config.checkpoint_every`` steps and at the end, then the summary
    (:func:`summarize`). The prefetch, the log and the source are closed whatever happens."""
    config = run.config
    total = stream.steps_per_epoch * config.epochs
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    log = open(run.out / LOG, "a", encoding="utf-8")  # noqa: SIM115 - closed in the finally below
    state = LoopState(config, run.loss_fn, earlier_warnings(run.out / LOG) if run.step > 0 else ())
    batches: Iterator[Minibatch] | None = None  # the prefetch, once started
    try:
        start_log(run, log)
        run.model.train()
        # tqdm's bar on a terminal; off one (a redirected log) a plain line every few seconds, not one line of
        # carriage-return updates
        bar = progress_bar(total, f"fit {config.loss}", unit="step", initial=run.step, enabled=config.progress)
        batches = iter(stream)
        while run.step < total:
            t0 = time.perf_counter()
            try:
                batch = next(batches).to(run.device)
            except StopIteration:
                break
            except StoreMovedOn as e:
                bar.close()
                raise stop_on_moved_store(run, log, e, total) from None
            t1 = time.perf_counter()
            result = train_step(run, batch)
            run.step += 1
            log_step(run, log, state, result, steps_per_epoch=stream.steps_per_epoch, t0=t0, t1=t1)
            bar.set_postfix(loss=loss_against_chance(state.recent, state.recent_chance), refresh=False)
            bar.update(1)
            if run.step % config.checkpoint_every == 0:
                checkpoint(run, log)
        bar.close()
        checkpoint(run, log)
        summary = summarize(run, stream, state)
        log.write(json.dumps(summary) + "\n")
    finally:
        if batches is not None:
            batches.close()  # stops the prefetch threads
        log.close()
        run.client.close()
    return summary


def loss_against_chance(losses: Sequence[float], chances: Sequence[float | None]) -> str:
    """The progress line's loss: the mean of the last steps', and the share it is of their chance level's mean
    (the loss of embeddings that know nothing of the labels, :meth:`BatchLoss.chance_level`), where the loss has
    one: ``0.0460 = 0.12 of chance``. A run that learns goes well below 1; one that sits at 1 learns nothing.

    >>> loss_against_chance([0.05, 0.04], [0.4, 0.35])
    '0.0450 = 0.12 of chance'
    >>> loss_against_chance([0.5], [None])
    '0.5000'
    """
    loss = float(np.mean(losses))
    known = [c for c in chances if c is not None]
    if not known or len(known) != len(chances) or float(np.mean(known)) <= 0:
        return f"{loss:.4f}"
    return f"{loss:.4f} = {loss / float(np.mean(known)):.2f} of chance"


def stop_on_moved_store(run: Run, log: Any, error: StoreMovedOn, total: int) -> StoreMovedOn:
    """The error that stops a run whose store changed on disk (``error``): every step so far trained on the
    generation the run opened, so they are checkpointed (and a ``stopped`` line logged) before it stops."""
    log.write(json.dumps({"event": "stopped", "step": run.step, "reason": str(error)}) + "\n")
    checkpoint(run, log)
    return StoreMovedOn(
        f"{error} (at step {run.step} of {total}; checkpoint saved): --resume continues it once the store is the one "
        "it trained on, or start a new run on the store now there (--overwrite, or another --out)"
    )


def fit(config: FitConfig) -> dict[str, Any]:
    """Train; returns ``steps``, ``loss`` (mean of the last 10 steps), ``seconds``, ``data_wait_s`` and
    ``checkpoint``.

    :func:`build` the run from its config, :func:`resume` it from its checkpoint (with ``config.resume``),
    :func:`make_stream` its minibatches from its step on, and :func:`train` it."""
    run = build(config)
    resume(run)
    return train(run, make_stream(run))
