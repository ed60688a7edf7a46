"""Labels rendered for display (the neighbour browser): a pose's joints, a map as a PNG, captions as text.

Rendering works from the raw label arrays of the store (``labels/<name>``), so a new kind is shown without
code here: per-item string arrays become texts, 2-d integer maps become PNG images, anything else small is
sent as nested lists. Two layouts are recognised by their array names: a pose (``xy``, ``present``,
``visible``) and ragged UTF-8 texts (``text`` bytes cut by ``text_offsets``, grouped per item by
``caption_offsets`` when there is one: caption sets, sentences).
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np

from labeldist.api.answers.schemas import LabelView, LegendEntry, PoseView
from labeldist.labels.base import as_str_array
from labeldist.labels.poses import default_joint_names, joint_side, skeleton_edges

#: colours of map labels 0, 1, 2, ... (wrapping around)
PALETTE = np.array(
    [
        [31, 119, 180],
        [255, 127, 14],
        [44, 160, 44],
        [214, 39, 40],
        [148, 103, 189],
        [140, 86, 75],
        [227, 119, 194],
        [127, 127, 127],
        [188, 189, 34],
        [23, 190, 207],
        [255, 255, 255],
        [0, 0, 0],
    ],
    dtype=np.uint8,
)
MAX_VALUES = 4096
#: arrays that are not one row per item even when their length happens to equal N (vocabularies, ragged data)
SHARED = frozenset(
    {"text", "text_offsets", "caption_offsets", "tokens", "token_offsets", "vocab", "vectors", "joint_names"}
)


#: names of the values of layout maps (labeldist.labels.layouts: 0 no surface, then SURFACES); kept here so that
#: rendering does not import the layout module (its readers pull in PIL and the LSUN prior)
LAYOUT_CLASSES = ("no surface", "floor", "middle wall", "right wall", "left wall", "ceiling")


def legend(kind: str, maps: list[np.ndarray]) -> list[LegendEntry]:
    """The colour of each value of the maps as drawn by :func:`png_data_url`: every surface class for a layout
    kind, else each value present in ``maps``."""
    if kind.startswith("layout") and all(int(m.max(initial=0)) < len(LAYOUT_CLASSES) for m in maps):
        values = list(range(len(LAYOUT_CLASSES)))
        names = list(LAYOUT_CLASSES)
    else:
        values = sorted({int(v) for m in maps for v in np.unique(m)})[:32]
        names = [f"label {v}" for v in values]
    colors = PALETTE[np.mod(values, len(PALETTE))]
    return [
        LegendEntry(value=v, name=n, color="#{:02x}{:02x}{:02x}".format(*c)) for v, n, c in zip(values, names, colors)
    ]


def png_data_url(label_map: np.ndarray) -> str:
    """A 2-d map of integer labels as a PNG data URL, one palette colour per label value."""
    from PIL import Image

    values = np.asarray(label_map)
    if values.ndim == 3:  # an RGB(A) image already
        rgb = values.astype(np.uint8)
    else:
        rgb = PALETTE[np.mod(values.astype(np.int64), len(PALETTE))]
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _pose(arrays: dict[str, np.ndarray], index: int) -> PoseView:
    """A pose's joints by name (the store's ``joint_names``, else the default: MPII's for 16 joints), their side,
    and the bones of every skeleton the pose kind declares both of whose ends the store has."""
    xy = np.asarray(arrays["xy"][index], dtype=np.float64)
    present = np.asarray(arrays["present"][index]).astype(bool)
    visible = np.asarray(arrays.get("visible", arrays["present"])[index]).astype(bool)
    stored = arrays.get("joint_names")
    names = tuple(as_str_array(stored).tolist()) if stored is not None else default_joint_names(len(xy))
    return PoseView(
        joints=list(names),
        xy=[(float(x), float(y)) if p else None for (x, y), p in zip(xy, present)],
        visible=visible.tolist(),
        edges=list(skeleton_edges(names)),
        sides=[joint_side(name) for name in names],
    )


def _ragged_texts(arrays: dict[str, np.ndarray], index: int) -> list[str]:
    text, offsets = np.asarray(arrays["text"]), np.asarray(arrays["text_offsets"])
    if "caption_offsets" in arrays:
        first, last = (int(x) for x in np.asarray(arrays["caption_offsets"])[index : index + 2])
    else:
        first, last = index, index + 1
    raw = text[offsets[first] : offsets[last]].tobytes()
    cuts = (offsets[first : last + 1] - offsets[first]).tolist()
    return [raw[a:b].decode("utf-8", errors="replace") for a, b in zip(cuts[:-1], cuts[1:])]


def render_label(kind: str, arrays: dict[str, np.ndarray], n_items: int, index: int, item_id: str) -> LabelView:
    """The label of item ``index`` for display."""
    view: dict[str, Any] = {"index": index, "id": item_id, "kind": kind}
    used: set[str] = set()
    if {"xy", "present"} <= arrays.keys():
        view["pose"] = _pose(arrays, index)
        used |= {"xy", "present", "visible", "joint_names"}
    images: list[str] = []
    maps: list[np.ndarray] = []
    texts: list[str] = []
    values: dict[str, Any] = {}
    if {"text", "text_offsets"} <= arrays.keys():
        texts.extend(_ragged_texts(arrays, index))
    for name, arr in sorted(arrays.items()):
        if name in used or name in SHARED or arr.ndim == 0 or arr.shape[0] != n_items:
            continue  # not one row per item (e.g. a shared vocabulary or ragged storage)
        row = np.asarray(arr[index])
        if row.dtype.kind in "UOST":
            texts.extend(t for t in np.asarray(row, dtype=str).reshape(-1).tolist() if t)
        elif row.ndim == 2 and row.dtype.kind in "iub" and min(row.shape) > 1:
            images.append(png_data_url(row))
            maps.append(row)
        elif row.size <= MAX_VALUES:
            values[name] = row.tolist()
    view.update(
        images=images or None, texts=texts or None, values=values or None, legend=legend(kind, maps) if maps else None
    )
    return LabelView(**view)
