"""``sts fit`` runs each batch by length groups: the cuts are the cheapest, and the outputs and gradients are the
padded batch's (eval mode, so no dropout), for a bi-encoder and a cross-encoder. The model tests let passes cost
nothing (``pass_tokens=0``): their batches are cut wherever lengths differ, the case furthest from one batch."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from labeldist.sts.fit import FitConfig, _load_base, forward_in_groups, length_groups
from labeldist.sts.stsb import read_sts
from tests.sts.conftest import STS_TRAIN


def grouping_cost(lengths: np.ndarray, groups: list[np.ndarray], pass_tokens: int) -> int:
    return sum(len(g) * int(lengths[g].max()) + pass_tokens for g in groups)


def cheapest_by_enumeration(lengths: np.ndarray, pass_tokens: int) -> int:
    """The least cost over every way to cut the sorted lengths into runs (2^(n-1) ways)."""
    ordered = np.sort(lengths)
    best = None
    for cuts in itertools.product([False, True], repeat=len(ordered) - 1):
        bounds = [0, *[i + 1 for i, cut in enumerate(cuts) if cut], len(ordered)]
        cost = sum((b - a) * int(ordered[b - 1]) + pass_tokens for a, b in itertools.pairwise(bounds))
        best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("pass_tokens", [0, 5, 24, 96, 10_000])
def test_length_groups_are_the_cheapest_cuts(pass_tokens):
    rng = np.random.default_rng(pass_tokens)
    for _ in range(20):
        lengths = rng.integers(3, 70, size=int(rng.integers(1, 11)))
        groups = length_groups(lengths, pass_tokens)
        together = np.sort(np.concatenate(groups))
        assert together.tolist() == list(range(len(lengths)))  # every text once
        assert grouping_cost(lengths, groups, pass_tokens) == cheapest_by_enumeration(lengths, pass_tokens)
        if pass_tokens == 10_000:
            assert len(groups) == 1
    assert length_groups(np.array([7, 7, 7]), 0)[0].tolist() == [0, 1, 2]  # equal lengths: no cut pays


@pytest.fixture(scope="module")
def pairs():
    train = read_sts(STS_TRAIN).head(12)
    return list(train.first), list(train.second)


def test_bi_encoder_groups_give_the_padded_batch_and_its_gradients(pairs):
    import torch

    first, second = pairs
    model = _load_base(FitConfig(architecture="bi", loss="cosine"))
    model.eval()  # no dropout: the two ways must agree to float rounding
    features = model.preprocess(first + second)
    lengths = features["attention_mask"].sum(dim=1).numpy()
    assert len(length_groups(lengths, 0)) > 3  # the test batch really is cut

    def gradients(grouped: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        batch = {key: value.clone() if torch.is_tensor(value) else value for key, value in features.items()}
        if grouped:
            out = forward_in_groups(model, batch, "sentence_embedding", pass_tokens=0)
        else:
            out = model(batch)["sentence_embedding"]
        loss = (torch.cosine_similarity(out[: len(first)], out[len(first) :]) - 0.5).pow(2).sum()
        loss.backward()
        return out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    padded, padded_grads = gradients(False)
    grouped, grouped_grads = gradients(True)
    np.testing.assert_allclose(grouped.numpy(), padded.numpy(), atol=1e-5)
    assert len(grouped_grads) == len(padded_grads)
    for g, p in zip(grouped_grads, padded_grads):
        np.testing.assert_allclose(g.numpy(), p.numpy(), atol=1e-5, rtol=1e-3)


def test_cross_encoder_groups_give_the_padded_scores(pairs, tiny_cross):
    import torch

    from labeldist.sts.models import load_cross_encoder

    first, second = pairs
    model = load_cross_encoder(tiny_cross, 64)
    model.eval()
    features = model.preprocess(list(zip(first, second)))
    assert len(length_groups(features["attention_mask"].sum(dim=1).numpy(), 0)) > 3
    with torch.no_grad():
        padded = model({k: v.clone() if torch.is_tensor(v) else v for k, v in features.items()})["scores"]
        grouped = forward_in_groups(model, features, "scores", pass_tokens=0)
    np.testing.assert_allclose(grouped.numpy(), padded.numpy(), atol=1e-5)
    assert grouped.shape[0] == len(first)
