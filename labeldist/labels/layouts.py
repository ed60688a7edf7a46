"""Room layouts: H x W surface-label maps (the label set), and a reader and a writer for folders of them.

A map gives, for every pixel, the room surface seen there, in the LSUN room-layout challenge's order
(``lsun_layout_types.json``, installed beside this module): 0 none (unlabelled: ignored by the layout distance),
1 floor, 2 middle_wall (the front wall facing the camera; the left one of two walls), 3 right_wall, 4 left_wall,
5 ceiling. The 11 LSUN layout types (ids 0-10) each show a different set of surfaces, so the visible set identifies
the type (:func:`layout_types_of`). Generated layouts: :mod:`labeldist.labels.lsun_rooms`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

import numpy as np
from PIL import Image, UnidentifiedImageError
from typing_extensions import Self

from labeldist.core.reading import SMALL_FILE_BYTES, open_regular, read_regular_text
from labeldist.errors import UsageError
from labeldist.labels.base import LabelError, LabelSet, read_npy

SURFACES = ("floor", "middle_wall", "right_wall", "left_wall", "ceiling")
#: label value of "no surface"; surfaces are 1..5 in the order of SURFACES
UNLABELLED = 0
FLOOR, MIDDLE_WALL, RIGHT_WALL, LEFT_WALL, CEILING = 1, 2, 3, 4, 5
LSUN_TYPES_PATH = Path(__file__).with_name("lsun_layout_types.json")
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
    """The LSUN layout types by id, read from ``lsun_layout_types.json`` beside this module (or ``path``)."""
    path = Path(path) if path is not None else LSUN_TYPES_PATH
    try:
        spec = json.loads(read_regular_text(path, "layout-types file", limit=SMALL_FILE_BYTES))
    except (OSError, ValueError) as e:  # ValueError: not UTF-8 (named), not JSON
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


def type_by_mask(types: dict[int, LayoutType]) -> np.ndarray:
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
    return type_by_mask(load_layout_types(types_path))[mask]


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

    shared_arrays: ClassVar[tuple[str, ...]] = ("n_classes",)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"maps": self.maps, "n_classes": np.array([self.n_classes], dtype=np.int64)}

    array_dimensions: ClassVar[Mapping[str, tuple[str, ...]]] = {"maps": ("item", "y", "x"), "n_classes": ("one",)}

    @classmethod
    def from_arrays(cls, ids: np.ndarray, arrays: dict[str, np.ndarray]) -> Self:
        n_classes = int(np.asarray(arrays["n_classes"]).ravel()[0]) if "n_classes" in arrays else 5
        return cls(ids, arrays["maps"], n_classes)

    def to_json(self, i: int) -> list[list[int]]:
        """Map ``i`` as its JSON form: a list of its H rows, each a list of W surface labels (0 unlabelled,
        1..n_classes; for LSUN 1 floor, 2 middle wall, 3 right wall, 4 left wall, 5 ceiling). Layout stores are
        not searched by a new map (no :meth:`from_json`); this is the form their labels are answered in."""
        return self.maps[i].tolist()


# --------------------------------------------------------------------------------------------------------------
# Reading and writing folders of maps


def _read_map_file(path: Path) -> np.ndarray:
    """The 2-d label array stored in one .npy or .png file; LabelError naming the file otherwise."""
    if path.suffix.lower() == ".npy":
        arr = read_npy(path)
    else:
        try:
            with open_regular(path, "label map") as f, Image.open(f) as img:
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
        raise UsageError(f"unknown format {fmt!r}; known: png, npy")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for item, m in zip(labels.ids.tolist(), labels.maps):
        if not item or Path(item).name != item or item in (".", ".."):
            raise UsageError(f"item id {item!r} cannot be a file name")
        path = folder / f"{item}.{fmt}"
        if fmt == "png":
            Image.fromarray(m).save(path)
        else:
            np.save(path, m)
        paths.append(path)
    return paths
