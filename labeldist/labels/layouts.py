"""Room layouts: H x W surface-label maps, a reader for user maps, and a generator of LSUN-type layouts.

A layout map gives, for every pixel, the room surface seen there, with the LSUN room-layout challenge's
surface order (``data/lsun/lsun_layout_types.json``):

====== =========== ==========================================================
value  surface     meaning
====== =========== ==========================================================
0      (none)      unlabelled: no surface; ignored by the layout distance
1      floor
2      middle_wall the front wall facing the camera (the left one of two walls)
3      right_wall
4      left_wall
5      ceiling
====== =========== ==========================================================

No LSUN annotations can be had here, so :func:`generate_layouts` renders plausible ones: a box room seen by a
pinhole camera standing inside it, ray-cast per pixel, kept only when the surfaces it shows make the requested
LSUN layout type. The 11 types (ids 0-10) differ in which surfaces are visible, and no two types show the same
set of surfaces, so the visible set identifies the type (:func:`layout_types_of`). Kim et al. (CVPR 2019,
"Deep Metric Learning Beyond Binary Supervision", §4.4) used only the most frequent type, 5 (floor, middle
wall, right wall and ceiling: two walls meeting in a visible vertical corner).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError
from typing_extensions import Self

from labeldist.labels.base import LabelError, LabelSet

SURFACES = ("floor", "middle_wall", "right_wall", "left_wall", "ceiling")
#: label value of "no surface"; surfaces are 1..5 in the order of SURFACES
UNLABELLED = 0
FLOOR, MIDDLE_WALL, RIGHT_WALL, LEFT_WALL, CEILING = 1, 2, 3, 4, 5
DEFAULT_TYPE = 5
LSUN_TYPES_PATH = Path(__file__).resolve().parents[2] / "data" / "lsun" / "lsun_layout_types.json"
MAP_SUFFIXES = (".npy", ".png")
#: PIL modes whose pixel values are label values (a palette image's values are its palette indices)
_LABEL_PNG_MODES = ("L", "P", "I", "I;16", "1")


# --------------------------------------------------------------------------------------------------------------
# Layout types


@dataclass(frozen=True)
class LayoutType:
    """One LSUN layout type: which surfaces are visible and the keypoint polygon of each (1-based indices)."""

    id: int
    n_keypoints: int
    regions: tuple[tuple[int, ...], ...]
    freq_train: float

    @property
    def visible(self) -> tuple[bool, ...]:
        """Per surface (order of SURFACES), whether this type shows it."""
        return tuple(len(r) > 0 for r in self.regions)


@lru_cache(maxsize=4)
def load_layout_types(path: str | os.PathLike[str] | None = None) -> dict[int, LayoutType]:
    """The LSUN layout types by id, read from ``data/lsun/lsun_layout_types.json`` (or ``path``)."""
    path = Path(path) if path is not None else LSUN_TYPES_PATH
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise LabelError(f"{path}: cannot read the LSUN layout types ({e})") from None
    if tuple(spec.get("surfaces", ())) != SURFACES:
        raise LabelError(f"{path}: surfaces {spec.get('surfaces')} are not {list(SURFACES)}")
    types = {
        t["id"]: LayoutType(t["id"], t["n_keypoints"], tuple(tuple(r) for r in t["regions"]), t["freq_train"])
        for t in spec["types"]
    }
    # The type of a rendered map is read off its visible surfaces: that needs every type's set to differ.
    sets = [t.visible for t in types.values()]
    if len(set(sets)) != len(sets):
        raise LabelError(f"{path}: two layout types show the same set of surfaces")
    return types


def _type_by_mask(types: dict[int, LayoutType]) -> np.ndarray:
    """(32,) int: layout type id for each 5-bit visible-surface mask (bit s-1 for surface s), -1 for none."""
    lut = np.full(1 << len(SURFACES), -1, dtype=np.int64)
    for t in types.values():
        lut[sum(1 << s for s, v in enumerate(t.visible) if v)] = t.id
    return lut


def visible_surfaces(maps: np.ndarray, min_pixels: int = 1) -> np.ndarray:
    """(N, 5) bool: whether each surface covers at least ``min_pixels`` pixels of each (N, H, W) map."""
    maps = np.asarray(maps)
    counts = np.stack([np.count_nonzero(maps == s, axis=(1, 2)) for s in range(1, len(SURFACES) + 1)], axis=1)
    return counts >= min_pixels


def layout_types_of(maps: np.ndarray, min_pixels: int = 1, types_path: str | None = None) -> np.ndarray:
    """(N,) int: the LSUN layout type of each (N, H, W) map, from its visible surfaces; -1 if it is none."""
    vis = visible_surfaces(maps, min_pixels)
    mask = (vis * (1 << np.arange(len(SURFACES)))).sum(axis=1)
    return _type_by_mask(load_layout_types(types_path))[mask]


# --------------------------------------------------------------------------------------------------------------
# The label set


def _check_map_values(values: np.ndarray, where: str, n_classes: int) -> None:
    """LabelError naming ``where`` unless every value is an integer in 0..n_classes."""
    if values.dtype.kind == "b":
        return
    if values.dtype.kind not in "iuf":
        raise LabelError(f"{where}: layout map has dtype {values.dtype}, expected integer labels")
    if values.dtype.kind == "f" and not np.all(np.isfinite(values) & (values == np.round(values))):
        raise LabelError(f"{where}: layout map holds non-integer values; labels are integers 0..{n_classes}")
    if values.size == 0 or (values.min() >= 0 and values.max() <= n_classes):
        return
    bad = (values < 0) | (values > n_classes)
    if bad.any():
        raise LabelError(
            f"{where}: unknown label values {np.unique(values[bad])[:10].tolist()}; "
            f"known: 0 (unlabelled) and 1..{n_classes} ({', '.join(SURFACES[:n_classes])})"
        )


class LayoutMaps(LabelSet):
    """N room-layout maps of one size.

    Attributes
    ----------
    maps : (N, H, W) uint8, the surface label of every pixel: 0 unlabelled, 1..n_classes surfaces
        (1 floor, 2 middle wall, 3 right wall, 4 left wall, 5 ceiling for LSUN layouts).
    n_classes : the largest allowed label value (5 for LSUN).
    """

    label_type = "layout_map"

    def __init__(self, ids: np.ndarray, maps: np.ndarray | Sequence[np.ndarray], n_classes: int = 5) -> None:
        super().__init__(ids)
        if not 1 <= int(n_classes) <= 255:
            raise LabelError(f"n_classes must be in 1..255 (labels are uint8), got {n_classes}")
        self.n_classes = int(n_classes)
        self.maps = self._validated(maps)

    def _validated(self, maps: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        n = len(self.ids)
        if not isinstance(maps, np.ndarray):
            # A list of maps: check each one so that the error names the item whose shape is off.
            maps = list(maps)
            if len(maps) != n:
                raise LabelError(f"{len(maps)} layout maps for {n} ids")
            shapes = [np.shape(m) for m in maps]
            first = self.ids.tolist()[0] if n else ""
            for item, shape in zip(self.ids.tolist(), shapes):
                if len(shape) != 2:
                    raise LabelError(f"layout map {item!r}: expected a 2-d (H, W) map, got shape {shape}")
                if shape != shapes[0]:
                    raise LabelError(
                        f"layout map {item!r}: shape {shape} differs from {shapes[0]} of layout map {first!r}"
                    )
            maps = np.stack([np.asarray(m) for m in maps]) if maps else np.zeros((0, 0, 0), np.uint8)
        if maps.ndim != 3 or maps.shape[0] != n:
            raise LabelError(f"layout maps must have shape (N={n}, H, W), got {maps.shape}")
        try:
            _check_map_values(maps, "layout maps", self.n_classes)
        except LabelError:
            for item, m in zip(self.ids.tolist(), maps):  # find the first bad item to name it
                _check_map_values(m, f"layout map {item!r}", self.n_classes)
            raise
        return np.ascontiguousarray(maps, dtype=np.uint8)

    @property
    def shape(self) -> tuple[int, int]:
        """(H, W) of every map."""
        return self.maps.shape[1], self.maps.shape[2]

    def subset(self, index: slice | np.ndarray) -> Self:
        return type(self)(self.ids[index], self.maps[index], self.n_classes)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"maps": self.maps, "n_classes": np.array([self.n_classes], dtype=np.int64)}

    @classmethod
    def from_arrays(cls, ids: np.ndarray, arrays: dict[str, np.ndarray]) -> Self:
        n_classes = int(np.asarray(arrays["n_classes"]).ravel()[0]) if "n_classes" in arrays else 5
        return cls(ids, arrays["maps"], n_classes)


# --------------------------------------------------------------------------------------------------------------
# Reading and writing folders of maps


def _read_map_file(path: Path) -> np.ndarray:
    """The 2-d label array stored in one .npy or .png file; LabelError naming the file otherwise."""
    if path.suffix.lower() == ".npy":
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise LabelError(f"{path}: cannot read as .npy ({e})") from None
    else:
        try:
            with Image.open(path) as img:
                if img.mode not in _LABEL_PNG_MODES:
                    raise LabelError(
                        f"{path}: PNG mode {img.mode!r} is not a label image; save one channel of label values "
                        f"(mode L or P)"
                    )
                arr = np.asarray(img)
        except (OSError, UnidentifiedImageError, SyntaxError) as e:
            raise LabelError(f"{path}: cannot read as .png ({e})") from None
    if arr.ndim != 2:
        raise LabelError(f"{path}: expected a 2-d (H, W) label map, got shape {arr.shape}")
    return arr


def read_layout_maps(folder: str | os.PathLike[str], n_classes: int = 5) -> LayoutMaps:
    """Read a folder of layout maps, one ``.npy`` or ``.png`` file per item.

    Item ids are the file stems, sorted. Each file holds one (H, W) map of integer labels in 0..n_classes
    (0 unlabelled; see the module docstring); a PNG must be single-channel (mode L, or P whose palette indices
    are the labels). Files with other suffixes are skipped. Raises LabelError naming the file for an unreadable
    file, a map of another shape than the first, an unknown label value, two files with one stem, and naming
    the folder when it is missing or holds no map.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise LabelError(f"{folder}: not a folder of layout maps")
    try:
        listed = list(folder.iterdir())
    except OSError as e:  # no permission to list it: one line naming the folder, not a traceback
        raise LabelError(f"{folder}: cannot list: {e.strerror or e}") from None
    paths = sorted((p for p in listed if p.suffix.lower() in MAP_SUFFIXES), key=lambda p: p.stem)
    if not paths:
        raise LabelError(f"{folder}: no layout maps ({' or '.join(MAP_SUFFIXES)} files)")
    for a, b in zip(paths, paths[1:]):
        if a.stem == b.stem:
            raise LabelError(f"{b}: same item id {b.stem!r} as {a.name}")
    maps = []
    for path in paths:
        arr = _read_map_file(path)
        if maps and arr.shape != maps[0].shape:
            raise LabelError(f"{path}: shape {arr.shape} differs from {paths[0].name}'s {maps[0].shape}")
        _check_map_values(arr, str(path), n_classes)
        maps.append(arr.astype(np.uint8))
    layouts = LayoutMaps(np.array([p.stem for p in paths]), np.stack(maps), n_classes)
    layouts.provenance = {"format": "folder", "n_classes": n_classes}
    return layouts


def write_layout_maps(labels: LayoutMaps, folder: str | os.PathLike[str], fmt: str = "png") -> list[Path]:
    """Write one ``<id>.png`` (8-bit grey, value = label) or ``<id>.npy`` per map; returns the paths."""
    if fmt not in ("png", "npy"):
        raise ValueError(f"unknown format {fmt!r}; known: png, npy")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for item, m in zip(labels.ids.tolist(), labels.maps):
        if not item or Path(item).name != item or item in (".", ".."):
            raise ValueError(f"item id {item!r} cannot be a file name")
        path = folder / f"{item}.{fmt}"
        if fmt == "png":
            Image.fromarray(m).save(path)
        else:
            np.save(path, m)
        paths.append(path)
    return paths


# --------------------------------------------------------------------------------------------------------------
# Rendering box rooms


@dataclass(frozen=True)
class LayoutPrior:
    """Ranges (uniform) of the random room and camera; lengths in metres, angles in degrees.

    The room is the box [0, width] x [0, height] x [0, depth] (x right, y up, z forward). The camera stands at
    ``camera_height``, at least ``wall_margin`` from every wall, turned by ``yaw`` about the vertical, tilted up
    by ``pitch``, rolled by ``roll``, with a horizontal field of view ``hfov`` and square pixels. The defaults
    are those of a person photographing a room at eye height.
    """

    width: tuple[float, float] = (3.0, 8.0)
    depth: tuple[float, float] = (3.0, 8.0)
    height: tuple[float, float] = (2.4, 3.6)
    camera_height: tuple[float, float] = (1.0, 1.9)
    wall_margin: float = 0.3
    yaw: tuple[float, float] = (-180.0, 180.0)
    pitch: tuple[float, float] = (-30.0, 20.0)
    roll: tuple[float, float] = (-2.0, 2.0)
    hfov: tuple[float, float] = (45.0, 80.0)


#: priors aimed at types the default prior rarely shows (acceptance from < 1 % to a few %): three walls need a
#: camera facing a wall, and type 7 (three walls, no floor or ceiling) a corridor seen through a long lens
TYPE_PRIORS: dict[int, LayoutPrior] = {
    1: LayoutPrior(yaw=(-25.0, 25.0), pitch=(-30.0, -5.0)),
    2: LayoutPrior(yaw=(-25.0, 25.0), pitch=(5.0, 30.0)),
    7: LayoutPrior(width=(1.2, 2.4), depth=(6.0, 12.0), yaw=(-5.0, 5.0), pitch=(-3.0, 3.0), hfov=(15.0, 35.0)),
}


@dataclass(frozen=True)
class Cameras:
    """B rooms and cameras: ``room`` (B, 3) box size, ``position`` (B, 3), ``rotation`` (B, 3, 3)
    camera-to-world (columns: image right, image up, viewing direction), ``focal`` (B,) in pixels of a
    unit-width image (the focal length for width W is ``focal * W``)."""

    room: np.ndarray
    position: np.ndarray
    rotation: np.ndarray
    focal: np.ndarray


def _rotations(yaw: np.ndarray, pitch: np.ndarray, roll: np.ndarray) -> np.ndarray:
    """(B, 3, 3) camera-to-world rotations R = R_yaw R_pitch R_roll (angles in radians)."""
    b = len(yaw)
    r_yaw, r_pitch, r_roll = (np.zeros((b, 3, 3)) for _ in range(3))
    cy, sy, cp, sp, cr, sr = np.cos(yaw), np.sin(yaw), np.cos(pitch), np.sin(pitch), np.cos(roll), np.sin(roll)
    r_yaw[:, 0, 0], r_yaw[:, 0, 2], r_yaw[:, 1, 1], r_yaw[:, 2, 0], r_yaw[:, 2, 2] = cy, sy, 1, -sy, cy
    r_pitch[:, 0, 0], r_pitch[:, 1, 1], r_pitch[:, 1, 2], r_pitch[:, 2, 1], r_pitch[:, 2, 2] = 1, cp, -sp, sp, cp
    r_roll[:, 0, 0], r_roll[:, 0, 1], r_roll[:, 1, 0], r_roll[:, 1, 1], r_roll[:, 2, 2] = cr, -sr, sr, cr, 1
    return r_yaw @ r_pitch @ r_roll


def sample_cameras(rng: np.random.Generator, n: int, prior: LayoutPrior = LayoutPrior()) -> Cameras:
    """n random rooms and cameras drawn from ``prior``."""
    u = rng.uniform
    room = np.stack([u(*prior.width, n), u(*prior.height, n), u(*prior.depth, n)], axis=1)
    m = prior.wall_margin
    position = np.stack(
        [
            u(m, np.maximum(room[:, 0] - m, m)),
            np.minimum(u(*prior.camera_height, n), room[:, 1] - m),  # a low ceiling stays above the camera
            u(m, np.maximum(room[:, 2] - m, m)),
        ],
        axis=1,
    )
    yaw, pitch, roll = (np.radians(u(*r, n)) for r in (prior.yaw, prior.pitch, prior.roll))
    focal = 0.5 / np.tan(np.radians(u(*prior.hfov, n)) / 2)
    return Cameras(room, position, _rotations(yaw, -pitch, roll), focal)


#: physical faces hit by a ray, in the order of the code :func:`render_faces` returns (axis * 2 + positive)
FACES = ("left", "right", "floor", "ceiling", "front", "back")
_WALL_FACES = np.array([0, 1, 4, 5])


def render_faces(cams: Cameras, height: int, width: int) -> np.ndarray:
    """(B, H, W) uint8 index into FACES of the box face each pixel's ray hits first.

    A ray from the camera centre :math:`c` along :math:`d` leaves the box through the face of the axis
    :math:`k` with the smallest :math:`t_k = D_k / |d_k|`, where :math:`D_k` is the distance from :math:`c` to
    the face that :math:`d_k` points at. The world direction is affine in the pixel coordinates,
    :math:`d = R\\,(u / f, -v / f, 1)`, so it is built by broadcasting, never per pixel.
    """
    f = (cams.focal * width)[:, None]
    r = cams.rotation
    a = (r[:, :, 0] / f).astype(np.float32)  # direction change per pixel to the right
    b = (-r[:, :, 1] / f).astype(np.float32)  # per pixel down
    c = r[:, :, 2].astype(np.float32)
    u = (np.arange(width, dtype=np.float32) + 0.5 - width / 2)[None, None, :]
    v = (np.arange(height, dtype=np.float32) + 0.5 - height / 2)[None, :, None]
    to_hi = (cams.room - cams.position).astype(np.float32)
    to_lo = cams.position.astype(np.float32)
    t, positive = [], []
    with np.errstate(divide="ignore"):  # d_k = 0: the ray never meets that axis's faces, t_k = inf
        for k in range(3):
            d = a[:, k, None, None] * u + b[:, k, None, None] * v + c[:, k, None, None]
            pos = d > 0
            dist = np.where(pos, to_hi[:, k, None, None], to_lo[:, k, None, None])
            t.append(dist / np.abs(d))
            positive.append(pos)
    x_first = (t[0] <= t[1]) & (t[0] <= t[2])
    y_first = ~x_first & (t[1] <= t[2])
    code = np.where(x_first, positive[0], np.where(y_first, 2 + positive[1], 4 + positive[2]))
    return code.astype(np.uint8)


#: canonical wall label by (number of visible walls, rank of the wall from the image's left): LSUN names one
#: visible wall "middle", two "middle, right", three "left, middle, right"
_WALL_NAMES = np.array(
    [
        [0, 0, 0, 0],
        [MIDDLE_WALL, 0, 0, 0],
        [MIDDLE_WALL, RIGHT_WALL, 0, 0],
        [LEFT_WALL, MIDDLE_WALL, RIGHT_WALL, 0],
        [0, 0, 0, 0],  # four walls is no LSUN type
    ],
    dtype=np.uint8,
)


def label_faces(faces: np.ndarray, min_pixels: int) -> tuple[np.ndarray, np.ndarray]:
    """LSUN surface maps from face maps, and whether each is clean.

    Floor and ceiling keep their names; walls are named by how many are visible and their left-to-right order
    (by mean column), as the LSUN types do. A map is not clean when a face covers fewer than ``min_pixels``
    pixels without being absent (a sliver an annotator would not draw), or when it shows no or four walls.
    Returns maps (B, H, W) uint8 and clean (B,) bool.
    """
    n, h, w = faces.shape
    flat = faces.reshape(n, -1).astype(np.int64) + 6 * np.arange(n)[:, None]
    counts = np.bincount(flat.ravel(), minlength=6 * n).reshape(n, 6)
    columns = np.broadcast_to(np.arange(w, dtype=np.float64), (n, h, w)).ravel()
    col_sums = np.bincount(flat.ravel(), weights=columns, minlength=6 * n).reshape(n, 6)
    visible = counts >= min_pixels
    walls_visible = visible[:, _WALL_FACES]
    n_walls = walls_visible.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        centre = np.where(walls_visible, col_sums[:, _WALL_FACES] / counts[:, _WALL_FACES], np.inf)
    rank = np.argsort(np.argsort(centre, axis=1, kind="stable"), axis=1, kind="stable")
    lut = np.zeros((n, 6), dtype=np.uint8)
    lut[:, FACES.index("floor")] = FLOOR
    lut[:, FACES.index("ceiling")] = CEILING
    lut[:, _WALL_FACES] = _WALL_NAMES[n_walls[:, None], rank]
    maps = lut.ravel()[flat].reshape(n, h, w)
    clean = ~((counts > 0) & ~visible).any(axis=1) & (n_walls >= 1) & (n_walls <= 3)
    return maps, clean


def _render_types(cams: Cameras, height: int, width: int, min_area: float, lut: np.ndarray):
    """Surface maps of B cameras and their layout type (-1 for an unclean or non-LSUN view)."""
    maps, clean = label_faces(render_faces(cams, height, width), max(1, int(np.ceil(min_area * height * width))))
    vis = visible_surfaces(maps)
    types = lut[(vis * (1 << np.arange(len(SURFACES)))).sum(axis=1)]
    return maps, np.where(clean, types, -1)


def _render_types_chunked(cams: Cameras, height: int, width: int, min_area: float, lut: np.ndarray):
    """:func:`_render_types` over chunks of about half a million pixels: its temporaries then stay in cache,
    about ten times faster than one big batch."""
    step = max(1, (1 << 19) // (height * width))
    parts = [
        _render_types(_take(cams, slice(s, s + step)), height, width, min_area, lut)
        for s in range(0, len(cams.focal), step)
    ]
    if not parts:
        return np.zeros((0, height, width), np.uint8), np.zeros(0, np.int64)
    return np.concatenate([m for m, _ in parts]), np.concatenate([t for _, t in parts])


def _take(cams: Cameras, index: np.ndarray) -> Cameras:
    return Cameras(*(getattr(cams, f.name)[index] for f in fields(Cameras)))


def generate_layouts(
    n: int,
    layout_type: int = DEFAULT_TYPE,
    height: int = 128,
    width: int = 128,
    seed: int | np.random.Generator = 0,
    prior: LayoutPrior | None = None,
    min_area: float = 0.01,
    max_candidates: int | None = None,
    types_path: str | os.PathLike[str] | None = None,
) -> LayoutMaps:
    """n random room layouts of one LSUN type, rendered to (height, width) surface maps.

    Rooms and cameras are drawn from ``prior`` (a box room, a camera inside it; by default
    ``TYPE_PRIORS.get(layout_type, LayoutPrior())``) and rendered by ray casting
    (:func:`render_faces`); a view is kept when its visible surfaces are those of ``layout_type`` and none
    covers less than ``min_area`` of the image (rejection sampling). To save time a candidate is first rendered
    at a quarter of the size and only rendered in full when that small view already has the right type; the
    full-size view decides. Candidates are drawn in fixed batches in order, so a seed gives the same maps, and
    the first k maps of a larger n are the maps of n = k.

    Item ids are ``lsun<type>-<index>``. Raises RuntimeError naming ``max_candidates`` and ``prior`` when too few
    candidates have the type (rare types, e.g. 7, need a prior aimed at them).
    """
    types = load_layout_types(types_path)
    if layout_type not in types:
        raise ValueError(f"unknown layout type {layout_type!r}; known: {', '.join(map(str, sorted(types)))}")
    if n < 0 or height < 8 or width < 8:
        raise ValueError(f"need n >= 0 and a map of at least 8 x 8 pixels, got n={n}, {height} x {width}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    lut = _type_by_mask(types)
    prior = prior if prior is not None else TYPE_PRIORS.get(layout_type, LayoutPrior())
    # enough for a type that one candidate in a thousand shows; fail rather than loop for ever
    max_candidates = max_candidates if max_candidates is not None else 1000 * n + 100_000
    batch = 2048
    small_h, small_w = max(8, height // 4), max(8, width // 4)
    found, tried = [], 0
    while sum(len(m) for m in found) < n:
        if tried >= max_candidates:
            raise RuntimeError(
                f"only {sum(len(m) for m in found)} of {n} layouts of type {layout_type} in {tried} candidates; "
                f"raise max_candidates or aim the prior (LayoutPrior) at this type"
            )
        cams = sample_cameras(rng, batch, prior)
        tried += batch
        _, small_types = _render_types_chunked(cams, small_h, small_w, min_area, lut)
        cams = _take(cams, np.flatnonzero(small_types == layout_type))
        maps, full_types = _render_types_chunked(cams, height, width, min_area, lut)
        found.append(maps[full_types == layout_type])
    maps = np.concatenate(found)[:n] if found else np.zeros((0, height, width), np.uint8)
    ids = np.array([f"lsun{layout_type}-{i:06d}" for i in range(n)])
    layouts = LayoutMaps(ids, maps)
    layouts.provenance = {
        "format": "generated",
        "layout_type": layout_type,
        "height": height,
        "width": width,
        "seed": seed if isinstance(seed, int) else "generator",
        "prior": asdict(prior),
        "min_area": min_area,
    }
    return layouts
