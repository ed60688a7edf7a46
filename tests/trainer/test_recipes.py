"""Recipes resolve to the papers' settings, the user's values win, and the run records what it resolved to; and a
run on stores read in-process (``--stores``) draws the same minibatches and losses as one through the service."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from labeldist.trainer.cli import main
from labeldist.trainer.training.checkpoints import read_checkpoint
from labeldist.trainer.training.config import FitConfig
from labeldist.trainer.training.fit import fit
from labeldist.trainer.training.recipes import (
    RECIPES,
    RecipeError,
    choose_recipe,
    lr_factor,
    recipe_name,
    resolve_recipe,
)
from tests.trainer.conftest import STORE


def log_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def test_kim2019_pose_is_the_authors_recipe() -> None:
    values = resolve_recipe("kim2019-pose", kind="pose", images=True, given={})
    assert (values["optimizer"], values["lr"], values["momentum"], values["weight_decay"]) == ("sgd", 0.01, 0.9, 5e-4)
    assert (values["lr_schedule"], values["lr_decay"], values["epochs"]) == ("inverse", 1e-4, 30)
    assert (values["size"], values["neighbors"], values["embedding_dim"]) == (150, 5, 128)
    assert values["loss"] == "log_ratio" and values["loss_options"] == {"squared": False}
    assert values["augment"] == "kind" and values["recipe"] == "kim2019-pose" and values["overrides"] == []


def test_given_values_override_the_recipe_and_are_listed() -> None:
    values = resolve_recipe(
        "kim2019-pose",
        kind="pose",
        images=True,
        given={"lr": 0.05, "epochs": 30, "loss": "dense_triplet", "loss_options": {"margin": 0.1}},
    )
    assert values["lr"] == 0.05 and values["loss"] == "dense_triplet"
    assert values["loss_options"] == {"margin": 0.1}  # the given margin over the recipe's 0.03
    assert values["overrides"] == ["loss", "lr"]  # epochs equals the recipe's: not an override
    # the recipe's options of the chosen loss apply when the user gives none
    assert resolve_recipe("kim2019-pose", kind="pose", images=True, given={"loss": "dense_triplet"})[
        "loss_options"
    ] == {"margin": 0.03}


def test_auto_picks_scratch_from_random_weights_the_kinds_recipe_from_weights_and_the_old_defaults_over_features() -> (
    None
):
    assert recipe_name("auto", "pose", images=True) == "scratch"
    assert recipe_name("auto", "layout_miou", images=True) == "scratch"
    assert recipe_name("auto", "pose", images=True, weights="w.pt") == "kim2019-pose"
    assert recipe_name("auto", "layout_miou", images=True, weights="w.pt") == "kim2019-layout"
    assert recipe_name("auto", "angles", images=True, weights="w.pt") == "scratch"  # no paper trained it
    assert recipe_name("auto", "pose", images=False) == "labeldist-v1"
    name, reason = choose_recipe("auto", "pose", images=True)
    assert "random weights" in reason and "every member of a minibatch an anchor" in reason
    scratch = RECIPES["scratch"]
    assert (scratch.optimizer, scratch.lr, scratch.lr_schedule, scratch.anchors, scratch.loss) == (
        "adam",
        1e-3,
        "constant",
        "all",
        "log_ratio",
    )
    assert resolve_recipe("auto", kind="pose", images=True, given={})["anchors"] == "all"
    assert resolve_recipe("kim2019-pose", kind="pose", images=True, given={})["anchors"] is None  # the loss's own
    assert resolve_recipe("auto", kind="pose", images=True, given={"anchors": "first"})["overrides"] == ["anchors"]
    old = RECIPES["labeldist-v1"]  # today's defaults stay reachable
    assert (old.optimizer, old.lr, old.lr_schedule, old.epochs) == ("adam", 1e-3, "constant", 1)
    assert old.augment == "imagenet"
    with pytest.raises(RecipeError, match="unknown recipe 'kim2020'; known: auto, kim2019-pose"):
        recipe_name("kim2020", "pose", images=True)
    with pytest.raises(RecipeError, match="momentum must be in"):
        resolve_recipe("kim2019-pose", kind="pose", images=True, given={"momentum": 1.5})


def test_lr_factor_against_the_formulas() -> None:
    for t in (0, 1, 999, 10_000, 123_456):
        assert lr_factor(t, schedule="inverse", decay=1e-4) == pytest.approx(1 / (1 + 1e-4 * t))
        assert lr_factor(t, schedule="constant", decay=0.3) == 1.0
    for t in (0, 1, 250, 499, 500, 700):  # cosine over 2 epochs of 250 steps, down to 0.1 of the rate
        progress = min(t / 500, 1.0)
        expected = 0.1 + 0.9 * (1 + math.cos(math.pi * progress)) / 2
        assert lr_factor(t, schedule="cosine", decay=0.1, steps_per_epoch=250, epochs=2) == pytest.approx(expected)
    assert lr_factor(500, schedule="cosine", decay=0.0, steps_per_epoch=250, epochs=2) == pytest.approx(0.0)
    per_epoch = 100
    for t in (0, 1499, 1500, 2999):
        expected = 0.1 if t >= 15 * per_epoch else 1.0
        assert lr_factor(t, schedule="step", decay=0.1, step_epochs=(15,), steps_per_epoch=per_epoch) == expected


def test_a_cli_run_records_the_resolved_recipe_and_follows_its_schedule(pose_store, features, tmp_path) -> None:
    out = tmp_path / "run"
    code = main(
        [
            "fit",
            "--stores",
            str(pose_store),
            "--store",
            STORE,
            "--features",
            str(features),
            "--out",
            str(out),
            "--recipe",
            "kim2019-pose",
            "--lr-decay",
            "0.01",
            "--max-steps",
            "6",
            "--no-progress",
            "--json",
        ]
    )
    assert code == 0
    rows = log_rows(out)
    start = next(r for r in rows if r["event"] == "start")["config"]
    assert start["recipe"] == "kim2019-pose" and start["overrides"] == ["lr_decay"]
    assert (start["optimizer"], start["momentum"]) == ("sgd", 0.9)
    assert (start["lr_schedule"], start["lr_decay"]) == ("inverse", 0.01)
    assert start["loss_options"] == {"squared": False} and start["epochs"] == 30
    lrs = [r["lr"] for r in rows if r["event"] == "step"]
    assert lrs == pytest.approx([0.01 / (1 + 0.01 * t) for t in range(6)])
    state = read_checkpoint(out / "checkpoint.pt")
    assert state["config"]["recipe"] == "kim2019-pose" and state["scheduler"]["last_epoch"] == 6
    # SGD with momentum: every parameter has a momentum buffer (Adam keeps exp_avg instead)
    assert all("momentum_buffer" in s for s in state["optimizer"]["state"].values())


def test_a_resumed_run_continues_the_decay(pose_store, features, tmp_path) -> None:
    config = dict(
        url="",
        stores=str(pose_store),
        store=STORE,
        features=str(features),
        optimizer="sgd",
        lr=0.01,
        momentum=0.9,
        lr_schedule="inverse",
        lr_decay=0.05,
        progress=False,
        checkpoint_every=3,
    )
    whole = tmp_path / "whole"
    fit(FitConfig(out=str(whole), max_steps=6, **config))
    part = tmp_path / "part"
    fit(FitConfig(out=str(part), max_steps=3, **config))
    fit(FitConfig(out=str(part), max_steps=6, resume=True, **config))
    lr = [r["lr"] for r in log_rows(part) if r["event"] == "step"]
    assert lr == pytest.approx([r["lr"] for r in log_rows(whole) if r["event"] == "step"])
    loss = [r["loss"] for r in log_rows(part) if r["event"] == "step"]
    assert loss == pytest.approx([r["loss"] for r in log_rows(whole) if r["event"] == "step"], rel=1e-5)


def test_fit_on_stores_draws_the_same_minibatches_and_losses_as_through_the_service(
    pose_store, service, features, tmp_path
) -> None:
    from labeldist.client import FeatureInputs, LabelDistClient, MinibatchStream
    from labeldist.client.local import LocalSource

    inputs = FeatureInputs(str(features))
    with LabelDistClient(service) as http, LocalSource(pose_store) as local:
        first = []
        for source in (http, local):
            stream = MinibatchStream(source, STORE, inputs, size=40, neighbors=5, seed=3, workers=1)
            batches = iter(stream)
            first.append([next(batches) for _ in range(3)])
            batches.close()
    for a, b in zip(*first):
        assert torch.equal(a.indices, b.indices)
        assert torch.allclose(a.distances, b.distances)
        assert torch.equal(a.inputs, b.inputs)

    runs = {}
    for name, where in (("url", {"url": service}), ("stores", {"url": "", "stores": str(pose_store)})):
        runs[name] = tmp_path / name
        fit(
            FitConfig(
                store=STORE,
                out=str(runs[name]),
                features=str(features),
                size=40,
                seed=3,
                max_steps=8,
                progress=False,
                **where,
            )
        )
    losses = {k: [r["loss"] for r in log_rows(v) if r["event"] == "step"] for k, v in runs.items()}
    assert len(losses["url"]) == 8
    assert losses["stores"] == pytest.approx(losses["url"], rel=1e-6)


def test_a_stores_folder_that_is_not_one_is_one_line(tmp_path, capsys) -> None:
    code = main(
        [
            "fit",
            "--stores",
            str(tmp_path / "nowhere"),
            "--store",
            STORE,
            "--features",
            "x.npy",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    assert code == 2
    assert "--stores" in capsys.readouterr().err


def test_a_cli_run_says_which_recipe_and_anchors_it_took_and_why(pose_store, features, tmp_path, capsys) -> None:
    out = tmp_path / "scratch"
    argv = ["fit", "--stores", str(pose_store), "--store", STORE, "--features", str(features), "--out", str(out)]
    assert main([*argv, "--recipe", "scratch", "--max-steps", "3", "--json"]) == 0
    printed = capsys.readouterr().out
    assert "recipe: scratch (--recipe scratch)" in printed
    assert "loss: log_ratio, every member of a minibatch an anchor (--anchors all)" in printed
    start = next(r for r in log_rows(out) if r["event"] == "start")
    assert start["anchors"] == "all" and start["config"]["anchors"] == "all" and start["threads"] == 1  # the MLP
    assert start["config"]["recipe_reason"] == "--recipe scratch"
    # auto over features: labeldist-v1, and the reason in the log; the loss's own anchors (the first)
    auto = tmp_path / "auto"
    argv[-1] = str(auto)
    assert main([*argv, "--max-steps", "3", "--no-progress", "--json"]) == 0
    start = next(r for r in log_rows(auto) if r["event"] == "start")
    assert start["config"]["recipe"] == "labeldist-v1" and "features" in start["config"]["recipe_reason"]
    assert start["anchors"] == "first" and start["config"]["anchors"] is None
    assert all(r["chance_level"] > 0 for r in log_rows(auto) if r["event"] == "step")
