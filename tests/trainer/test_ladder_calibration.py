"""The ladder loss is never silently zero: on real MPII pose distances (pixels, in the thousands) the paper's
relevance thresholds form no rung, so the loss calibrates them on the batch's distances or refuses, saying why.
Checked against numpy's quantiles and the loop of tests/trainer/test_losses.py, not against fixed numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from labeldist.trainer.losses import LadderLoss
from tests.trainer.test_losses import ladder_loop

PAPER = {"thresholds": (0.9, 0.63), "margins": (0.2, 0.01), "betas": (1.0, 0.25)}


def pose_batch(poses, start: int, n: int = 40) -> torch.Tensor:
    """The pixel pose distances (thin-slicing, Kwak et al.) among ``n`` real MPII poses, ``(n, n)`` float64."""
    from labeldist.distances.pose import PoseDistance

    subset = poses.subset(np.arange(start, start + n))
    d = PoseDistance().block(subset, subset)
    assert np.isfinite(d).all()
    return torch.from_numpy(d)


@pytest.fixture(scope="module")
def pixels(mpii_poses) -> torch.Tensor:
    return pose_batch(mpii_poses, 0)


def embeddings(n: int, seed: int) -> torch.Tensor:
    return torch.randn(n, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def off_diagonal(d: torch.Tensor) -> np.ndarray:
    return d.numpy()[~np.eye(len(d), dtype=bool)]


def test_the_old_behaviour_was_zero_on_pixel_pose_distances(pixels: torch.Tensor) -> None:
    """The bug this guards against: relevance 1 - D is negative for every pair, so the paper's thresholds put
    every item on the far side of every rung and the loss is exactly 0 (what every step of the run printed)."""
    assert off_diagonal(pixels).min() > 1
    rel = (1.0 - pixels).tolist()
    assert ladder_loop(embeddings(len(pixels), 0), rel, **PAPER) == 0.0


def test_the_default_ladder_calibrates_on_pixel_pose_distances(pixels: torch.Tensor) -> None:
    emb, loss_fn = embeddings(len(pixels), 0), LadderLoss()
    loss = loss_fn(emb, pixels[0, 1:], pixels)
    info = loss_fn.describe()
    assert info["ladder_mode"] == "quantile" and "outside the [0, 1]" in info["reason"]
    expected_d = np.quantile(off_diagonal(pixels), [0.05, 0.2], method="lower")
    np.testing.assert_allclose(info["distance_thresholds"], expected_d, rtol=0, atol=0)
    np.testing.assert_allclose(info["thresholds"], 1.0 - expected_d, rtol=1e-12)
    # the loss is the paper's, on the calibrated thresholds (the loop of test_losses), and not zero
    expected = ladder_loop(emb, (1.0 - pixels).tolist(), info["thresholds"], PAPER["margins"], PAPER["betas"])
    assert expected > 0
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    assert info["minibatches"] == 1 and info["minibatches_without_rung"] == 0


def test_calibrated_levels_hold_the_requested_shares_of_pairs(pixels: torch.Tensor) -> None:
    loss_fn = LadderLoss(shares=(0.1, 0.3))
    loss_fn(embeddings(len(pixels), 1), pixels[0, 1:], pixels)
    d, (d1, d2) = off_diagonal(pixels), loss_fn.describe()["distance_thresholds"]
    assert np.mean(d <= d1) >= 0.1 and np.mean(d < d1) < 0.1
    assert np.mean(d <= d2) >= 0.3 and np.mean(d < d2) < 0.3


def test_thresholds_are_frozen_after_the_first_batch_and_saved(mpii_poses, pixels: torch.Tensor) -> None:
    loss_fn = LadderLoss()
    loss_fn(embeddings(len(pixels), 0), pixels[0, 1:], pixels)
    first = loss_fn.describe()["thresholds"]
    other = pose_batch(mpii_poses, 100)
    loss_fn(embeddings(len(other), 2), other[0, 1:], other)
    assert loss_fn.describe()["thresholds"] == first and loss_fn.describe()["minibatches"] == 2
    restored = LadderLoss()
    restored.load_state_dict(loss_fn.state_dict())  # a resumed run keeps the run's thresholds
    emb = embeddings(len(other), 3)
    assert restored.describe()["thresholds"] == first
    assert restored(emb, other[0, 1:], other).item() == pytest.approx(
        ladder_loop(emb, (1.0 - other).tolist(), first, PAPER["margins"], PAPER["betas"]), rel=1e-12
    )


def test_with_calibration_off_it_refuses_saying_why(pixels: torch.Tensor) -> None:
    with pytest.raises(ValueError, match=r"no rung can be formed: .*outside the \[0, 1\].*quantile"):
        LadderLoss(calibrate="off")(embeddings(len(pixels), 0), pixels[0, 1:], pixels)


def test_inverse_relevance_is_in_range_but_forms_no_rung_on_pixels(pixels: torch.Tensor) -> None:
    """1 / (1 + D) lies in [0, 1] but below every threshold: auto calibrates, off refuses."""
    with pytest.raises(ValueError, match="put every pair on one side of every rung"):
        LadderLoss(relevance="inverse", calibrate="off")(embeddings(len(pixels), 0), pixels[0, 1:], pixels)
    loss_fn = LadderLoss(relevance="inverse")
    emb = embeddings(len(pixels), 0)
    loss = loss_fn(emb, pixels[0, 1:], pixels)
    info = loss_fn.describe()
    assert info["ladder_mode"] == "quantile"
    rel = (1.0 / (1.0 + pixels)).tolist()
    assert loss.item() == pytest.approx(ladder_loop(emb, rel, info["thresholds"], PAPER["margins"], PAPER["betas"]))
    assert loss.item() > 0


def test_distances_without_spread_are_refused() -> None:
    d = torch.full((10, 10), 3.0, dtype=torch.float64).fill_diagonal_(0)
    with pytest.raises(ValueError, match="no rung can be formed.*1 distinct value"):
        LadderLoss()(embeddings(10, 0), d[0, 1:], d)


def test_relevances_in_range_keep_the_papers_thresholds() -> None:
    g = torch.Generator().manual_seed(4)
    r = torch.rand(12, 12, dtype=torch.float64, generator=g)
    r = ((r + r.T) / 2).fill_diagonal_(1.0)
    d = 1.0 - r  # a relevance store holds 1 - R
    emb, loss_fn = embeddings(12, 5), LadderLoss()
    loss = loss_fn(emb, d[0, 1:], d)
    assert loss_fn.describe()["ladder_mode"] == "given" and loss_fn.describe()["thresholds"] == [0.9, 0.63]
    assert loss.item() == pytest.approx(ladder_loop(emb, r.tolist(), **PAPER), rel=1e-12)
    with pytest.raises(ValueError, match=r"outside the \[0, 1\]"):  # a later batch of other distances
        loss_fn(emb, (d * 5)[0, 1:], d * 5)


def test_calibration_needs_one_share_per_rung(pixels: torch.Tensor) -> None:
    loss_fn = LadderLoss(thresholds=(0.9, 0.8, 0.6), margins=(0.2, 0.1, 0.01), betas=(1, 0.5, 0.25))
    with pytest.raises(ValueError, match="one share per rung"):
        loss_fn(embeddings(len(pixels), 0), pixels[0, 1:], pixels)
    with pytest.raises(ValueError, match="calibrate"):
        LadderLoss(calibrate="sometimes")
    with pytest.raises(ValueError, match="shares"):
        LadderLoss(shares=(0.3, 0.1))
