"""Search by label: the exact ``k`` nearest items of a set of labels (a store's) to one new label, and the estimate
of what it costs. The service (``POST /v1/stores/{store}/search``, :mod:`labeldist.api.routers.search`) and the
in-process client (:meth:`labeldist.client.local.LocalSource.search`) both read the label (:func:`read_query`) and
search by these functions, so that they give the same answers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from labeldist.core.knn import pruned_topk, topk_rows
from labeldist.errors import LabeldistError
from labeldist.kinds import check_block, distance_class, read_label
from labeldist.labels.base import LabelError, reads_json
from labeldist.view.pairs import CHUNK_SECONDS, checked_block


def not_searchable(kind: str) -> str:
    """Why a store of ``kind`` cannot be searched by a new label: what the service and the client answer (422)."""
    return f"search by label is not available for kind {kind!r}: its labels have no JSON form"


def searchable(kind: str) -> bool:
    """Whether a store of ``kind`` can be searched by a new label: its LabelSet reads labels from JSON, known from
    the class before any label is loaded (:func:`~labeldist.labels.base.reads_json`)."""
    return reads_json(distance_class(kind).labels_class)


class LabelRefused(LabeldistError, ValueError):
    """A label a search cannot take, the message saying why: the service answers it 422 naming ``label``,
    :class:`~labeldist.client.LocalSource` raises it as RequestRejected."""


def read_query(kind: str, value: Any, load: Callable[[], tuple[Any, Any]]) -> tuple[Any, Any, Any]:
    """The new label ``value`` (its kind's JSON form) read as a set of one item made as the store's labels were,
    within the checks every kind gets (:func:`labeldist.kinds.read_label`), with the labels and distance ``load()``
    gives (loaded only for a kind that can be searched): ``(query, labels, distance)``. :class:`LabelRefused` for a
    kind whose labels have no JSON form or a label the kind cannot read, before any distance is computed."""
    if not searchable(kind):
        raise LabelRefused(not_searchable(kind))
    labels, distance = load()
    try:
        return read_label(value, labels, distance), labels, distance
    except NotImplementedError:
        raise LabelRefused(not_searchable(kind)) from None
    except LabelError as e:
        raise LabelRefused(str(e) or not_searchable(kind)) from None


@dataclass(frozen=True)
class SearchResult:
    """The nearest items of a label: indices (int32), distances (float32) nearest first, and how many exact
    distances were computed (fewer than the items where a lower bound ruled some out)."""

    indices: np.ndarray
    distances: np.ndarray
    computed: int


def search_cost_s(distance_cls: Any, n_items: int) -> float:
    """Estimated seconds of one core for a label against ``n_items`` items: the whole row (what a search costs
    when no bound rules an item out), in chunks of :data:`~labeldist.view.pairs.CHUNK_SECONDS`, plus one call
    for the bound's second round, plus the label and the items prepared."""
    chunks = math.ceil(n_items * distance_cls.cost_per_pair_s / CHUNK_SECONDS) or 1
    return (
        (chunks + 1) * distance_cls.cost_per_call_s
        + n_items * distance_cls.cost_per_pair_s
        + (n_items + 1) * distance_cls.cost_per_item_s
    )


def warm_search(labels: Any, distance: Any) -> None:
    """Search ``labels`` once by its own item 0's label (its JSON form read back, as a client's label is), so that
    whatever a first search loads (a sentence model, its tokenizer, the items' embeddings, compiled kernels) is
    loaded now: what ``labeldist serve`` (warming up by default) and :meth:`LocalSource.warm` do before the first
    request."""
    from labeldist.kinds import read_label

    query = read_label(labels.to_json(0), labels, distance)
    search_labels(query, labels, distance, 1)


def search_labels(
    query: Any, labels: Any, distance: Any, k: int, check: Callable[[], None] = lambda: None
) -> SearchResult:
    """The exact ``k`` nearest of ``labels`` to the one label of ``query`` (see :func:`search_store`);
    ``check`` is called between chunks of about :data:`~labeldist.view.pairs.CHUNK_SECONDS` of estimated work."""
    n = len(labels)
    per_chunk = max(1, int(CHUNK_SECONDS / max(type(distance).cost_per_pair_s * len(query), 1e-12)))

    def row(cols: np.ndarray) -> np.ndarray:  # exact distances of the query to items ``cols`` (sorted, distinct)
        out = np.empty(cols.size, dtype=np.float64)
        for start in range(0, cols.size, per_chunk):
            check()
            part = cols[start : start + per_chunk]
            items = labels if part.size == n else labels.subset(part)
            out[start : start + part.size] = checked_block(distance, query, items)[0]
        return out

    check()
    lower = distance.lower_bound_block(query, labels)
    if lower is None:
        values = row(np.arange(n)).astype(np.float32)[None]
        indices, dists = topk_rows(values, k)
        return SearchResult(indices[0], dists[0], n)
    check_block(distance.kind, lower, 1, n, row_ids=query.ids, col_ids=labels.ids)
    indices, dists, computed = pruned_topk(lower, lambda r, c: row(c), k, exclude=None)
    return SearchResult(indices[0], dists[0], computed)
