"""Images as model inputs: which file is each store item, checked before any training, decoded and resized to the
input size, once (an in-memory cache) or each step (loader processes, or the GPU).

Files (:func:`image_paths`): an index CSV ``id,path`` (``--image-index``, or ``ROOT/index.csv`` as ``trainer
render`` writes it), else a pattern under ``ROOT`` (default ``{id}.jpg``); :func:`check_images` reads every file's
header before the first step. Here images are only decoded and resized (``transform``: "resize", or "center_crop",
the ImageNet eval); the random augmentation runs in batch on the device (:mod:`labeldist.trainer.inputs.augment`).
They stay uint8 ``(3, size, size)``, a quarter of float's bytes, and the model normalises them on the device
(:class:`labeldist.trainer.training.models.ImageNormalize`). Three sources (:func:`open_images`):
:class:`CachedImages` (decoded once into a shared-memory array, when under :func:`default_cache_limit`),
:class:`ImageInputs` (decoded each step in DataLoader workers, :mod:`labeldist.client.loader`) and
:class:`EncodedImages` (bytes read by :class:`PackedImages`, decoded by :func:`decode_batch`: nvJPEG on CUDA).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from labeldist.client import InputError
from labeldist.core.reading import TextFileError, open_regular, read_csv, read_regular
from labeldist.errors import UsageError
from labeldist.trainer.inputs import decoding
from labeldist.trainer.inputs.augment import EVALS, eval_transform

#: a render folder's index (trainer render writes it)
INDEX = "index.csv"
DEFAULT_PATTERN = "{id}.jpg"
CACHE_MODES = ("auto", "on", "off")
#: the most of the physical memory that ``cache="auto"`` gives the decoded images (default_cache_limit)
CACHE_MEMORY_SHARE = 0.25
#: the most of the free shared memory (/dev/shm) that ``cache="auto"`` takes (default_cache_limit)
CACHE_SHM_SHARE = 0.5
JPEG_MAGIC = b"\xff\xd8\xff"


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
        table = [row for row in read_csv(path, "image index") if row]  # csv.DictReader's rows: blank lines skipped
    except OSError as e:
        raise ImageInputError(f"image index {path}: cannot read: {e.strerror or e}") from None
    except TextFileError as e:
        raise ImageInputError(f"image index {e}") from None
    header = table[0] if table else []
    if not {"id", "path"} <= set(header):
        raise ImageInputError(f"image index {path}: needs the columns id,path, found {','.join(header) or 'nothing'}")
    at_id, at_path = header.index("id"), header.index("path")
    rows = [
        (row[at_id] if at_id < len(row) else None, row[at_path] if at_path < len(row) else None) for row in table[1:]
    ]
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
        raise ImageInputError(
            f"image index {path}: {len(unknown)} ids are not items of the store: "
            f"{_listing([repr(u) for u in unknown[:3]], len(unknown))}"
        )
    if repeated:
        raise ImageInputError(
            f"image index {path}: ids listed twice: {_listing([repr(r) for r in repeated[:3]], len(repeated))}"
        )
    missing = [i for i in ids if i not in found]
    if missing:
        raise ImageInputError(
            f"image index {path}: {len(missing)} items of the store have no image: "
            f"{_listing([repr(m) for m in missing[:3]], len(missing))}"
        )
    return [path.parent / found[i] for i in ids]


def image_paths(
    root: str | Path, ids: Sequence[str], *, pattern: str | None = None, index: str | Path | None = None
) -> list[Path]:
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
        raise ImageInputError(f"{len(missing)} of {len(paths)} images not found: {_listing(missing[:3], len(missing))}")
    return paths


def check_images(paths: Sequence[Path], *, progress: bool = False) -> dict[tuple[int, int], int]:
    """Open every image's header (PIL reads only the header here): its ``(width, height)`` -> how many.

    Raises :class:`ImageInputError` naming the first file that is not an image PIL can identify."""
    from PIL import Image, UnidentifiedImageError

    from labeldist.core.progress import progress_bar

    sizes: dict[tuple[int, int], int] = {}
    with progress_bar(len(paths), "checking images", unit="img", units="images", enabled=progress, leave=False) as bar:
        for path in paths:
            try:
                with open_regular(path, "image") as f, Image.open(f) as image:
                    size = image.size
            except (OSError, UnidentifiedImageError, ValueError) as e:
                raise ImageInputError(f"image {path}: unreadable ({type(e).__name__}: {e})") from None
            sizes[size] = sizes.get(size, 0) + 1
            bar.update()
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
            "give --input-size N to resize each to NxN"
        )
    ((w, h),) = sizes
    return min(w, h)


# --------------------------------------------------------------------------------------------------------------
# Decoding


def _decode_error(name: object, error: BaseException) -> ImageInputError:
    text = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return ImageInputError(f"image {name}: cannot decode ({text})")


def read_bytes(path: Path) -> torch.Tensor:
    """A file's bytes as a uint8 1-D tensor (what the decoders take); only a regular file is read (a FIFO among the
    images would block the loader)."""
    return torch.frombuffer(bytearray(read_regular(path, "image")), dtype=torch.uint8)


def decode(path: Path) -> torch.Tensor:
    """A file's pixels as ``(3, H, W)`` uint8 RGB (grey and RGBA converted;
    :mod:`labeldist.trainer.inputs.decoding`)."""
    try:
        return decoding.decode_image(read_bytes(path))
    except (RuntimeError, OSError, ValueError) as e:  # a file damaged past its header
        raise _decode_error(path, e) from None


def _check_transform(transform: str) -> str:
    if transform not in EVALS:
        raise ImageInputError(f"unknown image transform {transform!r}; known: {', '.join(EVALS)}")
    return transform


class ImageInputs:
    """Images indexed like the store, decoded where they are asked for: ``self(indices)`` decodes the images of
    ``indices`` (any shape) and brings each to the input size (``transform``: "resize" or "center_crop",
    :func:`labeldist.trainer.inputs.augment.eval_transform`), uint8 ``indices.shape + (3, size, size)``. No random
    augmentation here: that is the training loop's (:mod:`labeldist.trainer.inputs.augment`). Picklable, so DataLoader
    worker processes run it."""

    #: decoded in DataLoader worker processes (labeldist.client.loader), never in the prefetch threads
    needs_processes = True

    def __init__(
        self,
        paths: Sequence[Path],
        size: int,
        transform: str = "resize",
    ) -> None:
        self.paths = list(paths)
        self.size = int(size)
        self.transform = _check_transform(transform)
        self.n_items = len(self.paths)
        self.item_shape = (3, self.size, self.size)
        self._transform = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_transform": None}  # rebuilt in the worker

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def image(self, i: int) -> torch.Tensor:
        """Item ``i`` decoded and brought to the input size: uint8 ``(3, size, size)``."""
        if self._transform is None:
            self._transform = eval_transform(self.transform, self.size)
        return self._transform(decode(self.paths[i]))

    def __call__(self, indices: np.ndarray) -> torch.Tensor:
        flat = np.asarray(indices, dtype=np.int64).reshape(-1)
        out = torch.empty((len(flat), *self.item_shape), dtype=torch.uint8)
        for row, i in enumerate(flat.tolist()):
            out[row] = self.image(i)
        return out.reshape(*np.shape(indices), *self.item_shape)


# --------------------------------------------------------------------------------------------------------------
# Decoded once: the in-memory cache


def default_cache_limit() -> int:
    """The bytes ``cache="auto"`` gives the decoded images: a quarter of the physical memory, and at most half of
    the free shared memory (/dev/shm).

    A quarter, because the cache is the one large block the run holds for its whole life, and the rest of the
    machine is busy too: the model and optimiser, the loader's prefetched steps and pinned copies, the labeldist
    service with its stores, other jobs on a shared machine; three quarters left to them keeps the run away from
    swap and the OOM killer. Half the free shared memory, because a shared tensor lives in /dev/shm, which a
    container often caps (Docker: 64 MiB), and a write past the cap kills the process with SIGBUS rather than
    raising an error."""
    limits = []
    try:
        limits.append(int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * CACHE_MEMORY_SHARE))
    except (ValueError, OSError, AttributeError):  # not a POSIX system: no figure
        pass
    try:
        shm = os.statvfs("/dev/shm")
        limits.append(int(shm.f_bavail * shm.f_frsize * CACHE_SHM_SHARE))
    except OSError:
        pass
    return min(limits) if limits else 0


def cache_bytes(n_items: int, size: int) -> int:
    """The bytes of the cache of ``n_items`` images of ``size`` x ``size``: uint8 RGB."""
    return int(n_items) * 3 * int(size) * int(size)


def _workers(workers: int | None) -> int:
    return max(1, min(os.cpu_count() or 1, 16) if workers is None else workers)


@dataclass(eq=False)
class CachedImages:
    """Every image decoded once, resized (not cropped: ``transform``) to the input size, in one uint8
    ``(N, 3, size, size)`` array in shared memory: ``self(indices)`` is a gather, uint8 ``indices.shape + (3, size,
    size)``. Forked loader workers map the array rather than copy it (and a pickle by torch.multiprocessing passes
    a handle); a plain pickle copies it. Build one with :meth:`decode`."""

    data: torch.Tensor
    transform: str = "resize"
    paths: list[Path] = field(default_factory=list)

    #: a gather: prefetch threads (or processes=0) are enough
    needs_processes = False

    def __post_init__(self) -> None:
        shape = tuple(self.data.shape)
        if self.data.dtype != torch.uint8 or len(shape) != 4 or shape[1] != 3 or shape[2] != shape[3]:
            raise UsageError(f"a cache is uint8 (N, 3, size, size), got {self.data.dtype} {tuple(self.data.shape)}")
        self.n_items = int(self.data.shape[0])
        self.size = int(self.data.shape[-1])
        self.item_shape = (3, self.size, self.size)

    @classmethod
    def decode(
        cls,
        paths: Sequence[Path],
        size: int,
        *,
        transform: str = "resize",
        workers: int | None = None,
        progress: bool = False,
    ) -> CachedImages:
        """Decode every file of ``paths`` into a new shared cache, in ``workers`` threads (default: one per core,
        at most 16; libjpeg, libpng and the resize release the GIL), with a progress bar when ``progress``.
        Raises :class:`ImageInputError` naming the first file that does not decode."""
        from labeldist.core.progress import progress_bar

        paths = list(paths)
        inputs = ImageInputs(paths, size, _check_transform(transform))
        data = torch.empty((len(paths), 3, size, size), dtype=torch.uint8).share_memory_()

        def fill(i: int) -> None:
            data[i] = inputs.image(i)

        with (
            ThreadPoolExecutor(_workers(workers)) as pool,
            progress_bar(
                len(paths), "decoding images", unit="img", units="images", enabled=progress, leave=False
            ) as bar,
        ):
            for start in range(0, len(paths), 256):  # a block at a time: the first error stops the rest soon
                for _ in pool.map(fill, range(start, min(start + 256, len(paths)))):
                    bar.update()
        return cls(data, transform, paths)

    def __call__(self, indices: np.ndarray) -> torch.Tensor:
        flat = torch.from_numpy(np.asarray(indices, dtype=np.int64).reshape(-1))
        return self.data[flat].reshape(*np.shape(indices), *self.item_shape)


# --------------------------------------------------------------------------------------------------------------
# Decoded on the device: the files' bytes through the loader, decoded in batch


def decode_batch(
    encoded: Sequence[torch.Tensor],
    size: int,
    device: torch.device | str = "cpu",
    *,
    names: Sequence[object] | None = None,
    transform: str = "resize",
) -> torch.Tensor:
    """Files' bytes (each a uint8 1-D tensor on the CPU) decoded and brought to the input size (``transform``) on
    ``device``: uint8 ``(len, 3, size, size)``.

    JPEGs go through one :func:`labeldist.trainer.inputs.decoding.decode_jpegs` call: batched by nvJPEG on CUDA,
    libjpeg-turbo on the CPU (the same pixels as :func:`decode`); other formats (PNG) through ``decode_image`` on
    the CPU, then to ``device``. A file that does not decode is an :class:`ImageInputError` naming it (``names``,
    else its position)."""
    device = torch.device(device)
    names = list(range(len(encoded))) if names is None else list(names)
    resize = eval_transform(_check_transform(transform), size)
    out = torch.empty((len(encoded), 3, size, size), dtype=torch.uint8, device=device)
    jpeg = [i for i, e in enumerate(encoded) if bytes(e[:3].tolist()) == JPEG_MAGIC]
    decoded: dict[int, torch.Tensor] = {}
    if jpeg:
        try:
            images = decoding.decode_jpegs([encoded[i] for i in jpeg], device=device)
            decoded.update(zip(jpeg, images, strict=True))
        except (RuntimeError, ValueError):  # one bad file fails the batch: find it
            for i in jpeg:
                try:
                    decoded[i] = decoding.decode_jpegs([encoded[i]], device=device)[0]
                except (RuntimeError, ValueError) as e:
                    raise _decode_error(names[i], e) from None
    for i in range(len(encoded)):
        if i not in decoded:
            try:
                decoded[i] = decoding.decode_image(encoded[i]).to(device)
            except (RuntimeError, ValueError) as e:
                raise _decode_error(names[i], e) from None
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for i, image in decoded.items():
        by_shape.setdefault(tuple(image.shape), []).append(i)
    for rows in by_shape.values():  # images of one size resized together
        out[rows] = resize(torch.stack([decoded[i] for i in rows]))
    return out


@dataclass(eq=False)
class PackedImages:
    """Encoded files for the trip through the loader: ``data`` uint8 (total bytes,), the files one after the
    other; file ``k`` (row-major over the leading shape) is ``data[offsets[k]:offsets[k + 1]]``; ``indices`` the
    store items, of the leading shape (``(B, n)`` for a step).

    It behaves as a step's inputs must (:class:`labeldist.client.data.Minibatch`): ``self[sl]`` slices the leading
    axis, ``pin_memory``, ``is_pinned`` and ``to(device)``. The bytes stay in host memory on ``to``: nvJPEG reads
    them from there; ``device`` only records where :meth:`EncodedImages.decode` puts the pixels."""

    data: torch.Tensor
    offsets: torch.Tensor
    indices: torch.Tensor
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.indices.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def files(self) -> list[torch.Tensor]:
        """Each file's bytes, row-major over the leading shape (views of ``data``)."""
        o = self.offsets.tolist()
        return [self.data[o[k] : o[k + 1]] for k in range(len(o) - 1)]

    def __getitem__(self, key: int | slice) -> PackedImages:
        if isinstance(key, int):
            key = slice(key, key + 1) if key != -1 else slice(key, None)
            return self._rows(key, squeeze=True)
        if not isinstance(key, slice):
            raise TypeError(f"PackedImages are sliced along their leading axis only, got {key!r}")
        return self._rows(key, squeeze=False)

    def _rows(self, key: slice, *, squeeze: bool) -> PackedImages:
        start, stop, step = key.indices(len(self))
        if step != 1:
            raise UsageError("PackedImages take slices of step 1 only")
        stop = max(stop, start)
        per_row = int(np.prod(self.shape[1:], dtype=np.int64))
        lo, hi = start * per_row, stop * per_row
        offsets = self.offsets[lo : hi + 1]
        data = self.data[int(offsets[0]) : int(offsets[-1])]
        indices = self.indices[start:stop]
        return PackedImages(data, offsets - offsets[0], indices[0] if squeeze else indices, self.device)

    def pin_memory(self) -> PackedImages:
        return PackedImages(self.data.pin_memory(), self.offsets, self.indices, self.device)

    def is_pinned(self) -> bool:
        return self.data.is_pinned()

    def to(self, device: torch.device | str, non_blocking: bool = False) -> PackedImages:
        return PackedImages(self.data, self.offsets, self.indices, torch.device(device))


@dataclass
class EncodedImages:
    """Images indexed like the store, read as bytes where they are asked for (``self(indices)``:
    :class:`PackedImages`, cheap enough for the prefetch threads) and decoded in batch where they are used
    (:meth:`decode`, on the GPU by nvJPEG): for datasets too large to cache and too many for the CPU cores."""

    paths: list[Path]
    size: int
    transform: str = "resize"

    needs_processes = False

    def __post_init__(self) -> None:
        self.paths = list(self.paths)
        self.transform = _check_transform(self.transform)
        self.n_items = len(self.paths)
        self.item_shape = (3, self.size, self.size)

    def read(self, i: int) -> torch.Tensor:
        try:
            return read_bytes(self.paths[i])
        except OSError as e:
            raise ImageInputError(f"image {self.paths[i]}: cannot read ({e.strerror or e})") from None

    def __call__(self, indices: np.ndarray) -> PackedImages:
        flat = np.asarray(indices, dtype=np.int64).reshape(-1)
        files = [self.read(i) for i in flat.tolist()]
        offsets = torch.zeros(len(files) + 1, dtype=torch.int64)
        offsets[1:] = torch.cumsum(torch.tensor([len(f) for f in files], dtype=torch.int64), 0)
        data = torch.cat(files) if files else torch.empty(0, dtype=torch.uint8)
        return PackedImages(data, offsets, torch.from_numpy(flat.reshape(np.shape(indices)).copy()))

    def decode(
        self, packed: PackedImages, size: int | None = None, device: torch.device | str | None = None
    ) -> torch.Tensor:
        """The pixels of ``packed`` on ``device`` (default: where ``packed.to`` sent it): uint8 ``packed.shape +
        (3, size, size)``."""
        size = self.size if size is None else size
        names = [self.paths[i] for i in packed.indices.reshape(-1).tolist()]
        images = decode_batch(
            packed.files(), size, packed.device if device is None else device, names=names, transform=self.transform
        )
        return images.reshape(*packed.shape, 3, size, size)


def device_images(inputs: torch.Tensor | PackedImages, source: object, device: torch.device | str) -> torch.Tensor:
    """A step's images as uint8 pixels on ``device``, whichever inputs made them: a tensor (cache, loader
    processes) moved there, or :class:`PackedImages` decoded there by ``source`` (its :class:`EncodedImages`)."""
    if isinstance(inputs, PackedImages):
        if not isinstance(source, EncodedImages):
            raise TypeError("PackedImages are decoded by the EncodedImages that made them")
        return source.decode(inputs, device=device)
    return inputs.to(device, non_blocking=True)


#: the inputs :func:`open_images` may return (what a trainer checks for "images")
IMAGE_INPUTS = (ImageInputs, CachedImages, EncodedImages)


def open_images(
    root: str | Path,
    ids: Sequence[str],
    *,
    pattern: str | None = None,
    index: str | Path | None = None,
    input_size: int | None = None,
    transform: str = "resize",
    cache: Literal["auto", "on", "off"] = "off",
    cache_limit_bytes: int | None = None,
    encoded: bool = False,
    workers: int | None = None,
    progress: bool = False,
) -> ImageInputs | CachedImages | EncodedImages:
    """The images of a store's ``ids``, every file found and its header read first, decoded to uint8 ``(3, size,
    size)`` by ``transform`` ("resize", default; "center_crop": the usual ImageNet eval):

    - ``cache="on"``, or "auto" when ``cache_bytes(N, size)`` is at most ``cache_limit_bytes`` (default
      :func:`default_cache_limit`): :class:`CachedImages`, decoded now by ``workers`` threads;
    - else :class:`EncodedImages` when ``encoded`` (decode on the device: CUDA), else :class:`ImageInputs`
      (decoded in loader processes).

    No random augmentation here: that is the training loop's (:mod:`labeldist.trainer.inputs.augment`)."""
    if cache not in CACHE_MODES:
        raise ImageInputError(f"--image-cache must be one of {', '.join(CACHE_MODES)}, got {cache!r}")
    transform = _check_transform(transform)
    paths = image_paths(root, ids, pattern=pattern, index=index)
    size = input_size_of(check_images(paths, progress=progress), input_size)
    limit = default_cache_limit() if cache_limit_bytes is None else cache_limit_bytes
    if cache == "on" or (cache == "auto" and cache_bytes(len(paths), size) <= limit):
        return CachedImages.decode(paths, size, transform=transform, workers=workers, progress=progress)
    if encoded:
        return EncodedImages(paths, size, transform)
    return ImageInputs(paths, size, transform)
