"""The pytorch-metric-learning adapter: labels and triplets checked against a slow, obvious computation, against the
trainer's binary rule, and accepted by PML's losses."""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest
import torch
from pytorch_metric_learning.losses import ContrastiveLoss, TripletMarginLoss

from labeldist.client import Minibatch, pml_labels, pml_triplets


def minibatch(b: int, n: int, seed: int, *, ties: bool = False) -> Minibatch:
    """B minibatches of n distinct store items (of 1000), with label distances (rounded, so some tie) and a
    symmetric pairwise matrix whose row 0 holds the anchor's distances."""
    rng = np.random.default_rng(seed)
    indices = np.stack([rng.choice(1000, size=n, replace=False) for _ in range(b)])
    pw = rng.uniform(0, 3, size=(b, n, n))
    if ties:
        pw = np.round(pw * 2) / 2
    pw = (pw + pw.transpose(0, 2, 1)) / 2
    pw[:, np.arange(n), np.arange(n)] = 0
    pw = torch.tensor(pw, dtype=torch.float32)
    return Minibatch(indices=torch.tensor(indices), distances=pw[:, 0, 1:].clone(), pairwise=pw)


def slow_labels(mb, positives: int) -> list[int]:
    out = []
    for idx, dist in zip(mb.indices.tolist(), mb.distances.tolist()):
        # positives: the items nearest the anchor, ties to the earlier item
        nearest = sorted(range(1, len(idx)), key=lambda j: (dist[j - 1], j))[:positives]
        out += [idx[0] if j == 0 or j in nearest else idx[j] for j in range(len(idx))]
    return out


def slow_triplets(mb, positives: int | None, anchors: str) -> list[tuple[int, int, int]]:
    b, n = mb.indices.shape
    out = []
    for t in range(b):
        for a in range(n) if anchors == "all" else [0]:
            d = {j: float(mb.pairwise[t, a, j]) for j in range(n) if j != a}
            if anchors == "first":
                d = {j: float(mb.distances[t, j - 1]) for j in range(1, n)}
            ranked = sorted(d, key=lambda j: (d[j], j))
            for i, j in product(range(len(ranked)), repeat=2):
                p, q = ranked[i], ranked[j]
                keep = d[p] < d[q] if positives is None else (i < positives <= j)
                if keep:
                    out.append((t * n + a, t * n + p, t * n + q))
    return out


def as_list(triplets) -> list[tuple[int, int, int]]:
    a, p, n = triplets
    assert a.dtype == p.dtype == n.dtype == torch.long
    return list(zip(a.tolist(), p.tolist(), n.tolist()))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ties", [False, True])
def test_labels_equal_the_slow_rule(seed: int, ties: bool) -> None:
    mb = minibatch(3, 9, seed, ties=ties)
    for positives in (1, 3, 7):
        assert pml_labels(mb, positives).tolist() == slow_labels(mb, positives)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ties", [False, True])
def test_triplets_equal_the_slow_enumeration_in_order(seed: int, ties: bool) -> None:
    mb = minibatch(2, 8, seed, ties=ties)
    for positives, anchors in product((None, 1, 3), ("first", "all")):
        got = as_list(pml_triplets(mb, positives, anchors=anchors))
        assert got == slow_triplets(mb, positives, anchors), (positives, anchors)
    dense = as_list(pml_triplets(mb))
    for a, p, q in dense:  # p nearer the anchor than n, both in the anchor's minibatch, never the anchor
        t = a // 8
        assert a == t * 8 and p // 8 == q // 8 == t and p != a and q != a
        assert mb.distances[t, p % 8 - 1] < mb.distances[t, q % 8 - 1]


def test_the_rule_is_the_trainers() -> None:
    from labeldist.trainer.losses import binary_triplets, neighbourhood_classes

    for seed in range(5):
        mb = minibatch(1, 12, seed, ties=True)
        d, idx = mb.distances[0], mb.indices[0]
        for positives in (1, 4, 10):
            assert torch.equal(pml_labels(mb, positives), neighbourhood_classes(idx, d, positives))
            for mine, theirs in zip(pml_triplets(mb, positives), binary_triplets(d, positives)):
                assert torch.equal(mine, theirs)


def test_a_step_of_several_minibatches_indexes_its_flattened_rows() -> None:
    mb = minibatch(3, 5, 0)
    step = Minibatch(mb.indices, mb.distances, mb.pairwise, inputs=torch.zeros(3, 5, 2))
    labels = pml_labels(step, 2)
    assert labels.shape == (15,)
    for t in range(3):  # each minibatch's rows are its own: its labels come from its own indices
        assert (
            labels.view(3, 5)[t].tolist()
            == pml_labels(Minibatch(indices=mb.indices[t], distances=mb.distances[t]), 2).tolist()
        )
    one = [as_list(pml_triplets(Minibatch(indices=mb.indices[t], distances=mb.distances[t]))) for t in range(3)]
    shifted = [(a + 5 * t, p + 5 * t, n + 5 * t) for t in range(3) for a, p, n in one[t]]
    assert as_list(pml_triplets(step)) == shifted


def test_pml_losses_take_them() -> None:
    mb = minibatch(2, 10, 1)
    embeddings = torch.randn(20, 8, requires_grad=True)
    loss = TripletMarginLoss(margin=0.1)(embeddings, indices_tuple=pml_triplets(mb))
    loss.backward()
    assert torch.isfinite(loss) and embeddings.grad is not None
    assert torch.isfinite(ContrastiveLoss()(embeddings, pml_labels(mb, 3)))
    # the triplet loss by hand, on the adapter's triplets: PML computes the same
    a, p, n = pml_triplets(mb, 3)
    e = torch.nn.functional.normalize(embeddings.detach(), dim=1)
    by_hand = ((e[a] - e[p]).norm(dim=1) - (e[a] - e[n]).norm(dim=1) + 0.1).clamp(min=0)
    pml = TripletMarginLoss(margin=0.1)(embeddings.detach(), indices_tuple=(a, p, n))
    torch.testing.assert_close(pml, by_hand[by_hand > 0].mean())


def test_bad_arguments_are_refused() -> None:
    mb = minibatch(1, 6, 0)
    for positives in (0, 5):
        with pytest.raises(ValueError, match=r"positives=\d must lie in 1..4"):
            pml_labels(mb, positives)
        with pytest.raises(ValueError, match=r"positives=\d must lie in 1..4"):
            pml_triplets(mb, positives)
    with pytest.raises(ValueError, match="pairwise"):
        pml_triplets(Minibatch(indices=mb.indices, distances=mb.distances, pairwise=None), anchors="all")
    with pytest.raises(ValueError, match="first"):
        pml_triplets(mb, anchors="some")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"distances \(B, n - 1\)"):
        pml_labels(Minibatch(indices=mb.indices, distances=mb.distances[:, :3]), 1)


@pytest.mark.parametrize("made", [lambda mb: {"indices": mb.indices}, lambda mb: (mb.indices, mb.distances)])
def test_the_helpers_refuse_what_no_client_answers_in_one_line(made) -> None:
    """A dict, a tuple or any other object is refused naming what is expected, not an AttributeError."""
    mb = minibatch(2, 4, seed=0)
    for helper in (lambda x: pml_labels(x, 1), pml_triplets):
        with pytest.raises(ValueError, match="expected a labeldist Minibatch .* got (dict|tuple)") as e:
            helper(made(mb))
        assert "\n" not in str(e.value)


def test_the_helpers_take_numpy_minibatches_as_batches_answers_them() -> None:
    """What ``batches()`` answers (NumPy arrays) gives the same labels and triplets as the stream's tensors."""
    mb = minibatch(3, 5, seed=1)
    as_numpy = Minibatch(mb.indices.numpy(), mb.distances.numpy(), mb.pairwise.numpy())
    assert pml_labels(as_numpy, 2).tolist() == pml_labels(mb, 2).tolist()
    assert [t.tolist() for t in pml_triplets(as_numpy)] == [t.tolist() for t in pml_triplets(mb)]
