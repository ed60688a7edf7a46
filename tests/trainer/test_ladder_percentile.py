"""The ladder loss with the authors' adaptive thresholds (``calibrate="percentile"``): per anchor, its rungs sit at
percentiles of its own relevances. Checked against a per-query loop over plain Python lists with thresholds from
``np.percentile``, not against fixed numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from labeldist.trainer.losses import LadderLoss
from labeldist.trainer.training.checkpoints import read_torch_file, save_checkpoint

MARGINS, BETAS = (0.2, 0.01), (1.0, 0.25)


def percentile_ladder_loop(emb: np.ndarray, rel: np.ndarray, percentiles, margins, betas) -> tuple[float, list]:
    """One minibatch's loss, by loops: for each query, its thresholds are ``np.percentile`` of its relevances to
    the other items; an item is on the far side of rung l when its relevance is below the query's threshold (at
    or below, where the threshold is the query's smallest relevance). Also returns, per query, per rung, whether
    both sides had items."""
    f = [list(v / np.linalg.norm(v)) for v in emb]
    n = len(f)

    def cos(i: int, j: int) -> float:
        return sum(x * y for x, y in zip(f[i], f[j]))

    total, formed = 0.0, []
    for q in range(n):
        others = [c for c in range(n) if c != q]
        values = [float(rel[q][c]) for c in others]
        lowest = min(values)
        thresholds = [float(np.percentile(values, p)) for p in percentiles]
        formed.append([])
        for t, alpha, beta in zip(thresholds, margins, betas):
            far = [c for c in others if (rel[q][c] < t if t > lowest else rel[q][c] <= t)]
            near = [c for c in others if c not in far]
            formed[-1].append(bool(near and far))
            if near and far:
                total += beta * max(0.0, alpha - min(cos(q, c) for c in near) + max(cos(q, c) for c in far))
    return total / n, formed


def random_batch(b: int, n: int, seed: int, gate: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Embeddings ``(b, n, 6)`` and symmetric relevances ``(b, n, n)`` in [0, 1] with 1 on the diagonal; ``gate``:
    the share of pairs set to 0, as a coarse gate does."""
    g = torch.Generator().manual_seed(seed)
    r = torch.rand(b, n, n, dtype=torch.float64, generator=g)
    if gate:
        r = r * (torch.rand(b, n, n, dtype=torch.float64, generator=g) >= gate)
    r = torch.maximum(r, r.transpose(1, 2))
    r = r.clone()
    r[:, torch.arange(n), torch.arange(n)] = 1.0
    return torch.randn(b, n, 6, dtype=torch.float64, generator=g), r


def loss_of(loss_fn: LadderLoss, emb: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    d = 1.0 - r  # a relevance store holds 1 - R
    return loss_fn(emb, d[:, 0, 1:], d)


@pytest.mark.parametrize(
    ("n", "percentiles", "margins", "betas", "gate"),
    [
        (12, (95, 85), MARGINS, BETAS, 0.0),
        (30, (90, 60, 30), (0.3, 0.1, 0.05), (1.0, 0.5, 0.25), 0.0),
        (20, (80,), (0.2,), (1.0,), 0.0),
        (40, (95, 85), MARGINS, BETAS, 0.8),  # most relevances 0: the tie rule at the bottom
    ],
)
def test_percentile_ladder_equals_a_loop_over_queries(n, percentiles, margins, betas, gate) -> None:
    emb, r = random_batch(3, n, seed=n, gate=gate)
    loss_fn = LadderLoss(
        calibrate="percentile", percentiles=percentiles, margins=margins, betas=betas, reduction="none"
    )
    losses = loss_of(loss_fn, emb, r)
    for b in range(3):
        expected, _ = percentile_ladder_loop(emb[b].numpy(), r[b].numpy(), percentiles, margins, betas)
        assert expected > 0
        assert losses[b].item() == pytest.approx(expected, rel=1e-12)


def test_the_loss_differs_from_the_given_thresholds_and_has_gradients() -> None:
    emb, r = random_batch(2, 16, seed=3)
    emb.requires_grad_(True)
    adaptive = loss_of(LadderLoss(calibrate="percentile"), emb, r)
    given = loss_of(LadderLoss(calibrate="off"), emb, r)
    assert adaptive.item() != pytest.approx(given.item())
    adaptive.backward()
    assert emb.grad is not None and emb.grad.abs().sum() > 0


@pytest.mark.parametrize("gate", [0.0, 0.9])
def test_every_rung_is_formed_for_every_anchor(gate: float) -> None:
    """Continuous relevances, and a gate that zeroes 90 % of them: every query of every minibatch has items on
    both sides of both rungs, which the given thresholds (0.9, 0.63) are far from."""
    emb, r = random_batch(4, 50, seed=7, gate=gate)
    loss_fn = LadderLoss(calibrate="percentile", reduction="none")
    loss_of(loss_fn, emb, r)
    info = loss_fn.describe()
    assert info["queries"] == 200 and info["queries_with_rung"] == [200, 200]
    assert info["minibatches"] == 4 and info["minibatches_without_rung"] == 0
    for b in range(4):
        _, formed = percentile_ladder_loop(emb[b].numpy(), r[b].numpy(), (95, 85), MARGINS, BETAS)
        assert all(all(f) for f in formed)
    if gate:
        given = LadderLoss(calibrate="off")
        loss_of(given, emb, r)
        assert given.describe()["queries_with_rung"][0] < 200 and given.describe()["queries_with_rung"][1] < 200


def test_levels_hold_the_top_of_each_anchor() -> None:
    """Of 49 other items, distinct relevances: percentile 95 puts the anchor's top 3 on the near side of rung 1,
    percentile 85 its top 8 on the near side of rung 2 (linear interpolation between order statistics)."""
    from labeldist.trainer.losses.ladder import anchor_percentile_levels, anchor_percentile_thresholds

    _, r = random_batch(2, 50, seed=11)
    level = anchor_percentile_levels(r, anchor_percentile_thresholds(r, (95, 85)))
    other = ~torch.eye(50, dtype=torch.bool)
    assert ((level == 0) & other).sum(-1).eq(3).all() and ((level <= 1) & other).sum(-1).eq(8).all()
    top = r.masked_fill(~other, -1).argsort(-1, descending=True)[..., :3]
    assert (level.gather(-1, top) == 0).all()


def test_describe_records_the_mode_percentiles_and_first_batch_thresholds() -> None:
    emb, r = random_batch(3, 20, seed=5)
    loss_fn = LadderLoss(calibrate="percentile", percentiles=(90, 70))
    loss_of(loss_fn, emb, r)
    info = loss_fn.describe()
    assert info["ladder_mode"] == "percentile" and info["percentiles"] == [90.0, 70.0]
    assert info["thresholds"] is None and "percentile" in info["reason"]
    other = ~np.eye(20, dtype=bool)
    rows = r.numpy()[:, other].reshape(3, 20, 19)
    for stats, p in zip(info["anchor_thresholds_first_batch"], (90, 70)):
        t = np.percentile(rows, p, axis=-1)
        assert stats == pytest.approx({"mean": t.mean(), "min": t.min(), "max": t.max()}, rel=1e-12)
    first = info["anchor_thresholds_first_batch"]
    emb2, r2 = random_batch(1, 20, seed=6)
    loss_of(loss_fn, emb2, r2)  # a later batch: thresholds recomputed, the first batch's record kept
    assert loss_fn.describe()["anchor_thresholds_first_batch"] == first
    assert loss_fn.describe()["minibatches"] == 4 and loss_fn.describe()["queries"] == 80


def test_the_checkpoint_state_round_trips(tmp_path) -> None:
    emb, r = random_batch(2, 20, seed=8)
    loss_fn = LadderLoss(calibrate="percentile", percentiles=(90, 60))
    loss_of(loss_fn, emb, r)
    path = tmp_path / "loss.pt"
    save_checkpoint(path, {"loss": loss_fn.state_dict()})  # as the fit loop saves it: plain data, weights_only
    restored = LadderLoss(calibrate="percentile", percentiles=(90, 60))
    restored.load_state_dict(read_torch_file(path, "loss")["loss"])
    assert restored.describe() == loss_fn.describe()
    emb2, r2 = random_batch(1, 20, seed=9)
    assert loss_of(restored, emb2, r2).item() == pytest.approx(loss_of(loss_fn, emb2, r2).item(), rel=1e-12)
    assert restored.describe() == loss_fn.describe()  # the counts go on from the saved ones


def test_an_older_checkpoint_state_still_loads() -> None:
    """A state saved before the percentile mode (no per-rung counts) restores the given thresholds."""
    old = {
        "mode": "given",
        "thresholds": [0.9, 0.63],
        "distance_thresholds": None,
        "reason": "r",
        "minibatches": 5,
        "without_rung": 1,
    }
    loss_fn = LadderLoss()
    loss_fn.set_extra_state(old)
    info = loss_fn.describe()
    assert info["ladder_mode"] == "given" and info["thresholds"] == [0.9, 0.63] and info["minibatches"] == 5
    assert info["queries"] == 0 and info["queries_with_rung"] == [0, 0] and info["percentiles"] is None


def test_works_on_distances_of_any_scale() -> None:
    """Pixel-like distances (relevance 1 - D far below 0): percentiles need no range, so no calibration, and the
    loss is the loop's on 1 - D."""
    emb, r = random_batch(1, 15, seed=10)
    d = (1.0 - r) * 3000
    loss_fn = LadderLoss(calibrate="percentile")
    loss = loss_fn(emb, d[:, 0, 1:], d)
    expected, _ = percentile_ladder_loop(emb[0].numpy(), (1.0 - d[0]).numpy(), (95, 85), MARGINS, BETAS)
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    assert loss_fn.describe()["anchor_thresholds_first_batch"][0]["max"] < -1


@pytest.mark.parametrize(
    "bad",
    [
        {"percentiles": (85, 95)},
        {"percentiles": (95, 95)},
        {"percentiles": (100, 85)},
        {"percentiles": (95, 0)},
        {"percentiles": (95,)},  # two margins
    ],
)
def test_bad_percentiles_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match="percentiles"):
        LadderLoss(calibrate="percentile", **bad)


def test_one_rung_needs_no_thresholds_and_the_default_modes_are_unchanged() -> None:
    one = LadderLoss(calibrate="percentile", percentiles=(95,), margins=(0.2,), betas=(1.0,))
    emb, r = random_batch(1, 10, seed=12)
    assert loss_of(one, emb, r).item() >= 0 and one.describe()["queries_with_rung"] == [10]
    default = LadderLoss()
    assert default.calibrate == "auto" and default.thresholds == [0.9, 0.63]
    loss_of(default, emb, r)
    assert default.describe()["ladder_mode"] == "given" and default.describe()["percentiles"] is None
