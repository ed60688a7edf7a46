"""The binary baselines through pytorch-metric-learning (lifted structure, proxy anchor, multi-similarity): each
equals a direct PML call on the same batch with positives, negatives and classes listed here independently, and
the pair losses equal the papers' formulas by loops. Tiny tensors, no network."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning import losses as pml

from labeldist.trainer.cli import build_parser
from labeldist.trainer.commands.options import loss_options
from labeldist.trainer.losses import (
    LiftedStructureLoss,
    MultiSimilarityLoss,
    ProxyAnchorLoss,
    binary_pairs,
    make_loss,
    neighbourhood_classes,
)

B, N, DIM, POS = 3, 9, 5, 3


@pytest.fixture
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(B, N, DIM, dtype=torch.float64, generator=g)
    distances = torch.rand(B, N - 1, dtype=torch.float64, generator=g) * 10
    return emb, distances


def split(distances: list[float], positives: int) -> tuple[list[int], list[int]]:
    """The documented rule, by hand: the ``positives`` items nearest the anchor (row 0) are positives."""
    rows = sorted(range(1, len(distances) + 1), key=lambda i: (distances[i - 1], i))
    return rows[:positives], rows[positives:]


def pair_tuple(distances: list[float], positives: int) -> tuple[torch.Tensor, ...]:
    pos, neg = split(distances, positives)
    zeros = [0] * len(distances)
    return tuple(torch.tensor(x) for x in (zeros[: len(pos)], pos, zeros[: len(neg)], neg))


def test_binary_pairs_are_the_anchor_with_its_label_nearest() -> None:
    a1, p, a2, n = binary_pairs(torch.tensor([0.9, 0.1, 0.5, 0.1]), positives=2)
    assert a1.tolist() == [0, 0] and a2.tolist() == [0, 0]
    assert p.tolist() == [2, 4] and n.tolist() == [3, 1]  # a tie (0.1) broken by position


def test_lifted_equals_a_direct_pml_call(batch) -> None:
    emb, distances = batch
    loss = LiftedStructureLoss(positives=POS, reduction="none")(emb, distances)
    direct = pml.LiftedStructureLoss(neg_margin=1.0, pos_margin=0.0)  # PML's defaults: L2-normalised, Euclidean
    expected = torch.stack([direct(emb[b], indices_tuple=pair_tuple(distances[b].tolist(), POS)) for b in range(B)])
    assert expected.min() > 0
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=0)
    torch.testing.assert_close(LiftedStructureLoss(positives=POS)(emb, distances), expected.mean())


def test_lifted_equals_oh_song_by_a_loop(batch) -> None:
    """J_ap = log sum_n exp(1 - D_an) + D_ap over the anchor's negatives; L = sum_p [J_ap]_+^2 / (2 |P|)."""
    emb, distances = batch
    expected = []
    for b in range(B):
        f = F.normalize(emb[b], dim=1).tolist()
        pos, neg = split(distances[b].tolist(), POS)
        js = [math.log(sum(math.exp(1.0 - math.dist(f[0], f[n])) for n in neg)) + math.dist(f[0], f[p]) for p in pos]
        expected.append(sum(max(0.0, j) ** 2 for j in js) / (2 * len(pos)))
    got = LiftedStructureLoss(positives=POS, reduction="none")(emb, distances)
    assert got.tolist() == pytest.approx(expected, rel=1e-10)


def test_multi_similarity_equals_a_direct_pml_call(batch) -> None:
    emb, distances = batch
    loss = MultiSimilarityLoss(positives=POS, reduction="none")(emb, distances)
    direct = pml.MultiSimilarityLoss()  # PML's defaults, mean over the N rows: only the anchor's row has pairs
    expected = torch.stack([direct(emb[b], indices_tuple=pair_tuple(distances[b].tolist(), POS)) * N for b in range(B)])
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=0)


def test_multi_similarity_equals_wang_by_a_loop(batch) -> None:
    """The anchor's term of Wang et al. Eq. 12 with alpha 2, beta 50, lambda 0.5 and cosine similarity."""
    emb, distances = batch
    alpha, beta, lam, expected = 2.0, 50.0, 0.5, []
    for b in range(B):
        f = F.normalize(emb[b], dim=1).tolist()
        pos, neg = split(distances[b].tolist(), POS)
        s = [sum(x * y for x, y in zip(f[0], f[k])) for k in range(N)]
        expected.append(
            math.log(1 + sum(math.exp(-alpha * (s[p] - lam)) for p in pos)) / alpha
            + math.log(1 + sum(math.exp(beta * (s[n] - lam)) for n in neg)) / beta
        )
    got = MultiSimilarityLoss(positives=POS, reduction="none")(emb, distances)
    assert got.tolist() == pytest.approx(expected, rel=1e-10)


def test_neighbourhood_classes_by_hand() -> None:
    indices = torch.tensor([7, 3, 11, 5, 2])
    labels = neighbourhood_classes(indices, torch.tensor([0.4, 0.1, 2.0, 0.3]), positives=2)
    assert labels.tolist() == [7, 3, 7, 5, 7]  # items 2 and 4 nearest: the anchor's class; 3 and 5 their own


def test_proxy_anchor_equals_a_direct_pml_call_and_its_proxies_get_the_same_gradient(batch) -> None:
    emb, distances = batch
    classes = 30
    indices = torch.stack([torch.randperm(classes, generator=torch.Generator().manual_seed(b))[:N] for b in range(B)])
    ours = ProxyAnchorLoss(num_classes=classes, embedding_size=DIM, positives=POS, reduction="none")
    direct = pml.ProxyAnchorLoss(classes, DIM)  # the paper's margin 0.1 and alpha 32 are PML's defaults
    direct.proxies.data = ours.proxy_anchor.proxies.data.clone()
    labels = []
    for b in range(B):
        pos, _ = split(distances[b].tolist(), POS)
        labels.append([int(indices[b, 0]) if i in pos else int(indices[b, i]) for i in range(N)])
    loss = ours(emb, distances, indices=indices)
    expected = torch.stack([direct(emb[b], torch.tensor(labels[b])) for b in range(B)])
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=0)
    loss.sum().backward()
    expected.sum().backward()
    grad = ours.proxy_anchor.proxies.grad
    assert grad is not None and grad.abs().max() > 0
    torch.testing.assert_close(grad, direct.proxies.grad)
    assert [name for name, _ in ours.named_parameters()] == ["proxy_anchor.proxies"]


def test_proxy_anchor_checks_its_indices(batch) -> None:
    emb, distances = batch
    loss_fn = ProxyAnchorLoss(num_classes=5, embedding_size=DIM, positives=POS)
    with pytest.raises(ValueError, match="store indices"):
        loss_fn(emb, distances)
    with pytest.raises(ValueError, match=r"0\.\.4"):
        loss_fn(emb, distances, indices=torch.arange(N).repeat(B, 1))


@pytest.mark.parametrize("name", ["lifted", "multi_similarity", "proxy_anchor"])
def test_each_baseline_rejects_more_positives_than_items(name: str, batch) -> None:
    emb, distances = batch
    loss_fn = make_loss(name, n_items=N, embedding_dim=DIM, positives=N - 1)
    with pytest.raises(ValueError, match=f"positives={N - 1}"):
        loss_fn(emb, distances, indices=torch.arange(N).repeat(B, 1))


def test_registry_builds_proxies_for_the_run() -> None:
    loss_fn = make_loss("proxy_anchor", n_items=300, embedding_dim=16, positives=5)
    assert isinstance(loss_fn, ProxyAnchorLoss) and loss_fn.proxy_anchor.proxies.shape == (300, 16)
    assert isinstance(make_loss("lifted", n_items=300, embedding_dim=16), LiftedStructureLoss)


@pytest.mark.parametrize(
    ("argv", "options"),
    [
        (["--loss", "lifted", "--positives", "7", "--margin", "0.5"], {"positives": 7, "margin": 0.5}),
        (["--loss", "proxy_anchor", "--positives", "5"], {"positives": 5}),
        (["--loss", "multi_similarity"], {}),
        (["--loss", "ladder", "--ladder-calibrate", "off"], {"calibrate": "off"}),
        (["--loss", "ladder", "--ladder-shares", "0.1", "0.3"], {"shares": [0.1, 0.3]}),
        (
            ["--loss", "ladder", "--ladder-calibrate", "percentile", "--ladder-percentiles", "90", "70"],
            {"calibrate": "percentile", "percentiles": [90.0, 70.0]},
        ),
        (["--recipe", "zhou2020", "--ladder-calibrate", "percentile"], {"calibrate": "percentile"}),
    ],
)
def test_the_command_line_reaches_the_new_losses(argv: list[str], options: dict) -> None:
    args = build_parser().parse_args(["fit", "--store", "s", "--features", "f.npy", "--out", "o", *argv])
    assert loss_options(args) == options


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--loss", "ladder", "--ladder-percentiles", "90"], "needs --ladder-calibrate percentile"),
        (["--loss", "dense_triplet", "--ladder-calibrate", "percentile"], "not of dense_triplet"),
    ],
)
def test_ladder_options_out_of_place_are_refused(argv: list[str], says: str) -> None:
    args = build_parser().parse_args(["fit", "--store", "s", "--features", "f.npy", "--out", "o", *argv])
    with pytest.raises(SystemExit, match=says):
        loss_options(args)


def test_margin_is_refused_where_the_paper_has_none() -> None:
    args = build_parser().parse_args(
        ["fit", "--store", "s", "--features", "f.npy", "--out", "o", "--loss", "multi_similarity", "--margin", "1"]
    )
    with pytest.raises(SystemExit, match="multi_similarity"):
        loss_options(args)
