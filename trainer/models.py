"""Embedding models: an MLP head over input features, and (optional, needs torchvision) a ResNet backbone with
an embedding head, as in Kim et al. (ResNet-34 for poses, ResNet-101 for captions, ImageNet-initialised).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

BACKBONES = ("resnet34", "resnet101")


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
        self.config: dict[str, Any] = {"kind": "mlp", "in_dim": in_dim, "out_dim": out_dim,
                                       "hidden": list(hidden), "dropout": dropout}  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        return self.net(x.reshape(-1, x.shape[-1])).reshape(*lead, -1)


def _local_imagenet_weights(arch: str) -> Path | None:
    """The torchvision ImageNet checkpoint of ``arch`` if it is already in the torch hub cache (never
    downloaded: this may run where nothing outside can be reached)."""
    hub = Path(os.environ.get("TORCH_HOME", Path(torch.hub.get_dir()).parent)) / "hub" / "checkpoints"
    found = sorted(hub.glob(f"{arch}-*.pth")) if hub.is_dir() else []
    return found[0] if found else None


class ResNetEmbedding(nn.Module):
    """A torchvision ResNet (``resnet34`` or ``resnet101``) whose classifier is replaced by a linear embedding
    head; images ``(..., 3, H, W)`` -> ``(..., out_dim)``.

    ImageNet weights are loaded only when the checkpoint is already in the local torch hub cache
    (``pretrained="auto"``); ``pretrained=True`` fails when it is not, ``False`` starts from random weights.
    torchvision is imported here, lazily, with a clear error when it is missing.
    """

    def __init__(self, arch: str = "resnet34", out_dim: int = 128, pretrained: bool | str = "auto") -> None:
        super().__init__()
        if arch not in BACKBONES:
            raise ValueError(f"unknown backbone {arch!r}; known: {', '.join(BACKBONES)}")
        try:
            import torchvision
        except ImportError as e:
            raise ImportError(
                f"the {arch} backbone needs torchvision, which is not installed: `pip install torchvision` "
                "(or train the MLP head on a feature array)"
            ) from e
        self.backbone = getattr(torchvision.models, arch)(weights=None)
        weights = _local_imagenet_weights(arch) if pretrained else None
        if pretrained is True and weights is None:
            raise FileNotFoundError(f"no ImageNet checkpoint for {arch} in the torch hub cache ({torch.hub.get_dir()})")
        if weights is not None:
            self.backbone.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
        self.backbone.fc = nn.Linear(self.backbone.fc.in_features, out_dim)
        self.config = {"kind": arch, "out_dim": out_dim, "imagenet": weights is not None}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-3]
        return self.backbone(x.reshape(-1, *x.shape[-3:])).reshape(*lead, -1)


def build_model(config: dict[str, Any]) -> nn.Module:
    """A model from its ``config`` (as saved in a checkpoint)."""
    kind = config["kind"]
    if kind == "mlp":
        return EmbeddingMLP(config["in_dim"], config["out_dim"], config["hidden"], config.get("dropout", 0.0))
    if kind in BACKBONES:
        return ResNetEmbedding(kind, config["out_dim"], pretrained=False)
    raise ValueError(f"unknown model kind {kind!r}; known: mlp, {', '.join(BACKBONES)}")
