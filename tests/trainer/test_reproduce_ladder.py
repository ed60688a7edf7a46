"""Zhou et al.'s Table 3 reproduction: the sentence split, the sentence demo inputs' sibling captions, CS@K at
a large K, and the table."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from labeldist.trainer.experiments import ladder as reproduce_ladder
from labeldist.trainer.experiments.ladder import coherent_at, sentence_split, table
from labeldist.trainer.inputs import demo_inputs
from labeldist.trainer.inputs.demo_inputs import sibling_captions
from labeldist.trainer.training.metrics import retrieval_metrics


def test_doctests() -> None:
    for module in (reproduce_ladder, demo_inputs):
        assert doctest.testmod(module).failed == 0


def test_sentence_split_follows_the_images_and_refuses_another_split() -> None:
    ids = ["5#0", "5#1", "8#0", "3#0", "3#1", "3#2"]
    queries, gallery = sentence_split({"queries": [2], "gallery": [0, 1]}, ["5", "8", "3"], ids)
    assert queries.tolist() == [3, 4, 5] and gallery.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="neither queries nor gallery"):
        sentence_split({"queries": [0], "gallery": [1]}, ["5", "8", "3"], ids)


def test_sibling_captions_pick_another_caption_of_the_same_image() -> None:
    ids = [f"{image}#{n}" for image in range(50) for n in range(5)] + ["99#0"]
    pick = sibling_captions(ids, seed=3)
    image = np.array([i.split("#")[0] for i in ids])
    assert (image[pick] == image).all()  # always the same image
    assert (pick[:-1] != np.arange(len(ids) - 1)).all()  # never the sentence itself while there is another
    assert pick[-1] == len(ids) - 1  # an image with one caption: itself
    assert len(set(pick[:250].tolist())) > 150  # spread over the siblings, not always the same one
    assert np.array_equal(sibling_captions(ids, seed=3), pick)
    assert not np.array_equal(sibling_captions(ids, seed=4), pick)


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_coherent_at_agrees_with_retrieval_metrics(metric: str) -> None:
    rng = np.random.default_rng(0)
    q, g = rng.normal(size=(7, 4)), rng.normal(size=(60, 4))
    d = rng.random((7, 60)).round(1)  # ties, as a gated relevance has
    expected = retrieval_metrics(q, g, d, k_max=60, metric=metric)["coherent_score"]
    for k in (2, 10, 60):
        assert coherent_at(q, g, d, k, metric) == pytest.approx(expected[k - 1], abs=1e-12)
    assert coherent_at(q, g, d, 1000, metric) == pytest.approx(expected[-1], abs=1e-12)  # k capped at the gallery


def test_table_gives_mean_and_spread_and_bolds_the_best() -> None:
    def result(cs: float, r: float, seconds: float | None) -> dict:
        return {
            "cs": {str(k): cs for k in reproduce_ladder.CS_K},
            "r": {str(k): r for k in reproduce_ladder.R_K},
            "train_s": seconds,
        }

    text = table({"a": [result(0.2, 0.5, None)], "b": [result(0.3, 0.1, 60.0), result(0.5, 0.3, 120.0)]}, 3, 9)
    head, _, a, b = text.splitlines()
    assert "3 queries x 9 gallery" in head and head.count("CS@") == 5 and head.count("R@") == 5
    assert a.startswith("| a | 0.200 | ") and "| **0.500** |" in a and a.endswith("| - |")
    assert "| **0.400** ± 0.100 |" in b and "| 0.200 ± 0.100 |" in b and b.endswith("| 1.0 / 2.0 min |")


def test_table_says_which_thresholds_each_row_used() -> None:
    def result(cs: float) -> dict:
        return {
            "cs": {str(k): cs for k in reproduce_ladder.CS_K},
            "r": {str(k): cs for k in reproduce_ladder.R_K},
            "train_s": 60.0,
        }

    used = {
        name: reproduce_ladder.thresholds_used(loss, options)
        for loss, options, name in reproduce_ladder.METHODS.values()
    }
    rows = {name: [result(0.1 * i)] for i, name in enumerate(used)}
    head, rule, *lines = table(rows, 3, 9, used).splitlines()
    assert head.startswith("| method (3 queries x 9 gallery sentences) | thresholds | CS@10 |")
    assert rule.count("|---") == 2 + 10 + 1 and len(lines) == len(used)
    cells = {line.split(" | ")[0][2:]: line.split(" | ")[1] for line in lines}
    assert cells["Ladder loss, θ = (0.9, 0.63) (Zhou et al.)"] == "given θ = (0.9, 0.63)"
    assert cells["Triplet, hardest negative, relevant = R ≥ 0.63 (VSE++)"] == "given θ = (0.63)"
    assert cells[reproduce_ladder.METHODS["ladder_percentile"][2]] == "adaptive, per-anchor percentiles p = (95, 85)"
    assert cells[reproduce_ladder.METHODS["triplet_hardest_percentile"][2]] == (
        "adaptive, per-anchor percentiles p = (95)"
    )
    assert cells["L(Triplet)+M(Dense) (Kim et al.)"] == "-"


def test_ladder_note_gives_the_thresholds_and_how_often_rungs_formed() -> None:
    import torch

    from labeldist.trainer.losses import LadderLoss

    r = torch.rand(2, 10, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    d = 1.0 - (r + r.transpose(1, 2)) / 2
    emb = torch.randn(2, 10, 4, dtype=torch.float64)
    adaptive, given = LadderLoss(calibrate="percentile"), LadderLoss(thresholds=(0.7, 0.4), calibrate="off")
    for loss_fn in (adaptive, given):
        loss_fn(emb, d[:, 0, 1:], d)
    note = reproduce_ladder.ladder_note("L", 0, adaptive.describe())
    assert note.startswith("L, seed 0: per-anchor percentiles [95.0, 85.0] (first batch's per-anchor thresholds: p95:")
    assert "0 of 2 minibatches without a rung" in note and note.endswith("rung 1: 100.0 %, rung 2: 100.0 %")
    note = reproduce_ladder.ladder_note("G", 1, given.describe())
    assert note.startswith("G, seed 1: relevance thresholds [0.7, 0.4] (given), 0 of 2 minibatches without a rung")
