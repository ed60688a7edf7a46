"""Image decoding: TorchCodec's pixels against Pillow's for the formats the trainer reads, its batched JPEG call, and
the torchvision.io fallback where TorchCodec does not load."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from labeldist.trainer.inputs import decoding
from labeldist.trainer.inputs.images import ImageInputError, decode


def encoded(array: np.ndarray, fmt: str, mode: str = "RGB") -> tuple[torch.Tensor, np.ndarray]:
    """An image's file bytes as a uint8 tensor, and its RGB pixels as Pillow decodes them (the oracle)."""
    buffer = io.BytesIO()
    image = Image.fromarray(array, mode=mode)
    image.save(buffer, format=fmt, **({"quality": 95, "subsampling": 0} if fmt == "JPEG" else {}))
    data = buffer.getvalue()
    with Image.open(io.BytesIO(data)) as back:
        pixels = np.asarray(back.convert("RGB"))
    return torch.frombuffer(bytearray(data), dtype=torch.uint8), pixels


def picture(seed: int, shape: tuple[int, ...] = (48, 64, 3)) -> np.ndarray:
    """A smooth picture with edges (JPEG decoders agree on it), as uint8."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[: shape[0], : shape[1]]
    channels = [np.sin(x / rng.uniform(3, 9) + c) * np.cos(y / rng.uniform(3, 9)) for c in range(3)]
    image = (np.stack(channels, -1) * 100 + 128).astype(np.uint8)
    image[10:20, 5:30] = rng.integers(0, 255, 3, dtype=np.uint8)  # a flat block with hard edges
    return image if len(shape) == 3 else image[..., 0]


@pytest.fixture(autouse=True)
def fresh_backend():
    decoding.torchcodec_decoders.cache_clear()
    yield
    decoding.torchcodec_decoders.cache_clear()


def test_torchcodec_is_what_decodes_here() -> None:
    # make setup installs the TorchCodec built for the pinned torch (Makefile: TORCHCODEC)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning, and no torchvision deprecation warning
        assert decoding.backend() == "torchcodec"
        data, _ = encoded(picture(0), "PNG")
        decoding.decode_image(data)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_pixels_are_pillows(fmt: str) -> None:
    data, expected = encoded(picture(1), fmt)
    got = decoding.decode_image(data)
    assert got.dtype == torch.uint8 and tuple(got.shape) == (3, 48, 64)
    # both libjpeg-turbo: the same pixels (4:4:4, as trainer render writes JPEGs)
    np.testing.assert_array_equal(got.permute(1, 2, 0).numpy(), expected)


@pytest.mark.parametrize(("mode", "shape"), [("L", (40, 30)), ("RGBA", (40, 30, 4))])
def test_grey_and_rgba_come_out_rgb(mode: str, shape: tuple[int, ...]) -> None:
    array = picture(2, (40, 30, 3))
    array = array[..., 0] if mode == "L" else np.concatenate([array, np.full((40, 30, 1), 200, np.uint8)], -1)
    data, expected = encoded(array, "PNG", mode)
    got = decoding.decode_image(data)
    assert tuple(got.shape) == (3, 40, 30)
    if mode == "L":
        np.testing.assert_array_equal(got.permute(1, 2, 0).numpy(), expected)


def test_a_list_of_jpegs_decodes_as_each_one_does() -> None:
    files = [encoded(picture(seed, (32 + 8 * seed, 40, 3)), "JPEG") for seed in range(4)]
    got = decoding.decode_jpegs([data for data, _ in files], device="cpu")
    assert len(got) == 4
    for image, (data, expected) in zip(got, files, strict=True):
        assert torch.equal(image, decoding.decode_image(data))
        np.testing.assert_array_equal(image.permute(1, 2, 0).numpy(), expected)


def test_damaged_data_is_an_error_naming_the_file(tmp_path) -> None:
    data, _ = encoded(picture(3), "JPEG")
    path = tmp_path / "cut.jpg"
    path.write_bytes(bytes(data[: len(data) // 3].tolist()))
    with pytest.raises(ImageInputError, match="cut.jpg: cannot decode"):
        decode(path)
    with pytest.raises((RuntimeError, ValueError)):
        decoding.decode_jpegs([data[: len(data) // 3]])


def test_where_torchcodec_does_not_load_torchvision_decodes_the_same_pixels_and_says_so(monkeypatch) -> None:
    # a stand-in for a TorchCodec built for another torch (the real failure needs a mismatched install): its loader
    # raises what such an import raises
    files = [encoded(picture(seed), fmt) for seed, fmt in ((4, "PNG"), (5, "JPEG"))]
    codec_pixels = [decoding.decode_image(data) for data, _ in files]
    decoding.torchcodec_decoders.cache_clear()

    def unloadable():
        raise OSError("libtorchcodec_core8.so: undefined symbol: _ZN3c1017RegisterOperators")

    monkeypatch.setattr(decoding, "_load_torchcodec", unloadable)
    with pytest.warns(RuntimeWarning, match=r"TorchCodec does not load beside torch .*undefined symbol") as said:
        assert decoding.backend() == "torchvision"
    assert "torchcodec#installing-torchcodec" in str(said[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torchvision's own, left to speak in a real run
        warnings.simplefilter("error", RuntimeWarning)  # the fallback's warning is said once, not per image
        for (data, _), before in zip(files, codec_pixels, strict=True):
            assert torch.equal(decoding.decode_image(data), before)
        jpeg = files[1][0]
        assert torch.equal(decoding.decode_jpegs([jpeg])[0], codec_pixels[1])
