r"""Poses drawn as figures over cluttered backgrounds (``trainer render`` of a ``pose`` store).

The figure is the pose itself: limbs are capsules between the joints of the store's skeleton (:func:`figure_parts`),
joints are discs, left limbs lighter and right limbs darker, so that a CNN tells the sides apart as the pose distance
does. It is drawn in the label's own :class:`Frame` (centre ``(cx, cy)``, half-side ``half``, one for a whole store):

.. math:: \text{pixel} = \frac{\text{size}}{2} + (xy - \text{centre}) \, \frac{\text{size}}{2\,\text{half}}

so that a pose's position and size in pixels are those the pose distance measures (Kwak et al. 2016; Kim et al.,
CVPR 2019, §4.3). The frame is :data:`CENTER_SCALE_FRAME`, :data:`BOX_FRAME` or, for other normalizations,
:func:`frame_from_extent` (a test store is rendered in its train store's frame); a joint outside it is refused.
Background, colours, limb width and noise vary; nothing moves the figure. docs/internals.md, "Rendering poses", has
the frame rules (:func:`needed_half`) and the drawing rules.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from PIL import Image, ImageDraw

from labeldist.labels.poses import MPII_JOINTS, default_joint_names, joint_side, skeleton_edges
from labeldist.trainer.render.base import RenderError, finish, hsv, luminance, smooth_noise

#: MPII's right and left joints, and its neck and head top (the head disc's segment)
RIGHT = frozenset(i for i, name in enumerate(MPII_JOINTS) if name.startswith("r_"))
LEFT = frozenset(i for i, name in enumerate(MPII_JOINTS) if name.startswith("l_"))
NECK, HEAD_TOP = MPII_JOINTS.index("upper_neck"), MPII_JOINTS.index("head_top")


class FigureParts(NamedTuple):
    """What a figure is made of, by joint position: its bones, its right and left joints, and the (neck, head top)
    pair whose segment is the head disc's diameter (None: no head disc)."""

    edges: tuple[tuple[int, int], ...]
    right: frozenset[int]
    left: frozenset[int]
    head: tuple[int, int] | None


@functools.lru_cache(maxsize=32)
def figure_parts(names: tuple[str, ...]) -> FigureParts:
    """The parts of a figure of joints ``names`` (:func:`labeldist.labels.poses.skeleton_edges`, sides by
    :func:`~labeldist.labels.poses.joint_side`, the head disc where ``upper_neck`` and ``head_top`` are joints):
    for MPII's 16 joints exactly :data:`MPII_EDGES`, :data:`RIGHT`, :data:`LEFT`, (:data:`NECK`,
    :data:`HEAD_TOP`)."""
    sides = [joint_side(name) for name in names]
    head = (names.index("upper_neck"), names.index("head_top")) if {"upper_neck", "head_top"} <= set(names) else None
    return FigureParts(
        skeleton_edges(names),
        frozenset(i for i, s in enumerate(sides) if s == "right"),
        frozenset(i for i, s in enumerate(sides) if s == "left"),
        head,
    )


def _parts(names: Sequence[str] | None, n_joints: int) -> FigureParts:
    return figure_parts(tuple(names) if names is not None else default_joint_names(n_joints))


class Frame(NamedTuple):
    """The square of label coordinates a picture shows: centre ``(cx, cy)`` and half-side ``half``, in label
    units (a tuple: it pickles to the worker processes with each item and writes to render.json as a list)."""

    cx: float
    cy: float
    half: float

    def to_pixels(self, xy: np.ndarray, size: int) -> np.ndarray:
        """``size / 2 + (xy - centre) * size / (2 half)``: label coordinates (..., 2) to output pixels."""
        return size / 2 + (np.asarray(xy, dtype=np.float64) - (self.cx, self.cy)) * (size / (2 * self.half))


#: the frame of a ``center_scale`` store: the smallest half-side in steps of 0.1 that holds every figure of
#: data/mpii/mpii_valid_2958.csv under the training jitter (docs/internals.md, "Rendering poses"; :func:`needed_half`)
CENTER_SCALE_FRAME = Frame(0.0, 0.0, 1.1)
#: the frame of a ``box`` store: a joint inside its box lies within 0.5 of the centre, needing a half-side of
#: 0.597 under the training jitter (:func:`needed_half`): 0.6 (docs/internals.md, "Rendering poses")
BOX_FRAME = Frame(0.0, 0.0, 0.6)
#: the training jitter a frame leaves room for: scale by 1 ± MARGIN_SCALE about the centre, shift by
#: ± MARGIN_SHIFT of the side per axis (the pose augmentation's defaults)
MARGIN_SCALE, MARGIN_SHIFT = 0.05, 0.03
#: limb width, as a range of fractions of the frame's side; joint radius, fractions of the limb width;
#: outline width, a fraction of the side. In the center_scale frame limbs are 0.026-0.057 label units wide
#: (1.5-3.3 px at 128 px), 4-9 % of the median figure's larger side (0.63), as render version 1 drew them
LIMB, JOINT, OUTLINE = (0.012, 0.026), (0.5, 0.8), 0.008
#: the farthest a figure reaches past a joint's centre (joint disc and outline at their largest), of the side
REACH = LIMB[1] * JOINT[1] + OUTLINE


@dataclass(frozen=True)
class FigureStyle:
    """The random look of one figure; sizes in output pixels. Drawn by :func:`figure_style` with a fixed number of
    draws, so that the figure's generator is in the same state whatever the pose."""

    hue: float
    saturation: float
    value: float
    limb_width: float
    joint_radius: float
    outline: float


def item(labels, index: int, frame: Sequence[float] = CENTER_SCALE_FRAME) -> tuple:
    """The label of item ``index`` of a Poses set as the renderer takes it: (J, 2) coordinates, (J,) present,
    the frame to draw it in and, for joints not named by default (MPII's for 16), their names: ``(xy, present,
    frame)`` or ``(xy, present, frame, names)`` (it travels with the item to the worker processes)."""
    out = (
        np.asarray(labels.xy[index], dtype=np.float64),
        np.asarray(labels.present[index], dtype=bool),
        Frame(*map(float, frame)),
    )
    names = _parts_names(labels)
    return out if names == default_joint_names(len(names)) else (*out, names)


def figure_style(rng: np.random.Generator, size: int) -> FigureStyle:
    """Colour, limb width and joint size of one figure: the sizes fractions of the frame (:data:`LIMB`,
    :data:`JOINT`, :data:`OUTLINE`), so the figure's thickness does not tell its label size apart; at least a
    pixel wide (0.8 and 0.6 for the joint radius and outline) in the smallest pictures."""
    u = rng.uniform(size=5)
    limb = size * (LIMB[0] + (LIMB[1] - LIMB[0]) * u[3])
    return FigureStyle(
        hue=float(u[0]),
        saturation=float(0.45 + 0.55 * u[1]),
        value=float(u[2]),
        limb_width=float(max(1.0, limb)),
        joint_radius=float(max(0.8, limb * (JOINT[0] + (JOINT[1] - JOINT[0]) * u[4]))),
        outline=float(max(0.6, size * OUTLINE)),
    )


def place_pose(xy: np.ndarray, present: np.ndarray, size: int, frame: Sequence[float]) -> np.ndarray:
    """(J, 2) joint positions in the output picture (pixels, x right, y down), NaN where a joint is missing:
    ``frame``'s fixed map from label coordinates (:meth:`Frame.to_pixels`), the same for every pose."""
    present = np.asarray(present, dtype=bool)
    out = Frame(*frame).to_pixels(xy, size)
    out[~present] = np.nan
    return out


def head_disc(joints: np.ndarray, head: tuple[int, int] = (NECK, HEAD_TOP)) -> tuple[np.ndarray, float]:
    """Centre and radius of the head: the disc on the upper-neck–head-top segment (positions ``head``), that
    segment its diameter."""
    neck, top = joints[head[0]], joints[head[1]]
    return (neck + top) / 2, float(np.linalg.norm(top - neck)) / 2


def outside(xy: np.ndarray, present: np.ndarray, frame: Sequence[float]) -> np.ndarray:
    """(N, J) bool: present joints of (N, J, 2) poses that lie outside the square of ``frame`` (its edge in)."""
    cx, cy, half = frame
    with np.errstate(invalid="ignore"):
        off = np.abs(np.asarray(xy, dtype=np.float64) - (cx, cy)).max(axis=-1) > half
    return off & np.asarray(present, dtype=bool)


def extent(xy: np.ndarray, present: np.ndarray, centre: Sequence[float], names: Sequence[str] | None = None) -> float:
    """The farthest (either axis) a present joint or a head disc of (N, J, 2) poses of joints ``names`` (default:
    :func:`~labeldist.labels.poses.default_joint_names`) lies from ``centre``."""
    xy, present = np.asarray(xy, dtype=np.float64), np.asarray(present, dtype=bool)
    d = np.abs(xy - np.asarray(centre, dtype=np.float64))
    far = float(np.where(present[..., None], d, 0.0).max(initial=0.0))
    parts = _parts(names, xy.shape[1])
    if parts.head is None:  # no neck and head top: no head disc
        return far
    neck, top = parts.head
    head = present[:, neck] & present[:, top]
    if head.any():
        mid = (xy[head, neck] + xy[head, top]) / 2
        radius = np.linalg.norm(xy[head, top] - xy[head, neck], axis=1) / 2
        far = max(far, float((np.abs(mid - np.asarray(centre)).max(axis=1) + radius).max()))
    return far


def needed_half(
    xy: np.ndarray,
    present: np.ndarray,
    centre: Sequence[float],
    *,
    scale: float = MARGIN_SCALE,
    shift: float = MARGIN_SHIFT,
    reach: float = REACH,
    names: Sequence[str] | None = None,
) -> float:
    r"""The least half-side of a frame on ``centre`` that holds every figure of (N, J, 2) poses, joint discs and
    outline included, after a scale by up to ``1 + scale`` about the centre and a shift by up to ``shift`` of the
    side per axis:

    .. math:: (e + 2 r h)(1 + 	ext{scale}) + 2 h \, 	ext{shift} \le h
        \iff h \ge rac{e (1 + 	ext{scale})}{1 - 2 r (1 + 	ext{scale}) - 2\,	ext{shift}}

    with ``e`` the :func:`extent` and ``r`` the ``reach`` past a joint (a fraction of the side). 0 for no joint.
    """
    return extent(xy, present, centre, names) * (1 + scale) / (1 - 2 * reach * (1 + scale) - 2 * shift)


def round_up(x: float, digits: int = 2) -> float:
    """``x`` rounded up to ``digits`` significant digits (1.085 -> 1.1, 234.1 -> 240)."""
    if not math.isfinite(x) or x <= 0:
        return x
    step = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    return float(round(math.ceil(x / step - 1e-9) * step, 12))


def frame_from_extent(xy: np.ndarray, present: np.ndarray, names: Sequence[str] | None = None) -> Frame:
    """A frame for poses with no natural one (``none``, ``head`` normalization): centred on the box of all their
    present joints (rounded to a hundredth of its half-size), the half-side :func:`needed_half` rounded up to two
    significant digits. Depends on the poses given: render a test store with its train store's frame."""
    xy, present = np.asarray(xy, dtype=np.float64), np.asarray(present, dtype=bool)
    if not present.any():
        return Frame(0.0, 0.0, 1.0)
    pts = xy[present]
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    span = float((hi - lo).max()) / 2
    step = 10.0 ** (math.floor(math.log10(span)) - 2) if span > 0 else 1.0
    centre = np.round((lo + hi) / 2 / step) * step
    half = round_up(needed_half(xy, present, centre, names=names)) or 1.0
    return Frame(float(round(centre[0], 12)), float(round(centre[1], 12)), half)


def check_in_frame(labels, frame: Sequence[float]) -> None:
    """Refuse (RenderError, one line) poses of ``labels`` with a joint outside ``frame``: the first such item by
    its id, the joint by name, its coordinates, and the frame that would hold every pose given."""
    frame = Frame(*frame)
    bad = outside(labels.xy, labels.present, frame)
    if not bad.any():
        return
    i, j = (int(v) for v in np.argwhere(bad)[0])
    x, y = labels.xy[i, j]
    names = _parts_names(labels)
    fits = frame_from_extent(labels.xy, labels.present, names)
    raise RenderError(
        f"pose {str(labels.ids[i])!r}: joint {j} ({names[j]}) at ({x:.6g}, {y:.6g}) lies "
        f"outside the frame (cx, cy, half) = {_show(frame)} ({int(bad.any(axis=1).sum())} of "
        f"{len(bad)} poses do); a frame that holds every pose here: {_show(fits)}; render a train "
        "store and its test store with the same frame"
    )


def _parts_names(labels) -> tuple[str, ...]:
    return tuple(getattr(labels, "joint_names", None) or default_joint_names(labels.xy.shape[1]))


def _show(frame: Frame) -> str:
    return "(" + ", ".join(f"{v:.6g}" for v in frame) + ")"


def store_frame(manifest: dict[str, Any], labels, frame: Sequence[float] | None = None) -> tuple[Frame, str]:
    """The frame to render a store's poses in and where it comes from, every pose checked to lie inside it
    (:func:`check_in_frame`): ``frame`` when given; :data:`CENTER_SCALE_FRAME` for a store normalised
    ``center_scale`` (the manifest's ``params.labels.normalization``), :data:`BOX_FRAME` for ``box``; else
    :func:`frame_from_extent` of its poses, which a test store must then be given (``frame=``) to be drawn like
    its train store."""
    if frame is not None:
        try:
            found = Frame(*(float(v) for v in frame))
        except (TypeError, ValueError):
            raise RenderError(f"a frame is (cx, cy, half), three numbers; got {frame!r}") from None
        if not all(math.isfinite(v) for v in found) or found.half <= 0:
            raise RenderError(f"a frame is (cx, cy, half), finite, half > 0; got {_show(found)}")
        source = "given"
    else:
        labels_params = (manifest.get("params") or {}).get("labels") or {}
        how = labels_params.get("normalization", "none") if isinstance(labels_params, dict) else "none"
        if how == "center_scale":
            found, source = CENTER_SCALE_FRAME, "center_scale default"
        elif how == "box":
            found, source = BOX_FRAME, "box default"
        else:
            found = frame_from_extent(labels.xy, labels.present, _parts_names(labels))
            source = (
                f"this store's extent (normalization {how!r}): render its train and test stores with the "
                f"same frame, frame={_show(found)}"
            )
    check_in_frame(labels, found)
    return found, source


def background(rng: np.random.Generator, size: int, ss: int) -> Image.Image:
    """(size * ss)-pixel square RGB clutter: a two-colour gradient with blotchy texture and grain (computed at the
    output size: they are smooth or pixel-scale anyway), then 6-14 random rectangles, ellipses, polygons and
    strokes blended in at full resolution. Every shape draws the same number of values, whatever its type."""
    c0 = hsv(rng.uniform(), rng.uniform(0.05, 0.6), rng.uniform(0.2, 0.95)).astype(np.float32)
    c1 = hsv(rng.uniform(), rng.uniform(0.05, 0.6), rng.uniform(0.2, 0.95)).astype(np.float32)
    a = rng.uniform(0, 2 * math.pi)
    ramp = np.linspace(0.0, 1.0, size, dtype=np.float32)
    t = ramp[None, :] * math.cos(a) + ramp[:, None] * math.sin(a)
    t = (t - t.min()) / (float(t.max() - t.min()) or 1.0)
    rgb = c0 + (c1 - c0) * t[..., None]
    blotch = smooth_noise(rng, size, size, int(rng.integers(3, 10))) * rng.uniform(0.05, 0.25)
    grain = smooth_noise(rng, size, size, max(4, size // 3)) * rng.uniform(0.02, 0.08)
    rgb = rgb * (1 + blotch + grain)[..., None]
    n = size * ss
    base = Image.fromarray(np.clip(rgb * 255 + 0.5, 0, 255).astype(np.uint8))
    if ss > 1:
        base = base.resize((n, n), Image.BILINEAR)
    layer = base.copy()
    draw = ImageDraw.Draw(layer)
    for _ in range(int(rng.integers(6, 15))):
        kind, h, sat, val, width = rng.uniform(size=5)
        p = rng.uniform(-0.1, 1.1, size=(3, 2)) * n
        colour = tuple(int(v) for v in np.rint(hsv(h, sat, 0.15 + 0.8 * val) * 255))
        if kind < 0.3:
            draw.rectangle([tuple(p[0:2].min(axis=0)), tuple(p[0:2].max(axis=0))], fill=colour)
        elif kind < 0.55:
            draw.ellipse([tuple(p[0:2].min(axis=0)), tuple(p[0:2].max(axis=0))], fill=colour)
        elif kind < 0.8:
            draw.polygon([tuple(v) for v in p], fill=colour)
        else:  # strokes about as thick as limbs: the figure must be told apart by its shape, not by being a line
            draw.line([tuple(v) for v in p], fill=colour, width=max(1, int(n * (0.01 + 0.05 * width))))
    return Image.blend(base, layer, float(rng.uniform(0.35, 0.8)))


def figure_colours(style: FigureStyle, background_luma: float) -> dict[str, tuple[int, int, int]]:
    """Body, left, right, joint and outline colours (uint8 RGB), the body contrasting with the background."""
    # a light figure on a dark background and vice versa; the outline takes the opposite end
    light = background_luma < 0.5
    value = 0.75 + 0.25 * style.value if light else 0.15 + 0.3 * style.value
    body = hsv(style.hue, style.saturation, value)
    outline = np.full(3, 0.05) if light else np.full(3, 0.95)
    white, black = np.ones(3), np.zeros(3)

    def rgb(x: np.ndarray) -> tuple[int, int, int]:
        return tuple(int(v) for v in np.rint(np.clip(x, 0, 1) * 255))

    return {
        "body": rgb(body),
        "left": rgb(body * 0.7 + white * 0.3),
        "right": rgb(body * 0.6 + black * 0.4),
        "joint": rgb(body * 0.5 + outline * 0.5),
        "outline": rgb(outline),
    }


def _side(a: int, b: int, parts: FigureParts) -> str:
    if a in parts.left or b in parts.left:
        return "left"
    if a in parts.right or b in parts.right:
        return "right"
    return "body"


def draw_figure(
    image: Image.Image,
    joints: np.ndarray,
    style: FigureStyle,
    colours: dict,
    ss: int,
    parts: FigureParts | None = None,
) -> None:
    """Draw the figure of ``joints`` (output pixels, NaN = missing) onto ``image`` (``ss`` times larger): first
    the outline of every part, then the parts, so the outline surrounds the whole silhouette. ``parts``: the
    figure's bones, sides and head (:func:`figure_parts`; default those of its number of joints' default names,
    MPII's for 16).

    Pillow puts coordinate ``p`` at the centre of pixel ``p`` (a disc on ``[p - r, p + r]`` covers pixels
    ``p - r .. p + r``), whose span is ``[p, p + 1)`` in the picture's coordinates: hence the half pixel."""
    draw = ImageDraw.Draw(image)
    pts = joints * ss - 0.5
    ok = np.isfinite(pts).all(axis=1)
    parts = parts or _parts(None, len(joints))
    bones = [(a, b) for a, b in parts.edges if ok[a] and ok[b]]
    head = head_disc(pts, parts.head) if parts.head is not None and ok[list(parts.head)].all() else None
    ol = style.outline * ss

    def disc(p: np.ndarray, r: float, colour) -> None:
        draw.ellipse([p[0] - r, p[1] - r, p[0] + r, p[1] + r], fill=colour)

    def capsule(a: int, b: int, width: float, colour) -> None:
        draw.line([tuple(pts[a]), tuple(pts[b])], fill=colour, width=max(1, int(round(width))))
        disc(pts[a], width / 2, colour)
        disc(pts[b], width / 2, colour)

    limb, radius = style.limb_width * ss, style.joint_radius * ss
    for a, b in bones:
        capsule(a, b, limb + 2 * ol, colours["outline"])
    for j in np.flatnonzero(ok):
        disc(pts[j], radius + ol, colours["outline"])
    if head is not None:
        disc(head[0], head[1] + ol, colours["outline"])
    # the head first, so that the neck and the joints stay visible on it
    if head is not None:
        disc(head[0], head[1], colours["body"])
    for a, b in bones:
        capsule(a, b, limb, colours[_side(a, b, parts)])
    for j in np.flatnonzero(ok):
        disc(pts[j], radius, colours["joint"])


def supersampling(size: int) -> int:
    """Draw at this many times the output size, then downsample: smooth edges that place a limb to a fraction of
    a pixel, which matters in a 32-64 px image."""
    return max(1, min(4, 512 // size))


def render(item: tuple, size: int, rng: np.random.Generator) -> np.ndarray:
    """(size, size, 3) uint8 image of one pose (``item``: (J, 2) coordinates, (J,) present, the :class:`Frame`
    and the joint names, as :func:`item` gives it; without the frame, :data:`CENTER_SCALE_FRAME`; without the
    names, the default for J joints, MPII's for 16). RenderError for a present joint outside the frame."""
    xy, present, frame, names = (*item, CENTER_SCALE_FRAME, None)[:4] if len(item) == 2 else (*item, None)[:4]
    xy, present, frame = np.asarray(xy, dtype=np.float64), np.asarray(present, dtype=bool), Frame(*frame)
    parts = _parts(names, len(xy))
    names = tuple(names) if names is not None else default_joint_names(len(xy))
    bad = outside(xy, present, frame)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise RenderError(
            f"joint {j} ({names[j]}) at ({xy[j, 0]:.6g}, {xy[j, 1]:.6g}) lies outside the "
            f"frame (cx, cy, half) = {_show(frame)}"
        )
    bg_rng, fig_rng, noise_rng = rng.spawn(3)
    ss = supersampling(size)
    image = background(bg_rng, size, ss)
    style = figure_style(fig_rng, size)
    joints = place_pose(xy, present, size, frame)
    luma = float(luminance(np.asarray(image.reduce(ss) if ss > 1 else image, np.float32) / 255.0).mean())
    draw_figure(image, joints, style, figure_colours(style, luma), ss, parts)
    if ss > 1:
        image = image.resize((size, size), Image.LANCZOS)
    return finish(np.asarray(image, np.float32) / 255.0, noise_rng, noise_rng.uniform(1.5, 6.0))
