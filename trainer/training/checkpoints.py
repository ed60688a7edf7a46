"""Trainer checkpoints and ``--weights`` files: written and read here only, as tensors and plain data.

``torch.load`` unpickles, and a pickle can name any function to call: a ``checkpoint.pt`` made by
``torch.save({"model": Evil()})`` runs whatever ``Evil.__reduce__`` says when loaded with
``weights_only=False``. So every file is read by :func:`read_torch_file` with ``weights_only=True`` (tensors,
numbers, strings, lists, tuples, dicts: nothing is called), and :func:`save_checkpoint` writes only such data
(numpy arrays and scalars become tensors and Python numbers; anything else is refused when saving, rather than
found unreadable when resuming). This module is the only place in the project that calls ``torch.load``
(``tests/trainer/test_checkpoints.py`` checks it). It knows no model: the model of a checkpoint is built by
:func:`labeldist.trainer.training.models.load_checkpoint`, and the models read ``--weights`` through this module.
"""

from __future__ import annotations

import os
import pickle
import re
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from labeldist.core.files import written_whole
from labeldist.errors import LabeldistError

#: what every trainer checkpoint holds (see :func:`labeldist.trainer.training.fit.fit`)
KEYS = ("model", "model_config", "step", "config", "loss")
#: values kept as they are; torch's weights_only unpickler allows each of them
PLAIN = (str, int, float, bool, type(None), torch.Tensor, torch.dtype, torch.device)


class CheckpointError(LabeldistError, ValueError):
    """A checkpoint or weights file that is refused: unreadable, not plain data, or not of the model asked for
    (one line naming the file and what to do)."""


def plain(value: Any, where: str = "checkpoint") -> Any:
    """``value`` as data that loads with ``weights_only=True``: numpy arrays become tensors, numpy scalars Python
    numbers, containers are rebuilt; anything else is a TypeError naming where it is (``where``: its key path)."""
    if isinstance(value, PLAIN):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError(f"{where}: a numpy array of Python objects is not plain data")
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        out: dict[Any, Any] = OrderedDict() if isinstance(value, OrderedDict) else {}
        for k, v in value.items():
            out[plain(k, f"{where} key")] = plain(v, f"{where}[{k!r}]")
        if isinstance(out, OrderedDict) and hasattr(value, "_metadata"):  # a state dict's module versions
            out._metadata = plain(value._metadata, f"{where}._metadata")  # type: ignore[attr-defined]
        return out
    if isinstance(value, (list, tuple)):
        items = [plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    raise TypeError(
        f"{where}: a {type(value).__module__}.{type(value).__qualname__} is not plain data (tensors, "
        "numbers, strings, lists, tuples, dicts): a checkpoint holds nothing that must be unpickled"
    )


def save_checkpoint(path: str | Path, state: Mapping[str, Any]) -> None:
    """Write ``state`` (made :func:`plain` first) aside, flush it to disk, then rename it over ``path``: a kill
    at any point leaves the previous checkpoint or this one whole, never half of one."""
    path = Path(path)
    data = plain(state)
    with written_whole(path) as tmp, open(tmp, "wb") as f:
        torch.save(data, f)
        f.flush()
        os.fsync(f.fileno())


def _refused_object(error: Exception) -> str | None:
    """What torch's weights_only unpickler refused to create (``posix.system``, as its message names it); None
    when it names nothing (the bytes are no pickle of objects, but junk)."""
    found = re.search(r"GLOBAL ([\w.]+)", str(error))  # "Unsupported global: GLOBAL x", "unsupported GLOBAL x ..."
    return found.group(1) if found else None


def _unpickling_detail(error: Exception) -> str:
    """The line of torch's long weights_only message that says what was wrong (``Unsupported operand 110``)."""
    found = re.search(r"WeightsUnpickler error:\s*(.+)", str(error))
    return f"{type(error).__name__}: {found.group(1)[:120]}" if found else first_line(error)


def read_torch_file(path: str | Path, what: str, map_location: Any = "cpu") -> Any:
    """What ``torch.save`` wrote at ``path``, loaded with ``weights_only=True``; ``what`` names the file in errors
    (``checkpoint runs/x/checkpoint.pt``, ``--weights r34.pth``). A file holding anything but tensors and plain
    data is refused, never unpickled."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{what}: no such file") from None
    except IsADirectoryError:
        raise CheckpointError(f"{what}: a folder, not a file torch.save wrote") from None
    except pickle.UnpicklingError as e:
        name = _refused_object(e)
        if name is None:
            raise CheckpointError(f"{what}: not a torch state dict or checkpoint ({_unpickling_detail(e)})") from None
        raise CheckpointError(
            f"{what}: refused: it holds a Python object ({name}), not only tensors and plain data, and loading it "
            "could run any code. The trainer's checkpoints hold plain data only; one written by an older trainer: "
            "train again, or, only if you trust the file, re-save it as plain data (load it yourself with "
            "torch.load, weights_only off, and write it with labeldist.trainer.training.checkpoints.save_checkpoint)"
        ) from None
    except Exception as e:  # torch.load raises many types for a file that is no checkpoint (zip, EOF, magic)
        raise CheckpointError(f"{what}: not a torch state dict or checkpoint ({first_line(e)})") from None


def first_line(error: Exception) -> str:
    """An exception as one short line: its type and the start of its message."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:120] if lines else ''}"


def read_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """A trainer checkpoint (:func:`labeldist.trainer.training.fit.fit` writes them), its keys checked."""
    what = f"checkpoint {path}"
    state = read_torch_file(path, what, map_location)
    if not isinstance(state, dict) or not isinstance(state.get("model"), Mapping):
        raise CheckpointError(
            f"{what}: not a trainer checkpoint (no model state dict in it); a torchvision state "
            "dict starts a run with --weights"
        )
    missing = [k for k in KEYS if k not in state]
    if missing:
        raise CheckpointError(f"{what}: not a trainer checkpoint (no {', '.join(missing)} in it)")
    return state


def describe_model(config: Mapping[str, Any]) -> str:
    """A model config in words: ``resnet18, 128-d embeddings``; ``mlp over 34 input features, hidden (512),
    16-d embeddings``."""
    if config.get("kind") == "mlp":
        hidden = config.get("hidden") or []
        layers = f"hidden ({', '.join(str(h) for h in hidden)})" if hidden else "no hidden layer"
        return f"mlp over {config.get('in_dim')} input features, {layers}, {config.get('out_dim')}-d embeddings"
    return f"{config.get('kind')}, {config.get('out_dim')}-d embeddings"


def same_model(recorded: Mapping[str, Any], asked: Mapping[str, Any]) -> bool:
    """Whether two model configs build the same network (the file a ResNet started from does not count)."""

    def shape(config: Mapping[str, Any]) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in config.items() if k != "weights"}

    return shape(recorded) == shape(asked)


def load_weights(module: nn.Module, weights: Mapping[str, Any], what: str, config: Mapping[str, Any]) -> None:
    """``module.load_state_dict(weights)``, refused in one line (not torch's list of every key) when they do not
    fit: how many weights are missing, unexpected or of another shape, and the first of each."""
    own = module.state_dict()
    missing = [k for k in own if k not in weights]
    unexpected = [k for k in weights if k not in own]
    shapes = [
        f"{k} {tuple(weights[k].shape)} vs {tuple(v.shape)}"
        for k, v in own.items()
        if k in weights and isinstance(weights[k], torch.Tensor) and weights[k].shape != v.shape
    ]
    if missing or unexpected or shapes:
        parts = [
            f"{len(x)} {kind} (first: {x[0]})"
            for x, kind in ((missing, "missing"), (unexpected, "unexpected"), (shapes, "of another shape"))
            if x
        ]
        raise CheckpointError(
            f"{what}: its weights do not fit the model it records ({describe_model(config)}): " + "; ".join(parts)
        )
    module.load_state_dict(weights)
