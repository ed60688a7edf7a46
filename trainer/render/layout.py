"""LSUN room layouts drawn as rooms (``trainer render`` of a ``layout_miou`` store).

A layout label is a per-pixel surface map (:mod:`labeldist.labels.layouts`). Each surface is painted with a material
of its kind (planks, carpet, tiles, paint, wallpaper, panels), a base colour, a lighting factor per wall and a
gradient, under a room light, with ambient occlusion and sensor noise; every two surfaces' colours differ clearly.
The picture is the room map's own frame: map pixel ``(r, c)`` of an ``H x W`` map covers picture pixels
``[c, c + 1) * size / W`` by ``[r, r + 1) * size / H``, with nothing random in its geometry, so that the layout
distance (1 - mIoU) and the picture see the same boundaries. docs/internals.md, "Rendering layouts".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageFilter

from labeldist.trainer.render.base import finish, hsv, smooth_noise

N_SURFACES = 5
FLOOR, MIDDLE_WALL, RIGHT_WALL, LEFT_WALL, CEILING = 1, 2, 3, 4, 5
WALLS = (MIDDLE_WALL, RIGHT_WALL, LEFT_WALL)
MATERIALS = {
    FLOOR: ("wood", "carpet", "tiles"),
    MIDDLE_WALL: ("paint", "paint", "stripes", "tiles"),
    RIGHT_WALL: ("paint", "paint", "stripes", "tiles"),
    LEFT_WALL: ("paint", "paint", "stripes", "tiles"),
    CEILING: ("paint", "panels"),
}
#: the least RGB distance (0-1 units, Euclidean) between the shaded colours of two surfaces
MIN_COLOUR_GAP = 0.15


@dataclass(frozen=True)
class Surface:
    """How one surface is painted: its material, shaded base colour (RGB in [0, 1]) and lighting gradient."""

    material: str
    colour: np.ndarray
    #: direction (radians) and strength of the linear lighting gradient across the surface
    light_angle: float
    light_amount: float


def item(labels, index: int) -> np.ndarray:
    """The label of item ``index`` of a LayoutMaps set as the renderer takes it: its (H, W) uint8 surface map."""
    return np.asarray(labels.maps[index], dtype=np.uint8)


def _base_colour(rng: np.random.Generator, surface: int, material: str, wall_hue: float) -> np.ndarray:
    """An unshaded colour in the family of the surface and material (wood is brown, ceilings are near white...)."""
    u = rng.uniform(size=4)
    if surface == FLOOR:
        if material == "wood":
            return hsv(0.05 + 0.06 * u[0], 0.45 + 0.3 * u[1], 0.3 + 0.3 * u[2])
        if material == "carpet":
            return hsv(u[0], 0.15 + 0.35 * u[1], 0.25 + 0.3 * u[2])
        return hsv(u[0], 0.15 * u[1], 0.5 + 0.35 * u[2])
    if surface == CEILING:
        return hsv(u[0], 0.08 * u[1], 0.8 + 0.17 * u[2])
    # walls share the room's paint half the time
    hue = wall_hue if u[3] < 0.5 else u[0]
    return hsv(hue, 0.05 + 0.45 * u[1], 0.55 + 0.35 * u[2])


def room_surfaces(rng: np.random.Generator, tries: int = 20) -> dict[int, Surface]:
    """Materials, colours and lighting of the five surfaces, redrawn until every two colours differ by at least
    :data:`MIN_COLOUR_GAP` (the last draw is kept after ``tries``)."""
    for _ in range(tries):
        wall_hue = rng.uniform()
        # walls facing different ways catch different light: one factor each from well-separated levels
        wall_light = dict(zip(WALLS, rng.permutation([0.68, 0.84, 1.0]) + rng.uniform(-0.03, 0.03, size=3)))
        surfaces = {}
        for s in range(1, N_SURFACES + 1):
            material = MATERIALS[s][int(rng.integers(len(MATERIALS[s])))]
            colour = _base_colour(rng, s, material, wall_hue) * wall_light.get(s, 1.0)
            surfaces[s] = Surface(material, colour, float(rng.uniform(0, 2 * math.pi)), float(rng.uniform(0.05, 0.2)))
        colours = np.stack([surfaces[s].colour for s in surfaces])
        gaps = np.linalg.norm(colours[:, None] - colours[None], axis=-1)[np.triu_indices(N_SURFACES, 1)]
        if gaps.min() >= MIN_COLOUR_GAP:
            break
    return surfaces


def texture(rng: np.random.Generator, material: str, n: int) -> np.ndarray:
    """(n, n) float32 brightness factor around 1 of a material, in image coordinates."""
    yy, xx = np.mgrid[0:n, 0:n].astype(np.float32) / n
    u = rng.uniform(size=4)
    mottle = smooth_noise(rng, n, n, int(4 + 8 * u[0]))
    if material == "wood":  # planks: a brightness per plank, dark joints between them, grain along them
        angle = (0.5 * math.pi if u[1] < 0.5 else 0.0) + (u[2] - 0.5) * 0.3
        across = (xx * math.cos(angle) + yy * math.sin(angle)) / (0.06 + 0.08 * u[3])
        plank = rng.uniform(-0.12, 0.12, size=256).astype(np.float32)[np.floor(across).astype(np.int64) % 256]
        joint = np.where((across % 1.0) < 0.06, np.float32(0.7), np.float32(1.0))
        return (1 + plank + 0.05 * mottle) * joint
    if material == "carpet":
        return 1 + 0.05 * mottle + 0.1 * smooth_noise(rng, n, n, max(4, n // 3))
    if material in ("tiles", "panels"):  # a grid of grout lines, each tile a little different
        period = (0.08 + 0.1 * u[1]) if material == "tiles" else (0.15 + 0.1 * u[1])
        line = 0.07 if material == "tiles" else 0.04
        gx, gy = xx / period, yy / period
        tile = rng.uniform(-0.06, 0.06, size=(64, 64)).astype(np.float32)
        shade = tile[np.floor(gy).astype(np.int64) % 64, np.floor(gx).astype(np.int64) % 64]
        grout = ((gx % 1.0) < line) | ((gy % 1.0) < line)
        return (1 + shade + 0.03 * mottle) * np.where(grout, np.float32(0.78), np.float32(1.0))
    if material == "stripes":  # wallpaper: vertical stripes
        period = 0.04 + 0.08 * u[1]
        return 1 + (0.04 + 0.06 * u[2]) * np.sign(np.sin(2 * math.pi * xx / period)) + 0.04 * mottle
    return 1 + (0.03 + 0.05 * u[1]) * mottle  # paint


def edge_shadow(labels: np.ndarray, width: float) -> np.ndarray:
    """(n, n) float32 in [0, 1]: 1 on the boundaries between surfaces, fading over about ``width`` pixels."""
    edge = np.zeros(labels.shape, dtype=bool)
    edge[:, 1:] |= labels[:, 1:] != labels[:, :-1]
    edge[:, :-1] |= labels[:, 1:] != labels[:, :-1]
    edge[1:, :] |= labels[1:, :] != labels[:-1, :]
    edge[:-1, :] |= labels[1:, :] != labels[:-1, :]
    blurred = Image.fromarray(edge.astype(np.uint8) * 255).filter(ImageFilter.GaussianBlur(width))
    return np.minimum(np.asarray(blurred, np.float32) / 255.0 * 2.5, 1.0)


def render(item: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """(size, size, 3) uint8 image of one room layout (``item``: an (H, W) surface map)."""
    layout = np.asarray(item)
    # at least twice the output size: plank joints and grout lines a pixel wide would alias into dashes
    n = max(layout.shape[0], layout.shape[1], 2 * size)
    labels = np.asarray(Image.fromarray(layout.astype(np.uint8)).resize((n, n), Image.NEAREST))
    surfaces = room_surfaces(rng)
    yy, xx = np.mgrid[0:n, 0:n].astype(np.float32) / n
    # one colour per label and one brightness field: a surface's texture and light gradient where it is
    colours = np.zeros((256, 3), dtype=np.float32)
    colours[0] = 0.12  # unlabelled pixels (0): a dark, noisy nothing
    shade = 1 + 0.3 * smooth_noise(rng, n, n, 8)
    for s, surface in surfaces.items():
        tex = texture(rng, surface.material, n)  # drawn for every surface, shown or not: a fixed use of rng
        mask = labels == s
        if not mask.any():
            continue
        along = xx * np.float32(math.cos(surface.light_angle)) + yy * np.float32(math.sin(surface.light_angle))
        light = 1 + np.float32(2 * surface.light_amount) * (along - along[mask].mean())
        colours[s] = surface.colour
        np.copyto(shade, tex * light, where=mask)
    rgb = colours[labels] * shade[..., None]
    lamp = rng.uniform(0.2, 0.8, size=2).astype(np.float32)
    falloff = rng.uniform(0.05, 0.2)
    rgb *= (1 - falloff * ((xx - lamp[0]) ** 2 + (yy - lamp[1]) ** 2))[..., None]
    rgb *= (1 - rng.uniform(0.15, 0.35) * edge_shadow(labels, max(1.0, n / 96)))[..., None]
    image = Image.fromarray(np.clip(rgb * 255 + 0.5, 0, 255).astype(np.uint8))
    if n != size:
        image = image.resize((size, size), Image.LANCZOS)
    return finish(np.asarray(image, np.float32) / 255.0, rng, rng.uniform(1.5, 6.0))
