"""A store's arrays as objects of its kind: its labels as the kind's :class:`~labeldist.labels.base.LabelSet`, its
distance as the kind's :class:`~labeldist.distances.base.LabelDistance`. The store layer reads arrays
(:class:`~labeldist.store.StoreReader`); the registry of kinds builds from them here, above it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from labeldist.labels.base import LabelError
from labeldist.store import StoreCorruptError, StoreReader
from labeldist.store.reading import pinned

if TYPE_CHECKING:
    from labeldist.distances.base import LabelDistance
    from labeldist.labels.base import LabelSet


@pinned
def stored_labels(reader: StoreReader) -> LabelSet:
    """The labels ``reader``'s store holds, rebuilt as the LabelSet class of its kind, with how they were read or made
    (the manifest's ``params["labels"]``) as their ``provenance``: what a new label searched against them, or items
    appended to them, must be made with. Of the generation the reader opened: where the store changed while they were
    read, :class:`~labeldist.store.StoreChangedError`, whatever else went wrong (a pinned read of the reader's)."""
    from labeldist.kinds import distance_class  # the kinds pull in heavy modules

    cls = distance_class(reader.manifest["kind"]).labels_class
    arrays = reader.label_arrays()
    try:
        labels = cls.from_arrays(reader.ids, arrays)
    except LabelError as e:  # an array of the labels lost (its metadata deleted), or arrays that disagree
        found = ", ".join(sorted(arrays)) or "no arrays"
        message = f"{reader.url}: the labels cannot be rebuilt from labels/ ({found}): {e}"
        raise StoreCorruptError(message, array="labels") from e
    recorded = reader.manifest.get("params", {}).get("labels")
    labels.provenance = dict(recorded) if isinstance(recorded, dict) else {}
    return labels


def stored_distance(reader: StoreReader) -> LabelDistance:
    """The distance ``reader``'s store was made with: its kind's class, from the parameters its manifest records."""
    from labeldist.kinds import distance_class

    params = {key: value for key, value in reader.manifest["params"].items() if key != "labels"}
    return distance_class(reader.manifest["kind"]).from_params(params)
