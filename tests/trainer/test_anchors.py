"""Every member of a minibatch an anchor: the all-anchor loss against a loop of one-anchor losses, the first-anchor
loss against the authors' formula bit for bit, and each loss's chance level against the loss of embeddings whose
distances are all equal."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from labeldist.trainer.losses import LOSSES, BatchLoss, make_loss
from labeldist.trainer.losses.base import anchor_orders, every_anchor

B, N, D = 2, 9, 6
# small minibatches: binary losses need positives < n - 1; the ladder's per-anchor thresholds need no unit
OPTIONS: dict[str, dict[str, object]] = {
    "binary_triplet": {"positives": 3},
    "lifted": {"positives": 3},
    "multi_similarity": {"positives": 3},
    "proxy_anchor": {"positives": 3},
    "ladder": {"calibrate": "percentile"},
}


def minibatches(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Embeddings (B, N, D), pairwise label distances (B, N, N) of points in 3-d, store indices (B, N)."""
    g = torch.Generator().manual_seed(seed)
    f = torch.randn(B, N, D, dtype=torch.float64, generator=g)
    points = torch.randn(B, N, 3, dtype=torch.float64, generator=g)
    pairwise = torch.cdist(points, points)
    indices = torch.stack([torch.randperm(40, generator=g)[:N] for _ in range(B)])
    return f, pairwise, indices, pairwise[:, 0, 1:]


def pair(name: str) -> tuple[BatchLoss, BatchLoss]:
    """The loss ``name`` with every member an anchor and with the first, sharing any parameters (proxies)."""
    torch.manual_seed(0)
    one = make_loss(name, n_items=40, embedding_dim=D, anchors="first", **OPTIONS.get(name, {})).double()
    every = make_loss(name, n_items=40, embedding_dim=D, anchors="all", **OPTIONS.get(name, {})).double()
    every.load_state_dict(one.state_dict())
    return one, every


def test_anchor_orders_put_each_member_first_and_keep_the_others_in_order() -> None:
    order = anchor_orders(5)
    for q in range(5):
        assert order[q].tolist() == [q] + [i for i in range(5) if i != q]


def test_every_anchor_views_carry_each_members_own_row_of_label_distances() -> None:
    f, pairwise, indices, _ = minibatches(0)
    views, distances, idx = every_anchor(f, pairwise, indices)
    assert views.shape == (B * N, N, D) and distances.shape == (B * N, N - 1)
    for b in range(B):
        for q in range(N):
            others = [i for i in range(N) if i != q]
            assert torch.equal(views[b * N + q, 0], f[b, q])
            assert torch.equal(views[b * N + q, 1:], f[b, others])
            assert torch.equal(distances[b * N + q], pairwise[b, q, others])
            assert idx is not None and idx[b * N + q].tolist() == indices[b, [q, *others]].tolist()


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_all_anchors_is_the_mean_of_the_one_anchor_loss_over_each_member_as_anchor(name: str) -> None:
    one, every = pair(name)
    f, pairwise, indices, distances = minibatches(1)
    got = every(f, distances, pairwise, indices=indices)
    per_minibatch = []
    for b in range(B):  # the loop: each member in turn moved to the front of its minibatch
        terms = []
        for q in range(N):
            order = [q] + [i for i in range(N) if i != q]
            terms.append(
                one(
                    f[b, order],
                    pairwise[b, q, order[1:]],
                    pairwise[b][order][:, order],
                    indices=indices[b, order],
                )
            )
        per_minibatch.append(torch.stack(terms).mean())
    expected = torch.stack(per_minibatch).mean()
    assert expected.item() > 0  # a loss worth comparing
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_all_anchors_gives_a_gradient_to_every_member(name: str) -> None:
    _, every = pair(name)
    f, pairwise, indices, distances = minibatches(2)
    f.requires_grad_(True)
    every(f, distances, pairwise, indices=indices).backward()
    assert f.grad is not None and bool((f.grad.abs().sum(-1) > 0).all())


def authors_log_ratio(f: torch.Tensor, y: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The log-ratio loss of the first member, as this trainer computed it before anchors were a choice."""
    d_f = (f[:, 1:] - f[:, :1]).pow(2).sum(-1)
    x = torch.log(d_f + eps) - torch.log(y + eps)
    return (2.0 * x.var(dim=1, unbiased=True)).mean()


def authors_dense_triplet(f: torch.Tensor, y: torch.Tensor, margin: float = 0.03) -> torch.Tensor:
    """The dense triplet loss of the first member, as this trainer computed it before anchors were a choice."""
    f = F.normalize(f, dim=-1)
    d_f = (f[:, 1:] - f[:, :1]).pow(2).sum(-1)
    nearer = (y[:, :, None] < y[:, None, :]).to(f)
    hinge = F.relu(d_f[:, :, None] - d_f[:, None, :] + margin)
    return ((hinge * nearer).sum((1, 2)) / nearer.sum((1, 2)).clamp_min(1)).mean()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_first_anchor_is_the_authors_loss_bit_for_bit(dtype: torch.dtype) -> None:
    f, pairwise, _, distances = minibatches(3)
    f, pairwise, distances = f.to(dtype), pairwise.to(dtype), distances.to(dtype)
    for loss in (make_loss("log_ratio"), make_loss("log_ratio", anchors="first")):
        assert loss.anchors == "first" and not loss.needs_pairwise
        assert torch.equal(loss(f, distances), authors_log_ratio(f, distances))
        assert torch.equal(loss(f, distances, pairwise), authors_log_ratio(f, distances))  # pairwise unused
    for loss in (make_loss("dense_triplet"), make_loss("dense_triplet", anchors="first")):
        assert torch.equal(loss(f, distances), authors_dense_triplet(f, distances))


def simplex(b: int, n: int, scale: float = 3.0) -> torch.Tensor:
    """Embeddings whose pairwise distances (and cosines) are all equal: scaled one-hot rows."""
    return (scale * torch.eye(n, dtype=torch.float64)).expand(b, n, n).clone()


@pytest.mark.parametrize("anchors", ["first", "all"])
@pytest.mark.parametrize("name", ["log_ratio", "dense_triplet", "binary_triplet", "lifted", "ladder"])
def test_chance_level_is_the_loss_of_embeddings_at_equal_distances(name: str, anchors: str) -> None:
    loss = make_loss(name, anchors=anchors, **OPTIONS.get(name, {}))
    _, pairwise, _, distances = minibatches(4)
    f = simplex(B, N)
    value = loss(f, distances, pairwise)
    chance = loss.chance_level(distances, pairwise)
    assert chance is not None and float(chance) > 0
    torch.testing.assert_close(torch.as_tensor(chance, dtype=value.dtype), value, rtol=1e-9, atol=1e-12)


def test_log_ratio_chance_level_is_twice_the_variance_of_the_log_label_distances() -> None:
    _, pairwise, _, distances = minibatches(5)
    eps = 1e-6
    one = sum(2 * torch.log(distances[b] + eps).var().item() for b in range(B)) / B
    every = 0.0
    for b in range(B):
        for q in range(N):
            row = pairwise[b, q, [i for i in range(N) if i != q]]
            every += 2 * torch.log(row + eps).var().item() / (B * N)
    assert float(make_loss("log_ratio").chance_level(distances)) == pytest.approx(one, rel=1e-12)
    got = make_loss("log_ratio", anchors="all").chance_level(distances, pairwise)
    assert float(got) == pytest.approx(every, rel=1e-12)


def test_losses_without_a_chance_level_say_so() -> None:
    _, pairwise, _, distances = minibatches(6)
    assert make_loss("multi_similarity", positives=3).chance_level(distances) is None
    assert make_loss("proxy_anchor", n_items=40, embedding_dim=D, positives=3).chance_level(distances) is None


def test_all_anchors_without_the_pairwise_distances_is_refused_naming_the_flag() -> None:
    f, _, _, distances = minibatches(7)
    loss = make_loss("log_ratio", anchors="all")
    assert loss.needs_pairwise
    with pytest.raises(ValueError, match=r"every member an anchor\) needs the batch's pairwise label distances"):
        loss(f, distances)
    with pytest.raises(ValueError, match="every member an anchor"):
        loss.chance_level(distances)


def test_unknown_anchors_are_refused_naming_the_known() -> None:
    with pytest.raises(ValueError, match="unknown anchors 'some'; known: first, all"):
        make_loss("dense_triplet", anchors="some")


def test_the_ladder_takes_every_query_by_default_and_the_first_on_request() -> None:
    f, pairwise, _, distances = minibatches(8)
    every, first = (
        make_loss("ladder", calibrate="percentile"),
        make_loss("ladder", calibrate="percentile", anchors="first"),
    )
    assert every.anchors == "all" and every.needs_pairwise and first.needs_pairwise
    per_query = []
    for q in range(N):  # the first member's loss of each reordered minibatch
        order = [q] + [i for i in range(N) if i != q]
        per_query.append(first(f[:, order], pairwise[:, q, order[1:]], pairwise[:, order][:, :, order]))
    torch.testing.assert_close(every(f, distances, pairwise), torch.stack(per_query).mean())
