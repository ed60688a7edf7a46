"""Losses against plain Python loops over hand-listed triplets, and the log-ratio gradient against autograd."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from labeldist.trainer.losses import (
    BinaryTripletLoss,
    DenseTripletLoss,
    LadderLoss,
    LogRatioLoss,
    binary_triplets,
    log_ratio_gradient,
    make_loss,
)

# one minibatch: the anchor (row 0) and three items, in 2-d, with their label distances to the anchor
F_ = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], dtype=torch.float64)
Y = torch.tensor([0.5, 3.0, 1.0], dtype=torch.float64)  # item 1 nearest in label, then item 3, then item 2


def sqdist(a: list[float], b: list[float]) -> float:
    return sum((x - y) ** 2 for x, y in zip(a, b))


def test_log_ratio_equals_a_loop_over_the_hand_listed_pairs() -> None:
    f, y, eps = F_.tolist(), [None, *Y.tolist()], 1e-6
    pairs = [(1, 2), (1, 3), (2, 3)]  # every pair of items sharing the anchor
    terms = []
    for i, j in pairs:
        emb = math.log((sqdist(f[0], f[i]) + eps) / (sqdist(f[0], f[j]) + eps))
        lab = math.log((y[i] + eps) / (y[j] + eps))
        terms.append((emb - lab) ** 2)
    expected = sum(terms) / len(terms)
    assert LogRatioLoss()(F_, Y).item() == pytest.approx(expected, rel=1e-12)
    # by hand: D_f = (1, 4, 2), so the pairs give (log(1/4) - log(1/6))^2, (log(1/2) - log(1/2))^2, ...
    assert terms[1] == pytest.approx(0.0, abs=1e-12)


def test_log_ratio_is_zero_when_embedding_distances_are_proportional_to_label_distances() -> None:
    y = torch.tensor([0.5, 2.0, 1.0, 4.0], dtype=torch.float64)
    f = torch.zeros(5, 4, dtype=torch.float64)
    f[1:] = torch.diag((3.0 * y).sqrt())  # D(f_a, f_i) = 3 y_i exactly
    assert LogRatioLoss(eps=0.0)(f, y).item() == pytest.approx(0.0, abs=1e-12)
    assert LogRatioLoss()(f * 7.0, y).item() < 1e-10  # no margin: invariant to the embedding's scale
    f[2, 1] *= 2.0
    assert LogRatioLoss()(f, y).item() > 0.1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_log_ratio_analytic_gradient_matches_autograd(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    f = torch.randn(12, 5, dtype=torch.float64, generator=g).requires_grad_(True)
    y = torch.rand(11, dtype=torch.float64, generator=g) * 3 + 0.05
    LogRatioLoss()(f, y).backward()
    analytic = log_ratio_gradient(f, y)
    assert f.grad is not None and f.grad.abs().max() > 1e-3  # a gradient worth comparing
    torch.testing.assert_close(analytic, f.grad, rtol=1e-9, atol=1e-12)
    assert analytic.sum(0).abs().max() < 1e-9  # translating every embedding changes nothing


def test_dense_triplet_equals_a_loop_over_the_hand_listed_triplets() -> None:
    f = F.normalize(F_, dim=1).tolist()
    # label order 1 < 3 < 2: (a, positive, negative) with D(y_a, y_p) < D(y_a, y_n)
    triplets = [(1, 3), (1, 2), (3, 2)]
    expected = sum(max(0.0, sqdist(f[0], f[p]) - sqdist(f[0], f[n]) + 0.03) for p, n in triplets) / 3
    assert expected > 0
    assert DenseTripletLoss()(F_, Y).item() == pytest.approx(expected, rel=1e-12)


def test_dense_triplet_skips_pairs_with_equal_label_distances() -> None:
    y = torch.tensor([1.0, 1.0, 2.0], dtype=torch.float64)  # items 1 and 2 tie: no triplet between them
    f = F.normalize(F_, dim=1).tolist()
    triplets = [(1, 3), (2, 3)]
    expected = sum(max(0.0, sqdist(f[0], f[p]) - sqdist(f[0], f[n]) + 0.1) for p, n in triplets) / 2
    assert DenseTripletLoss(margin=0.1)(F_, y).item() == pytest.approx(expected, rel=1e-12)


def test_binary_miner_lists_every_positive_negative_pair() -> None:
    a, p, n = binary_triplets(torch.tensor([0.9, 0.1, 0.5, 0.7]), positives=2)
    assert a.tolist() == [0, 0, 0, 0]
    assert sorted(zip(p.tolist(), n.tolist())) == [(2, 1), (2, 4), (3, 1), (3, 4)]


def test_binary_triplet_equals_a_loop_over_the_hand_listed_triplets() -> None:
    torch.manual_seed(0)
    emb = torch.randn(6, 3, dtype=torch.float64)
    y = torch.tensor([0.4, 2.0, 0.1, 3.0, 1.0], dtype=torch.float64)  # items 3, 1, 5 nearest
    f = F.normalize(emb, dim=1).tolist()
    triplets = [(p, n) for p in (3, 1) for n in (5, 2, 4)]  # positives=2: items 3 and 1
    expected = sum(max(0.0, sqdist(f[0], f[p]) - sqdist(f[0], f[n]) + 0.2) for p, n in triplets) / len(triplets)
    assert expected > 0
    assert BinaryTripletLoss(positives=2)(emb, y).item() == pytest.approx(expected, rel=1e-9)


def test_binary_triplet_rejects_more_positives_than_items() -> None:
    with pytest.raises(ValueError, match=r"positives=30 must lie in 1\.\.2"):
        BinaryTripletLoss(positives=30)(F_, Y)


def test_binary_positives_default_to_the_papers_share_of_the_minibatch() -> None:
    from labeldist.trainer.losses.binary_triplet import positives_among

    assert positives_among(None, 149) == 30  # Kim et al.: 30 of a minibatch of 150
    assert positives_among(None, 31) == 6 and positives_among(None, 3) == 1 and positives_among(None, 2) == 1
    # the default at three items is one positive, so the loss is that of positives=1
    assert BinaryTripletLoss()(F_, Y).item() == BinaryTripletLoss(positives=1)(F_, Y).item()


def ladder_loop(emb: torch.Tensor, rel: list[list[float]], thresholds, margins, betas) -> float:
    """The ladder loss of one minibatch, by loops: every item a query, each rung's hardest pair."""
    f = F.normalize(emb, dim=1).tolist()
    n = len(f)

    def cos(i: int, j: int) -> float:
        return sum(x * y for x, y in zip(f[i], f[j]))

    total = 0.0
    for q in range(n):
        level = {c: sum(rel[q][c] < t for t in thresholds) for c in range(n) if c != q}
        for rung, (alpha, beta) in enumerate(zip(margins, betas), start=1):
            near = [c for c in level if level[c] < rung]
            far = [c for c in level if level[c] >= rung]
            if near and far:
                total += beta * max(0.0, alpha - min(cos(q, c) for c in near) + max(cos(q, c) for c in far))
    return total / n


def test_ladder_equals_a_loop_over_queries_and_rungs() -> None:
    torch.manual_seed(1)
    emb = torch.randn(5, 4, dtype=torch.float64)
    rel = torch.tensor(
        [
            [1.0, 0.95, 0.7, 0.2, 0.5],
            [0.95, 1.0, 0.3, 0.92, 0.1],
            [0.7, 0.3, 1.0, 0.65, 0.64],
            [0.2, 0.92, 0.65, 1.0, 0.4],
            [0.5, 0.1, 0.64, 0.4, 1.0],
        ],
        dtype=torch.float64,
    )
    pairwise = 1.0 - rel  # a relevance store holds 1 - R
    loss = LadderLoss()(emb, pairwise[0, 1:], pairwise)
    expected = ladder_loop(emb, rel.tolist(), (0.9, 0.63), (0.2, 0.01), (1.0, 0.25))
    assert expected > 0
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_ladder_inverse_relevance_and_custom_rungs() -> None:
    torch.manual_seed(2)
    emb = torch.randn(6, 3, dtype=torch.float64)
    d = torch.rand(6, 6, dtype=torch.float64) * 4
    d = (d + d.T) / 2
    d.fill_diagonal_(0)
    loss = LadderLoss(
        thresholds=(0.5, 0.3, 0.2), margins=(0.3, 0.1, 0.05), betas=(1.0, 0.5, 0.25), relevance="inverse"
    )(emb, d[0, 1:], d)
    expected = ladder_loop(emb, (1 / (1 + d)).tolist(), (0.5, 0.3, 0.2), (0.3, 0.1, 0.05), (1.0, 0.5, 0.25))
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_ladder_needs_the_pairwise_matrix() -> None:
    with pytest.raises(ValueError, match="pairwise"):
        LadderLoss()(F_, Y)


@pytest.mark.parametrize("bad", [{"thresholds": (0.5, 0.9)}, {"margins": (0.2,)}, {"relevance": "cosine"}])
def test_ladder_rejects_bad_settings(bad: dict) -> None:
    with pytest.raises(ValueError):
        LadderLoss(**bad)


def test_base_checks_shapes_and_reduces_per_minibatch() -> None:
    torch.manual_seed(0)
    emb, y = torch.randn(3, 8, 4), torch.rand(3, 7) + 0.1
    each = LogRatioLoss(reduction="none")(emb, y)
    assert each.shape == (3,)
    torch.testing.assert_close(each[1], LogRatioLoss()(emb[1], y[1]))
    torch.testing.assert_close(LogRatioLoss(reduction="sum")(emb, y), each.sum())
    torch.testing.assert_close(LogRatioLoss()(emb, y), each.mean())
    with pytest.raises(ValueError, match=r"\(B, n - 1\)"):
        LogRatioLoss()(emb, y[:, :5])
    with pytest.raises(ValueError, match="not finite"):
        LogRatioLoss()(emb, torch.full((3, 7), float("inf")))
    with pytest.raises(ValueError, match="unknown reduction"):
        LogRatioLoss(reduction="max")


def test_make_loss_names_the_known_losses() -> None:
    assert isinstance(make_loss("dense_triplet", margin=0.1), DenseTripletLoss)
    with pytest.raises(ValueError, match="known: log_ratio, dense_triplet, binary_triplet, ladder"):
        make_loss("contrastive")
