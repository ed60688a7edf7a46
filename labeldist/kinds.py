"""Registry of store kinds: the manifest's ``kind`` names a LabelDistance class.

Modules are imported on first use, so asking for the pose distance does not load word vectors or torch.
"""

from __future__ import annotations

import importlib

from labeldist.distances.base import LabelDistance

#: kind -> "module:class"
KINDS: dict[str, str] = {
    "pose": "labeldist.distances.pose:PoseDistance",
    "layout_miou": "labeldist.distances.layout:LayoutMIoU",
    "caption_wmd": "labeldist.distances.caption_sets:CaptionSetWMD",
    "sentence_relevance": "labeldist.distances.sts:SentenceRelevance",
    "vectors": "labeldist.distances.vectors:VectorDistance",
}


def distance_class(kind: str) -> type[LabelDistance]:
    """The LabelDistance class registered for ``kind``; ValueError naming the known kinds otherwise."""
    try:
        target = KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(sorted(KINDS))}") from None
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)
