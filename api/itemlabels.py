"""Items' labels in their kind's JSON form (:meth:`~labeldist.labels.base.LabelSet.to_json`), for the answers that
carry them on request: ``include_labels`` of ``POST /v1/stores/{store}/search`` and of
``GET /v1/stores/{store}/items/{index}/neighbors``.

The labels are rebuilt once per served store from its raw label arrays (:meth:`ServedStore.label_arrays`, which
the label view reads too, so that the two share them), as the kind's LabelSet: no distance is made or warmed up
for them. A kind whose LabelSet has no per-item JSON form (a plugin that does not define ``to_json``) is answered
422 naming the kind, known from its class before any work.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from labeldist.api.errors import BadParameter, Unavailable
from labeldist.api.registry import ServedStore
from labeldist.kinds import distance_class
from labeldist.labels.base import LabelError, LabelSet, has_json_form

_lock = threading.Lock()
#: each served store's labels, dropped with the store object (a store replaced on disk is a new object)
_label_sets: weakref.WeakKeyDictionary[ServedStore, LabelSet] = weakref.WeakKeyDictionary()


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


def labels_loaded(store: ServedStore) -> bool:
    """Whether :func:`item_labels` answers from memory (the store's labels already rebuilt)."""
    return store in _label_sets


def item_labels(store: ServedStore, indices: np.ndarray | list[int]) -> list[Any]:
    """The labels of items ``indices``, in order, each in its kind's JSON form (``None`` for a padding entry, an
    index below 0, which no answer carries today). Reads and rebuilds the store's labels on first use: call it
    off the event loop unless :func:`labels_loaded`."""
    labels = _label_set(store)
    return [labels.to_json(int(i)) if i >= 0 else None for i in np.asarray(indices).tolist()]
