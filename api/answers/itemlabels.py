"""Items' labels in their kind's JSON form (:meth:`~labeldist.labels.base.LabelSet.to_json`), for the answers that
carry them on request: ``include_labels`` of ``POST /v1/stores/{store}/search`` and of
``GET /v1/stores/{store}/items/{index}/neighbors``.

The labels are rebuilt once per served store from its raw label arrays (:meth:`ServedStore.label_arrays`, which
the label view reads too, so that the two share them), as the kind's LabelSet: no distance is made or warmed up
for them. A kind whose LabelSet has no per-item JSON form (a plugin that does not define ``to_json``) is answered
422 naming the kind, known from its class before any work.

The labels an answer carries are bounded (``LABELDIST_MAX_LABEL_BYTES``, :func:`check_labels_size`): a label's
JSON size is the largest of a sample of the store's labels, measured once per store, and a request whose labels
would pass the bound is answered 413 before they are made; the labels then made are measured too, and 413 is
answered once they pass it (a store whose sampled labels are short and others long). Without it, 40 clients
asking a store of 2,000 room layouts (33 kB a label) for ``k=100&include_labels=true`` (3.3 MB each) held the
service's threads for seconds and raised a small neighbours request's median from 18 ms to 2.2-3.3 s.
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import Any

import numpy as np

from labeldist.api.errors import BadParameter, TooLarge, Unavailable
from labeldist.api.serving.registry import ServedStore
from labeldist.kinds import distance_class
from labeldist.labels.base import LabelError, LabelSet, has_json_form

_lock = threading.Lock()
#: each served store's labels, dropped with the store object (a store replaced on disk is a new object)
_label_sets: weakref.WeakKeyDictionary[ServedStore, LabelSet] = weakref.WeakKeyDictionary()
#: each served store's largest label in JSON (bytes) among :data:`SIZE_SAMPLE` spread over its items
_label_bytes: weakref.WeakKeyDictionary[ServedStore, int] = weakref.WeakKeyDictionary()
#: labels measured to estimate a store's label size
SIZE_SAMPLE = 32


def check_labels_available(store: ServedStore, loc: tuple[str, ...]) -> None:
    """422 at ``loc`` (the request's ``include_labels``) for a kind whose labels have no JSON form."""
    kind = store.manifest.get("kind", "")
    if not has_json_form(distance_class(kind).labels_class):
        raise BadParameter(
            f"labels are not available for kind {kind!r}: its labels have no JSON form (LabelSet.to_json); ask "
            "without include_labels",
            loc,
            True,
        )


def _label_set(store: ServedStore) -> LabelSet:
    with _lock:
        labels = _label_sets.get(store)
        if labels is None:
            cls = distance_class(store.manifest["kind"]).labels_class
            arrays = store.label_arrays()
            try:
                labels = cls.from_arrays(store.ids, arrays)
            except LabelError as e:  # the arrays disagree: damage the checksums did not catch
                raise Unavailable(
                    f"store {store.name!r}: its labels cannot be rebuilt from labels/ "
                    f"({', '.join(sorted(arrays)) or 'no arrays'}): {e}"
                ) from e
            _label_sets[store] = labels
        return labels


def label_bytes(store: ServedStore) -> int:
    """The JSON size of the largest of :data:`SIZE_SAMPLE` labels spread evenly over the store's items (measured
    on first need, then kept with the store): the estimate of one label's size in an answer."""
    size = _label_bytes.get(store)
    if size is None:
        labels = _label_set(store)
        sample = np.unique(np.linspace(0, store.n_items - 1, min(SIZE_SAMPLE, store.n_items)).astype(np.int64))
        size = max(len(json.dumps(labels.to_json(int(i)))) for i in sample.tolist()) + 2  # ", " between labels
        _label_bytes[store] = size
    return size


def check_labels_size(store: ServedStore, count: int, limit: int) -> None:
    """413 when ``count`` labels of ``store`` would pass ``limit`` bytes (``LABELDIST_MAX_LABEL_BYTES``), by
    :func:`label_bytes`; reads the labels on first use: call it off the event loop unless :func:`labels_loaded`."""
    each = label_bytes(store)
    if count * each > limit:
        raise TooLarge(
            f"{count} labels of store {store.name!r} (about {each:,} bytes each in JSON) are over the "
            f"{limit:,} bytes one answer carries (LABELDIST_MAX_LABEL_BYTES; {limit // each} fit): ask for a "
            "smaller k with include_labels, or fetch the labels you need with GET .../items/{index}/label"
        )


def labels_loaded(store: ServedStore) -> bool:
    """Whether :func:`item_labels` and :func:`check_labels_size` answer from memory (the store's labels already
    rebuilt and measured)."""
    return store in _label_sets and store in _label_bytes


def item_labels(store: ServedStore, indices: np.ndarray | list[int], limit: int | None = None) -> list[Any]:
    """The labels of items ``indices``, in order, each in its kind's JSON form (``None`` for a padding entry, an
    index below 0, which no answer carries today). Reads and rebuilds the store's labels on first use: call it
    off the event loop unless :func:`labels_loaded`.

    With a ``limit`` (bytes, ``LABELDIST_MAX_LABEL_BYTES``) the labels actually made are measured as they are made,
    and 413 is raised once their JSON passes it: :func:`check_labels_size` estimates from a sample, and a store
    whose sampled labels are short and others long would otherwise answer far more than the bound."""
    labels = _label_set(store)
    made, total = [], 0
    for i in np.asarray(indices).tolist():
        label = labels.to_json(int(i)) if i >= 0 else None
        if limit is not None:
            total += len(json.dumps(label)) + 2  # ", " between labels
            if total > limit:
                raise TooLarge(
                    f"the labels of these {len(indices)} items of store {store.name!r} are over the {limit:,} "
                    f"bytes one answer carries (LABELDIST_MAX_LABEL_BYTES; the first {len(made) + 1} alone make "
                    f"{total:,}): ask for a smaller k with include_labels, or fetch the labels you need with "
                    "GET .../items/{index}/label"
                )
        made.append(label)
    return made
