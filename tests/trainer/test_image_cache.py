"""Decode once, augment on the device: the shared in-memory cache of decoded images, the choice of
cache by size, the decoders that only decode and resize, and the files' bytes packed through the loader and
decoded in batch (on the CPU here: the fallback of the nvJPEG path)."""

from __future__ import annotations

import multiprocessing
import pickle
from multiprocessing.reduction import ForkingPickler  # torch.multiprocessing registers its tensor reductions
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing  # noqa: F401 (the shared-memory reductions of ForkingPickler)
from PIL import Image

from labeldist.client import MinibatchStream
from labeldist.client.local import LocalSource
from labeldist.trainer.inputs.augment import eval_transform
from labeldist.trainer.inputs.images import (
    IMAGE_INPUTS,
    CachedImages,
    EncodedImages,
    ImageInputError,
    ImageInputs,
    PackedImages,
    cache_bytes,
    decode,
    decode_batch,
    default_cache_limit,
    device_images,
    image_paths,
    open_images,
)
from tests.trainer.conftest import N_ITEMS, STORE

SIZE = 24


def _write(path: Path, rng: np.random.Generator, shape: tuple[int, int], mode: str) -> None:
    """A smooth random picture (JPEG-friendly) of ``shape`` (h, w) in ``mode``."""
    h, w = shape
    base = rng.uniform(0, 255, (max(h // 6, 2), max(w // 6, 2), 3))
    image = Image.fromarray(base.astype(np.uint8)).resize((w, h), Image.BILINEAR)
    noise = rng.integers(0, 20, (h, w, 3), dtype=np.uint8)
    image = Image.fromarray(np.asarray(image) // 2 + noise).convert(mode)
    image.save(path, quality=90) if path.suffix == ".jpg" else image.save(path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """12 images: JPEG and PNG, RGB, grey and RGBA, square and not, larger than SIZE; named by id."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    ids = [f"item{i:02d}" for i in range(12)]
    lines = ["id,path"]
    for i, name in enumerate(ids):
        suffix = ".jpg" if i % 3 else ".png"
        mode = ("RGB", "L", "RGBA")[i % 3] if suffix == ".png" else ("RGB", "L")[i % 2]
        shape = (40, 40) if i % 4 else (36, 52)
        _write(root / f"{name}{suffix}", rng, shape, mode)
        lines.append(f"{name},{name}{suffix}")
    (root / "index.csv").write_text("\n".join(lines) + "\n")
    return root, ids


def _expected(paths: list[Path], transform: str = "resize") -> torch.Tensor:
    resize = eval_transform(transform, SIZE)
    return torch.stack([resize(decode(p)) for p in paths])


# --------------------------------------------------------------------------------------------------------------
# The cache


@pytest.mark.parametrize("transform", ["resize", "center_crop"])
def test_the_cache_holds_the_pixels_of_decode_and_resize_for_every_item(folder, transform) -> None:
    root, ids = folder
    paths = image_paths(root, ids)
    cache = CachedImages.decode(paths, SIZE, transform=transform, workers=2)
    assert cache.n_items == len(ids) and cache.item_shape == (3, SIZE, SIZE) and cache.size == SIZE
    assert cache.needs_processes is False and cache.transform == transform
    assert cache.data.dtype == torch.uint8 and cache.data.is_shared()
    assert torch.equal(cache.data, _expected(paths, transform))
    # the same pixels as the decoders that decode each step
    indices = np.array([[3, 0, 11], [5, 5, 7]])
    got = cache(indices)
    assert got.shape == (2, 3, 3, SIZE, SIZE) and got.dtype == torch.uint8
    assert torch.equal(got, ImageInputs(paths, SIZE, transform)(indices))
    assert torch.equal(got, torch.stack([cache.data[i] for i in indices.reshape(-1)]).reshape(got.shape))


def test_auto_caches_under_the_limit_and_not_over_it(folder) -> None:
    root, ids = folder
    need = cache_bytes(len(ids), SIZE)
    assert need == len(ids) * 3 * SIZE * SIZE
    assert isinstance(open_images(root, ids, input_size=SIZE, cache="auto", cache_limit_bytes=need), CachedImages)
    over = open_images(root, ids, input_size=SIZE, cache="auto", cache_limit_bytes=need - 1)
    assert type(over) is ImageInputs and over.needs_processes
    assert isinstance(open_images(root, ids, input_size=SIZE, cache="on", cache_limit_bytes=1), CachedImages)
    assert type(open_images(root, ids, input_size=SIZE, cache="off")) is ImageInputs
    encoded = open_images(root, ids, input_size=SIZE, cache="auto", cache_limit_bytes=1, encoded=True)
    assert type(encoded) is EncodedImages
    assert isinstance(open_images(root, ids, input_size=SIZE, cache="auto"), CachedImages)  # the default limit
    assert 0 < default_cache_limit()
    with pytest.raises(ImageInputError, match="--image-cache must be one of auto, on, off"):
        open_images(root, ids, input_size=SIZE, cache="always")
    for inputs in (over, encoded):
        assert isinstance(inputs, IMAGE_INPUTS)


def test_the_cache_is_shared_with_forked_workers_and_pickles(folder) -> None:
    root, ids = folder
    cache = CachedImages.decode(image_paths(root, ids), SIZE)
    copy = pickle.loads(pickle.dumps(cache))  # a plain pickle copies the pixels
    assert torch.equal(copy.data, cache.data) and copy.n_items == cache.n_items and copy(np.array([2])).shape[0] == 1
    shared = pickle.loads(ForkingPickler.dumps(cache))  # torch.multiprocessing: a handle to the same memory
    assert shared.data.is_shared() and torch.equal(shared.data, cache.data)
    before = int(cache.data[4, 0, 0, 0])

    def child() -> None:  # a forked worker writes one pixel: the parent sees it, so nothing was copied
        cache.data[4, 0, 0, 0] = (before + 1) % 256

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(30)
    assert process.exitcode == 0
    assert int(cache.data[4, 0, 0, 0]) == (before + 1) % 256


def test_a_damaged_file_stops_the_cache_in_one_line_naming_it(folder, tmp_path) -> None:
    root, ids = folder
    paths = image_paths(root, ids)
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(paths[1].read_bytes()[:80])
    with pytest.raises(ImageInputError) as e:
        CachedImages.decode([*paths[:3], bad], SIZE, workers=2)
    assert str(e.value).startswith(f"image {bad}: cannot decode") and len(str(e.value).splitlines()) == 1


# --------------------------------------------------------------------------------------------------------------
# Decoding each step: only decode and resize


def test_image_inputs_only_decode_and_resize(folder) -> None:
    root, ids = folder
    paths = image_paths(root, ids)
    inputs = ImageInputs(paths, SIZE)
    assert inputs.transform == "resize" and inputs.needs_processes
    one, two = inputs(np.array([[1, 2]])), inputs(np.array([[1, 2]]))
    assert torch.equal(one, two)  # nothing random here any more
    assert torch.equal(one[0], _expected([paths[1], paths[2]]))
    assert ImageInputs(paths, SIZE, "center_crop").transform == "center_crop"
    assert open_images(root, ids, input_size=SIZE, transform="center_crop").transform == "center_crop"
    with pytest.raises(ImageInputError, match="unknown image transform 'crop'"):
        open_images(root, ids, input_size=SIZE, transform="crop")
    again = pickle.loads(pickle.dumps(inputs))
    assert torch.equal(again(np.array([4])), inputs(np.array([4])))


# --------------------------------------------------------------------------------------------------------------
# The files' bytes through the loader, decoded in batch


def test_decode_batch_on_the_cpu_is_decode_and_resize(folder) -> None:
    root, ids = folder
    paths = image_paths(root, ids)
    files = [torch.frombuffer(bytearray(p.read_bytes()), dtype=torch.uint8) for p in paths]
    got = decode_batch(files, SIZE, "cpu", names=paths)
    assert got.shape == (len(paths), 3, SIZE, SIZE) and got.dtype == torch.uint8
    assert torch.equal(got, _expected(paths))
    assert torch.equal(decode_batch(files, SIZE, transform="center_crop"), _expected(paths, "center_crop"))


def test_packed_files_round_trip_and_slice_like_a_step(folder) -> None:
    root, ids = folder
    paths = image_paths(root, ids)
    inputs = EncodedImages(paths, SIZE)
    indices = np.array([[0, 4, 7], [2, 2, 9], [11, 1, 3], [5, 6, 8]])
    packed = inputs(indices)
    assert isinstance(packed, PackedImages) and packed.shape == (4, 3) and len(packed) == 4
    assert packed.data.dtype == torch.uint8 and packed.offsets.dtype == torch.int64
    for k, i in enumerate(indices.reshape(-1)):
        assert bytes(packed.files()[k].tolist()) == paths[i].read_bytes()
    part = packed[1:3]  # what MinibatchStream does for each step of a request
    assert part.shape == (2, 3) and torch.equal(part.indices, torch.from_numpy(indices[1:3]))
    assert [bytes(f.tolist()) for f in part.files()] == [paths[i].read_bytes() for i in indices[1:3].reshape(-1)]
    assert packed[3].shape == (3,) and packed[-1].shape == (3,) and packed[5:].shape == (0, 3)
    moved = packed.to("cpu")
    assert moved.device == torch.device("cpu") and moved.data is packed.data  # the bytes stay in host memory
    images = inputs.decode(part)
    assert images.shape == (2, 3, 3, SIZE, SIZE) and torch.equal(images, _expected(paths)[indices[1:3]])
    assert torch.equal(device_images(part, inputs, "cpu"), images)
    cache = CachedImages.decode(paths, SIZE)
    assert torch.equal(device_images(cache(indices), cache, "cpu"), inputs.decode(packed))
    again = pickle.loads(ForkingPickler.dumps(packed))  # through a DataLoader worker's queue
    assert torch.equal(again.data, packed.data) and torch.equal(again.offsets, packed.offsets)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_cuda_packed_files_pin_and_decode_by_nvjpeg(folder) -> None:
    root, ids = folder
    paths = image_paths(root, ids)
    inputs = EncodedImages(paths, SIZE)
    packed = inputs(np.arange(12).reshape(3, 4)).pin_memory()
    assert packed.is_pinned()
    gpu = inputs.decode(packed.to("cuda"))
    assert gpu.device.type == "cuda" and gpu.shape == (3, 4, 3, SIZE, SIZE)
    cpu = inputs.decode(packed)
    # nvJPEG's IDCT and upsampling are not libjpeg-turbo's: close, not equal
    assert (gpu.cpu().int() - cpu.int()).abs().float().mean() < 3


def test_a_damaged_file_gives_one_line_naming_it(folder, tmp_path) -> None:
    root, ids = folder
    paths = image_paths(root, ids)
    for damage in (lambda b: b[:80], lambda b: b[:3] + bytes(len(b) - 3)):
        bad = tmp_path / "bad.jpg"
        bad.write_bytes(damage(paths[1].read_bytes()))
        inputs = EncodedImages([*paths[:3], bad], SIZE)
        with pytest.raises(ImageInputError) as e:
            inputs.decode(inputs(np.array([[0, 3, 2]])))
        assert str(e.value).startswith(f"image {bad}: cannot decode (") and len(str(e.value).splitlines()) == 1
    missing = EncodedImages([tmp_path / "gone.png"], SIZE)
    with pytest.raises(ImageInputError, match=f"image {tmp_path / 'gone.png'}: cannot read"):
        missing(np.array([0]))
    png = tmp_path / "bad.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    with pytest.raises(ImageInputError, match=f"image {png}: cannot decode"):
        decode_batch([torch.frombuffer(bytearray(png.read_bytes()), dtype=torch.uint8)], SIZE, names=[png])


def test_a_stream_of_real_minibatches_carries_packed_files_through_a_worker(pose_store, tmp_path) -> None:
    """MinibatchStream slices a request's PackedImages into steps, in a DataLoader worker process; decoded, they
    are the cached images of the step's items."""
    rng = np.random.default_rng(1)
    ids = LocalSource(pose_store).ids(STORE)
    assert len(ids) == N_ITEMS
    flat = tmp_path / "flat"
    flat.mkdir()
    names = [f"img{i:03d}.png" for i in range(N_ITEMS)]
    for name in names:
        Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(flat / name)
    (flat / "index.csv").write_text("id,path\n" + "".join(f"{i},{n}\n" for i, n in zip(ids, names, strict=True)))
    encoded = open_images(flat, ids, cache="off", encoded=True)
    cache = open_images(flat, ids, cache="on")
    stream = MinibatchStream(
        LocalSource(pose_store),
        STORE,
        encoded,
        size=10,
        neighbors=3,
        batches_per_step=2,
        anchors_per_request=4,
        seed=0,
        processes=1,
        prefetch=2,
    )
    for n, step in enumerate(stream):
        assert isinstance(step.inputs, PackedImages) and step.inputs.shape == (2, 10)
        assert torch.equal(step.inputs.indices, step.indices)
        images = device_images(step.to("cpu").inputs, encoded, "cpu")
        assert torch.equal(images, cache(step.indices.numpy()))
        if n == 3:
            break
