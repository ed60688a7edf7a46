"""The new losses in the fit loop, through a real ``labeldist serve`` over the 300-pose store: the proxies of
proxy anchor are trained by the optimizer and kept in the checkpoint (a resumed run continues exactly), each PML
baseline trains, and the default ladder on pose distances calibrates its thresholds and says so in the run log."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from labeldist.trainer.training.checkpoints import read_checkpoint
from labeldist.trainer.training.config import FitConfig
from labeldist.trainer.training.fit import fit
from tests.trainer.conftest import N_ITEMS, STORE

LR = 1e-3


def config(service: str, features: Path, out: Path, **kw) -> FitConfig:
    base = dict(
        url=service,
        store=STORE,
        features=str(features),
        out=str(out),
        size=40,
        neighbors=5,
        seed=0,
        progress=False,
        checkpoint_every=100,
        embedding_dim=16,
        hidden=(32,),
        lr=LR,
    )
    return FitConfig(**{**base, **kw})


def log_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def step_losses(run: Path) -> list[float]:
    return [r["loss"] for r in log_rows(run) if r["event"] == "step"]


def checkpoint(run: Path) -> dict:
    return read_checkpoint(run / "checkpoint.pt")


def test_proxy_anchor_trains_its_proxies_and_checkpoints_them(service: str, features: Path, tmp_path: Path) -> None:
    kw = {"loss": "proxy_anchor", "loss_options": {"positives": 5}}
    fit(config(service, features, tmp_path / "init", max_steps=0, **kw))  # the proxies as drawn, untrained
    fit(config(service, features, tmp_path / "straight", max_steps=4, **kw))
    init, straight = checkpoint(tmp_path / "init"), checkpoint(tmp_path / "straight")
    before, after = init["loss_state"]["proxy_anchor.proxies"], straight["loss_state"]["proxy_anchor.proxies"]
    assert before.shape == after.shape == (N_ITEMS, 16)  # one proxy per store item
    assert not torch.equal(before, after)  # the optimizer moved them
    groups = straight["optimizer"]["param_groups"]
    assert len(groups) == 2 and groups[1]["lr"] == pytest.approx(LR * 100)  # the paper's proxy learning rate
    (proxy_id,) = groups[1]["params"]
    assert straight["optimizer"]["state"][proxy_id]["exp_avg"].shape == (N_ITEMS, 16)
    # a run stopped after 2 steps and resumed sees and ends exactly as the uninterrupted one
    fit(config(service, features, tmp_path / "resumed", max_steps=2, **kw))
    fit(config(service, features, tmp_path / "resumed", max_steps=4, resume=True, **kw))
    assert step_losses(tmp_path / "resumed") == pytest.approx(step_losses(tmp_path / "straight"), rel=1e-6)
    resumed = checkpoint(tmp_path / "resumed")["loss_state"]["proxy_anchor.proxies"]
    torch.testing.assert_close(resumed, after, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("loss", ["lifted", "multi_similarity", "proxy_anchor"])
def test_each_pml_baseline_trains_through_http(loss: str, service: str, features: Path, tmp_path: Path) -> None:
    fit(config(service, features, tmp_path / loss, loss=loss, loss_options={"positives": 5}, max_steps=120))
    losses = step_losses(tmp_path / loss)
    assert len(losses) == 120 and np.isfinite(losses).all()
    assert np.mean(losses[-30:]) < np.mean(losses[:30]), loss


def test_default_ladder_on_the_pose_store_calibrates_and_logs_it(service: str, features: Path, tmp_path: Path) -> None:
    run = tmp_path / "ladder"
    summary = fit(config(service, features, run, loss="ladder", max_steps=30))
    (event,) = [r for r in log_rows(run) if r["event"] == "loss"]
    info = summary["loss_info"]
    assert event["ladder_mode"] == info["ladder_mode"] == "quantile" and event["step"] == 1
    assert len(info["distance_thresholds"]) == 2 and info["distance_thresholds"][0] < info["distance_thresholds"][1]
    assert info["minibatches"] == 30 and info["minibatches_without_rung"] == 0
    losses = step_losses(run)
    assert min(losses) > 0  # never the silent 0.0000 of every step
    state = checkpoint(run)["loss_state"]["_extra_state"]
    assert state["thresholds"] == info["thresholds"]  # a resumed run keeps them
