"""Training recipes by name: the papers' optimiser, schedule, run length, minibatch, loss settings and embedding,
so that ``trainer fit --recipe kim2019-pose`` trains as the authors did, and any field can still be overridden.

- ``kim2019-pose``, ``kim2019-layout``, ``kim2019-caption``: Kim, Kim, Cho and Kwak, "Deep Metric Learning Beyond
  Binary Supervision", CVPR 2019, as their public code trains (SGD, :math:`\\eta_t = \\eta_0 / (1 + 10^{-4} t)`);
- ``zhou2020``: Zhou et al., "Ladder Loss for Coherent Visual-Semantic Embedding", AAAI 2020, trained as VSE++;
- ``scratch``: what learns from random weights (every member an anchor, Adam 1e-3, minibatches of 32);
- ``labeldist-v1``: Adam 1e-3 and the squared-distance log-ratio loss, for feature runs (the MLP head).

:func:`choose_recipe` says which recipe ``auto`` stands for, and why; :func:`resolve_recipe` gives a recipe's fields
for a store kind, overridden by what the user gave. Every recipe's settings: docs/training.md, "Recipes by name".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from labeldist.errors import LabeldistError
from labeldist.trainer.kinds import trainer_kind

#: the fields of :class:`labeldist.trainer.training.config.FitConfig` a recipe sets
RECIPE_FIELDS = (
    "optimizer",
    "lr",
    "momentum",
    "weight_decay",
    "lr_schedule",
    "lr_decay",
    "lr_step_epochs",
    "epochs",
    "size",
    "neighbors",
    "loss",
    "embedding_dim",
    "augment",
    "anchors",
)


@dataclass(frozen=True)
class Recipe:
    """One paper's training settings; ``loss_options`` per loss name (applied when the run uses that loss)."""

    name: str
    source: str
    optimizer: str
    lr: float
    momentum: float
    weight_decay: float
    #: "constant"; "inverse": lr / (1 + lr_decay * step); "step": lr * lr_decay at each of lr_step_epochs;
    #: "cosine": from lr down to lr * lr_decay over the epochs
    lr_schedule: str
    lr_decay: float
    lr_step_epochs: tuple[int, ...]
    epochs: int
    size: int
    neighbors: int
    loss: str
    embedding_dim: int
    augment: str
    #: "first", "all", or None for the loss's own default (one anchor for Kim et al.'s losses, every query for
    #: the ladder)
    anchors: str | None = None
    loss_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in RECIPE_FIELDS}


def _kim2019(name: str, size: int, what: str) -> Recipe:
    return Recipe(
        name=name,
        source=f"Kim et al., CVPR 2019 ({what}), as the authors' code trains",
        optimizer="sgd",
        lr=0.01,
        momentum=0.9,
        weight_decay=5e-4,
        lr_schedule="inverse",
        lr_decay=1e-4,
        lr_step_epochs=(),
        epochs=30,
        size=size,
        neighbors=5,
        loss="log_ratio",
        embedding_dim=128,
        augment="kind",
        loss_options={
            "log_ratio": {"squared": False},
            "dense_triplet": {"margin": 0.03},
            "binary_triplet": {"margin": 0.2},
        },
    )


RECIPES: dict[str, Recipe] = {
    "kim2019-pose": _kim2019("kim2019-pose", 150, "MPII poses"),
    "kim2019-layout": _kim2019("kim2019-layout", 150, "LSUN room layouts"),
    "kim2019-caption": _kim2019("kim2019-caption", 50, "COCO caption sets"),
    "zhou2020": Recipe(
        name="zhou2020",
        source="Zhou et al., AAAI 2020, trained as VSE++ (Adam 2e-4, x0.1 after 15 of 30 epochs)",
        optimizer="adam",
        lr=2e-4,
        momentum=0.0,
        weight_decay=0.0,
        lr_schedule="step",
        lr_decay=0.1,
        lr_step_epochs=(15,),
        epochs=30,
        size=128,
        neighbors=5,
        loss="ladder",
        embedding_dim=1024,
        augment="kind",
    ),
    "scratch": Recipe(
        name="scratch",
        source="labeldist: what learns from random weights (every member an anchor, log-ratio, Adam 1e-3)",
        optimizer="adam",
        lr=1e-3,
        momentum=0.0,
        weight_decay=0.0,
        lr_schedule="constant",
        lr_decay=0.0,
        lr_step_epochs=(),
        epochs=10,
        size=32,
        neighbors=5,
        loss="log_ratio",
        embedding_dim=128,
        # none: at 500-1,500 steps on MPII images the pose jitter cost 0.035 nDCG@10 and the minibatch flip 0.033
        # (3 seeds each, spread <= 0.007; RESULTS.md, "The defaults that learn, and augmentation by evidence")
        augment="none",
        anchors="all",
        # the authors' code's Euclidean D(f): nDCG@10 0.795 against 0.773 (3 seeds: 0.772-0.774) for the squared
        # distance after 1,000 steps on MPII images (RESULTS.md, "From random weights")
        loss_options={"log_ratio": {"squared": False}},
    ),
    "labeldist-v1": Recipe(
        name="labeldist-v1",
        source="labeldist's first trainer defaults, before recipes were named",
        optimizer="adam",
        lr=1e-3,
        momentum=0.0,
        weight_decay=0.0,
        lr_schedule="constant",
        lr_decay=0.0,
        lr_step_epochs=(),
        epochs=1,
        size=150,
        neighbors=5,
        loss="log_ratio",
        embedding_dim=128,
        augment="imagenet",
    ),
}
OPTIMIZERS = ("adam", "sgd")
SCHEDULES = ("constant", "inverse", "step", "cosine")


class RecipeError(LabeldistError, ValueError):
    """An unknown recipe, or values no recipe can run with (one line naming the recipe and the field)."""


def choose_recipe(name: str, kind: str | None, images: bool, weights: str | None = None) -> tuple[str, str]:
    """The recipe ``name`` stands for, and why: itself; or for ``auto``

    - over images from random weights (no ``weights``): ``scratch``, the recipe that learns from random weights
      (the papers' recipes were made for ImageNet weights, and from random ones learn nothing: RESULTS.md);
    - over images from ``weights``: the paper's recipe of the store's ``kind`` (the papers fine-tuned ImageNet
      weights), or ``scratch`` for a kind no paper trained;
    - over features: ``labeldist-v1``.

    >>> choose_recipe("auto", "pose", images=True)[0]
    'scratch'
    """
    if name != "auto":
        if name not in RECIPES:
            raise RecipeError(f"unknown recipe {name!r}; known: auto, {', '.join(RECIPES)}")
        return name, f"--recipe {name}"
    if not images:
        return "labeldist-v1", "auto: features train an MLP head with labeldist-v1, the trainer's defaults"
    if weights is None:
        return "scratch", (
            "auto: a CNN from random weights (no --weights) learns with every member of a minibatch an anchor "
            "and Adam 1e-3; the papers' recipes, made for ImageNet weights, leave it at the untrained "
            "network's nDCG (RESULTS.md)"
        )
    paper = trainer_kind(kind).recipe  # labeldist.trainer.kinds
    if paper is not None:
        return paper, f"auto: --weights given, so the paper's recipe of the {kind} kind"
    return "scratch", f"auto: no paper's recipe for the {kind} kind"


def recipe_name(name: str, kind: str | None, images: bool, weights: str | None = None) -> str:
    """The recipe ``name`` stands for (:func:`choose_recipe` without the reason)."""
    return choose_recipe(name, kind, images, weights)[0]


def resolve_recipe(
    name: str, *, kind: str | None, images: bool, given: Mapping[str, Any], weights: str | None = None
) -> dict[str, Any]:
    """The run's values: the recipe's fields for this store kind, then everything in ``given`` (the user's
    explicit values: they win). Returns the FitConfig values to set (``loss_options`` merged: the recipe's for the
    chosen loss, then the given ones), plus ``recipe`` (the resolved name), ``recipe_reason`` (why:
    :func:`choose_recipe`) and ``overrides`` (the recipe fields the user changed, sorted)."""
    chosen, reason = choose_recipe(name, kind, images, weights)
    recipe = RECIPES[chosen]
    values = recipe.fields()
    overrides = sorted(k for k in RECIPE_FIELDS if k in given and given[k] != values[k])
    values.update({k: v for k, v in given.items() if k != "loss_options"})
    options = dict(recipe.loss_options.get(values["loss"], {}))
    options.update(given.get("loss_options") or {})
    values["loss_options"] = options
    values["lr_step_epochs"] = tuple(values["lr_step_epochs"])
    check_values(values, recipe.name)
    values["recipe"], values["overrides"], values["recipe_reason"] = recipe.name, overrides, reason
    return values


def check_values(values: Mapping[str, Any], recipe: str = "the run") -> None:
    """Refuse what no optimiser or schedule can run with, naming the field."""
    if values["optimizer"] not in OPTIMIZERS:
        raise RecipeError(f"{recipe}: optimizer must be one of {', '.join(OPTIMIZERS)}, got {values['optimizer']!r}")
    if values["lr_schedule"] not in SCHEDULES:
        raise RecipeError(f"{recipe}: lr_schedule must be one of {', '.join(SCHEDULES)}, got {values['lr_schedule']!r}")
    if not values["lr"] > 0:
        raise RecipeError(f"{recipe}: lr must be > 0, got {values['lr']}")
    if values["lr_decay"] < 0:
        raise RecipeError(f"{recipe}: lr_decay must be >= 0, got {values['lr_decay']}")
    if not 0 <= values["momentum"] < 1:
        raise RecipeError(f"{recipe}: momentum must be in [0, 1), got {values['momentum']}")
    if values["weight_decay"] < 0:
        raise RecipeError(f"{recipe}: weight_decay must be >= 0, got {values['weight_decay']}")
    if values["epochs"] < 1:
        raise RecipeError(f"{recipe}: epochs must be >= 1, got {values['epochs']}")
    if values.get("anchors") not in (None, "first", "all"):
        raise RecipeError(f"{recipe}: anchors must be first or all, got {values['anchors']!r}")


def lr_factor(
    step: int,
    *,
    schedule: str,
    decay: float,
    step_epochs: tuple[int, ...] = (),
    steps_per_epoch: int = 1,
    epochs: int = 1,
) -> float:
    """The learning rate at optimizer step ``step`` (0-based) as a multiple of the initial one.

    - ``constant``: 1;
    - ``inverse``: :math:`1 / (1 + \\gamma t)`, ``decay`` = :math:`\\gamma` (Kim et al.'s code: 1e-4);
    - ``step``: ``decay`` to the power of the number of ``step_epochs`` already reached (VSE++: 0.1 after 15);
    - ``cosine``: :math:`d + (1 - d) \\frac{1}{2}(1 + \\cos(\\pi t / T))`, ``decay`` = :math:`d` the final
      multiple, over the run's ``epochs`` (:math:`T` = ``epochs`` x ``steps_per_epoch``; Loshchilov and Hutter,
      ICLR 2017, without restarts). ``--max-steps`` stops a run early without changing its schedule.

    >>> lr_factor(10_000, schedule="inverse", decay=1e-4)
    0.5
    >>> lr_factor(3, schedule="step", decay=0.1, step_epochs=(2,), steps_per_epoch=1)
    0.1
    >>> lr_factor(50, schedule="cosine", decay=0.0, steps_per_epoch=50, epochs=2)
    0.5
    """
    if schedule == "constant":
        return 1.0
    if schedule == "inverse":
        return 1.0 / (1.0 + decay * step)
    if schedule == "step":
        epoch = step // max(steps_per_epoch, 1)
        return decay ** sum(epoch >= e for e in step_epochs)
    if schedule == "cosine":
        progress = min(step / max(steps_per_epoch * epochs, 1), 1.0)
        return decay + (1.0 - decay) * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise RecipeError(f"unknown lr_schedule {schedule!r}; known: {', '.join(SCHEDULES)}")


def describe_recipes() -> str:
    """One line per recipe, for ``--help`` and the docs."""
    return "; ".join(
        f"{r.name}: {r.optimizer} lr {r.lr:g}, {r.lr_schedule} decay, {r.epochs} epochs, batch {r.size}, {r.loss}"
        + (f", {r.anchors} anchors" if r.anchors else "")
        for r in RECIPES.values()
    )
