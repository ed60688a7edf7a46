"""The run log survives a kill: whatever a checkpoint holds the log holds too (it is flushed to disk first), and a
resumed run cuts the log back to the checkpoint's step, so that every step is in it exactly once, in order."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from labeldist.trainer.training.checkpoints import CheckpointError, read_checkpoint
from labeldist.trainer.training.config import FitConfig
from labeldist.trainer.training.fit import fit
from labeldist.trainer.training.resuming import rewind_log
from tests.processes import kill, spawn
from tests.trainer.conftest import STORE

#: a busy 2-core machine can take long to import torch and reach the first checkpoints
TIMEOUT = 300.0


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def steps(run: Path) -> list[int]:
    return [r["step"] for r in rows(run) if r["event"] == "step"]


def losses(run: Path) -> list[float]:
    return [r["loss"] for r in rows(run) if r["event"] == "step"]


def checkpoint_step(path: Path) -> int:
    """The step of the checkpoint at ``path``; 0 while there is none (it is replaced whole, never half-written)."""
    try:
        return int(read_checkpoint(path)["step"])
    except CheckpointError:
        return 0


def wait_for_checkpoint(proc, path: Path, step: int) -> int:
    """Until the running trainer has written a checkpoint at ``step`` or later; its step."""
    deadline = time.monotonic() + TIMEOUT
    while (got := checkpoint_step(path)) < step:
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited with {proc.returncode}:\n{proc.stdout.read()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no checkpoint at step {step} after {TIMEOUT} s")
        time.sleep(0.05)  # polling the event, not standing in for it
    return got


def test_a_run_killed_and_resumed_logs_every_step_once(service: str, features: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    # 1000 epochs: it cannot end on its own before the kill, however slowly the test polls
    args = [
        "labeldist.trainer.cli",
        "fit",
        "--url",
        service,
        "--store",
        STORE,
        "--features",
        str(features),
        "--out",
        str(run),
        "--size",
        "40",
        "--embedding-dim",
        "16",
        "--hidden",
        "32",
        "--epochs",
        "1000",
        "--checkpoint-every",
        "3",
        "--threads",
        "1",
        "--no-progress",
    ]
    proc = spawn(args)
    try:
        wait_for_checkpoint(proc, run / "checkpoint.pt", 12)
    finally:
        kill(proc, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    at = checkpoint_step(run / "checkpoint.pt")
    end = at + 10
    base = dict(
        url=service,
        store=STORE,
        features=str(features),
        size=40,
        embedding_dim=16,
        hidden=(32,),
        epochs=1000,
        checkpoint_every=3,
        threads=1,
        progress=False,
        max_steps=end,
    )
    fit(FitConfig(out=str(run), resume=True, **base))
    assert steps(run) == list(range(1, end + 1))
    # and they are the steps an uninterrupted run takes
    fit(FitConfig(out=str(tmp_path / "straight"), **base))
    assert losses(run) == pytest.approx(losses(tmp_path / "straight"), rel=1e-6)


def _log(path: Path, *lines: dict | str) -> None:
    path.write_text("".join(line if isinstance(line, str) else json.dumps(line) + "\n" for line in lines))


def _step(n: int) -> dict:
    return {"event": "step", "step": n, "loss": 1.0 / n}


def test_rewind_log_keeps_the_checkpointed_steps_of_the_run_resumed(tmp_path: Path) -> None:
    """Wherever the kill landed: mid-line, between the log's flush and the checkpoint's rename (the log ahead of
    the checkpoint), after a previous resume, or after an earlier run in the same folder."""
    log = tmp_path / "log.jsonl"
    start = {"event": "start", "step": 0}
    _log(log, start, _step(1), {"event": "loss", "step": 1}, _step(2), _step(3), _step(4), '{"event": "st')
    rewind_log(log, 3)
    assert log.read_text().splitlines() == [
        json.dumps(r) for r in (start, _step(1), {"event": "loss", "step": 1}, _step(2), _step(3))
    ]
    # an earlier run, ended, then a new one started afresh and resumed once already
    earlier = [start, _step(1), _step(2), {"event": "end", "steps": 2}]
    _log(log, *earlier, start, _step(1), _step(2), {"event": "start", "step": 2}, _step(3), _step(4), _step(5))
    rewind_log(log, 4)
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        *earlier,
        start,
        _step(1),
        _step(2),
        {"event": "start", "step": 2},
        _step(3),
        _step(4),
    ]
    # no checkpoint yet: every step is done again
    _log(log, start, _step(1), _step(2))
    rewind_log(log, 0)
    assert [json.loads(line) for line in log.read_text().splitlines()] == [start]
    # a run started afresh (no resume): only a partial last line goes, so the log stays readable
    _log(log, start, _step(1), '{"eve')
    rewind_log(log, None)
    assert [json.loads(line) for line in log.read_text().splitlines()] == [start, _step(1)]
    rewind_log(tmp_path / "none.jsonl", 3)  # no log yet: nothing to do
    assert not (tmp_path / "none.jsonl").exists()
