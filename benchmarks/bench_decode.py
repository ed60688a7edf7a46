"""Image decoding that will last: torchvision.io's decoders (deprecated since torchvision 0.29) against what can
replace them, on the JPEGs and PNGs that ``trainer render`` makes.

    nice -n 10 .venv/bin/python benchmarks/bench_decode.py --work /tmp/bench-decode \\
        --store /tmp/img64/stores/mpii-train-pose

The trainer decodes in two places (labeldist.trainer.inputs.images): ``decode(path)``, one file at a time on the CPU
(``torchvision.io.decode_image(read_file(path), mode=RGB)``: the decoded-image cache's threads and the DataLoader
workers), and ``decode_batch``, one ``torchvision.io.decode_jpeg(list, device=device)`` call (nvJPEG on CUDA,
libjpeg-turbo on the CPU). For each render (MPII training poses, the first ``--items`` of the store, at each of
``--sizes`` px, as JPEG (quality 95, 4:4:4, the render's setting) and as PNG, the render's default), measures
images/s decoded to a uint8 ``(3, H, W)`` RGB torch tensor laid out as torchvision returns it (a CHW view of an
HWC buffer, strides ``(1, 3W, 3)``; TorchCodec's are the same, and the numpy decoders' HWC arrays are permuted
without a copy), one image per call in one thread, by:

- the baseline: ``torchvision.io.decode_image`` on the file's bytes already in memory (a uint8 tensor), today's path;
- ``torchvision.io.decode_jpeg`` / ``decode_png``, and ``decode_jpeg(list, device="cpu")``, ``decode_batch``'s call
  (per image of the list);
- TorchCodec's ``torchcodec.decoders.decode_image`` / ``decode_jpeg`` / ``decode_png`` (its ``decode_jpeg`` takes
  a list too, on the CPU one image after another, on CUDA one nvJPEG call);
- Pillow (``Image.open(BytesIO)``, already a dependency), simplejpeg, OpenCV (``cv2.imdecode`` to RGB) and
  PyTurboJPEG (over the system's libturbojpeg), where installed: an alternative that does not import is
  reported as such, with its error;
- from the file: the trainer's own ``decode(path)`` (``read_file`` included) and TorchCodec's ``decode_image(path)``.

Every method decodes each image once first (the warm-up) and its pixels are compared with the baseline's: the
largest absolute difference and the share of values that differ. Then ``--repeats`` repeats, each one pass of
every method over the same images, cut into ``--chunks`` slices: every method decodes a slice before the next
slice starts, in an order rotated from one slice to the next, so that a shared machine's load weighs on all
alike. Prints each method's images/s (median of the repeats) beside the baseline from the same run as a ratio
(the median of the repeats' ratios, each against the baseline's pass of the same repeat; above 1: faster than
today) and the lowest and highest of those ratios, and the CPU time over the wall time of its timed passes: about
1 (or less, on a loaded machine) when a method decodes in the calling thread alone, above 1 when it uses threads
of its own. torch and OpenCV are held to one thread. About 70 s with the defaults on 2 busy cores; run it under
``nice`` on a shared machine, and read the ratios with their range.

What is missing under ``--work`` is built first: the split of the shipped MPII poses and the pose store of its
training part (as tools/reproduce_images.sh does), unless ``--store`` names one, and each render.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STORE = "mpii-train-pose"
FORMATS = ("jpg", "png")

# today's decoders warn on every call (the message is the deprecation this script is about)
warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torchvision\.io")


# --------------------------------------------------------------------------------------------------------------
# Inputs


def build_store(work: Path) -> Path:
    """The pose store of the MPII training split under ``work``, unless it is there."""
    python = sys.executable
    store = work / "stores" / STORE
    if not (work / "mpii" / "split.json").exists():
        command = [python, "-m", "labeldist.trainer.cli", "split", "data/mpii/mpii_valid_2958.csv"]
        subprocess.run([*command, "--out", str(work / "mpii"), "--seed", "0"], cwd=REPO, check=True)
    if not (store / "zarr.json").exists():
        command = [python, "-m", "labeldist.cli", "precompute", "pose", str(work / "mpii" / "train.csv")]
        command += ["--normalization", "center_scale", "--k", "100", "--dataset", "mpii-train", "--out", str(store)]
        subprocess.run([*command, "--no-progress"], cwd=REPO, check=True)
    return store


def render(store: Path, out: Path, size: int, fmt: str, items: int) -> list[Path]:
    """The first ``items`` images of ``trainer render`` of ``store`` at ``size`` px in ``fmt`` (rendered unless
    ``out`` holds them), in the store's order."""
    if not (out / "index.csv").exists() or len(read_index(out)) < items:
        command = [sys.executable, "-m", "labeldist.trainer.cli", "render", str(store), "--out", str(out)]
        command += ["--size", str(size), "--format", fmt, "--items", str(items), "--overwrite", "--no-progress"]
        subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return read_index(out)[:items]


def read_index(folder: Path) -> list[Path]:
    with open(folder / "index.csv", newline="", encoding="utf-8") as f:
        return [folder / row["path"] for row in csv.DictReader(f)]


@dataclass
class Inputs:
    """One render's files, read into memory once in each form a decoder takes."""

    paths: list[Path]
    raw: list[bytes]
    tensors: list[torch.Tensor]
    arrays: list[np.ndarray]

    @classmethod
    def read(cls, paths: list[Path]) -> Inputs:
        raw = [p.read_bytes() for p in paths]
        tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in raw]
        return cls(paths, raw, tensors, [np.frombuffer(b, dtype=np.uint8) for b in raw])

    def part(self, i: int, parts: int) -> Inputs:
        """The ``i``-th of ``parts`` consecutive slices."""
        n = len(self.paths)
        s = slice(i * n // parts, (i + 1) * n // parts)
        return Inputs(self.paths[s], self.raw[s], self.tensors[s], self.arrays[s])

    def kb(self) -> float:
        return statistics.mean(len(b) for b in self.raw) / 1024


# --------------------------------------------------------------------------------------------------------------
# Decoders: each returns ``run(inputs) -> list of uint8 (3, H, W) tensors``


def chw(hwc: np.ndarray) -> torch.Tensor:
    """A numpy decoder's HWC array as the tensor torchvision returns: a CHW view of the HWC buffer."""
    return torch.from_numpy(hwc).permute(2, 0, 1)


@dataclass
class Method:
    name: str
    formats: tuple[str, ...]
    run: Callable[[Inputs], list[torch.Tensor]]
    baseline: bool = False


def torchvision_methods() -> list[Method]:
    from torchvision.io import ImageReadMode, decode_image, decode_jpeg, decode_png

    from labeldist.trainer.inputs.images import decode

    rgb = ImageReadMode.RGB
    return [
        Method(
            "torchvision decode_image",
            FORMATS,
            lambda x: [decode_image(t, mode=rgb) for t in x.tensors],
            baseline=True,
        ),
        Method("torchvision decode_jpeg", ("jpg",), lambda x: [decode_jpeg(t, mode=rgb) for t in x.tensors]),
        Method("torchvision decode_jpeg(list)", ("jpg",), lambda x: decode_jpeg(x.tensors, mode=rgb, device="cpu")),
        Method("torchvision decode_png", ("png",), lambda x: [decode_png(t, mode=rgb) for t in x.tensors]),
        Method("trainer decode(path)", FORMATS, lambda x: [decode(p) for p in x.paths]),
    ]


def torchcodec_methods() -> list[Method]:
    from torchcodec.decoders import decode_image, decode_jpeg, decode_png

    return [
        Method("torchcodec decode_image", FORMATS, lambda x: [decode_image(t, mode="RGB") for t in x.tensors]),
        Method("torchcodec decode_jpeg", ("jpg",), lambda x: [decode_jpeg(t, mode="RGB") for t in x.tensors]),
        Method("torchcodec decode_jpeg(list)", ("jpg",), lambda x: decode_jpeg(x.tensors, mode="RGB", device="cpu")),
        Method("torchcodec decode_png", ("png",), lambda x: [decode_png(t, mode="RGB") for t in x.tensors]),
        Method("torchcodec decode_image(path)", FORMATS, lambda x: [decode_image(p, mode="RGB") for p in x.paths]),
    ]


def pillow_methods() -> list[Method]:
    from PIL import Image

    def one(b: bytes) -> torch.Tensor:
        with Image.open(io.BytesIO(b)) as image:
            if image.mode != "RGB":
                image = image.convert("RGB")
            return chw(np.array(image))  # np.asarray's array is read-only: a tensor over it must not be written

    return [Method("Pillow Image.open", FORMATS, lambda x: [one(b) for b in x.raw])]


def simplejpeg_methods() -> list[Method]:
    import simplejpeg

    return [
        Method(
            "simplejpeg decode_jpeg",
            ("jpg",),
            lambda x: [chw(simplejpeg.decode_jpeg(b, colorspace="RGB")) for b in x.raw],
        )
    ]


def opencv_methods() -> list[Method]:
    import cv2

    cv2.setNumThreads(1)
    flag = cv2.IMREAD_COLOR_RGB
    return [Method("OpenCV imdecode", FORMATS, lambda x: [chw(cv2.imdecode(a, flag)) for a in x.arrays])]


def turbojpeg_methods() -> list[Method]:
    from turbojpeg import TJPF_RGB, TurboJPEG

    jpeg = TurboJPEG()  # the system's libturbojpeg; RuntimeError when it is missing or too old for this version
    return [
        Method("PyTurboJPEG decode", ("jpg",), lambda x: [chw(jpeg.decode(b, pixel_format=TJPF_RGB)) for b in x.raw])
    ]


LIBRARIES: dict[str, tuple[str, Callable[[], list[Method]]]] = {
    "torchvision": ("torchvision", torchvision_methods),
    "torchcodec": ("torchcodec", torchcodec_methods),
    "Pillow": ("PIL", pillow_methods),
    "simplejpeg": ("simplejpeg", simplejpeg_methods),
    "opencv-python-headless": ("cv2", opencv_methods),
    "PyTurboJPEG": ("turbojpeg", turbojpeg_methods),
}


def available() -> list[Method]:
    """Every method whose library imports and starts; the others reported, with their error."""
    from importlib import metadata

    methods = []
    print("libraries:")
    for dist, (module, make) in LIBRARIES.items():
        try:
            found = make()
        except Exception as e:  # not installed, or its native library missing: say so and go on
            text = (str(e).strip().splitlines() or [""])[0]
            print(f"  {dist:>24}: not measured ({type(e).__name__}: {text})")
            continue
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            version = getattr(sys.modules.get(module), "__version__", "?")
        print(f"  {dist:>24}: {version}")
        methods += found
    print(f"  {'torch':>24}: {torch.__version__} ({torch.get_num_threads()} thread)")
    return methods


# --------------------------------------------------------------------------------------------------------------
# Measure


def compare(images: list[torch.Tensor], reference: list[torch.Tensor]) -> tuple[int, float] | str:
    """(largest absolute difference, share of values that differ) against the baseline, or what is wrong."""
    worst, differ, total = 0, 0, 0
    for got, want in zip(images, reference, strict=True):
        if got.dtype != torch.uint8 or got.shape != want.shape or got.stride() != want.stride():
            return f"{got.dtype} {tuple(got.shape)} strides {got.stride()}"
        diff = (got.to(torch.int16) - want.to(torch.int16)).abs()
        worst = max(worst, int(diff.max()))
        differ += int((diff > 0).sum())
        total += diff.numel()
    return worst, differ / total


@dataclass
class Timing:
    rate: float  # images/s, median of the repeats
    ratio: float  # rate / the baseline's rate in the same repeat, median of the repeats
    low: float  # the lowest and highest of those ratios
    high: float
    cpu: float  # CPU time / wall time of all its timed passes


def measure(inputs: Inputs, methods: list[Method], base: Method, repeats: int, chunks: int) -> dict[str, Timing]:
    """Each method's :class:`Timing`. A repeat is one pass over the images, in ``chunks`` slices; every method
    decodes a slice before the next slice starts, in an order rotated from one slice to the next."""
    cpus = {m.name: 0.0 for m in methods}
    walls: dict[str, list[float]] = {m.name: [] for m in methods}
    m = len(methods)
    for r in range(repeats):
        spent = dict.fromkeys(cpus, 0.0)
        for c in range(chunks):
            part = inputs.part(c, chunks)
            k = (r * chunks + c) % m
            for method in methods[k:] + methods[:k]:
                c0, t0 = time.process_time(), time.perf_counter()
                method.run(part)
                spent[method.name] += time.perf_counter() - t0
                cpus[method.name] += time.process_time() - c0
        for name, wall in spent.items():
            walls[name].append(wall)
    n, out = len(inputs.paths), {}
    for name, w in walls.items():
        ratios = [b / t for b, t in zip(walls[base.name], w, strict=True)]
        out[name] = Timing(
            n / statistics.median(w), statistics.median(ratios), min(ratios), max(ratios), cpus[name] / sum(w)
        )
    return out


def bench(label: str, inputs: Inputs, methods: list[Method], repeats: int, chunks: int) -> None:
    base = next(m for m in methods if m.baseline)
    reference = base.run(inputs)
    checks = {m.name: compare(reference if m is base else m.run(inputs), reference) for m in methods}
    times = measure(inputs, methods, base, repeats, chunks)
    h, w = reference[0].shape[1:]
    print(f"\n{label}: {len(inputs.paths)} images {w} x {h}, {inputs.kb():.1f} KiB each, median of {repeats}")
    print(f"{'method':>30} {'img/s':>8} {'ratio':>6} {'(range)':>11} {'cpu/wall':>8} {'max|diff|':>9} {'differing':>9}")
    for m in methods:
        t, check = times[m.name], checks[m.name]
        pixels = f"{check[0]:>9} {check[1]:>9.2%}" if isinstance(check, tuple) else f"{'wrong: ' + check:>19}"
        name = m.name + (" (base)" if m.baseline else "")
        spread = f"({t.low:.2f}-{t.high:.2f})"
        print(f"{name:>30} {t.rate:8.0f} {t.ratio:6.2f} {spread:>11} {t.cpu:8.2f} {pixels}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/bench-decode"), help="renders (and a store) go here")
    p.add_argument("--store", type=Path, help=f"a pose store to render (default: WORK/stores/{STORE}, built)")
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 224], help="rendered image sides, px")
    p.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    p.add_argument("--items", type=int, default=500, help="images per render, each decoded once per repeat")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--chunks", type=int, default=5, help="slices of a repeat, the methods interleaved in each")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    store = args.store or build_store(args.work)
    methods = available()
    if not any(m.baseline for m in methods):
        raise SystemExit("torchvision.io does not import: no baseline")
    t0 = time.perf_counter()
    for fmt in args.formats:
        for size in args.sizes:
            inputs = Inputs.read(render(store, args.work / f"mpii-{size}-{fmt}", size, fmt, args.items))
            ms = [m for m in methods if fmt in m.formats]
            bench(f"{fmt.upper()} {size} px", inputs, ms, args.repeats, args.chunks)
    print(f"\n{time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
