"""What the trainer knows of each store kind, in one declaration per kind: its augmentation, the paper's recipe,
its renderer, its demo input features and its ceiling.

As :mod:`labeldist.kinds` does for the engine, a declaration names its parts as ``"module:attribute"`` (or a
module), imported on first use: this table imports no torch and nothing of the trainer, so every module can read
it. A kind with no declaration (a plugin's) trains on its features or images as they are: no augmentation, the
``scratch`` recipe from ImageNet weights too, nothing to render and no demo inputs. To teach the trainer a new
kind, add its :class:`TrainerKind` to :data:`TRAINER_KINDS`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TrainerKind:
    """The trainer's side of one store kind. Each part is ``"module:attribute"`` (``renderer``: a module), or None
    where the kind has none."""

    #: its own augmentation (``--augment kind``): a :class:`~labeldist.trainer.inputs.augment.KindAugmentation`
    augmentation: str | None
    #: the paper's recipe, which ``--recipe auto`` picks from ImageNet-style ``--weights``
    recipe: str | None
    #: the module drawing one image per item (``trainer render``, :mod:`labeldist.trainer.render.base`)
    renderer: str | None
    #: ``function(store, *, seed, **options) -> features`` (``trainer demo-inputs``)
    demo_inputs: str | None
    #: ``function(labels, **options) -> (views, draws, note)``: the labels as a perfect model of the pictures sees
    #: them (:func:`labeldist.trainer.experiments.ceiling.ceiling`)
    ceiling: str | None


_AUGMENT = "labeldist.trainer.inputs.augment"
_DEMO = "labeldist.trainer.inputs.demo_inputs"
_CEILING = "labeldist.trainer.experiments.ceiling"

#: every kind the trainer knows, keyed by the manifest's kind
TRAINER_KINDS: dict[str, TrainerKind] = {
    "pose": TrainerKind(
        augmentation=f"{_AUGMENT}:POSE",
        recipe="kim2019-pose",
        renderer="labeldist.trainer.render.pose",
        demo_inputs=f"{_DEMO}:pose_inputs",
        ceiling=f"{_CEILING}:pose_views",
    ),
    "layout_miou": TrainerKind(
        augmentation=f"{_AUGMENT}:LAYOUT",
        recipe="kim2019-layout",
        renderer="labeldist.trainer.render.layout",
        demo_inputs=None,
        ceiling=f"{_CEILING}:painted_views",
    ),
    "caption_wmd": TrainerKind(
        augmentation=f"{_AUGMENT}:CAPTION",
        recipe="kim2019-caption",
        renderer=None,
        demo_inputs=f"{_DEMO}:caption_inputs",
        ceiling=None,
    ),
    "sentence_relevance": TrainerKind(
        augmentation=f"{_AUGMENT}:SENTENCE",
        recipe="zhou2020",
        renderer=None,
        demo_inputs=f"{_DEMO}:sentence_inputs",
        ceiling=None,
    ),
}

#: a kind the trainer has no declaration for
UNDECLARED = TrainerKind(augmentation=None, recipe=None, renderer=None, demo_inputs=None, ceiling=None)


def trainer_kind(kind: str | None) -> TrainerKind:
    """The declaration of ``kind``, or :data:`UNDECLARED`.

    >>> trainer_kind("pose").recipe, trainer_kind("my_plugin_kind").recipe
    ('kim2019-pose', None)
    """
    return TRAINER_KINDS.get(kind or "", UNDECLARED)


def kinds_with(part: str) -> list[str]:
    """The kinds whose declaration has ``part`` (``"renderer"``, ``"demo_inputs"``, ...), for error messages.

    >>> kinds_with("renderer")
    ['pose', 'layout_miou']
    """
    return [kind for kind, declared in TRAINER_KINDS.items() if getattr(declared, part) is not None]


def load(reference: str) -> Any:
    """What ``"module:attribute"`` (or ``"module"``) names, imported now."""
    module, _, attribute = reference.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attribute) if attribute else loaded
