"""The training monitor: the spread against numpy, the watch on made-up sequences, and on real training runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from labeldist.trainer.monitor import (
    COLLAPSE_COSINE,
    PLATEAU_WINDOWS,
    WARMUP,
    WINDOW,
    TrainingWatch,
    embedding_spread,
    flat_value,
)
from tests.trainer.conftest import N_ITEMS, STORE


def numpy_spread(e: np.ndarray) -> dict[str, float]:
    """The spread by the definitions, with an explicit n x n cosine matrix and per-dimension variances."""
    e = e.astype(np.float64)
    if e.ndim == 2:
        e = e[None]
    cos, var = [], []
    for x in e:
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        f = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
        g = f @ f.T
        n = len(f)
        cos.append((g.sum() - np.trace(g)) / (n * (n - 1)))
        var.append(f.var(axis=0).sum())
    return {
        "mean_cosine": float(np.mean(cos)),
        "variance": float(np.mean(var)),
        "norm": float(np.linalg.norm(e, axis=-1).mean()),
    }


@pytest.mark.parametrize("shape", [(7, 5), (3, 11, 16), (2, 2, 3)])
def test_spread_matches_numpy(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape))
    e = rng.normal(size=shape) + rng.normal(size=shape[-1])  # a shared direction: cosines well above 0
    got, want = embedding_spread(torch.from_numpy(e).float()), numpy_spread(e)
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key


def test_spread_of_collapsed_orthogonal_and_zero_rows() -> None:
    same = torch.tensor([[3.0, 4.0]]).repeat(6, 1)
    assert embedding_spread(same)["mean_cosine"] == pytest.approx(1.0, abs=1e-6)
    assert embedding_spread(same)["variance"] == pytest.approx(0.0, abs=1e-6)
    assert embedding_spread(same)["norm"] == pytest.approx(5.0)
    eye = torch.eye(4) * 2.0  # orthogonal: cosine 0, variance 1 - |mean|^2 = 1 - 4/16
    assert embedding_spread(eye)["mean_cosine"] == pytest.approx(0.0, abs=1e-7)
    assert embedding_spread(eye)["variance"] == pytest.approx(0.75)
    # a zero row stays zero (no NaN) and counts as cosine 0 with every other row, as numpy's definition says
    with_zero = torch.cat([same[:3], torch.zeros(1, 2)])
    want = numpy_spread(with_zero.numpy())
    got = embedding_spread(with_zero)
    assert got["mean_cosine"] == pytest.approx(want["mean_cosine"])
    assert got["variance"] == pytest.approx(want["variance"])


def test_spread_ties_cosine_and_variance_and_works_under_autograd() -> None:
    e = torch.randn(4, 9, 6, requires_grad=True)
    s = embedding_spread(e * 2.0)
    n = 9
    assert s["variance"] == pytest.approx((n - 1) / n * (1 - s["mean_cosine"]), rel=1e-5)
    with pytest.raises(ValueError, match="shape"):
        embedding_spread(torch.randn(1, 4))


def feed(watch: TrainingWatch, losses: list[float], cosines: list[float]) -> list[tuple[int, str]]:
    said = []
    for step, (loss, cos) in enumerate(zip(losses, cosines), start=1):
        w = watch.update(step, loss, {"mean_cosine": cos, "variance": 1 - cos, "norm": 1.0})
        if w:
            said.append((step, w))
    return said


def test_watch_fires_once_per_kind_on_a_collapsed_sequence() -> None:
    rng = np.random.default_rng(0)
    steps = 300
    cos = np.minimum(0.9 + np.arange(steps) * 0.001, 0.999)  # past 0.99 from step 91
    loss = 0.03 + rng.normal(0, 0.0008, steps)  # at the margin +- 3 %
    loss[:15] = 0.2  # the first steps do not count
    said = feed(TrainingWatch("dense_triplet", flat_at=0.03), loss.tolist(), cos.tolist())
    assert len(said) == 2, said  # flat, then collapse, each once
    (flat_step, flat), (collapse_step, collapse) = said
    assert flat_step == WARMUP + WINDOW  # the first full window after the warm-up
    assert "dense_triplet" in flat and "sat at 0.03" in flat and "margin" in flat and "\n" not in flat
    first_above = int(np.argmax(cos > COLLAPSE_COSINE)) + 1
    assert collapse_step == first_above + WINDOW - 1
    assert "collapsed" in collapse and "--recipe kim2019-pose" in collapse


def test_watch_quiet_on_a_healthy_sequence() -> None:
    rng = np.random.default_rng(1)
    steps = 400
    loss = (0.08 * np.exp(-np.arange(steps) / 150) + 0.01) * rng.lognormal(0, 0.2, steps)  # decreasing, noisy
    cos = 0.95 - 0.5 * (1 - np.exp(-np.arange(steps) / 50))  # spreading out
    assert feed(TrainingWatch("dense_triplet", flat_at=0.03), loss.tolist(), cos.tolist()) == []
    # a loss near the margin for a while, but moving as a learning run's does, is not flat
    loss = 0.03 * rng.lognormal(0, 0.15, steps)
    assert feed(TrainingWatch("dense_triplet", flat_at=0.03), loss.tolist(), cos.tolist()) == []


def test_watch_fires_on_a_noisy_loss_pinned_at_the_margin_with_bunched_embeddings() -> None:
    # the CPU dense triplet run of RESULTS.md: loss 0.029 +- 8 % a step, cosine 0.965, for 2,000 steps
    rng = np.random.default_rng(3)
    steps = 300
    loss = 0.029 * rng.lognormal(0, 0.08, steps)
    said = feed(TrainingWatch("dense_triplet", flat_at=0.03), loss.tolist(), [0.965] * steps)
    assert len(said) == 1 and said[0][0] == WARMUP + PLATEAU_WINDOWS * WINDOW  # four windows on the plateau
    assert "margin (0.03)" in said[0][1] and "bunched" in said[0][1] and "0.965" in said[0][1]
    assert f"for {PLATEAU_WINDOWS * WINDOW} steps" in said[0][1]
    # a run that starts on the plateau and leaves it within four windows (as any CNN from random weights starts
    # there) is not stuck
    cos = [0.965] * (WARMUP + 3 * WINDOW) + [0.6] * (steps - WARMUP - 3 * WINDOW)
    assert feed(TrainingWatch("dense_triplet", flat_at=0.03), loss.tolist(), cos) == []
    # the same losses from embeddings that spread out (a run that learns as its loss passes the margin): quiet
    assert feed(TrainingWatch("dense_triplet", flat_at=0.03), loss.tolist(), [0.6] * steps) == []
    # bunched, but the loss's mean away from the margin: not this warning
    assert feed(TrainingWatch("dense_triplet", flat_at=0.03), (2 * loss).tolist(), [0.965] * steps) == []


def test_watch_flat_without_a_known_value_needs_a_still_loss() -> None:
    cos = [0.5] * 200
    said = feed(TrainingWatch("log_ratio"), [1.234] * 200, cos)
    assert len(said) == 1 and "log_ratio" in said[0][1] and "--lr" in said[0][1]
    rng = np.random.default_rng(2)
    assert feed(TrainingWatch("log_ratio"), (1.2 + rng.normal(0, 0.03, 200)).tolist(), cos) == []
    assert feed(TrainingWatch("log_ratio"), [0.0] * 200, cos) == []  # zero loss: done, not stuck
    assert feed(TrainingWatch("ladder"), [float("nan")] * 200, cos) == []


def test_flat_value_is_the_margin_of_triplet_losses() -> None:
    from labeldist.trainer.losses import make_loss

    assert flat_value(make_loss("dense_triplet", margin=0.1)) == pytest.approx(0.1)
    assert flat_value(make_loss("binary_triplet")) == pytest.approx(0.2)
    assert flat_value(make_loss("log_ratio")) is None
    # the value is what the loss gives for collapsed embeddings
    e, y = torch.ones(2, 12, 8), torch.rand(2, 11) + 0.1
    for name in ("dense_triplet", "binary_triplet"):
        loss = make_loss(name, **({"positives": 3} if name == "binary_triplet" else {}))
        assert float(loss(e, y)) == pytest.approx(flat_value(loss), rel=1e-5)


def run_fit(pose_store: Path, features: np.ndarray, out: Path, loss: str, steps: int) -> tuple[list[dict], dict]:
    from labeldist.trainer.fit import FitConfig, fit

    path = out.with_suffix(".npy")
    np.save(path, features.astype(np.float32))
    summary = fit(
        FitConfig(
            url="",
            stores=str(pose_store),
            store=STORE,
            features=str(path),
            out=str(out),
            loss=loss,
            size=40,
            seed=0,
            max_steps=steps,
            progress=False,
            checkpoint_every=10_000,
        )
    )
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return rows, summary


def test_a_real_collapsed_run_warns_once_in_its_log_and_summary(pose_store, tmp_path, capsys) -> None:
    # every item gets the same input features, so the network cannot tell items apart: its embeddings coincide
    # and the dense triplet loss sits at its margin, the state of the collapsed run of issue 18 taken to the limit
    rows, summary = run_fit(
        pose_store, np.ones((N_ITEMS, 16)), tmp_path / "collapsed", "dense_triplet", WARMUP + WINDOW + 10
    )
    steps = [r for r in rows if r["event"] == "step"]
    assert all(r["mean_cosine"] > COLLAPSE_COSINE and r["spread_var"] < 0.01 for r in steps)
    warnings = [r for r in rows if r["event"] == "warning"]
    assert {w["kind"] for w in warnings} == {"flat", "collapse"} and len(warnings) == 2
    assert all(w["step"] == WARMUP + WINDOW for w in warnings)  # both seen at the first full window, one line
    err = capsys.readouterr().err
    assert err.count("warning: dense_triplet training looks stuck") == 1 and "margin" in err
    assert summary["warnings"] == [{k: w[k] for k in ("step", "kind", "message")} for w in warnings]


def test_a_real_healthy_run_logs_its_spread_and_stays_quiet(pose_store, tmp_path, capsys) -> None:
    from labeldist.trainer.demo_inputs import pose_inputs

    features = pose_inputs(str(pose_store / STORE), seed=0)
    rows, summary = run_fit(pose_store, features, tmp_path / "healthy", "log_ratio", WARMUP + 2 * WINDOW)
    steps = [r for r in rows if r["event"] == "step"]
    assert len(steps) == WARMUP + 2 * WINDOW
    assert not [r for r in rows if r["event"] == "warning"] and "warnings" not in summary
    assert "warning" not in capsys.readouterr().err
    # the logged spread is that of the embeddings: spread out well below the collapse line, and tied to the variance
    late = steps[-WINDOW:]
    assert np.mean([r["mean_cosine"] for r in late]) < COLLAPSE_COSINE - 0.1
    for r in late:
        assert r["spread_var"] == pytest.approx((39 / 40) * (1 - r["mean_cosine"]), abs=2e-5)
