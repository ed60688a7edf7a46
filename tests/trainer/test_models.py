"""Models: the MLP head, rebuilding from a checkpoint's config, and the optional torchvision backbone."""

from __future__ import annotations

import sys

import pytest
import torch

from labeldist.trainer.training.models import EmbeddingMLP, ResNetEmbedding, build_model
from labeldist.trainer.training.runtime import pick_device


def test_mlp_embeds_any_batch_shape_and_rebuilds_from_its_config() -> None:
    torch.manual_seed(0)
    model = EmbeddingMLP(12, 16, hidden=(32, 8))
    x = torch.randn(2, 5, 12)
    y = model(x)
    assert y.shape == (2, 5, 16)
    torch.testing.assert_close(y[1, 3], model(x[1, 3][None])[0])
    again = build_model(model.config)
    again.load_state_dict(model.state_dict())
    torch.testing.assert_close(again(x), y)
    assert len([m for m in EmbeddingMLP(4, 2, hidden=()).modules() if isinstance(m, torch.nn.Linear)]) == 1


def test_resnet_without_torchvision_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(ImportError, match="pip install torchvision"):
        ResNetEmbedding("resnet34")
    with pytest.raises(ValueError, match="known: resnet18, resnet34, resnet50, resnet101"):
        ResNetEmbedding("vgg16")


def test_device_is_cpu_here_unless_cuda_is_present() -> None:
    assert pick_device().type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert pick_device("cpu").type == "cpu"
