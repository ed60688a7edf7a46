"""Minibatch streams (with a fake service), feature inputs, and the optional image-folder path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from labeldist.client import FeatureInputs, Minibatch, MinibatchStream

N = 23


class FakeClient:
    """Answers batches like the service: anchor, then ``neighbors`` "nearest" (the next indices), then random
    others, with distance = |i - j| (the seed decides the random others)."""

    def __init__(self) -> None:
        self.requests: list[dict] = []

    def batches(self, store, *, anchors, size, neighbors, pairwise, seed) -> Minibatch:
        self.requests.append({"anchors": list(anchors), "seed": seed, "pairwise": pairwise})
        rng = np.random.default_rng(seed)
        items = []
        for a in anchors:
            near = [(a + 1 + t) % N for t in range(neighbors)]
            rest = [i for i in rng.permutation(N).tolist() if i != a and i not in near][: size - 1 - neighbors]
            items.append(near + rest)
        anchors, items = np.asarray(anchors), np.asarray(items)
        dist = np.abs(items - anchors[:, None]).astype(np.float32)
        members = np.concatenate([anchors[:, None], items], axis=1)
        pw = np.abs(members[:, :, None] - members[:, None, :]).astype(np.float32) if pairwise else None
        return Minibatch.from_parts(anchors, items, dist, pw, seed)


def features() -> FeatureInputs:
    return FeatureInputs(np.arange(N * 2, dtype=np.float32).reshape(N, 2))


def test_each_epoch_visits_every_anchor_once_in_a_seeded_order() -> None:
    client = FakeClient()
    stream = MinibatchStream(
        client,
        "s",
        features(),
        size=6,
        neighbors=2,
        batches_per_step=2,
        anchors_per_request=4,
        epochs=2,
        seed=3,
        prefetch=3,
    )
    steps = list(stream)
    assert len(steps) == len(stream) == 2 * (N // 2)
    anchors = [int(a) for s in steps for a in s.indices[:, 0]]
    first, second = anchors[: N // 2 * 2], anchors[N // 2 * 2 :]
    assert len(set(first)) == len(first) == N - 1 and len(set(second)) == N - 1  # one anchor left over per epoch
    assert first != second  # a new order each epoch


def test_minibatch_shapes_inputs_and_distances() -> None:
    stream = MinibatchStream(
        FakeClient(),
        "s",
        features(),
        size=6,
        neighbors=2,
        batches_per_step=2,
        anchors_per_request=4,
        pairwise=True,
        epochs=1,
        seed=0,
    )
    step = next(iter(stream))
    assert step.indices.shape == (2, 6) and step.inputs.shape == (2, 6, 2) and step.distances.shape == (2, 5)
    assert step.pairwise is not None and step.pairwise.shape == (2, 6, 6)
    torch.testing.assert_close(step.inputs[..., 0], (step.indices * 2).float())  # row i of the features
    anchor = step.indices[:, :1]
    torch.testing.assert_close(step.distances, (step.indices[:, 1:] - anchor).abs().float())
    assert ((step.indices[:, 1:3] - anchor) % N).tolist() == [[1, 2], [1, 2]]  # the nearest come first


def test_same_seed_same_minibatches_and_resume_continues_exactly() -> None:
    def run(start: int, seed: int = 5) -> list[torch.Tensor]:
        stream = MinibatchStream(
            FakeClient(),
            "s",
            features(),
            size=5,
            neighbors=1,
            batches_per_step=1,
            anchors_per_request=3,
            epochs=2,
            seed=seed,
            start_step=start,
        )
        return [s.indices for s in stream]

    full = run(0)
    assert all(torch.equal(a, b) for a, b in zip(full, run(0)))
    assert not all(torch.equal(a, b) for a, b in zip(full, run(0, seed=6)))
    for start in (4, N, N + 7):  # inside a request, at an epoch boundary, in the second epoch
        tail = run(start)
        assert len(tail) == len(full) - start
        assert all(torch.equal(a, b) for a, b in zip(full[start:], tail))


def test_requests_are_rejected_when_anchors_do_not_split_into_steps() -> None:
    with pytest.raises(ValueError, match="multiple of batches_per_step"):
        MinibatchStream(FakeClient(), "s", features(), batches_per_step=3, anchors_per_request=4)


def test_feature_inputs_from_npy_and_zarr(tmp_path) -> None:
    import zarr

    x = np.random.default_rng(0).normal(size=(10, 3, 2)).astype(np.float32)
    np.save(tmp_path / "f.npy", x)
    z = zarr.create_array(str(tmp_path / "f.zarr"), shape=x.shape, dtype="float32", chunks=(4, 3, 2))
    z[...] = x
    idx = np.array([[7, 1, 7], [0, 9, 3]])
    for source, in_memory in (
        (tmp_path / "f.npy", True),
        (str(tmp_path / "f.zarr"), True),
        (str(tmp_path / "f.zarr"), False),
    ):
        got = FeatureInputs(source, in_memory=in_memory)
        assert got.n_items == 10 and got.item_shape == (3, 2)
        np.testing.assert_array_equal(got(idx).numpy(), x[idx])
    with pytest.raises(ValueError, match=r"shape \(N, ...\)"):
        FeatureInputs(np.zeros(5))
