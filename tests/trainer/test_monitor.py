"""The training monitor: the spread against numpy, the watch on made-up sequences, and on real training runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from labeldist.trainer.training.monitor import (
    CHANCE_TOL,
    CHANCE_WARMUP,
    CHANCE_WINDOW,
    COLLAPSE_COSINE,
    ORDER_MIN,
    STILL_REL,
    WARMUP,
    WINDOW,
    TrainingWatch,
    embedding_spread,
    rank_agreement,
    relative_change,
    stuck_advice,
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


def feed(
    watch: TrainingWatch, losses: list[float], cosines: list[float], chance: float | list[float] | None = None
) -> list[tuple[int, str]]:
    """The warnings of ``watch`` over a run of these losses, cosines and chance levels (one, or one per step)."""
    said = []
    chances = chance if isinstance(chance, list) else [chance] * len(losses)
    for step, (loss, cos, level) in enumerate(zip(losses, cosines, chances), start=1):
        w = watch.update(step, loss, {"mean_cosine": cos, "variance": 1 - cos, "norm": 1.0}, chance=level)
        if w:
            said.append((step, w))
    return said


def test_watch_fires_once_per_kind_on_a_collapsed_sequence_at_its_margin() -> None:
    rng = np.random.default_rng(0)
    steps = CHANCE_WARMUP + CHANCE_WINDOW + 50
    cos = np.minimum(0.9 + np.arange(steps) * 0.001, 0.999)  # past 0.99 from step 91
    loss = 0.03 + rng.normal(0, 0.0008, steps)  # at the margin +- 3 %
    loss[:15] = 0.2  # the first steps do not count
    said = feed(TrainingWatch("dense_triplet"), loss.tolist(), cos.tolist(), chance=0.03)
    assert len(said) == 2, said  # collapse, then chance, each once
    (collapse_step, collapse), (chance_step, chance) = said
    first_above = int(np.argmax(cos > COLLAPSE_COSINE)) + 1
    assert collapse_step == first_above + WINDOW - 1
    assert "collapsed" in collapse and "dense_triplet" in collapse and "\n" not in collapse
    assert chance_step == CHANCE_WARMUP + CHANCE_WINDOW  # the first judged window
    assert "has not got below its chance level (0.03," in chance and "--loss log_ratio" in chance


def test_watch_quiet_on_a_healthy_sequence() -> None:
    rng = np.random.default_rng(1)
    steps = CHANCE_WARMUP + 2 * CHANCE_WINDOW
    loss = (0.08 * np.exp(-np.arange(steps) / 150) + 0.01) * rng.lognormal(0, 0.2, steps)  # decreasing, noisy
    cos = 0.95 - 0.5 * (1 - np.exp(-np.arange(steps) / 50))  # spreading out
    assert feed(TrainingWatch("dense_triplet"), loss.tolist(), cos.tolist(), chance=0.03) == []


def test_no_collapse_warning_while_a_triplet_loss_is_below_its_margin() -> None:
    # the all-anchor dense triplet run on MPII images (RESULTS.md): its embeddings bunched at a cosine of
    # 0.985-0.994 while its loss fell below the margin (0.991 of it over steps 21-70, 0.73 by step 400): it learned
    steps = CHANCE_WARMUP + CHANCE_WINDOW
    loss = 0.03 * np.concatenate([np.linspace(1.0, 0.985, 70), np.linspace(0.985, 0.73, steps - 70)])
    said = feed(TrainingWatch("dense_triplet"), loss.tolist(), [0.992] * steps, chance=0.03)
    assert said == []
    # the same cosines with the loss at its margin: collapsed
    said = feed(TrainingWatch("dense_triplet"), [0.03] * steps, [0.992] * steps, chance=0.03)
    assert [step for step, _ in said] == [WARMUP + WINDOW, CHANCE_WARMUP + CHANCE_WINDOW]


def test_watch_fires_on_a_noisy_loss_a_hair_below_its_margin() -> None:
    # the CPU dense triplet run of RESULTS.md: loss 0.029 +- 8 % a step (3 % under the margin: triplets satisfied
    # by a hair), cosine 0.965, for 2,000 steps, at the untrained network's nDCG
    rng = np.random.default_rng(3)
    steps = CHANCE_WARMUP + CHANCE_WINDOW + 100
    loss = 0.029 * rng.lognormal(0, 0.08, steps)
    said = feed(TrainingWatch("dense_triplet"), loss.tolist(), [0.965] * steps, chance=0.03)
    assert len(said) == 1 and said[0][0] == CHANCE_WARMUP + CHANCE_WINDOW
    assert "chance level (0.03," in said[0][1]
    # a run that learns, CHANCE_TOL or more below its chance level by the first judged window: quiet
    learns = np.concatenate([loss[:CHANCE_WARMUP], loss[CHANCE_WARMUP:] * (1 - CHANCE_TOL) * 0.98 / 0.967])
    assert feed(TrainingWatch("dense_triplet"), learns.tolist(), [0.965] * steps, chance=0.03) == []


def test_the_chance_test_follows_a_chance_level_that_changes_per_minibatch() -> None:
    # the log-ratio loss's chance level is the variance of each minibatch's log label distances
    rng = np.random.default_rng(4)
    steps = CHANCE_WARMUP + CHANCE_WINDOW
    chance = rng.uniform(0.3, 0.6, steps)
    stuck = chance * rng.lognormal(0, 0.1, steps)
    said = feed(TrainingWatch("log_ratio"), stuck.tolist(), [0.5] * steps, chance=chance.tolist())
    assert len(said) == 1 and said[0][0] == steps and "--lr" in said[0][1]
    learning = chance * np.linspace(1.4, 0.6, steps)  # above chance at first, as the all-anchor runs on images
    assert feed(TrainingWatch("log_ratio"), learning.tolist(), [0.5] * steps, chance=chance.tolist()) == []


def test_the_advice_names_anchors_and_the_recipe_first() -> None:
    advice = stuck_advice("dense_triplet", anchors="first", optimizer="sgd", pretrained=False)
    assert advice.index("--anchors all") < advice.index("--recipe scratch") < advice.index("--loss log_ratio")
    assert "--anchors" not in stuck_advice("log_ratio", anchors="all", optimizer="adam", pretrained=False)
    assert "--recipe scratch" not in stuck_advice("log_ratio", anchors="all", optimizer="sgd", pretrained=True)
    steps = CHANCE_WARMUP + CHANCE_WINDOW
    said = feed(TrainingWatch("log_ratio", advice="ADVICE"), [1.0] * steps, [0.5] * steps, chance=1.0)
    assert said and said[0][1].endswith("; try ADVICE")


def test_watch_flat_without_a_chance_level_needs_a_still_loss() -> None:
    cos = [0.5] * 200
    said = feed(TrainingWatch("multi_similarity"), [1.234] * 200, cos)
    assert len(said) == 1 and "multi_similarity" in said[0][1] and "--lr" in said[0][1] and "sat at 1.234" in said[0][1]
    rng = np.random.default_rng(2)
    assert feed(TrainingWatch("multi_similarity"), (1.2 + rng.normal(0, 0.03, 200)).tolist(), cos) == []
    assert feed(TrainingWatch("multi_similarity"), [0.0] * 200, cos) == []  # zero loss: done, not stuck
    assert feed(TrainingWatch("ladder"), [float("nan")] * 200, cos) == []
    # with a chance level, a still loss below it is a converged run, not a stuck one
    assert feed(TrainingWatch("log_ratio"), [0.5] * 800, [0.5] * 800, chance=1.0) == []


def run_fit(
    pose_store: Path,
    features: np.ndarray,
    out: Path,
    loss: str,
    steps: int,
    anchors: str | None = None,
    resume: bool = False,
    **options,
) -> tuple[list[dict], dict]:
    from labeldist.trainer.training.config import FitConfig
    from labeldist.trainer.training.fit import fit

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
            anchors=anchors,
            size=40,
            seed=0,
            max_steps=steps,
            epochs=3,
            progress=False,
            checkpoint_every=10_000,
            resume=resume,
            **options,
        )
    )
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return rows, summary


JUDGED = CHANCE_WARMUP + CHANCE_WINDOW  # the first step the chance test judges


def test_a_real_run_that_cannot_learn_warns_at_its_chance_level(pose_store, tmp_path, capsys) -> None:
    # every item gets the same input features: the network cannot tell items apart, so its embedding distances
    # are all equal and the log-ratio loss is exactly its chance level, 2 var(log D) of each minibatch
    rows, summary = run_fit(pose_store, np.ones((N_ITEMS, 16)), tmp_path / "blind", "log_ratio", JUDGED + 10)
    steps = [r for r in rows if r["event"] == "step"]
    assert len(steps) == JUDGED + 10
    for r in steps:
        assert r["loss"] == pytest.approx(r["chance_level"], rel=1e-4)
    warnings = [r for r in rows if r["event"] == "warning"]
    assert [(w["step"], w["kind"]) for w in warnings] == [(WARMUP + WINDOW, "collapse"), (JUDGED, "chance")]
    err = capsys.readouterr().err
    assert err.count("warning: log_ratio training looks stuck") == 2 and "--anchors all" in err
    assert "has not got below its chance level" in err
    assert summary["warnings"] == [{k: w[k] for k in ("step", "kind", "message")} for w in warnings]


def test_a_resumed_run_does_not_warn_again_of_what_it_warned_before(pose_store, tmp_path, capsys) -> None:
    # the blind run collapses at once: its collapse warning comes WINDOW steps after the warm-up, and a watch that
    # started afresh on resuming would give it again WARMUP + WINDOW steps after the resumed run's first step
    first = WARMUP + WINDOW + 10
    run_fit(pose_store, np.ones((N_ITEMS, 16)), tmp_path / "blind", "log_ratio", first)
    assert "warning: log_ratio training looks stuck" in capsys.readouterr().err
    rows, summary = run_fit(
        pose_store, np.ones((N_ITEMS, 16)), tmp_path / "blind", "log_ratio", first + WARMUP + WINDOW + 10, resume=True
    )
    assert [r["step"] for r in rows if r["event"] == "start"] == [0, first]
    warnings = [r for r in rows if r["event"] == "warning"]
    assert [(w["step"], w["kind"]) for w in warnings] == [(WARMUP + WINDOW, "collapse")]
    assert "warning" not in capsys.readouterr().err
    assert summary["warnings"] == [{k: w[k] for k in ("step", "kind", "message")} for w in warnings]


def test_a_real_collapsed_triplet_run_warns_of_the_collapse_then_of_its_chance_level(pose_store, tmp_path) -> None:
    rows, _ = run_fit(pose_store, np.ones((N_ITEMS, 16)), tmp_path / "collapsed", "dense_triplet", JUDGED)
    steps = [r for r in rows if r["event"] == "step"]
    assert all(r["mean_cosine"] > COLLAPSE_COSINE and r["spread_var"] < 0.01 for r in steps)
    assert all(r["chance_level"] == pytest.approx(0.03) for r in steps)  # the margin
    warnings = [(r["step"], r["kind"]) for r in rows if r["event"] == "warning"]
    assert warnings == [(WARMUP + WINDOW, "collapse"), (JUDGED, "chance")]


def test_a_real_run_that_learns_gets_below_its_chance_level_and_stays_quiet(pose_store, tmp_path, capsys) -> None:
    from labeldist.trainer.inputs.demo_inputs import pose_inputs

    features = pose_inputs(str(pose_store / STORE), seed=0)
    rows, summary = run_fit(pose_store, features, tmp_path / "healthy", "log_ratio", JUDGED + WINDOW, anchors="all")
    steps = [r for r in rows if r["event"] == "step"]
    assert len(steps) == JUDGED + WINDOW
    assert rows[0]["anchors"] == "all"
    assert not [r for r in rows if r["event"] == "warning"] and "warnings" not in summary
    assert "warning" not in capsys.readouterr().err
    late = steps[-CHANCE_WINDOW:]
    assert np.mean([r["loss"] for r in late]) < (1 - CHANCE_TOL) * np.mean([r["chance_level"] for r in late])
    # the logged spread is that of the embeddings: spread out well below the collapse line, and tied to the variance
    assert np.mean([r["mean_cosine"] for r in late]) < COLLAPSE_COSINE - 0.1
    for r in late:
        assert r["spread_var"] == pytest.approx((39 / 40) * (1 - r["mean_cosine"]), abs=2e-5)


# ------------------------------------------------------------------ the order of the labels, and still weights
def spearman_by_hand(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho of two samples without ties: 1 - 6 sum d^2 / (n (n^2 - 1)), d the rank differences."""
    n = len(a)
    d = np.argsort(np.argsort(a)) - np.argsort(np.argsort(b))
    return 1 - 6 * float(np.sum(d.astype(np.float64) ** 2)) / (n * (n * n - 1))


def test_rank_agreement_is_spearman_per_minibatch_and_does_not_see_scale() -> None:
    gen = torch.Generator().manual_seed(0)
    e = torch.randn(3, 20, 8, generator=gen)
    labels = torch.rand(3, 19, generator=gen) * 5
    ours = [(e[b, 1:] - e[b, 0]).norm(dim=-1).numpy() for b in range(3)]
    expected = np.mean([spearman_by_hand(ours[b], labels[b].numpy()) for b in range(3)])
    assert rank_agreement(e, labels) == pytest.approx(expected, abs=1e-12)
    # bunched onto one direction (a collapse) but in the same order: the same agreement
    assert rank_agreement(5 + 0.01 * e, labels) == pytest.approx(expected, abs=1e-9)
    # embeddings whose distances are the label distances agree at 1; identical embeddings at 0
    line = torch.zeros(1, 20, 2)
    line[0, 1:, 0] = labels[0]
    assert rank_agreement(line, labels[:1]) == pytest.approx(1.0)
    assert rank_agreement(torch.ones(2, 20, 8), labels[:2]) == 0.0
    normed = torch.nn.functional.normalize(e, dim=-1)
    assert rank_agreement(e, labels, normalized=True) == pytest.approx(rank_agreement(normed, labels), abs=1e-12)
    assert relative_change(torch.tensor([3.0, 4.0]), torch.tensor([3.0, 4.0])) == 0.0


def feed_ordered(watch: TrainingWatch, losses, cosines, chance, order, moved=None) -> list[tuple[int, str]]:
    said = []
    for step, (loss, cos) in enumerate(zip(losses, cosines), start=1):
        spread = {"mean_cosine": cos, "variance": 1 - cos, "norm": 1.0}
        w = watch.update(step, loss, spread, chance=chance, order=order, moved=moved if step % 200 == 0 else None)
        if w:
            said.append((step, w))
    return said


def test_a_run_whose_embeddings_order_the_labels_is_not_warned_whatever_its_loss() -> None:
    steps = CHANCE_WARMUP + 2 * CHANCE_WINDOW
    # the ladder run on MPII pose features (nDCG@10 0.82): cosines collapsed, loss at its chance level
    collapsed = feed_ordered(TrainingWatch("ladder"), [0.169] * steps, [0.9998] * steps, 0.169, 0.4)
    assert collapsed == []
    assert [s for s, _ in feed_ordered(TrainingWatch("ladder"), [0.169] * steps, [0.9998] * steps, 0.169, 0.0)] == [
        WARMUP + WINDOW,
        CHANCE_WARMUP + CHANCE_WINDOW,
    ]
    # multi-similarity (nDCG@10 0.85): no chance level, its loss flat within 0.5 %
    rng = np.random.default_rng(0)
    flat = (1.825 + rng.normal(0, 0.003, steps)).tolist()
    assert feed_ordered(TrainingWatch("multi_similarity"), flat, [0.9] * steps, None, ORDER_MIN + 0.05) == []
    said = feed_ordered(TrainingWatch("multi_similarity"), flat, [0.9] * steps, None, ORDER_MIN / 2)
    assert len(said) == 1 and "sat at 1.82" in said[0][1]


def test_weights_that_do_not_move_are_told_a_higher_rate_not_a_lower_one() -> None:
    steps = CHANCE_WARMUP + 2 * CHANCE_WINDOW
    said = feed_ordered(TrainingWatch("log_ratio"), [0.5] * steps, [0.7] * steps, 1.0, 0.8, moved=STILL_REL / 100)
    assert len(said) == 1, said
    step, message = said[0]
    assert step == 600 and "weights barely moved (1e-06 of their norm" in message
    assert "a higher --lr" in message and "a lower --lr" not in message
    assert feed_ordered(TrainingWatch("log_ratio"), [0.5] * steps, [0.7] * steps, 1.0, 0.8, moved=0.2) == []


@pytest.mark.parametrize("loss", ["ladder", "multi_similarity"])
def test_real_ladder_and_multi_similarity_runs_that_learn_are_not_warned(pose_store, tmp_path, loss, capsys) -> None:
    from labeldist.trainer.inputs.demo_inputs import pose_inputs

    features = pose_inputs(str(pose_store / STORE), seed=0)
    rows, summary = run_fit(pose_store, features, tmp_path / loss, loss, JUDGED + WINDOW)
    steps = [r for r in rows if r["event"] == "step"]
    late = steps[-CHANCE_WINDOW:]
    assert np.mean([r["rank_agreement"] for r in late]) >= ORDER_MIN
    assert "warnings" not in summary and "warning" not in capsys.readouterr().err


def test_a_real_run_at_a_rate_far_too_small_is_told_a_higher_rate(pose_store, tmp_path, capsys) -> None:
    from labeldist.trainer.inputs.demo_inputs import pose_inputs

    features = pose_inputs(str(pose_store / STORE), seed=0)
    rows, summary = run_fit(pose_store, features, tmp_path / "slow", "log_ratio", 3 * CHANCE_WINDOW, lr=1e-9)
    warnings = [r for r in rows if r["event"] == "warning"]
    assert [(w["step"], w["kind"]) for w in warnings] == [(3 * CHANCE_WINDOW, "still")]
    err = capsys.readouterr().err
    assert "weights barely moved" in err and "a higher --lr" in err and "a lower --lr" not in err
