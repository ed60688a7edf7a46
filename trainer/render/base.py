"""``trainer render``: one image per item of a labeldist store, drawn from its label, deterministic by seed.

A CNN trained on these pictures has to recover the label's geometry from pixels, through nuisance variation. The
renderers: ``pose`` (:mod:`labeldist.trainer.render.pose`) and ``layout_miou`` (:mod:`labeldist.trainer.render.layout`).
Item ``i`` is drawn with a generator seeded from ``(seed, i)`` alone. The output folder holds the images,
``index.csv`` (``id,path``) and ``render.json`` (store, kind, seed, size, frame, ...; ``complete`` true last). A
pose is drawn in its label's frame (``frame``: ``[cx, cy, half]``), and a test store must be rendered in its train
store's frame (``render_store(..., frame=...)``, :func:`read_frame`). This module also holds the drawing helpers
both renderers use (colours, smooth noise, finishing an image). docs/internals.md, "Rendering images from labels".
"""

from __future__ import annotations

import colorsys
import csv
import hashlib
import io
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from labeldist.core.files import written_whole
from labeldist.errors import LabeldistError
from labeldist.store.outputs import make_folder, what_is
from labeldist.trainer.kinds import kinds_with, load, trainer_kind
from labeldist.view.stored import stored_labels

#: bump when a change to the drawing changes the pixels: a render of another version is a different render
RENDER_VERSION = 2
FORMATS = ("png", "jpg")
INDEX = "index.csv"
META = "render.json"
#: render.json keys that must agree for an existing folder to count as the same render
IDENTITY = ("version", "kind", "labels_sha256", "n_items", "seed", "size", "format", "count", "frame")
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,119}")
#: items per task sent to a worker process: large enough to amortise the pickling, small enough to balance
CHUNK = 32


class RenderError(LabeldistError, ValueError):
    """A render that cannot be made as asked (a kind with no renderer, an output that is a file, ...)."""


# --------------------------------------------------------------------------------------------------------------
# Drawing helpers shared by the renderers


def item_rng(seed: int, index: int) -> np.random.Generator:
    """The generator of item ``index``: a function of (seed, index) only, so workers and --items don't matter."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(index)]))


def hsv(h: float, s: float, v: float) -> np.ndarray:
    """(3,) float RGB in [0, 1] of a hue (turns), saturation and value, each clipped to [0, 1]."""
    return np.array(colorsys.hsv_to_rgb(h % 1.0, float(np.clip(s, 0, 1)), float(np.clip(v, 0, 1))))


def luminance(rgb: np.ndarray) -> np.ndarray:
    """Rec. 601 luma of float RGB in [0, 1] (last axis)."""
    return np.asarray(rgb) @ np.array([0.299, 0.587, 0.114])


def smooth_noise(rng: np.random.Generator, height: int, width: int, cells: int) -> np.ndarray:
    """(height, width) float32 value noise in [-1, 1]: a random ``cells`` x ``cells`` grid upsampled bicubically,
    the cheap low-frequency texture (mottled paint, carpet, blotchy backgrounds) that white noise is not."""
    grid = rng.uniform(-1.0, 1.0, size=(cells, cells)).astype(np.float32)
    up = Image.fromarray(grid, mode="F").resize((width, height), Image.BICUBIC)
    return np.clip(np.asarray(up, dtype=np.float32), -1.0, 1.0)


def finish(rgb: np.ndarray, rng: np.random.Generator, sigma: float) -> np.ndarray:
    """float RGB in [0, 1] to uint8 with Gaussian sensor noise of ``sigma`` (in 0-255 units)."""
    noisy = rgb * np.float32(255.0) + rng.standard_normal(size=rgb.shape, dtype=np.float32) * np.float32(sigma)
    return np.clip(np.rint(noisy), 0, 255).astype(np.uint8)


def encode(image: np.ndarray, fmt: str) -> bytes:
    """A (H, W, 3) uint8 image as PNG or JPEG bytes (no timestamps or other metadata: identical for equal pixels)."""
    buf = io.BytesIO()
    if fmt == "png":
        Image.fromarray(image).save(buf, format="PNG", optimize=False, compress_level=6)
    elif fmt == "jpg":
        Image.fromarray(image).save(buf, format="JPEG", quality=95, subsampling=0)
    else:
        raise RenderError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    return buf.getvalue()


# --------------------------------------------------------------------------------------------------------------
# Names, the index and render.json


def safe_names(ids: Sequence[str], fmt: str) -> list[str]:
    """A file name per id: ``{id}.{fmt}`` where the id is a plain name, else a slug of it and a hash of the id.

    Ids may hold '/', '#', spaces or be '..'; the hash keeps two ids that slug alike apart. Names are also kept
    apart when they differ only in case (a case-insensitive file system would merge them).
    """
    names, seen = [], set()
    for item in ids:
        item = str(item)
        stem = item if _SAFE_ID.fullmatch(item) else None
        if stem is None or stem.lower() in seen:
            slug = re.sub(r"[^A-Za-z0-9._-]+", "_", item).strip("._")[:80] or "item"
            stem = f"{slug}-{hashlib.sha1(item.encode('utf-8')).hexdigest()[:10]}"
        seen.add(stem.lower())
        names.append(f"{stem}.{fmt}")
    return names


def read_index(out: Path) -> dict[str, str]:
    """id -> relative path of a render folder's index.csv (empty when there is none); RenderError naming it when
    it is no render's index (not UTF-8 text, not a CSV with columns id and path)."""
    path = out / INDEX
    if not path.is_file():
        return {}
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return {row["id"]: row["path"] for row in csv.DictReader(f)}
    except (UnicodeDecodeError, csv.Error, KeyError, TypeError) as e:
        reason = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else "not a CSV with columns id and path"
        raise RenderError(
            f"{path}: not a render's index ({reason}); --overwrite removes the images an index lists and cannot "
            "read this one: remove it, or render into another folder"
        ) from None


def _check_own_files(out: Path, names: Sequence[str]) -> None:
    """RenderError, before anything is written or removed, when a file the render writes in ``out`` (its index,
    render.json, an image) is there as anything but a regular file: a link is never followed or replaced."""
    for name in (INDEX, META, *names):
        path = out / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            raise RenderError(
                f"{path}: {what_is(path)}; trainer render replaces regular files only: remove it, or render into "
                "another folder"
            )


def _write_index(out: Path, ids: Sequence[str], names: Sequence[str]) -> None:
    with written_whole(out / INDEX) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "path"])
        writer.writerows(zip(ids, names))


def _write_meta(out: Path, meta: dict[str, Any]) -> None:
    with written_whole(out / META) as tmp:
        tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def _prepare_out(out: Path, meta: dict[str, Any], overwrite: bool, names: Sequence[str] = ()) -> None:
    """Make ``out`` ready for this render, or refuse: a file, a different render, or a folder of other files.

    The same render (equal IDENTITY keys) may be rerun, finished or not: it writes the same bytes. With
    ``overwrite`` the images of the old render (those its index lists, inside ``out``) are removed first, so that
    none outlives it; other files are left alone. Everything is checked before anything is removed: a link or
    anything but a regular file at one of the render's ``names`` (:func:`_check_own_files`), an index that cannot
    be read.
    """
    if out.exists() and not out.is_dir():
        raise RenderError(f"{out}: is a file, not a folder for the images")
    if not out.exists():
        make_folder(out)  # refused inside a store
        return
    make_folder(out)
    _check_own_files(out, names)
    old_meta, unreadable = None, ""
    if (out / META).is_file():
        try:
            old_meta = json.loads((out / META).read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            old_meta, unreadable = {}, "not UTF-8 text"
        except (OSError, ValueError) as e:  # json.JSONDecodeError is a ValueError
            old_meta, unreadable = {}, f"not JSON: {type(e).__name__}"
    same = isinstance(old_meta, dict) and all(old_meta.get(k) == meta[k] for k in IDENTITY)
    if same:
        return
    if not overwrite:
        if unreadable:
            raise RenderError(f"{out / META}: not a render's record ({unreadable}); pass --overwrite to render over it")
        if old_meta is not None:
            diff = [k for k in IDENTITY if not isinstance(old_meta, dict) or old_meta.get(k) != meta[k]]
            raise RenderError(
                f"{out}: holds a different render ({', '.join(diff)} differ); pass --overwrite to replace it"
            )
        if any(out.iterdir()):
            raise RenderError(f"{out}: is a folder of other files, not a render; pass --overwrite to render into it")
        return
    root = out.resolve()
    for rel in read_index(out).values():  # read whole (or refused) before the first image is removed
        path = (out / rel).resolve()
        if path.parent == root and path.is_file():  # never follow an index outside the folder
            path.unlink()
    for name in (INDEX, META):
        (out / name).unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------------------------
# Rendering a store


@dataclass(frozen=True)
class _Task:
    kind: str
    seed: int
    size: int
    fmt: str
    out: str
    #: (item index, file name, the item's label as the renderer takes it, its frame included)
    items: tuple[tuple[int, str, Any], ...]


def _renderer(kind: str):
    """The renderer module a kind declares (:mod:`labeldist.trainer.kinds`): ``item(labels, index)`` (the item's
    label, small and picklable, from the store's LabelSet) and ``render(item, size, rng) -> (size, size, 3)
    uint8``; a kind drawn in a frame also has ``store_frame(manifest, labels, frame) -> (frame, source)`` and
    takes ``item(labels, index, frame)``."""
    return load(trainer_kind(kind).renderer)


def _run_task(task: _Task) -> int:
    """Render and write the items of one task (in a worker process or in this one); the number written."""
    module = _renderer(task.kind)
    for index, name, item in task.items:
        image = module.render(item, task.size, item_rng(task.seed, index))
        data = encode(image, task.fmt)
        path = os.path.join(task.out, name)
        # rewrite only what changed: a rerun of the same render leaves the files (and their times) as they are
        if os.path.isfile(path) and os.path.getsize(path) == len(data) and Path(path).read_bytes() == data:
            continue
        with written_whole(path) as tmp:
            tmp.write_bytes(data)
    return len(task.items)


def _tasks(kind: str, seed: int, size: int, fmt: str, out: Path, names: Sequence[str], labels, count: int, frame):
    module = _renderer(kind)
    extra = () if frame is None else (frame,)
    for start in range(0, count, CHUNK):
        stop = min(start + CHUNK, count)
        items = tuple((i, names[i], module.item(labels, i, *extra)) for i in range(start, stop))
        yield _Task(kind, seed, size, fmt, str(out), items)


def _run(tasks: Iterator[_Task], workers: int, progress: Callable[[int], None]) -> None:
    if workers <= 1:
        for task in tasks:
            progress(_run_task(task))
        return
    import multiprocessing

    # fork where there is one (Linux): a spawned worker would import the trainer package again, torch and all,
    # seconds each. The workers run numpy and Pillow only, never torch or a lock of the parent's threads.
    method = "fork" if sys.platform == "linux" else "spawn"
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method)) as pool:
        for done in pool.map(_run_task, tasks):
            progress(done)


def render_store(
    store: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    size: int = 128,
    seed: int = 0,
    fmt: str = "png",
    items: int | None = None,
    workers: int | None = None,
    overwrite: bool = False,
    progress: bool = False,
    frame: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Render the first ``items`` (default: all) items of ``store`` into ``out``; the render.json written.

    ``frame``: ``(cx, cy, half)``, the square of label coordinates a pose picture shows; None: the kind's default
    for the store (render_pose.store_frame: fixed for ``center_scale`` poses, else the store's own extent, which
    a test store must then be given from its train render, :func:`read_frame`). render.json's ``frame`` and
    ``frame_source`` say which was used. Kinds without a frame (layouts) take none.

    Raises RenderError for a kind with no renderer (naming those that have one), an ``out`` that is a file, an
    ``out`` holding a different render (without ``overwrite``), a frame for a kind that has none, a pose with a
    joint outside the frame (naming it), and bad sizes, seeds or formats; StoreError (labeldist.store) for a
    store that cannot be read.
    """
    from labeldist.store import StoreReader

    if fmt not in FORMATS:
        raise RenderError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    if not 8 <= size <= 4096:
        raise RenderError(f"--size must be in 8..4096 pixels, got {size}")
    if seed < 0:
        raise RenderError(f"--seed must be >= 0, got {seed}")
    if items is not None and items < 0:
        raise RenderError(f"--items must be >= 0, got {items}")
    reader = StoreReader(os.fspath(store))
    kind = reader.manifest.get("kind")
    if trainer_kind(kind).renderer is None:
        raise RenderError(
            f"{reader.url}: kind {kind!r} has no renderer; kinds that have one: {', '.join(kinds_with('renderer'))}"
        )
    count = reader.n_items if items is None else min(items, reader.n_items)
    ids = [str(i) for i in reader.ids[:count]]
    labels = stored_labels(reader)
    module = _renderer(kind)
    if hasattr(module, "store_frame"):
        frame, frame_source = module.store_frame(reader.manifest, labels, frame)
        frame = [float(v) for v in frame]
    elif frame is not None:
        raise RenderError(f"kind {kind!r} is drawn in its label's own frame and takes no frame; got {frame!r}")
    else:
        frame_source = "the label's own (a layout's map is the picture)"
    names = safe_names(ids, fmt)
    meta = {
        "version": RENDER_VERSION,
        "store": reader.url,
        "dataset": reader.manifest.get("dataset"),
        "kind": kind,
        "labels_sha256": reader.manifest.get("labels_sha256"),
        "n_items": reader.n_items,
        "seed": int(seed),
        "size": int(size),
        "format": fmt,
        "count": count,
        "frame": frame,
        "frame_source": frame_source,
        "index": INDEX,
        "complete": False,
    }
    out = Path(out)
    _prepare_out(out, meta, overwrite, names)
    _write_meta(out, meta)
    workers = max(1, min(workers or os.cpu_count() or 1, -(-count // CHUNK) or 1))
    tasks = _tasks(kind, seed, size, fmt, out, names, labels, count, frame)
    from labeldist.core.progress import progress_bar

    # tqdm's bar on a terminal, plain lines every few seconds off one (a redirected log)
    with progress_bar(count, f"render {kind}", unit="img", units="images", enabled=progress) as bar:
        _run(tasks, workers, bar.update)
    _write_index(out, ids, names)
    meta["complete"] = True
    _write_meta(out, meta)
    return meta


def read_frame(out: str | os.PathLike[str]) -> tuple[float, float, float] | None:
    """The frame ``(cx, cy, half)`` of the render in folder ``out`` (its render.json), None for a kind drawn
    without one: what its test store's render must be given (``render_store(..., frame=read_frame(train))``).
    RenderError when ``out`` holds no render."""
    path = Path(out) / META
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise RenderError(f"{path}: no render there ({type(e).__name__})") from None
    if not isinstance(meta, dict) or meta.get("version") != RENDER_VERSION:
        found = meta.get("version") if isinstance(meta, dict) else None
        raise RenderError(f"{path}: a render of version {found!r}, not {RENDER_VERSION}: it has no frame to reuse")
    frame = meta.get("frame")
    return None if frame is None else tuple(float(v) for v in frame)
