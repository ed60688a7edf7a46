"""Augmentation that keeps the label: the minibatch flip leaves every anchor-to-item distance of real
pose and layout stores as served, a per-image flip does not; pixels and label coordinates move together; the
draws stay in their declared ranges and depend on the seed alone; a per-image flip is refused where it breaks
the distance."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from labeldist.client.local import LocalSource
from labeldist.distances.base import LabelDistance
from labeldist.distances.layout import LayoutMIoU
from labeldist.distances.pose import PoseDistance
from labeldist.labels.base import LabelSet
from labeldist.labels.layouts import LayoutMaps
from labeldist.labels.poses import Poses
from labeldist.store import StoreReader
from labeldist.trainer.inputs.augment import (
    AUGMENT_NAMES,
    IMAGENET,
    NONE,
    Augmentation,
    AugmentationError,
    AugmentParams,
    apply_augmentation,
    augment,
    draw_augmentation,
    eval_transform,
    kind_augmentation,
    resolve_augmentation,
    step_generator,
    transform_maps,
    transform_points,
)
from labeldist.trainer.kinds import TRAINER_KINDS
from labeldist.view.stored import stored_distance, stored_labels
from tests.trainer.conftest import STORE as POSE_STORE

LAYOUT_STORE = "lsun48-layout_miou"
MAP = 32
#: a label frame (cx, cy, half) off the origin, so that a flip about the wrong axis would show
FRAME = (0.12, -0.05, 0.9)


@pytest.fixture(scope="module")
def layout_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stores folder with one dense store of 48 generated LSUN layouts (32 x 32), computed and published by the
    engine's own functions (as tests/trainer/test_render.py builds its layout store)."""
    from labeldist.distances.layout import LayoutMIoU
    from labeldist.engine.blocks import compute_block
    from labeldist.labels.lsun_rooms import generate_layouts
    from labeldist.store import build_manifest, create_store, publish

    root = tmp_path_factory.mktemp("augment-stores")
    labels = generate_layouts(48, height=MAP, width=MAP, seed=3)
    distance, url = LayoutMIoU(), str(root / LAYOUT_STORE)
    manifest = build_manifest(
        dataset="lsun48", kind="layout_miou", params=distance.params(), labels=labels, k=8, dense=True, block_rows=64
    )
    create_store(url, manifest, labels)
    compute_block(0, labels=labels, distance=distance, url=url, k=8, block_rows=64, dense=True)
    publish(url)
    return root


# --------------------------------------------------------------------------------------------------------------
# The key property: the label distances of a minibatch are those of the labels as the pictures show them


def anchor_distance_change(
    kind_distance: LabelDistance, labels_before: list[LabelSet], labels_after: list[LabelSet]
) -> float:
    """The largest change of an anchor-to-item label distance, over the rows of a block of minibatches (each row a
    label set, anchor first) from ``labels_before`` to ``labels_after``. Two infinite distances (poses sharing no
    joint) are no change."""
    worst = 0.0
    for before, after in zip(labels_before, labels_after, strict=True):
        d0 = kind_distance.block(before.subset(np.arange(1)), before)[0, 1:]
        d1 = kind_distance.block(after.subset(np.arange(1)), after)[0, 1:]
        same_inf = np.isinf(d0) & (d0 == d1)
        with np.errstate(invalid="ignore"):
            change = np.where(same_inf, 0.0, np.abs(d1 - d0))
        worst = max(worst, float(change.max()))
    return worst


def _minibatches(root: Path, store: str, *, rows: int, size: int, neighbors: int, seed: int):
    """Real minibatches of a store read in this process (anchor + items), its labels and distance; the served
    distances checked against the distance of the stored labels first."""
    source = LocalSource(root)
    reader = StoreReader(str(root / store))
    labels, distance = stored_labels(reader), stored_distance(reader)
    n = labels.ids.shape[0]
    got = source.batches(
        store,
        anchors=np.random.default_rng(seed).choice(n, rows, replace=False),
        size=size,
        neighbors=neighbors,
        seed=seed,
    )
    members = got.members
    rows_labels = [labels.subset(m) for m in members]
    for row, served in zip(rows_labels, got.distances, strict=True):
        own = distance.block(row.subset(np.arange(1)), row)[0, 1:]
        np.testing.assert_allclose(served, own, rtol=1e-6, atol=1e-6)  # what the store serves
    return members, rows_labels, distance


def _moved_poses(rows: list[Poses], params: AugmentParams) -> list[Poses]:
    xy = np.stack([r.xy for r in rows])  # (B, n, J, 2)
    moved = transform_points(xy, params, FRAME)
    return [Poses(r.ids, m, r.present, r.visible) for r, m in zip(rows, moved, strict=True)]


def _moved_maps(rows: list[LayoutMaps], params: AugmentParams) -> list[LayoutMaps]:
    maps = np.stack([r.maps for r in rows])  # (B, n, H, W)
    moved = transform_maps(maps, params)
    return [LayoutMaps(r.ids, m, r.n_classes) for r, m in zip(rows, moved, strict=True)]


CASES = {
    "pose": (POSE_STORE, "pose_store", _moved_poses, dict(size=24, neighbors=5)),
    "layout_miou": (LAYOUT_STORE, "layout_root", _moved_maps, dict(size=12, neighbors=4)),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_the_kinds_flip_keeps_every_anchor_distance_and_a_per_image_flip_does_not(kind, request) -> None:
    store, fixture, move, shape = CASES[kind]
    root = request.getfixturevalue(fixture)
    members, before, distance = _minibatches(root, store, rows=16, seed=5, **shape)
    assert isinstance(distance, {"pose": PoseDistance, "layout_miou": LayoutMIoU}[kind])  # the real distances
    aug = resolve_augmentation("kind", kind)
    assert aug.flip == "batch" and kind_augmentation(kind).mirror_invariant is False
    for seed in range(3):
        params = draw_augmentation(members.shape, aug, torch.Generator().manual_seed(seed)).flip_only()
        flipped_rows = params.flip[:, 0]
        assert 0 < int(flipped_rows.sum()) < len(flipped_rows)  # some rows flipped, some not: a real test
        after = move(before, params)
        for b, row in enumerate(after):  # the flipped rows' labels did move
            now, then = (getattr(r, "xy", getattr(r, "maps", None)) for r in (row, before[b]))
            moved = not np.array_equal(now, then, equal_nan=bool(now.dtype.kind == "f"))
            assert moved == bool(flipped_rows[b])
        assert anchor_distance_change(distance, before, after) <= 1e-9

    # the twin: a flip per image mirrors some images of a minibatch and not others, which changes distances
    per_image = Augmentation("per-image", flip="image")
    params = draw_augmentation(members.shape, per_image, torch.Generator().manual_seed(0))
    assert (params.flip.any(1) & ~params.flip.all(1)).any()  # mixed rows
    change = anchor_distance_change(distance, before, move(before, params))
    typical = float(np.median(np.concatenate([distance.block(r.subset(np.arange(1)), r)[0, 1:] for r in before])))
    assert change > 0.05 * typical, (change, typical)


def test_the_pose_jitter_per_image_moves_distances_and_per_row_keeps_their_ratios(pose_store) -> None:
    """The paper's jitter is not label-preserving per image: in the frame MPII poses are rendered in (centre 0,
    half 1.1), on minibatches of 32 it moves anchor-to-item distances by 7 % (median), those to the anchor's 5
    label-nearest by 19 %, and reverses 9 % of the orders of two items' distances to their anchor (the figures of
    trainer/inputs/augment.py, measured on the 2,366 MPII training poses; this store holds 300). The same jitter per
    minibatch row keeps every ratio of two distances."""
    frame = (0.0, 0.0, 1.1)
    members, before, distance = _minibatches(pose_store, POSE_STORE, rows=64, size=32, neighbors=5, seed=1)
    aug = resolve_augmentation("kind", "pose", flip=False)
    params = draw_augmentation(members.shape, aug, torch.Generator().manual_seed(1))

    def moved(p: AugmentParams) -> list[Poses]:
        xy = transform_points(np.stack([r.xy for r in before]), p, frame)
        return [Poses(r.ids, m, r.present, r.visible) for r, m in zip(before, xy, strict=True)]

    def anchor_distances(rows: list[Poses]) -> np.ndarray:
        return np.stack([distance.block(r.subset(np.arange(1)), r)[0, 1:] for r in rows])

    d0, d1 = anchor_distances(before), anchor_distances(moved(params))
    ok = np.isfinite(d0)
    change = np.abs(d1 / d0 - 1)
    assert 0.04 < float(np.nanmedian(change)) < 0.11, np.nanmedian(change)
    # the 5 nearest: 12 % among these 300 poses, whose nearest lie further apart than among 2,366 (19 %)
    assert 0.09 < float(np.nanmedian(change[:, :5])) < 0.27, np.nanmedian(change[:, :5])
    assert float(np.nanmedian(change[:, :5])) > 1.5 * float(np.nanmedian(change[:, 5:]))
    i, j = np.triu_indices(d0.shape[1], 1)
    order0, order1 = np.sign(d0[:, i] - d0[:, j]), np.sign(d1[:, i] - d1[:, j])
    ranked = (order0 != 0) & np.isfinite(order0) & np.isfinite(order1)
    reversed_share = float(np.mean(order0[ranked] != order1[ranked]))
    assert 0.05 < reversed_share < 0.14, reversed_share

    per_row = draw_augmentation(members.shape, replace(aug, jitter="batch"), torch.Generator().manual_seed(1))
    assert (per_row.scale == per_row.scale[:, :1]).all() and (per_row.shift == per_row.shift[:, :1]).all()
    assert torch.equal(per_row.scale[:, 0], params.scale[:, 0])  # the same draws, the first image's for the row
    d2 = anchor_distances(moved(per_row))
    np.testing.assert_allclose(d2[ok], (d0 * per_row.scale[:, :1].double().numpy())[ok], rtol=1e-6)


# --------------------------------------------------------------------------------------------------------------
# Pixels and label coordinates move together


def _dots_image(pixels: np.ndarray, size: int, sigma: float = 1.2) -> torch.Tensor:
    """uint8 (3, size, size): a bright Gaussian dot at each continuous pixel position (x, y) on black (pixel i
    covers [i, i + 1))."""
    centres = np.arange(size) + 0.5
    image = np.zeros((size, size))
    for x, y in pixels:
        image = np.maximum(image, np.exp(-((centres[None, :] - x) ** 2 + (centres[:, None] - y) ** 2) / (2 * sigma**2)))
    return torch.from_numpy(np.rint(image * 255).astype(np.uint8)).expand(3, size, size).clone()


def _centroid(image: torch.Tensor, near: np.ndarray, radius: int = 4) -> np.ndarray:
    """The intensity-weighted centre (continuous pixels) of the dot near ``near``."""
    g = image[0].double().numpy()
    size = g.shape[0]
    x0, y0 = (int(np.floor(v)) for v in near)
    ys, xs = (
        slice(max(y0 - radius, 0), min(y0 + radius + 1, size)),
        slice(max(x0 - radius, 0), min(x0 + radius + 1, size)),
    )
    w = g[ys, xs]
    yy, xx = np.mgrid[ys, xs]
    return np.array([(w * (xx + 0.5)).sum() / w.sum(), (w * (yy + 0.5)).sum() / w.sum()])


def _to_pixels(xy: np.ndarray, size: int) -> np.ndarray:
    cx, cy, half = FRAME
    return size / 2 + (xy - np.array([cx, cy])) * size / (2 * half)


def _to_labels(px: np.ndarray, size: int) -> np.ndarray:
    cx, cy, half = FRAME
    return np.array([cx, cy]) + (px - size / 2) * 2 * half / size


def test_the_image_transform_moves_dots_where_transform_points_says(pose_store) -> None:
    size = 64
    # dots at the joints of a real pose (rescaled into the frame) and at the corners' neighbourhood
    pose = stored_labels(StoreReader(str(pose_store / POSE_STORE)))
    xy = pose.xy[3][pose.present[3]]
    xy = (xy - xy.mean(0)) / np.abs(xy - xy.mean(0)).max() * 0.55 + np.array(FRAME[:2])
    pixels = []
    for p in _to_pixels(xy, size):  # joints far enough apart that their dots do not merge
        if all(np.abs(p - q).max() > 9 for q in pixels):
            pixels.append(p)
    assert len(pixels) >= 4
    pixels = np.concatenate([pixels, [[14.3, 50.7], [49.5, 12.25]]])
    labels = _to_labels(pixels, size)
    image = _dots_image(pixels, size)
    B, n = 2, 3
    images = image.expand(B, n, 3, size, size).clone()
    params = AugmentParams(
        scale=torch.tensor([[1.0, 1.05, 0.95], [1.03, 1.0, 0.97]]),
        shift=torch.tensor([[[0.0, 0.0], [0.03, -0.02], [-0.03, 0.01]], [[0.02, 0.03], [0.0, 0.0], [-0.01, -0.03]]]),
        flip=torch.tensor([[False, True, False], [True, True, False]]),
    )
    drawn = draw_augmentation((B, n), IMAGENET, torch.Generator().manual_seed(4))
    drawn.crop = torch.where(
        drawn.crop[..., 2:3] * drawn.crop[..., 3:4] > 0.5, drawn.crop, torch.tensor([0.1, 0.05, 0.8, 0.85])
    )  # dots stay inside the crop
    for p in (params, drawn):
        out = apply_augmentation(images, p, size)
        expected = _to_pixels(transform_points(np.broadcast_to(labels, (B, n, *labels.shape)), p, FRAME), size)
        checked = 0
        for b in range(B):
            for i in range(n):
                for dot in range(len(labels)):
                    where = expected[b, i, dot]
                    if not (5 <= where.min() and where.max() <= size - 5):  # cut off by the crop
                        continue
                    found = _centroid(out[b, i], where)
                    assert np.abs(found - where).max() < 1.0, (b, i, dot, found, where)
                    checked += 1
        assert checked >= B * n * len(labels) // 2


def test_identity_is_exact_and_a_flip_is_an_exact_mirror_by_either_path() -> None:
    images = torch.randint(0, 256, (3, 4, 3, 20, 20), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    flip = torch.rand(3, 4, generator=torch.Generator().manual_seed(1)) < 0.5
    ones, zeros = torch.ones(3, 4), torch.zeros(3, 4, 2)
    mirrored = torch.where(flip[..., None, None, None], images.flip(-1), images)
    assert torch.equal(apply_augmentation(images, AugmentParams(ones, zeros, torch.zeros_like(flip)), 20), images)
    assert torch.equal(apply_augmentation(images, AugmentParams(ones, zeros, flip), 20), mirrored)
    whole = torch.tensor([0.0, 0.0, 1.0, 1.0]).expand(3, 4, 4)  # a crop of the whole image: the grid_sample path
    params = AugmentParams(ones, zeros, flip, whole)
    assert not params.is_flip_only()
    assert torch.equal(apply_augmentation(images, params, 20), mirrored)


def test_maps_move_with_the_picture_by_whole_pixels() -> None:
    maps = torch.zeros(1, 2, MAP, MAP, dtype=torch.uint8)
    maps[..., 10:14, 4:9] = 3
    params = AugmentParams(
        torch.ones(1, 2), torch.tensor([[[2 / MAP, -3 / MAP], [0.0, 0.0]]]), torch.tensor([[False, True]])
    )
    moved = transform_maps(maps, params)
    assert moved.dtype == torch.uint8
    assert torch.equal(torch.nonzero(moved[0, 0] == 3).amin(0), torch.tensor([7, 6]))  # 3 up, 2 right
    assert torch.equal(moved[0, 1], maps[0, 1].flip(-1))
    assert set(
        torch.unique(transform_maps(maps, draw_augmentation((1, 2), IMAGENET, step_generator(0, 0)))).tolist()
    ) <= {0, 3}


# --------------------------------------------------------------------------------------------------------------
# The draws


def test_jitter_stays_in_its_ranges_and_the_batch_flip_is_one_coin_per_row() -> None:
    aug = resolve_augmentation("kind", "pose")
    assert (aug.scale, aug.shift, aug.flip, aug.eval) == (0.05, 0.015, "batch", "resize")
    p = draw_augmentation((64, 30), aug, torch.Generator().manual_seed(0))
    assert p.scale.shape == (64, 30) and p.shift.shape == (64, 30, 2) and p.flip.shape == (64, 30) and p.crop is None
    assert 0.95 <= float(p.scale.min()) < 0.955 and 1.045 < float(p.scale.max()) <= 1.05
    assert -0.015 <= float(p.shift.min()) < -0.0145 and 0.0145 < float(p.shift.max()) <= 0.015
    assert (p.flip == p.flip[:, :1]).all() and 10 < int(p.flip[:, 0].sum()) < 54  # one coin per row, both sides
    caption = draw_augmentation((64, 30), resolve_augmentation("kind", "caption_wmd"), torch.Generator().manual_seed(0))
    assert (caption.flip != caption.flip[:, :1]).any()  # a coin per image
    layout = draw_augmentation((8, 5), resolve_augmentation("kind", "layout_miou"), torch.Generator().manual_seed(0))
    assert (layout.scale == 1).all() and (layout.shift == 0).all() and layout.is_flip_only()
    none = draw_augmentation((8, 5), NONE, torch.Generator().manual_seed(0))
    assert not none.flip.any() and none.is_flip_only() and not NONE.random


def test_the_imagenet_crops_are_torchvisions_ranges() -> None:
    p = draw_augmentation((40, 50), IMAGENET, torch.Generator().manual_seed(2))
    x0, y0, w, h = p.crop.unbind(-1)
    assert (x0 >= 0).all() and (y0 >= 0).all() and (x0 + w <= 1 + 1e-6).all() and (y0 + h <= 1 + 1e-6).all()
    area, ratio = w * h, w / h
    assert (area >= 0.08 - 1e-6).all() and (area <= 1 + 1e-6).all()
    assert (ratio >= 3 / 4 - 1e-5).all() and (ratio <= 4 / 3 + 1e-5).all()
    assert float(area.min()) < 0.12 and float(area.max()) > 0.9
    assert not (p.flip == p.flip[:, :1]).all()  # a flip per image
    narrow = resolve_augmentation("imagenet", "caption_wmd", crop_scale=(0.8, 1.0))
    assert (
        float((lambda c: (c[..., 2] * c[..., 3]).min())(draw_augmentation((20, 20), narrow, step_generator(0, 1)).crop))
        >= 0.8 - 1e-6
    )


def test_the_same_seed_draws_the_same_parameters() -> None:
    for aug in (resolve_augmentation("kind", "pose"), IMAGENET):
        a = draw_augmentation((6, 7), aug, step_generator(3, 10))
        b = draw_augmentation((6, 7), aug, step_generator(3, 10))
        c = draw_augmentation((6, 7), aug, step_generator(3, 11))
        for name in ("scale", "shift", "flip", "crop"):
            x, y, z = getattr(a, name), getattr(b, name), getattr(c, name)
            if x is None or bool((x == x.flatten()[0]).all()):  # not drawn by this recipe
                continue
            assert torch.equal(x, y) and not torch.equal(x, z)
    images = torch.randint(0, 256, (2, 5, 3, 24, 24), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    aug = resolve_augmentation("kind", "pose")
    one, two = augment(images, aug, step_generator(0, 5), 24), augment(images, aug, step_generator(0, 5), 24)
    assert one.dtype == torch.uint8 and one.shape == images.shape and torch.equal(one, two)
    assert not torch.equal(one, images)
    # turning the flip off draws the same jitter
    off = draw_augmentation((6, 7), resolve_augmentation("kind", "pose", flip=False), step_generator(3, 10))
    on = draw_augmentation((6, 7), resolve_augmentation("kind", "pose"), step_generator(3, 10))
    assert torch.equal(off.scale, on.scale) and torch.equal(off.shift, on.shift) and not off.flip.any()


def test_augment_resizes_to_the_input_size_and_runs_where_the_images_are() -> None:
    images = torch.randint(0, 256, (2, 3, 3, 40, 40), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    out = augment(images, IMAGENET, torch.Generator().manual_seed(0), 32)
    assert out.shape == (2, 3, 3, 32, 32) and out.dtype == torch.uint8 and out.device == images.device


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_cuda_the_transform_is_the_cpus() -> None:
    images = torch.randint(0, 256, (4, 6, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    aug = resolve_augmentation("kind", "pose")
    cpu = augment(images, aug, step_generator(0, 1), 32)
    gpu = augment(images.cuda(), aug, step_generator(0, 1), 32)
    assert gpu.device.type == "cuda"
    assert (gpu.cpu().int() - cpu.int()).abs().max() <= 1  # the same draws; interpolation rounding at most 1


# --------------------------------------------------------------------------------------------------------------
# Recipes


def test_a_per_image_flip_is_refused_where_it_breaks_the_distance() -> None:
    assert AUGMENT_NAMES == ("kind", "flip", "none", "imagenet")
    for kind in ("pose", "layout_miou", "vectors"):
        with pytest.raises(AugmentationError) as e:
            resolve_augmentation("imagenet", kind)
        message = str(e.value)
        assert len(message.splitlines()) == 1 and "--allow-image-flip" in message and kind in message
        assert "mirror-invariant" in message
        assert isinstance(e.value, ValueError)
        assert resolve_augmentation("imagenet", kind, allow_image_flip=True) == IMAGENET
        assert resolve_augmentation("imagenet", kind, flip=False).flip == "none"  # no flip: nothing to refuse
    assert resolve_augmentation("imagenet", "caption_wmd") == IMAGENET
    assert resolve_augmentation("kind", "caption_wmd").flip == "image"
    assert resolve_augmentation("kind", "sentence_relevance").flip == "image"
    with pytest.raises(AugmentationError, match="unknown augmentation 'flips'; known: kind, flip, none, imagenet"):
        resolve_augmentation("flips", "pose")
    with pytest.raises(AugmentationError, match="--crop-scale"):
        resolve_augmentation("imagenet", "caption_wmd", crop_scale=(0.5, 0.2))


def test_every_kind_declares_its_augmentation_and_a_kind_without_one_gets_none() -> None:
    for kind in TRAINER_KINDS:
        declared = kind_augmentation(kind)
        assert declared.reason and declared.augmentation.description.strip()
        assert "\n" not in declared.augmentation.description
        assert declared.mirror_invariant == (declared.augmentation.flip == "image"), kind
    vectors = resolve_augmentation("kind", "vectors")
    assert not vectors.random and "vectors kind declares no" in vectors.description
    assert resolve_augmentation("none", "pose") == NONE


def test_flip_is_the_kinds_flip_without_its_jitter() -> None:
    for kind in ("pose", "layout_miou", "caption_wmd", "vectors"):
        own, flip = resolve_augmentation("kind", kind, allow_image_flip=True), resolve_augmentation("flip", kind)
        assert (flip.scale, flip.shift, flip.crop_scale) == (0.0, 0.0, None)
        assert flip.flip == own.flip and flip.eval == "resize"
        assert flip.random == (own.flip != "none")
    assert resolve_augmentation("flip", "pose").flip == "batch"  # every distance of a minibatch kept
    assert resolve_augmentation("flip", "pose", flip=False).random is False


def test_eval_transforms_are_the_rendered_image_resized_or_the_old_imagenet_eval() -> None:
    from torchvision.transforms import v2

    image = torch.randint(0, 256, (3, 45, 60), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    old = v2.Compose([v2.Resize(round(32 * 256 / 224), antialias=True), v2.CenterCrop(32)])
    assert torch.equal(eval_transform(IMAGENET, 32)(image), old(image))
    assert torch.equal(eval_transform("resize", 32)(image), v2.Resize((32, 32), antialias=True)(image))
    assert eval_transform(resolve_augmentation("kind", "pose"), 32)(image).shape == (3, 32, 32)
    with pytest.raises(AugmentationError, match="unknown eval transform"):
        eval_transform("squash", 32)
    assert math.isclose(IMAGENET.crop_scale[0], 0.08)
