"""Augmentation that keeps the label: declared by the store kind, drawn per minibatch, applied in batch on the
images' device.

A transform is an augmentation only when the distances served for the untransformed labels are still those of the
labels as the pictures show them. A **jitter** (a scale about the centre and a shift, after Kim et al., CVPR 2019,
``code/transformation.py``) does not keep them per image (``jitter="batch"`` keeps every ratio of two distances); a
**flip** of a whole minibatch (``flip="batch"``) keeps every pose and layout distance, a flip per image only a
mirror-invariant kind's. Each kind declares its own (:func:`kind_augmentation`); a run picks from
:data:`AUGMENT_NAMES` (:func:`resolve_augmentation`). One affine map in normalised coordinates moves pixels
(:func:`apply_augmentation`), joints (:func:`transform_points`) and layout maps (:func:`transform_maps`):
``v_x = f * (m * c_x(u_x) + 2 * shift_x)``, ``v_y = m * c_y(u_y) + 2 * shift_y``. All in torch on the images'
device, drawn from :func:`step_generator`. docs/internals.md, "Augmentation that keeps the label", has the symbols
and the reasons.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from labeldist.errors import LabeldistError, UsageError
from labeldist.trainer.kinds import load, trainer_kind

Flip = Literal["none", "batch", "image"]
Jitter = Literal["image", "batch"]
JITTERS = ("image", "batch")
Eval = Literal["resize", "center_crop"]
FLIPS = ("none", "batch", "image")
EVALS = ("resize", "center_crop")
#: the recipes a run may name (``trainer fit --augment``)
AUGMENT_NAMES = ("kind", "flip", "none", "imagenet")
#: the eval resize of the torchvision ImageNet recipe: short side to size * 256/224, then a centre crop of size
EVAL_RESIZE = 256 / 224
#: the aspect-ratio range of torchvision's RandomResizedCrop
CROP_RATIO = (3 / 4, 4 / 3)
#: where a sample falls outside the input (a zoom out, a shift): the edge pixel repeated. Reflection would mirror
#: whatever lies near the edge into the picture (a limb near the border gets a mirrored twin, drawn in the shade of
#: the other side) and zeros draw a black band that tells the network the jitter; a repeated edge adds neither.
PADDING = "border"


class AugmentationError(LabeldistError, ValueError):
    """An augmentation that cannot be used as asked (one line, naming the flag that changes it)."""


@dataclass(frozen=True)
class Augmentation:
    """A training-time image transform and what evaluation does instead.

    name : the recipe's name (recorded with a run).
    scale : per image, the content is magnified by a factor drawn uniformly in ``[1 - scale, 1 + scale]``, about the
        image centre (0: none).
    shift : per image and axis, a shift drawn uniformly in ``[-shift, shift]`` of the side (0: none).
    jitter : "image": a scale and a shift per image (the authors'); "batch": one per minibatch row, the same for
        all its images: a common shift keeps every pose distance, a common scale multiplies them all by one
        factor (their ratios, which the log-ratio loss and every triplet's order depend on, are kept). Per
        image, the paper's jitter moves the distance of an anchor to its 5 label-nearest items by 19% (median)
        in the frame MPII poses are rendered in (tests/trainer/test_augment.py).
    flip : "none"; "batch": every image of a minibatch row mirrored together or none (one coin per row);
        "image": each image on its own coin (only for mirror-invariant kinds).
    crop_scale : the ImageNet random resized crop's area range (aspect 3/4-4/3), or None.
    eval : what evaluation does: "resize" (the image as rendered, resized to the input size) or "center_crop"
        (the usual ImageNet eval: short side to size * 256/224, then a centre crop of size).
    description : one line for logs and ``--help``.
    """

    name: str
    scale: float = 0.0
    shift: float = 0.0
    jitter: Jitter = "image"
    flip: Flip = "none"
    crop_scale: tuple[float, float] | None = None
    eval: Eval = "resize"
    description: str = ""

    def __post_init__(self) -> None:
        if self.flip not in FLIPS:
            raise AugmentationError(
                f"augmentation {self.name}: flip must be one of {', '.join(FLIPS)}, got {self.flip!r}"
            )
        if self.jitter not in JITTERS:
            raise AugmentationError(
                f"augmentation {self.name}: jitter must be one of {', '.join(JITTERS)}, got {self.jitter!r}"
            )
        if self.eval not in EVALS:
            raise AugmentationError(
                f"augmentation {self.name}: eval must be one of {', '.join(EVALS)}, got {self.eval!r}"
            )
        if not 0 <= self.scale < 1 or not 0 <= self.shift < 1:
            raise AugmentationError(
                f"augmentation {self.name}: scale and shift must be in [0, 1), got {self.scale} and {self.shift}"
            )
        if self.crop_scale is not None:
            object.__setattr__(self, "crop_scale", check_crop_scale(self.crop_scale))

    @property
    def random(self) -> bool:
        """Whether training draws anything (False: the images go through as they are)."""
        return bool(self.scale or self.shift or self.flip != "none" or self.crop_scale is not None)


def check_crop_scale(crop_scale: tuple[float, float]) -> tuple[float, float]:
    """``crop_scale`` as floats; AugmentationError unless 0 < MIN <= MAX <= 1 (an area range of the image).

    >>> check_crop_scale((0.08, 1))
    (0.08, 1.0)
    """
    lo, hi = crop_scale
    if not 0 < lo <= hi <= 1:
        raise AugmentationError(f"--crop-scale must be 0 < MIN <= MAX <= 1, got {lo} {hi}")
    return float(lo), float(hi)


@dataclass(frozen=True)
class KindAugmentation:
    """What a store kind declares: its own augmentation, whether its distance ignores a mirror of one of the two
    labels (only then may one image of a pair be flipped and not the other), and why."""

    augmentation: Augmentation
    mirror_invariant: bool
    reason: str


NONE = Augmentation("none", description="none: each image as rendered, resized to the input size")
IMAGENET = Augmentation(
    "imagenet",
    flip="image",
    crop_scale=(0.08, 1.0),
    eval="center_crop",
    description="imagenet: random resized crop (area 0.08-1, aspect 3/4-4/3) and a flip per image; evaluation "
    "resizes to size*256/224 and crops the centre (the usual ImageNet recipe)",
)
_PAPER = {"scale": 0.05, "shift": 0.03}
# each store kind's own augmentation (``--augment kind``), which its declaration (labeldist.trainer.kinds) names
POSE = KindAugmentation(
    Augmentation(
        "pose",
        scale=_PAPER["scale"],
        # The paper shifts by 3% of a crop about one person tall; our picture spans the label frame, 2.2 person
        # heights (render.pose.CENTER_SCALE_FRAME, half 1.1), so the same shift in the label's units (0.033 of
        # 200 s) is 1.5% of the side. 3% of the side would double it and lower the ceiling (RESULTS.md).
        shift=0.015,
        flip="batch",
        description="pose: the paper's +-5% scale and +-3%-of-a-person shift jitter per image (1.5% of the "
        "side of the label frame), and a flip of the whole minibatch or none of it",
    ),
    mirror_invariant=False,
    reason="the pose distance compares each joint with the same joint (left wrist with left wrist): mirroring "
    "one pose of a pair changes it, mirroring both keeps it",
)
LAYOUT = KindAugmentation(
    Augmentation(
        "layout",
        flip="batch",
        description="layout: no jitter (the map is the picture's geometry: any shift changes the mIoU), "
        "and a flip of the whole minibatch or none of it",
    ),
    mirror_invariant=False,
    reason="1 - mIoU with the left and right walls labelled: a flip of both maps keeps it (the same pixel "
    "permutation of both), a flip of one does not",
)
CAPTION = KindAugmentation(
    Augmentation(
        "caption",
        **_PAPER,
        flip="image",
        description="caption: the paper's +-5% scale and +-3% shift jitter and a flip, per image",
    ),
    mirror_invariant=True,
    reason="captions describe the picture, not its handedness: the caption distance is the same for a mirrored "
    "picture (a caption that says left or right is the exception this ignores)",
)
SENTENCE = KindAugmentation(
    Augmentation(
        "sentence",
        **_PAPER,
        flip="image",
        description="sentence: the paper's +-5% scale and +-3% shift jitter, a flip per image",
    ),
    mirror_invariant=True,
    reason="a sentence relevance between captions does not change when one picture is mirrored",
)


def kind_augmentation(kind: str) -> KindAugmentation:
    """What ``kind`` declares (:mod:`labeldist.trainer.kinds`); a kind that declares no augmentation gets none and
    is not taken to be mirror-invariant (nothing says it is)."""
    declared = trainer_kind(kind).augmentation
    if declared is not None:
        return load(declared)
    none = replace(
        NONE,
        description=f"none: the {kind} kind declares no label-preserving augmentation "
        "(labeldist.trainer.kinds), so images go through as rendered",
    )
    return KindAugmentation(none, mirror_invariant=False, reason=f"the {kind} kind declares nothing")


def resolve_augmentation(
    name: str,
    kind: str,
    *,
    allow_image_flip: bool = False,
    flip: bool = True,
    crop_scale: tuple[float, float] | None = None,
) -> Augmentation:
    """The augmentation named ``name`` (:data:`AUGMENT_NAMES`) for a store of ``kind``: "kind" (the kind's own,
    :mod:`labeldist.trainer.kinds`), "flip" (the kind's own flip alone, without its jitter: for poses and layouts
    the flip of a whole minibatch, which keeps every distance served), "none" or "imagenet" (the usual ImageNet
    recipe).

    ``flip=False`` turns the flip off; ``crop_scale`` replaces the imagenet crop's area range. A flip per image on a
    kind that is not mirror-invariant is refused (one line, naming ``--allow-image-flip``) unless
    ``allow_image_flip``."""
    if name == "kind":
        aug = kind_augmentation(kind).augmentation
    elif name == "flip":
        own = kind_augmentation(kind).augmentation
        aug = replace(
            NONE, name="flip", flip=own.flip, description=f"flip: the {kind} kind's flip alone ({own.flip}), no jitter"
        )
    elif name == "none":
        aug = NONE
    elif name == "imagenet":
        aug = IMAGENET if crop_scale is None else replace(IMAGENET, crop_scale=tuple(crop_scale))
    else:
        raise AugmentationError(f"unknown augmentation {name!r}; known: {', '.join(AUGMENT_NAMES)}")
    if not flip and aug.flip != "none":
        aug = replace(aug, flip="none", description=f"{aug.description} (flip turned off)")
    if aug.flip == "image" and not allow_image_flip and not kind_augmentation(kind).mirror_invariant:
        raise AugmentationError(
            f"--augment {name} flips each image on its own, which breaks the {kind} store's distances (not "
            f"mirror-invariant: {kind_augmentation(kind).reason}): give --allow-image-flip to train with it anyway, "
            "or --no-flip"
        )
    return aug


# --------------------------------------------------------------------------------------------------------------
# Drawing the parameters


@dataclass(eq=False)
class AugmentParams:
    """The transform of each image of a ``(B, n)`` block of minibatches.

    scale (B, n) float32 magnification; shift (B, n, 2) float32 fraction of the side (x, y), in the output;
    flip (B, n) bool; crop (B, n, 4) float32 ``(x0, y0, w, h)`` fractions of the input, or None."""

    scale: torch.Tensor
    shift: torch.Tensor
    flip: torch.Tensor
    crop: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.flip.shape)

    def to(self, device: torch.device | str) -> AugmentParams:
        return AugmentParams(
            self.scale.to(device),
            self.shift.to(device),
            self.flip.to(device),
            None if self.crop is None else self.crop.to(device),
        )

    def flip_only(self) -> AugmentParams:
        """The same flips with no jitter and no crop: the part that keeps every label distance of a minibatch."""
        return AugmentParams(torch.ones_like(self.scale), torch.zeros_like(self.shift), self.flip.clone())

    def is_flip_only(self) -> bool:
        return self.crop is None and bool((self.scale == 1).all()) and bool((self.shift == 0).all())

    def forward(self) -> tuple[torch.Tensor, ...]:
        """``(mx, my, ox, oy, f)``, each (B, n) float32: a point at ``u`` in the input is at ``v_x = f (mx u_x +
        ox)``, ``v_y = my u_y + oy`` in the output (normalised coordinates)."""
        m = self.scale.float()
        mx, my = m, m
        ox, oy = 2 * self.shift[..., 0].float(), 2 * self.shift[..., 1].float()
        if self.crop is not None:  # the box (x0, y0, w, h) fills the output: u -> (u - box centre) / box half side
            x0, y0, w, h = self.crop.float().unbind(-1)
            cx, cy = 2 * (x0 + w / 2) - 1, 2 * (y0 + h / 2) - 1
            mx, my = m / w, m / h
            ox, oy = ox - mx * cx, oy - my * cy
        f = 1 - 2 * self.flip.float()
        return mx, my, ox, oy, f

    def theta(self) -> torch.Tensor:
        """(B * n, 2, 3) float32 ``affine_grid`` matrices: for each output location, where to sample the input (the
        inverse of :meth:`forward`)."""
        mx, my, ox, oy, f = (t.reshape(-1) for t in self.forward())
        zero = torch.zeros_like(mx)
        return torch.stack([torch.stack([f / mx, zero, -ox / mx], -1), torch.stack([zero, 1 / my, -oy / my], -1)], 1)


def step_seed(seed: int, step: int) -> int:
    """The seed of one training step's augmentation: a function of the run's seed and the step alone."""
    return int(np.random.default_rng([seed, step, 18]).integers(2**63))


def step_generator(seed: int, step: int) -> torch.Generator:
    """A CPU generator for step ``step`` of a run seeded ``seed``: the same transforms in a resumed run."""
    return torch.Generator().manual_seed(step_seed(seed, step))


def _uniform(shape: tuple[int, ...], half_width: float, generator: torch.Generator) -> torch.Tensor:
    u = torch.rand(shape, generator=generator, device=generator.device, dtype=torch.float64)
    return ((2 * u - 1) * half_width).float()


def _resized_crops(
    shape: tuple[int, int], area: tuple[float, float], generator: torch.Generator, attempts: int = 10
) -> torch.Tensor:
    """(B, n, 4) boxes of torchvision's RandomResizedCrop on a square image, in fractions: ``attempts`` tries of an
    area in ``area`` and a log-uniform aspect in 3/4-4/3, the first that fits; else the whole image (what
    torchvision falls back to on a square image)."""
    dev = generator.device
    a = area[0] + (area[1] - area[0]) * torch.rand((*shape, attempts), generator=generator, device=dev)
    lo, hi = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
    r = torch.exp(lo + (hi - lo) * torch.rand((*shape, attempts), generator=generator, device=dev))
    w, h = torch.sqrt(a * r), torch.sqrt(a / r)
    fits = (w <= 1) & (h <= 1)
    first = torch.argmax(fits.int(), dim=-1, keepdim=True)  # the first try that fits (0 when none does)
    any_fit = fits.any(-1)
    w = torch.where(any_fit, w.gather(-1, first)[..., 0], torch.ones(shape, device=dev))
    h = torch.where(any_fit, h.gather(-1, first)[..., 0], torch.ones(shape, device=dev))
    pos = torch.rand((*shape, 2), generator=generator, device=dev)
    return torch.stack([pos[..., 0] * (1 - w), pos[..., 1] * (1 - h), w, h], -1).float()


def draw_augmentation(
    shape_BN: tuple[int, int], aug: Augmentation, generator: torch.Generator, device: torch.device | str | None = None
) -> AugmentParams:
    """The transforms of a ``(B, n)`` block of minibatches (B rows of n images, anchor first), drawn from
    ``generator`` on its own device, then moved to ``device``.

    Always draws the scale, shift and flip coins in that order (then the crops), so a recipe that turns one of
    them off draws the same others for the same seed."""
    B, n = (int(s) for s in shape_BN)
    dev = generator.device
    scale = 1 + _uniform((B, n), aug.scale, generator)
    shift = _uniform((B, n, 2), aug.shift, generator)
    if aug.jitter == "batch":  # the first image's, for the whole row
        scale, shift = scale[:, :1].expand(B, n).clone(), shift[:, :1].expand(B, n, 2).clone()
    row_coin = torch.rand((B, 1), generator=generator, device=dev) < 0.5
    image_coin = torch.rand((B, n), generator=generator, device=dev) < 0.5
    if aug.flip == "batch":
        flip = row_coin.expand(B, n).clone()
    elif aug.flip == "image":
        flip = image_coin
    else:
        flip = torch.zeros((B, n), dtype=torch.bool, device=dev)
    crop = None if aug.crop_scale is None else _resized_crops((B, n), aug.crop_scale, generator)
    params = AugmentParams(scale, shift, flip, crop)
    return params if device is None else params.to(device)


# --------------------------------------------------------------------------------------------------------------
# Applying them


def _check_block(what: str, leading: tuple[int, ...], params: AugmentParams) -> None:
    if tuple(leading) != params.shape:
        raise UsageError(f"{what} of leading shape {tuple(leading)} do not match the parameters' {params.shape}")


def apply_augmentation(images: torch.Tensor, params: AugmentParams, size: int) -> torch.Tensor:
    """uint8 ``(B, n, 3, H, W)`` images transformed to uint8 ``(B, n, 3, size, size)`` on their own device, in one
    bilinear ``grid_sample`` (edge pixels repeated outside the input: :data:`PADDING`).

    The inputs are meant to be at the input size already (the cache and the decoders resize them); larger ones
    are first resized with antialiasing, since a bilinear sample of a larger image aliases. A block of flips
    alone is done exactly, by mirroring (the sample of a flip lands on pixel centres anyway)."""
    if images.dtype != torch.uint8 or images.ndim != 5:
        raise UsageError(f"images must be uint8 (B, n, 3, H, W), got {images.dtype} {tuple(images.shape)}")
    _check_block("images", images.shape[:2], params)
    B, n, C, H, W = images.shape
    params = params.to(images.device)
    if (H, W) == (size, size) and params.is_flip_only():
        return torch.where(params.flip[..., None, None, None], images.flip(-1), images)
    x = images.reshape(B * n, C, H, W).float()
    if H > size or W > size:
        x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    grid = F.affine_grid(params.theta(), [B * n, C, size, size], align_corners=False)
    out = F.grid_sample(x, grid, mode="bilinear", padding_mode=PADDING, align_corners=False)
    return out.round_().clamp_(0, 255).to(torch.uint8).reshape(B, n, C, size, size)


def augment(images: torch.Tensor, aug: Augmentation, generator: torch.Generator, size: int) -> torch.Tensor:
    """:func:`draw_augmentation` then :func:`apply_augmentation`: the training images of one step."""
    params = draw_augmentation(tuple(images.shape[:2]), aug, generator, images.device)
    return apply_augmentation(images, params, size)


def transform_points(xy, params: AugmentParams, frame: tuple[float, float, float] = (0.0, 0.0, 1.0)):
    """Label coordinates ``xy`` (B, n, ..., 2) (x right, y down; NaN stays NaN) moved as the pictures' pixels are:
    the label as the transformed picture shows it. ``frame = (cx, cy, half)`` is the label frame the picture was
    rendered in (``pixel = size/2 + (xy - c) * size / (2 half)``): scale about ``c``, shift by ``shift * 2 *
    half``, flip ``x -> 2 cx - x``. A numpy array comes back as numpy, a tensor as a tensor."""
    is_numpy = isinstance(xy, np.ndarray)
    t = torch.from_numpy(np.array(xy, dtype=np.float64)) if is_numpy else xy
    _check_block("points", t.shape[:2], params)
    cx, cy, half = (float(v) for v in frame)
    extra = (None,) * (t.ndim - 3)
    mx, my, ox, oy, f = (p.to(t.device, torch.float64)[(..., *extra)] for p in params.forward())
    # x' = cx + half f (mx (x - cx) / half + ox), written as a x + k: exact for the identity and for a flip alone
    ax, ay = f * mx, my
    kx, ky = cx * (1 - ax) + half * f * ox, cy * (1 - ay) + half * oy
    out = torch.stack([ax * t[..., 0] + kx, ay * t[..., 1] + ky], -1).to(t.dtype)
    return out.numpy() if is_numpy else out


def transform_maps(maps: torch.Tensor, params: AugmentParams) -> torch.Tensor:
    """Label maps (B, n, H, W) (layouts: a surface per pixel) moved as the pictures' pixels are, by nearest
    neighbour (labels are not blended), at their own size; same dtype."""
    is_numpy = isinstance(maps, np.ndarray)
    t = torch.from_numpy(np.ascontiguousarray(maps)) if is_numpy else maps
    _check_block("maps", t.shape[:2], params)
    B, n, H, W = t.shape
    params = params.to(t.device)
    if params.is_flip_only():
        out = torch.where(params.flip[..., None, None], t.flip(-1), t)
    else:
        grid = F.affine_grid(params.theta(), [B * n, 1, H, W], align_corners=False)
        sampled = F.grid_sample(
            t.reshape(B * n, 1, H, W).float(), grid, mode="nearest", padding_mode=PADDING, align_corners=False
        )
        out = sampled.round().to(t.dtype).reshape(B, n, H, W)
    return out.numpy() if is_numpy else out


# --------------------------------------------------------------------------------------------------------------
# Evaluation


def eval_transform(aug: Augmentation | str, size: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """What evaluation does to one uint8 ``(3, H, W)`` image (or a ``(..., 3, H, W)`` batch of one size), giving
    uint8 ``(3, size, size)``: "resize" (to ``size`` x ``size``, antialiased) or "center_crop" (short side to
    ``round(size * 256/224)``, then the centre ``size`` x ``size``). ``aug`` is an :class:`Augmentation` (its
    ``eval``) or the mode's name."""
    from torchvision.transforms.v2 import functional as TF

    mode = aug.eval if isinstance(aug, Augmentation) else aug
    if mode == "resize":
        return lambda image: TF.resize(image, [size, size], antialias=True)
    if mode == "center_crop":
        side = round(size * EVAL_RESIZE)
        return lambda image: TF.center_crop(TF.resize(image, [side], antialias=True), [size, size])
    raise AugmentationError(f"unknown eval transform {mode!r}; known: {', '.join(EVALS)}")
