"""Images as model inputs: which file is each store item, checked before any training, and the papers'
augmentation on decoded images.

A store's items are mapped to files in one of two ways (:func:`image_paths`):

- an **index CSV** ``id,path`` (paths relative to the CSV's folder), such as the ``index.csv`` that
  ``trainer render`` writes: used when ``--image-index`` names one, or when ``ROOT/index.csv`` exists;
- a **pattern** such as ``{id}.jpg`` under ``ROOT`` (default ``{id}.jpg``).

Every item must have a readable image before a step runs (:func:`check_images` reads each file's header), so a
missing or unreadable file is one clear line at the start, not a worker's traceback an hour in.

Augmentation follows the torchvision ImageNet recipe the papers trained with (Kim et al., CVPR 2019, §5:
ImageNet-initialised ResNets): to train, a random resized crop (scale 0.08-1, aspect 3/4-4/3) to ``size``
and a horizontal flip with probability 1/2; to evaluate, a resize of the short side to ``size * 256/224``
and a centre crop of ``size``. Images stay **uint8** (``(3, size, size)``): four times fewer bytes between
the worker processes, pinned memory and the GPU than float; the model scales and normalises them on the device
(:class:`labeldist.trainer.models.ImageNormalize`).

Images are decoded with ``torchvision.io`` (libjpeg-turbo / libpng, no PIL round trip) in DataLoader worker
processes (:mod:`labeldist.trainer.loader`). The random crop of an item depends on the torch generator of the worker at
that moment; :mod:`labeldist.trainer.loader` seeds it per request, so a run's crops depend on its seed alone.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from labeldist.trainer.data import InputError

#: a render folder's index (trainer render writes it)
INDEX = "index.csv"
DEFAULT_PATTERN = "{id}.jpg"
#: the eval resize of the torchvision ImageNet recipe: short side to size * 256/224, then a centre crop of size
EVAL_RESIZE = 256 / 224


class ImageInputError(InputError):
    """Images that cannot be used as asked: a missing or unreadable file, an index that does not match the store,
    images of different sizes with no ``--input-size``. The message is one line that names the file."""


def _listing(items: Sequence[str], total: int) -> str:
    more = f" (and {total - len(items)} more)" if total > len(items) else ""
    return ", ".join(items) + more


def read_index(path: Path, ids: Sequence[str]) -> list[Path]:
    """Paths of ``ids`` from an index CSV with columns ``id`` and ``path`` (relative to the CSV's folder).

    Refuses an index without those columns, an id the store does not have, an id listed twice, and a store item
    the index does not list."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None or not {"id", "path"} <= set(reader.fieldnames):
                raise ImageInputError(f"image index {path}: needs the columns id,path, found "
                                      f"{','.join(reader.fieldnames or []) or 'nothing'}")  # fmt: skip
            rows = [(row["id"], row["path"]) for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ImageInputError(f"image index {path}: cannot read: {e}") from None
    known = set(ids)
    found: dict[str, str] = {}
    unknown, repeated = [], []
    for i, p in rows:
        if i not in known:
            unknown.append(i)
        elif i in found:
            repeated.append(i)
        found[i] = p
    if unknown:
        raise ImageInputError(f"image index {path}: {len(unknown)} ids are not items of the store: "
                              f"{_listing([repr(u) for u in unknown[:3]], len(unknown))}")  # fmt: skip
    if repeated:
        raise ImageInputError(f"image index {path}: ids listed twice: "
                              f"{_listing([repr(r) for r in repeated[:3]], len(repeated))}")  # fmt: skip
    missing = [i for i in ids if i not in found]
    if missing:
        raise ImageInputError(f"image index {path}: {len(missing)} items of the store have no image: "
                              f"{_listing([repr(m) for m in missing[:3]], len(missing))}")  # fmt: skip
    return [path.parent / found[i] for i in ids]


def image_paths(root: str | Path, ids: Sequence[str], *, pattern: str | None = None,
                index: str | Path | None = None) -> list[Path]:  # fmt: skip
    """The image file of each store item, in index order: from ``index`` (an ``id,path`` CSV), else
    ``ROOT/index.csv`` when it exists and no ``pattern`` is given, else ``ROOT / pattern.format(id=...)``.

    Raises :class:`ImageInputError` for a root that is not a folder, a pattern without ``{id}``, or any item
    whose file does not exist (naming the first few)."""
    root = Path(root)
    if not root.is_dir():
        raise ImageInputError(f"--images {root}: not a folder")
    ids = [str(i) for i in ids]
    if index is not None:
        paths = read_index(Path(index), ids)
    elif pattern is None and (root / INDEX).is_file():
        paths = read_index(root / INDEX, ids)
    else:
        pattern = pattern or DEFAULT_PATTERN
        if "{id}" not in pattern:
            raise ImageInputError(f"--image-pattern {pattern!r} must contain {{id}}, e.g. {DEFAULT_PATTERN!r}")
        paths = [root / pattern.format(id=i) for i in ids]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ImageInputError(f"{len(missing)} of {len(paths)} images not found: "
                              f"{_listing(missing[:3], len(missing))}")  # fmt: skip
    return paths


def check_images(paths: Sequence[Path], *, progress: bool = False) -> dict[tuple[int, int], int]:
    """Open every image's header (PIL reads only the header here): its ``(width, height)`` -> how many.

    Raises :class:`ImageInputError` naming the first file that is not an image PIL can identify."""
    from PIL import Image, UnidentifiedImageError
    from tqdm import tqdm

    sizes: dict[tuple[int, int], int] = {}
    for path in tqdm(paths, desc="checking images", unit="img", disable=not progress, leave=False):
        try:
            with Image.open(path) as image:
                size = image.size
        except (OSError, UnidentifiedImageError, ValueError) as e:
            raise ImageInputError(f"image {path}: unreadable ({type(e).__name__}: {e})") from None
        sizes[size] = sizes.get(size, 0) + 1
    return sizes


def input_size_of(sizes: dict[tuple[int, int], int], requested: int | None) -> int:
    """The side of the square model input: ``requested``, else the images' own short side when they all have
    one size. Images of several sizes with no requested size are refused (naming two of them), rather than
    resized to a size chosen silently."""
    if requested is not None:
        if not 16 <= requested <= 4096:
            raise ImageInputError(f"--input-size must be in 16..4096 pixels, got {requested}")
        return requested
    if len(sizes) > 1:
        (a, na), (b, nb) = sorted(sizes.items(), key=lambda kv: -kv[1])[:2]
        raise ImageInputError(
            f"images differ in size ({na} are {a[0]}x{a[1]}, {nb} are {b[0]}x{b[1]}, {len(sizes)} sizes in all): "
            "give --input-size N to resize and crop each to NxN"
        )
    ((w, h),) = sizes
    return min(w, h)


def decode(path: Path) -> torch.Tensor:
    """A file's pixels as ``(3, H, W)`` uint8 RGB (grey and RGBA converted)."""
    from torchvision.io import ImageReadMode, decode_image, read_file

    try:
        return decode_image(read_file(str(path)), mode=ImageReadMode.RGB)
    except (RuntimeError, OSError, ValueError) as e:  # a file damaged past its header
        raise ImageInputError(f"image {path}: cannot decode ({str(e).splitlines()[0]})") from None


def augmentation(size: int, *, train: bool, flip: bool = True, crop_scale: tuple[float, float] = (0.08, 1.0)):
    """The transform of uint8 ``(3, H, W)`` images to uint8 ``(3, size, size)``: random resized crop (and flip)
    to train, resize and centre crop to evaluate (module docstring)."""
    from torchvision.transforms import v2

    if not train:
        return v2.Compose([v2.Resize(round(size * EVAL_RESIZE), antialias=True), v2.CenterCrop(size)])
    steps = [v2.RandomResizedCrop(size, scale=crop_scale, antialias=True)]
    if flip:
        steps.append(v2.RandomHorizontalFlip())
    return v2.Compose(steps)


@dataclass
class ImageInputs:
    """Images indexed like the store: ``self(indices)`` decodes and transforms the images of ``indices`` (any
    shape) into uint8 ``indices.shape + (3, size, size)``. Picklable, so DataLoader worker processes run it."""

    paths: list[Path]
    size: int
    train: bool = True
    flip: bool = True
    crop_scale: tuple[float, float] = (0.08, 1.0)

    #: decoded in DataLoader worker processes (labeldist.trainer.loader), never in the prefetch threads
    needs_processes = True

    def __post_init__(self) -> None:
        self.n_items = len(self.paths)
        self.item_shape = (3, self.size, self.size)
        self._transform = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_transform": None}  # rebuilt in the worker

    def __call__(self, indices: np.ndarray) -> torch.Tensor:
        if self._transform is None:
            self._transform = augmentation(self.size, train=self.train, flip=self.flip, crop_scale=self.crop_scale)
        flat = np.asarray(indices, dtype=np.int64).reshape(-1)
        out = torch.empty((len(flat), *self.item_shape), dtype=torch.uint8)
        for row, i in enumerate(flat.tolist()):
            out[row] = self._transform(decode(self.paths[i]))
        return out.reshape(*np.shape(indices), *self.item_shape)


def open_images(root: str | Path, ids: Sequence[str], *, pattern: str | None = None, index: str | Path | None = None,
                input_size: int | None = None, train: bool = True, flip: bool = True,
                crop_scale: tuple[float, float] = (0.08, 1.0), progress: bool = False) -> ImageInputs:  # fmt: skip
    """:class:`ImageInputs` for a store's ``ids``, every file found and its header read first."""
    paths = image_paths(root, ids, pattern=pattern, index=index)
    size = input_size_of(check_images(paths, progress=progress), input_size)
    if not 0 < crop_scale[0] <= crop_scale[1] <= 1:
        raise ImageInputError(f"--crop-scale must be 0 < MIN <= MAX <= 1, got {crop_scale[0]} {crop_scale[1]}")
    return ImageInputs(paths, size, train=train, flip=flip, crop_scale=tuple(crop_scale))
