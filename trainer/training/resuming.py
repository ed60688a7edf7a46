"""A run folder checked, resumed and checkpointed: the checkpoint read back and checked against the run and its
store, the log cut back to the checkpoint's step, the warnings of earlier runs."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import torch

from labeldist.core.files import written_whole
from labeldist.store.outputs import OutputError, check_output_file
from labeldist.trainer.training.checkpoints import (
    CheckpointError,
    describe_model,
    first_line,
    load_weights,
    read_checkpoint,
    same_model,
)
from labeldist.trainer.training.config import CHECKPOINT, LOG, FitConfig


def resume_from(
    path: Path,
    config: FitConfig,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: torch.nn.Module,
    scaler: torch.amp.GradScaler | None,
    device: torch.device,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    store_info: dict[str, Any] | None = None,
) -> int:
    """Load a checkpoint into this run's model, optimizer, loss (proxies, calibrated ladder thresholds), scaler
    and random generator; its step. A checkpoint of another model or loss, or trained on another store than
    ``store_info`` (:func:`check_same_store`), is refused in one line saying what it was made with and what this run
    asks for, rather than torch's list of every key."""
    state = read_checkpoint(path, map_location=device)
    what = f"--resume: checkpoint {path}"
    if store_info is not None:
        check_same_store(state.get("store"), store_info, path, config.store)
    recorded = state["model_config"]
    if not same_model(recorded, model.config):
        raise CheckpointError(
            f"{what} was made with {describe_model(recorded)}, but this run asks for "
            f"{describe_model(model.config)}: resume with the options it was trained with, or "
            "give a new --out"
        )
    if state["loss"] != config.loss:
        raise CheckpointError(
            f"{what} was trained with loss {state['loss']}, but this run asks for {config.loss}: "
            "resume with its loss, or give a new --out"
        )
    load_weights(model, state["model"], what, recorded)
    try:
        optimizer.load_state_dict(state["optimizer"])
        if state.get("loss_state") is not None:
            loss_fn.load_state_dict(state["loss_state"])
        if scaler is not None and state.get("scaler"):
            scaler.load_state_dict(state["scaler"])
        if scheduler is not None:
            if state.get("scheduler") is not None:
                scheduler.load_state_dict(state["scheduler"])
            else:  # a checkpoint from before schedules: its rate was constant
                scheduler.last_epoch = int(state["step"])
        torch.set_rng_state(state["torch_rng"].cpu())  # loaded onto the device with the rest
    except (KeyError, RuntimeError, TypeError, ValueError) as e:  # e.g. proxies of a store of another size
        raise CheckpointError(
            f"{what} does not fit this run ({first_line(e)}): resume with the options and store "
            "it was trained with, or give a new --out"
        ) from None
    return int(state["step"])


#: what names the data a run trains on: a resumed run must find them as its checkpoint recorded them
SAME_STORE_KEYS = ("kind", "n_items", "k", "labels_sha256", "params", "dense", "generation")


def check_same_store(recorded: dict[str, Any] | None, info: dict[str, Any], where: Path, store: str) -> None:
    """CheckpointError (one line) when the store a checkpoint was trained on (``recorded``, its manifest) is not the
    store there now (``info``): other labels, parameters, items or generation. A store rebuilt from the same labels
    and parameters holds the same distances, and is taken."""
    if not recorded:
        return
    differ = [key for key in SAME_STORE_KEYS if key in recorded and recorded.get(key) != info.get(key)]
    if not differ:
        return

    def short(value: Any) -> str:
        return repr(value[:12] + "...") if isinstance(value, str) and len(value) > 16 else repr(value)

    shown = ", ".join(f"{key} {short(recorded[key])} -> {short(info.get(key))}" for key in differ if key != "params")
    if "params" in differ:
        shown = ", ".join(filter(None, (shown, "its parameters")))
    raise CheckpointError(
        f"--resume: checkpoint {where} was trained on another store {store!r} than the one there now ({shown}): "
        "resuming would train on other data; restore the store it was trained on, or start a new run "
        "(--overwrite, or another --out)"
    )


def sync(log: Any) -> None:
    """Flush the log to disk. Before each checkpoint: whatever step a checkpoint holds, the log then holds too,
    wherever a kill lands (else a run killed at step 98 could keep a log that ends at step 63)."""
    log.flush()
    os.fsync(log.fileno())


def rewind_log(path: Path, step: int | None) -> None:
    """Cut a run's log back to ``step``, the checkpoint a resumed run continues from (0: none yet), so that the
    steps it does again are not logged twice: the lines of the run being continued (from its last ``start`` at or
    before ``step``) past ``step`` go, and so does everything after them. ``None`` (a run started afresh) keeps
    every step. Either way a partial line, which a kill mid-write leaves, goes too.

    Rewritten aside, then renamed: a kill here leaves the old log, cut again at the next resume."""
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines()
    kept: list[tuple[str, dict[str, Any]]] = []
    for line in lines:
        with contextlib.suppress(json.JSONDecodeError):
            row = json.loads(line)
            if isinstance(row, dict):
                kept.append((line, row))
    if step is not None:
        starts = [i for i, (_, r) in enumerate(kept) if r.get("event") == "start" and int(r.get("step", 0)) <= step]
        run = starts[-1] if starts else 0
        past = [i for i in range(run, len(kept)) if int(kept[i][1].get("step", 0)) > step]
        kept = kept[: past[0]] if past else kept
    if len(kept) == len(lines):
        return
    with written_whole(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line, _ in kept)
        sync(f)


def check_run_folder(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse (OutputError, one line) to start a new run in ``out`` over another run's checkpoint or log, unless
    ``resume`` (it continues) or ``overwrite`` (its checkpoint and log are removed first: regular files only)."""
    held = [name for name in (CHECKPOINT, LOG) if os.path.lexists(out / name)]
    if not held or resume:
        return
    if not overwrite:
        raise OutputError(
            f"{out}: holds a run ({', '.join(held)}): continue it with --resume, replace it with --overwrite, or "
            "give another --out"
        )
    for name in held:
        check_output_file(out / name, overwrite)  # never a link's target
        os.unlink(out / name)


def earlier_warnings(path: Path) -> list[dict[str, Any]]:
    """The ``warning`` rows of a resumed run's log (already cut back to its checkpoint by :func:`rewind_log`), from
    the last time it started at step 0."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []
    fresh = [i for i, r in enumerate(rows) if r.get("event") == "start" and int(r.get("step", 0)) == 0]
    return [r for r in rows[fresh[-1] if fresh else 0 :] if r.get("event") == "warning"]
