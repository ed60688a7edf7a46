"""Request and response models of HTTP API v1 (docs/http-api.md), so that the OpenAPI schema is exact.

Distances are float32 values as stored, sent as JSON numbers; a distance that is +infinity (e.g. two poses
with no joint in common under the ``rescale`` rule) is sent as ``null``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from labeldist.view.minibatch import MAX_INDEX, MAX_SEED

#: an item index (row of the store); its upper bound is the store's ``n_items``, checked per request (404)
Index = Annotated[int, Field(ge=0, le=MAX_INDEX, strict=True)]
#: a distance; null stands for +infinity
Distance = float | None
#: at most 2**53 - 1, so that JavaScript clients read it exactly
Seed = Annotated[int, Field(ge=0, le=MAX_SEED, strict=True)]


class _Request(BaseModel):
    # numbers and booleans exactly as the schema says: no "seed": false read as 0, no "size": "8"
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    detail: str


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Ready(BaseModel):
    """Every store is ready: those warmed up at start-up (the default; none with ``--no-warm``), and those that could
    not be (name -> why)."""

    status: Literal["ready"] = "ready"
    warmed: list[str] = []
    failed: dict[str, str] = {}


class StoreIds(BaseModel):
    """Every item's id, in index order."""

    n_items: int
    ids: list[str]


class StoreInfo(BaseModel):
    """A store's manifest (docs/store-format.md) plus ``name``, and whether it is served."""

    model_config = ConfigDict(extra="allow")

    name: str
    available: bool = Field(description="false for an incomplete store (answers 503 until it is complete)")
    complete: bool | None = None
    format: int | None = None
    dataset: str | None = None
    kind: str | None = None
    params: dict[str, Any] | None = None
    n_items: int | None = None
    k: int | None = None
    labels_sha256: str | None = None
    engine_version: str | None = None
    created: str | None = None
    has_dense: bool | None = Field(None, description="the store holds the full dense matrix")
    searchable: bool | None = Field(
        None,
        description="the store can be searched by a new label (POST .../search): its kind reads labels from JSON",
    )
    distance: str | None = Field(None, description="what the store's distances mean, in words")
    digest: str | None = Field(
        None,
        description="SHA-256 of the served store's manifest: changes when the store "
        "on disk is rebuilt or replaced, which the service then serves without a restart",
    )
    detail: str | None = Field(None, description="why an unavailable store is not served")


class StoreList(BaseModel):
    stores: list[StoreInfo]


#: what an answer's labels are, in the OpenAPI schema
LABELS_FORM = (
    "each in its kind's JSON form: a pose a list of its joints, each [x, y] (the store's frame) or null; a vector "
    "a list of its D numbers; a caption set a list of caption strings; a sentence a string; a layout map a list "
    "of its H rows of W surface labels. The forms a search takes, where the kind is searched by label"
)


class Neighbors(BaseModel):
    index: int
    id: str
    indices: list[int] = Field(description="neighbour indices, nearest first")
    ids: list[str]
    distances: list[Distance]
    label: Any = Field(None, description="the item's own label, only with include_labels=true; " + LABELS_FORM)
    labels: list[Any] | None = Field(
        None,
        description="the neighbours' labels, in the order of indices, only with include_labels=true; " + LABELS_FORM,
    )


class AnchorItems(_Request):
    anchor: Index
    items: list[Index] = Field(description="distances are answered in this order")


class Pairs(_Request):
    pairs: list[tuple[Index, Index]]


class Distances(BaseModel):
    distances: list[Distance]
    computed: int = Field(description="distinct pairs computed on demand for this request (not stored, not cached)")


class _BatchOptions(_Request):
    size: int = Field(32, ge=2, strict=True, description="batch size with the anchor; each batch has size - 1 items")
    neighbors: int = Field(0, ge=0, strict=True, description="how many of the anchor's nearest neighbours come first")
    pairwise: bool = Field(
        False, strict=True, description="also answer the (size x size) matrix of the batch, anchor first"
    )
    seed: Seed | None = Field(None, description="seed of the random choices; the answer says which was used")
    pool: list[Index] | None = Field(
        None,
        description="the items every member of every batch is drawn from (anchors, nearest and random others "
        "alike): say, the training items, so that held-out items never reach a batch. The nearest are the "
        "anchor's nearest within the pool. A set: order and repeats do not matter. Given anchors must be in it; "
        "count draws the anchors from it; it must hold at least size items",
    )
    exclude: list[Index] | None = Field(
        None,
        description="the items no batch ever contains (say, the held-out items): the pool is every other item. "
        "Give pool or exclude, not both; whichever is shorter",
    )


class BatchesByAnchors(_BatchOptions):
    anchors: list[Index] = Field(min_length=1, description="one batch per anchor, in this order")


class BatchesByCount(_BatchOptions):
    count: int = Field(
        ge=1,
        strict=True,
        description="number of batches, anchors drawn at random without replacement (from the pool when there is one)",
    )


class Batch(BaseModel):
    anchor: int
    anchor_id: str
    items: list[int] = Field(description="the anchor's nearest neighbours first, then random others")
    ids: list[str]
    distances: list[Distance] = Field(description="from the anchor to each item")
    pairwise: list[list[Distance]] | None = Field(description="the batch's matrix, anchor first, when asked")


class Batches(BaseModel):
    batches: list[Batch]
    seed: int = Field(description="the seed used; send it again to get the same batches")
    computed: int = Field(description="distinct pairs computed on demand for this request")


class PoseView(BaseModel):
    joints: list[str] | None = Field(
        description="joint names: the store's (labels/joint_names), else MPII's for 16 "
        "joints, joint_0, joint_1, ... otherwise"
    )
    xy: list[tuple[float, float] | None] = Field(description="joint coordinates; null for a missing joint")
    visible: list[bool]
    edges: list[tuple[int, int]] = Field(
        description="pairs of joints joined by a bone: the bones of every skeleton "
        "the pose kind declares (MPII's, COCO's) both of whose joints the store "
        "has"
    )
    sides: list[str] | None = Field(None, description="each joint's side as its name says: left, right or center")


class LegendEntry(BaseModel):
    value: int = Field(description="the label value of the map's pixels")
    name: str
    color: str = Field(description="its colour in the map's PNG, #rrggbb")


class LabelView(BaseModel):
    """A label rendered for display: a pose, images (PNG data URLs), texts, and/or the raw values."""

    index: int
    id: str
    kind: str
    pose: PoseView | None = None
    images: list[str] | None = Field(None, description="PNG data URLs (e.g. a layout map)")
    texts: list[str] | None = None
    values: dict[str, Any] | None = Field(None, description="other label arrays of the item, as nested lists")
    legend: list[LegendEntry] | None = Field(
        None, description="the colours of the map images: every surface class of a layout, else the values shown"
    )


class Search(_Request):
    label: Any = Field(
        description="a new label in its kind's JSON form: a caption set is a list of caption strings (one string is "
        "one caption); a pose a list of the store's joints (16 for MPII), each [x, y] in the frame of the store's "
        'coordinates or null, or, for a normalised store, {"joints": [...] in image pixels, "center": [x, y], '
        '"scale": s} ("head": h, "box": [x, y, w, h], as its normalisation takes), normalised as the store\'s '
        "poses were; a vector a list of the store's D numbers, or a number when D = 1"
    )
    k: int = Field(10, ge=1, strict=True, description="how many nearest items (at most LABELDIST_MAX_K)")
    include_labels: bool = Field(
        False,
        strict=True,
        description="also answer each hit's label (labels); 422 for a kind whose labels have no JSON form",
    )


class SearchResult(BaseModel):
    indices: list[int] = Field(description="the nearest items, nearest first (ties broken by index)")
    ids: list[str]
    distances: list[Distance] = Field(description="from the label to each item, float32 as a store holds them")
    computed: int = Field(
        description="exact distances computed: fewer than the items where a lower bound ruled "
        "some out (the pruning of the store's kNN lists)"
    )
    labels: list[Any] | None = Field(
        None, description="the hits' labels, in the order of indices, only with include_labels: true; " + LABELS_FORM
    )
