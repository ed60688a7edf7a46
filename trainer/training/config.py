"""The run's configuration: what ``trainer fit`` was asked (:class:`FitConfig`), the files a run folder holds, and what
the run records of its configuration and inputs in its log."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labeldist.client import Inputs

CHECKPOINT = "checkpoint.pt"


LOG = "log.jsonl"


@dataclass
class FitConfig:
    """Everything that changes a training run (saved in the checkpoint and the log)."""

    url: str
    store: str
    out: str
    #: read stores in this process from this folder (labeldist.client.LocalSource), no service; ``url`` unused
    stores: str | None = None
    #: the recipe these values came from (labeldist.trainer.training.recipes; recorded, not applied here: resolve_recipe
    #: fills the fields) and the recipe fields the user changed
    recipe: str = "labeldist-v1"
    overrides: list[str] = field(default_factory=list)
    #: why the recipe was chosen (labeldist.trainer.training.recipes.choose_recipe), printed and logged
    recipe_reason: str = ""
    features: str | None = None
    #: images instead of features: a folder, items mapped by image_index (id,path CSV; ROOT/index.csv by
    #: default when it exists) or image_pattern ("{id}.jpg")
    images: str | None = None
    image_pattern: str | None = None
    image_index: str | None = None
    backbone: str = "resnet34"
    weights: str | None = None
    input_size: int | None = None
    #: images: "kind" (the store kind's label-preserving transforms), "none" or "imagenet" (random resized crop and
    #: per-image flip: refused for kinds whose distance is not mirror-invariant unless allow_image_flip)
    augment: str = "kind"
    allow_image_flip: bool = False
    #: False turns off the flip of the chosen augmentation
    flip: bool = True
    #: the "imagenet" augmentation's crop area range
    crop_scale: tuple[float, float] = (0.08, 1.0)
    #: images: decode every image once into a shared uint8 cache ("auto": when it fits the memory limit)
    image_cache: str = "auto"
    #: images not cached: decode each step's files on the device in batch (None: on CUDA, where nvJPEG does it;
    #: True on a CPU runs the same path with libjpeg, as the tests do)
    decode_on_device: bool | None = None
    #: DataLoader worker processes decoding images (None: one per CPU core but one, at most 16)
    loader_workers: int | None = None
    precision: str = "auto"
    channels_last: bool | None = None
    compile: bool = False
    loss: str = "log_ratio"
    loss_options: dict[str, Any] = field(default_factory=dict)
    #: the members of a minibatch the loss takes as anchors: "first" (the authors' code), "all" (every member, by
    #: the minibatch's pairwise label distances), or None for the loss's own default
    anchors: str | None = None
    size: int = 150
    neighbors: int = 5
    batches_per_step: int = 1
    epochs: int = 1
    max_steps: int | None = None
    optimizer: str = "adam"
    lr: float = 1e-3
    momentum: float = 0.0
    weight_decay: float = 0.0
    #: "constant", "inverse" (lr / (1 + lr_decay * step), Kim et al.), "step" (x lr_decay at lr_step_epochs) or
    #: "cosine" (down to lr x lr_decay over the epochs)
    lr_schedule: str = "constant"
    lr_decay: float = 0.0
    lr_step_epochs: tuple[int, ...] = ()
    embedding_dim: int = 128
    hidden: tuple[int, ...] = (512,)
    seed: int = 0
    device: str = "auto"
    checkpoint_every: int = 500
    resume: bool = False
    #: replace a run already in ``out`` (its checkpoint and log) instead of refusing to; ``resume`` continues it
    overwrite: bool = False
    progress: bool = True
    prefetch: int = 8
    workers: int = 2
    #: minibatches per service request (None: 8 over features; batches_per_step over images, so that each worker
    #: process decodes one step at a time)
    anchors_per_request: int | None = None
    api_key: str | None = None
    threads: int | None = None


def recorded_config(config: FitConfig) -> dict[str, Any]:
    """The run's config as its log and checkpoint record it: where the minibatches came from named once, the
    service's ``url`` or the ``stores`` folder read in this process (absolute), never the unused default of the
    other."""
    record = asdict(config)
    if config.stores is not None:
        record["url"] = None
        record["stores"] = str(Path(config.stores).resolve())
    return record


def input_config(inputs: Inputs, augmentation: Any = None) -> dict[str, Any]:
    """What evaluation must know of the training inputs (kept in the checkpoint): for images their size, the
    augmentation and so the evaluation transform (the image as rendered, or the ImageNet centre crop)."""
    from labeldist.trainer.inputs.images import IMAGE_INPUTS

    if isinstance(inputs, IMAGE_INPUTS):
        info: dict[str, Any] = {"kind": "images", "input_size": inputs.size}
        if augmentation is not None:
            info["augmentation"] = asdict(augmentation)
            info["eval_transform"] = augmentation.eval
        return info
    return {"kind": "features", "shape": list(inputs.item_shape)}
