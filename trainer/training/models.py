"""Embedding models: an MLP head over input features, and a torchvision ResNet (18/34/50/101) with an embedding
head, as in Kim et al. (ResNet-34 for poses, ResNet-101 for captions, ImageNet-initialised from a local file).
:func:`build_model` makes one from its config, :func:`load_checkpoint` from a trainer checkpoint (read, as the
``--weights`` files are, by :mod:`labeldist.trainer.training.checkpoints`, which imports no model).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from labeldist.errors import LabeldistError, UsageError
from labeldist.trainer.training.checkpoints import CheckpointError, load_weights, read_checkpoint, read_torch_file

BACKBONES = ("resnet18", "resnet34", "resnet50", "resnet101")
#: ImageNet mean and std, the statistics the torchvision ResNet weights expect
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class EmbeddingMLP(nn.Module):
    """Features ``(..., in_dim)`` -> embeddings ``(..., out_dim)``: Linear-ReLU blocks, then a linear head.

    ``hidden=()`` gives a linear embedding. Batch dimensions are flattened and restored, so a step's
    ``(B, n, in_dim)`` inputs embed in one call.

    >>> EmbeddingMLP(10, 4, hidden=(8,))(torch.zeros(2, 3, 10)).shape
    torch.Size([2, 3, 4])
    """

    def __init__(self, in_dim: int, out_dim: int = 128, hidden: Sequence[int] = (512,), dropout: float = 0.0) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_dim
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU(inplace=True)]
            if dropout:
                layers.append(nn.Dropout(dropout))
            width = h
        layers.append(nn.Linear(width, out_dim))
        self.net = nn.Sequential(*layers)
        self.config: dict[str, Any] = {
            "kind": "mlp",
            "in_dim": in_dim,
            "out_dim": out_dim,
            "hidden": list(hidden),
            "dropout": dropout,
        }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        return self.net(x.reshape(-1, x.shape[-1])).reshape(*lead, -1)


class WeightsError(LabeldistError, ValueError):
    """``--weights`` that cannot be read or do not fit the backbone (one line naming what differs)."""


class ImageNormalize(nn.Module):
    """uint8 images ``(..., 3, H, W)`` -> float, scaled to [0, 1] and normalised by the ImageNet mean and std
    (what the torchvision ResNets were trained with). On the model's device, so the data path moves uint8."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(3, 1, 1) * 255.0, persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(3, 1, 1) * 255.0, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() - self.mean) / self.std


def _weights_state(path: str | Path) -> dict[str, torch.Tensor]:
    """The state dict of a ``--weights`` file: a torchvision ResNet state dict, or a trainer checkpoint (read as
    every checkpoint is, tensors and plain data only: see :mod:`labeldist.trainer.training.checkpoints`)."""
    try:
        state = read_torch_file(path, f"--weights {path}")
    except CheckpointError as e:
        raise WeightsError(str(e)) from None
    if isinstance(state, dict) and isinstance(state.get("model"), dict):  # a trainer checkpoint: its backbone
        state = {k.removeprefix("backbone."): v for k, v in state["model"].items() if k.startswith("backbone.")}
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise WeightsError(f"--weights {path}: not a state dict of tensors")
    return state


def load_backbone_weights(backbone: nn.Module, path: str | Path, arch: str) -> None:
    """Load a local state dict into ``backbone`` (its classifier ``fc`` aside, which the embedding head replaces).

    Every weight but ``fc`` must be there with its shape: a file of another architecture is refused, naming how
    many weights are missing, unexpected or of another shape, and the first of each."""
    state = {k: v for k, v in _weights_state(path).items() if not k.startswith("fc.")}
    own = {k: v for k, v in backbone.state_dict().items() if not k.startswith("fc.")}
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [
        f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}"
        for k, v in own.items()
        if k in state and state[k].shape != v.shape
    ]
    if missing or unexpected or shapes:
        parts = [
            f"{len(x)} {what} (first: {x[0]})"
            for x, what in ((missing, "missing"), (unexpected, "unexpected"), (shapes, "of another shape"))
            if x
        ]
        raise WeightsError(f"--weights {path} do not fit {arch}: " + "; ".join(parts))
    backbone.load_state_dict(state, strict=False)


class ResNetEmbedding(nn.Module):
    """A torchvision ResNet whose classifier is replaced by a linear embedding head (Kim et al. 2019: ResNet-34
    for poses, ResNet-101 for captions, ImageNet-initialised); uint8 or float images ``(..., 3, H, W)`` ->
    ``(..., out_dim)``. uint8 images are scaled and normalised inside (:class:`ImageNormalize`).

    ``weights``: a local state dict to start from (torchvision's ImageNet checkpoint of the same architecture,
    or a trainer checkpoint); nothing is ever downloaded. None: random initialisation. ``channels_last``: NHWC
    memory format, faster for convolutions under mixed precision on CUDA.
    """

    def __init__(
        self,
        arch: str = "resnet34",
        out_dim: int = 128,
        weights: str | Path | None = None,
        channels_last: bool = False,
    ) -> None:
        super().__init__()
        if arch not in BACKBONES:
            raise UsageError(f"unknown backbone {arch!r}; known: {', '.join(BACKBONES)}")
        try:
            import torchvision
        except ImportError as e:
            raise ImportError(
                f"the {arch} backbone needs torchvision, which is not installed: `pip install torchvision` "
                "(or train the MLP head on a feature array)"
            ) from e
        self.normalize = ImageNormalize()
        self.backbone = getattr(torchvision.models, arch)(weights=None)
        if weights is not None:
            load_backbone_weights(self.backbone, weights, arch)
        self.backbone.fc = nn.Linear(self.backbone.fc.in_features, out_dim)
        self.channels_last = channels_last
        if channels_last:
            self.to(memory_format=torch.channels_last)
        self.config = {"kind": arch, "out_dim": out_dim, "weights": None if weights is None else str(weights)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-3]
        x = self.normalize(x.reshape(-1, *x.shape[-3:]))
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return self.backbone(x).reshape(*lead, -1)


def build_model(config: dict[str, Any]) -> nn.Module:
    """A model from its ``config`` (as saved in a checkpoint)."""
    kind = config["kind"]
    if kind == "mlp":
        return EmbeddingMLP(config["in_dim"], config["out_dim"], config["hidden"], config.get("dropout", 0.0))
    if kind in BACKBONES:
        return ResNetEmbedding(kind, config["out_dim"])
    raise UsageError(f"unknown model kind {kind!r}; known: mlp, {', '.join(BACKBONES)}")


def load_checkpoint(path: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """The model of a checkpoint (on CPU, eval mode) and the whole checkpoint dict: the checkpoint read and its
    weights checked by :mod:`labeldist.trainer.training.checkpoints`, the model built here (:func:`build_model`)."""
    state = read_checkpoint(path)
    config = state["model_config"]
    try:
        model = build_model(config)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path}: its model config {config} cannot be built ({e})") from None
    load_weights(model, state["model"], f"checkpoint {path}", config)
    return model.eval(), state
