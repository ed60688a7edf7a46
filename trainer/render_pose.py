"""MPII poses drawn as figures over cluttered backgrounds (``trainer render`` of a ``pose`` store).

The figure is the pose itself: limbs are capsules (thick lines with round ends) between the joints of
:data:`MPII_EDGES`, joints are discs, the head a disc on the neck–head-top segment, all with a contrasting
outline. Only present joints are drawn (an occluded joint, present but not visible, still counts in the pose
distance, so it is drawn); a limb with a missing end is left out. Left limbs are drawn lighter and right limbs
darker, so that a CNN can tell them apart as the distance does (it compares r_wrist with r_wrist).

What varies from image to image and must not matter: the background (a gradient, blotchy texture, random
shapes and strokes), the figure's colour, limb width and joint size, its scale, a small rotation and its
position, and sensor noise. The pose is normalised to the frame first (its present joints' bounding box,
aspect kept), so the pixels carry the pose's shape and nothing of the photo it came from; the whole figure,
outline included, stays inside the frame.

Three independent generators are spawned from the item's: background, figure, noise. Two poses rendered with the
same generator therefore get the same background, style and noise, and differ only where their figures are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from labeldist.trainer.render import finish, hsv, luminance, smooth_noise
from PIL import Image, ImageDraw

from labeldist.labels.poses import MPII_EDGES, MPII_JOINTS

RIGHT = frozenset(i for i, name in enumerate(MPII_JOINTS) if name.startswith("r_"))
LEFT = frozenset(i for i, name in enumerate(MPII_JOINTS) if name.startswith("l_"))
NECK, HEAD_TOP = MPII_JOINTS.index("upper_neck"), MPII_JOINTS.index("head_top")


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
    #: the larger side of the figure's box, as a fraction of the frame
    fill: float
    angle: float
    #: where in the free room the figure sits, per axis, in [0, 1]
    shift: tuple[float, float]


def item(labels, index: int) -> tuple[np.ndarray, np.ndarray]:
    """The label of item ``index`` of a Poses set as the renderer takes it: (J, 2) coordinates, (J,) present."""
    return np.asarray(labels.xy[index], dtype=np.float64), np.asarray(labels.present[index], dtype=bool)


def figure_style(rng: np.random.Generator, size: int) -> FigureStyle:
    """Colour, limb width, joint size, scale, rotation (within ±6°: the label is not rotation invariant) and
    shift of one figure."""
    u = rng.uniform(size=9)
    fill = 0.55 + 0.37 * u[5]
    # limbs in proportion to the figure, not the frame: a small figure with frame-sized limbs is a blob
    limb = size * fill * (0.04 + 0.045 * u[3])
    return FigureStyle(
        hue=float(u[0]),
        saturation=float(0.45 + 0.55 * u[1]),
        value=float(u[2]),
        limb_width=float(max(1.0, limb)),
        joint_radius=float(max(0.8, limb * (0.5 + 0.3 * u[4]))),
        outline=float(max(0.6, size * 0.012)),
        fill=float(fill),
        angle=float(math.radians(-6 + 12 * u[6])),
        shift=(float(u[7]), float(u[8])),
    )


def place_pose(xy: np.ndarray, present: np.ndarray, size: int, style: FigureStyle) -> np.ndarray:
    """(J, 2) joint positions in the output frame (pixels, x right, y down), NaN where a joint is missing.

    The present joints are centred on their bounding box and divided by its larger side (the pose, normalised
    to the frame), rotated by ``style.angle``, scaled so that the figure's larger side spans ``style.fill`` of
    the frame, and shifted by ``style.shift`` within the room left; the scale shrinks where the figure with its
    head, limb width and outline would not fit.
    """
    xy = np.asarray(xy, dtype=np.float64)
    present = np.asarray(present, dtype=bool)
    out = np.full(xy.shape, np.nan)
    if not present.any():
        return out
    pts = xy[present]
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    extent = float((hi - lo).max()) or 1.0
    c, s = math.cos(style.angle), math.sin(style.angle)
    q = ((xy - (lo + hi) / 2) / extent) @ np.array([[c, s], [-s, c]])
    shown = q[present]
    box_lo, box_hi = shown.min(axis=0), shown.max(axis=0)
    if present[NECK] and present[HEAD_TOP]:  # the head disc reaches past the joints
        centre, radius = head_disc(q)
        box_lo, box_hi = np.minimum(box_lo, centre - radius), np.maximum(box_hi, centre + radius)
    span = box_hi - box_lo
    margin = max(style.limb_width / 2, style.joint_radius) + style.outline + 1.0
    larger = float(span.max())
    scale = style.fill * size / larger if larger > 0 else 0.0
    if larger > 0:
        scale = min(scale, (size - 2 * margin) / larger)
    free = np.maximum(size - 2 * margin - scale * span, 0.0)
    origin = margin + np.asarray(style.shift) * free - scale * box_lo
    out[present] = q[present] * scale + origin
    return out


def head_disc(joints: np.ndarray) -> tuple[np.ndarray, float]:
    """Centre and radius of the head: the disc on the upper-neck–head-top segment, that segment its diameter."""
    neck, top = joints[NECK], joints[HEAD_TOP]
    return (neck + top) / 2, float(np.linalg.norm(top - neck)) / 2


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


def _side(a: int, b: int) -> str:
    if a in LEFT or b in LEFT:
        return "left"
    if a in RIGHT or b in RIGHT:
        return "right"
    return "body"


def draw_figure(image: Image.Image, joints: np.ndarray, style: FigureStyle, colours: dict, ss: int) -> None:
    """Draw the figure of ``joints`` (output-frame pixels, NaN = missing) onto ``image`` (``ss`` times larger):
    first the outline of every part, then the parts, so the outline surrounds the whole silhouette."""
    draw = ImageDraw.Draw(image)
    pts = joints * ss
    ok = np.isfinite(pts).all(axis=1)
    bones = [(a, b) for a, b in MPII_EDGES if ok[a] and ok[b]]
    head = head_disc(pts) if ok[NECK] and ok[HEAD_TOP] else None
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
        capsule(a, b, limb, colours[_side(a, b)])
    for j in np.flatnonzero(ok):
        disc(pts[j], radius, colours["joint"])


def supersampling(size: int) -> int:
    """Draw at this many times the output size, then downsample: smooth edges that place a limb to a fraction of
    a pixel, which matters in a 32-64 px image."""
    return max(1, min(4, 512 // size))


def render(item: tuple[np.ndarray, np.ndarray], size: int, rng: np.random.Generator) -> np.ndarray:
    """(size, size, 3) uint8 image of one pose (``item``: (J, 2) coordinates, (J,) present)."""
    xy, present = item
    bg_rng, fig_rng, noise_rng = rng.spawn(3)
    ss = supersampling(size)
    image = background(bg_rng, size, ss)
    style = figure_style(fig_rng, size)
    joints = place_pose(xy, present, size, style)
    luma = float(luminance(np.asarray(image.reduce(ss) if ss > 1 else image, np.float32) / 255.0).mean())
    draw_figure(image, joints, style, figure_colours(style, luma), ss)
    if ss > 1:
        image = image.resize((size, size), Image.LANCZOS)
    return finish(np.asarray(image, np.float32) / 255.0, noise_rng, noise_rng.uniform(1.5, 6.0))
