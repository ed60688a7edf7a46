"""End to end: a real ``labeldist serve`` on 127.0.0.1 over a pose store built in the test, the trainer for a
few hundred steps on CPU through HTTP, evaluation, plots, and the command's errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from labeldist.client import LabelDistClient
from labeldist.trainer.cli import main
from labeldist.trainer.training.config import FitConfig
from labeldist.trainer.training.evaluate import evaluate, plot_curves
from labeldist.trainer.training.fit import fit
from tests.trainer.conftest import STORE

STEPS = 300


def step_losses(run: Path) -> list[float]:
    rows = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["event"] == "step"]


def config(service: str, features: Path, out: Path, **kw) -> FitConfig:
    base = dict(
        url=service,
        store=STORE,
        features=str(features),
        out=str(out),
        loss="log_ratio",
        size=40,
        neighbors=5,
        epochs=1,
        seed=0,
        progress=False,
        checkpoint_every=100,
    )
    return FitConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def trained(service: str, features: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("run") / "log_ratio"
    summary = fit(config(service, features, run))
    assert summary["steps"] == STEPS  # 300 anchors, one per step
    return run


def test_the_loss_goes_down_through_http(trained: Path) -> None:
    losses = step_losses(trained)
    assert len(losses) == STEPS and all(np.isfinite(losses))
    first, last = np.mean(losses[:50]), np.mean(losses[-50:])
    assert last < 0.7 * first, (first, last)


def test_resume_continues_exactly_where_an_uninterrupted_run_goes(
    service: str, features: Path, trained: Path, tmp_path: Path
) -> None:
    run = tmp_path / "resumed"
    fit(config(service, features, run, max_steps=150))
    fit(config(service, features, run, resume=True))
    assert step_losses(run) == pytest.approx(step_losses(trained), rel=1e-6)


def test_each_loss_trains_through_http(service: str, features: Path, tmp_path: Path) -> None:
    for loss, options in (
        ("dense_triplet", {}),
        ("binary_triplet", {"positives": 10}),
        ("ladder", {"relevance": "inverse", "thresholds": (0.5, 0.3)}),
    ):
        run = tmp_path / loss
        fit(config(service, features, run, loss=loss, loss_options=options, max_steps=120))
        losses = step_losses(run)
        assert len(losses) == 120 and np.mean(losses[-30:]) < np.mean(losses[:30]), loss


def test_trained_embedding_retrieves_better_than_its_inputs(service: str, features: Path, trained: Path) -> None:
    queries, gallery = np.arange(0, 300, 5), np.setdiff1d(np.arange(300), np.arange(0, 300, 5))
    with LabelDistClient(service) as client:
        before = evaluate(client, STORE, str(features), queries, gallery, k_max=20)
        after = evaluate(
            client, STORE, str(features), queries, gallery, checkpoint=str(trained / "checkpoint.pt"), k_max=20
        )
    assert after["metric"] == "euclidean" and after["loss"] == "log_ratio" and after["steps"] == STEPS
    assert len(after["ndcg"]) == 20 and 0 < after["ndcg"][9] <= 1
    # the queries were training anchors too: this checks the machinery, not generalisation
    assert after["summary"]["ndcg@10"] > before["summary"]["ndcg@10"]
    png = plot_curves({"inputs": before, "log-ratio": after}, trained / "fig.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_command_eval_and_its_errors(service: str, features: Path, tmp_path: Path, capsys) -> None:
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"queries": [0, 1, 2], "gallery": list(range(3, 300))}))
    out = tmp_path / "eval.json"
    args = [
        "eval",
        "--url",
        service,
        "--store",
        STORE,
        "--features",
        str(features),
        "--split",
        str(split),
        "--out",
        str(out),
        "--plot",
        str(tmp_path / "eval.png"),
        "--k-max",
        "10",
    ]
    assert main(args) == 0
    result = json.loads(out.read_text())
    assert result["label"] == "input features" and len(result["mean_label_distance"]) == 10
    assert (tmp_path / "eval.png").stat().st_size > 1000

    args[args.index(STORE)] = "no-such-store"
    assert main([*args, "--overwrite"]) == 2
    assert "no-such-store" in capsys.readouterr().err


def test_command_fit_with_evaluation(service: str, features: Path, tmp_path: Path, capsys) -> None:
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"queries": list(range(0, 300, 10)), "gallery": list(range(1, 300, 10))}))
    out = tmp_path / "run"
    args = [
        "fit",
        "--url",
        service,
        "--store",
        STORE,
        "--features",
        str(features),
        "--out",
        str(out),
        "--loss",
        "dense_triplet",
        "--size",
        "30",
        "--max-steps",
        "40",
        "--no-progress",
        "--embedding-dim",
        "16",
        "--eval-store",
        STORE,
        "--eval-features",
        str(features),
        "--split",
        str(split),
        "--k-max",
        "10",
    ]
    assert main(args) == 0
    result = json.loads((out / "eval.json").read_text())
    assert result["metric"] == "cosine" and result["embedding_dim"] == 16 and result["steps"] == 40
    assert (out / "eval.png").read_bytes()[:4] == b"\x89PNG" and (out / "checkpoint.pt").exists()
    assert len(step_losses(out)) == 40
    with pytest.raises(SystemExit, match="--margin does not apply to log_ratio"):
        main(
            [
                "fit",
                "--url",
                service,
                "--store",
                STORE,
                "--features",
                str(features),
                "--out",
                str(out),
                "--loss",
                "log_ratio",
                "--margin",
                "0.1",
            ]
        )
