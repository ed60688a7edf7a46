"""Image decoding: TorchCodec, the successor of torchvision.io's decoders, or torchvision.io where it does not load.

torchvision 0.29 deprecates its image decoders in favour of TorchCodec. On the pictures the trainer reads
(benchmarks/bench_decode.py; BENCHMARKS.md, "Image decoding"), TorchCodec 0.17 decodes the same pixels as
torchvision.io (largest difference 0, JPEG and PNG at 64-224 px) at the same speed (0.89-1.08 of torchvision.io's
images/s, within the shared machine's noise), and its ``decode_jpeg`` takes a list and, on CUDA, decodes it in one
nvJPEG call, as torchvision's did. simplejpeg was 11-15 % faster on JPEG but decodes neither PNG nor on a GPU;
Pillow, OpenCV and PyTurboJPEG were no faster. So TorchCodec it is.

A TorchCodec release loads only beside the torch release it was built for, which pip cannot check (the wheel
declares no dependency on torch; the Makefile installs a matching pair). Where it does not load, images are decoded
by torchvision.io as before (the same pixels), and a warning says so once, naming the fix; torchvision's own
deprecation warning is then left to speak too.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from types import ModuleType

import torch

#: the torch - TorchCodec pairs: https://github.com/meta-pytorch/torchcodec#installing-torchcodec
COMPATIBILITY = "https://github.com/meta-pytorch/torchcodec#installing-torchcodec"


def _load_torchcodec() -> ModuleType:
    from torchcodec import decoders

    return decoders


@functools.cache
def torchcodec_decoders() -> ModuleType | None:
    """``torchcodec.decoders``, or None (after one warning) where TorchCodec is not installed or does not load
    beside this torch."""
    try:
        return _load_torchcodec()
    except (ImportError, OSError, RuntimeError) as e:  # not installed; built for another torch (missing symbols)
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        warnings.warn(
            f"TorchCodec does not load beside torch {torch.__version__} ({reason}): images are decoded by "
            f"torchvision.io, which torchvision deprecates. Install the TorchCodec release built for this torch "
            f"({COMPATIBILITY}).",
            RuntimeWarning,
            stacklevel=2,
        )
        return None


def backend() -> str:
    """Which library decodes: ``"torchcodec"`` or ``"torchvision"``."""
    return "torchvision" if torchcodec_decoders() is None else "torchcodec"


def decode_image(data: torch.Tensor) -> torch.Tensor:
    """A file's bytes (a uint8 1-D tensor) as ``(3, H, W)`` uint8 RGB on the CPU (grey and RGBA converted), any
    format TorchCodec or torchvision.io reads (JPEG, PNG, ...). Raises RuntimeError or ValueError for data that
    does not decode."""
    codec = torchcodec_decoders()
    if codec is not None:
        return codec.decode_image(data, mode="RGB")
    from torchvision.io import ImageReadMode
    from torchvision.io import decode_image as torchvision_decode

    return torchvision_decode(data, mode=ImageReadMode.RGB)


def decode_jpegs(data: Sequence[torch.Tensor], device: torch.device | str = "cpu") -> list[torch.Tensor]:
    """JPEG files' bytes (uint8 1-D tensors on the CPU) as ``(3, H, W)`` uint8 RGB images on ``device``: on CUDA
    one batched nvJPEG call, on the CPU libjpeg-turbo. Raises RuntimeError or ValueError when one does not
    decode."""
    codec = torchcodec_decoders()
    if codec is not None:
        return list(codec.decode_jpeg(list(data), mode="RGB", device=device))
    from torchvision.io import ImageReadMode, decode_jpeg

    return list(decode_jpeg(list(data), mode=ImageReadMode.RGB, device=device))
