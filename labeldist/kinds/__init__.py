"""The registry of store kinds: built-in kinds and plugins, each declaring its distance, its label reader and its
``labeldist precompute`` command.

A kind is a :class:`Kind`, from a **built-in** module of this package (``labeldist.kinds.<name>``, defining ``KIND``:
the kind's options and ``load``, with its labels and distance modules) or a **plugin**'s entry point in the group
``labeldist.kinds`` (``examples/labeldist-angles`` is a complete one), e.g. in its ``pyproject.toml``::

    [project.entry-points."labeldist.kinds"]
    angles = "labeldist_angles:KIND"

:func:`registry` builds the whole registry on first use; :func:`get_kind` imports a built-in kind's own module only
(a pose store does not load the sentence models). A plugin that fails to load is left out with a warning naming its
entry point. Adding a kind: docs/design.md, "Where to add things".
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import importlib.metadata
import logging
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from labeldist.errors import LabeldistError

if TYPE_CHECKING:
    from labeldist.distances.base import LabelDistance
    from labeldist.labels.base import LabelSet

__all__ = [
    "ENTRY_POINTS",
    "Kind",
    "KindError",
    "Registry",
    "check_block",
    "check_file_labels",
    "distance_class",
    "distance_meaning",
    "get_kind",
    "probe",
    "read_label",
    "registry",
]

log = logging.getLogger(__name__)
ENTRY_POINTS = "labeldist.kinds"

#: (labels, distance, dataset name) from the parsed command line
Loader = Callable[[argparse.Namespace], "tuple[LabelSet, LabelDistance, str]"]


class KindError(LabeldistError, ValueError):
    """An unknown kind, a plugin that did not load, or a kind whose distance misbehaves."""


@dataclass(frozen=True)
class Kind:
    """What labeldist needs of a kind of labels.

    Parameters
    ----------
    name : str
        The manifest's ``kind``, e.g. ``"pose"``.
    distance : str
        ``"module:Class"`` of its :class:`~labeldist.distances.base.LabelDistance` (imported on first use, so
        that asking for one kind does not load the word vectors or torch of another).
    help : str
        One line for ``labeldist precompute --help``.
    add_arguments : Callable[[argparse.ArgumentParser], None]
        Adds the command's own options (the input, the distance's parameters) to its parser; the options every
        kind shares (``--k``, ``--out``, ...) are added after them.
    load : Callable
        Reads the labels and builds the distance from the parsed options: ``(labels, distance, dataset)``;
        raises :class:`~labeldist.labels.base.LabelError` for bad input (one line, naming the file).
    command : str
        The ``labeldist precompute`` sub-command, e.g. ``"pose"`` (default: ``name``).
    origin : str
        Where it came from: ``"built-in"``, or the plugin's distribution and entry point.
    """

    name: str
    distance: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    load: Loader
    command: str = ""
    #: where it came from: "built-in", or the plugin's distribution and entry point
    origin: str = field(default="built-in", compare=False)

    @property
    def subcommand(self) -> str:
        return self.command or self.name

    def distance_class(self) -> type[LabelDistance]:
        module, _, name = self.distance.partition(":")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise KindError(
                f"kind {self.name!r} ({self.origin}): cannot import its distance {self.distance!r}: {e}"
            ) from e
        if getattr(cls, "kind", None) != self.name:
            raise KindError(
                f"kind {self.name!r} ({self.origin}): {self.distance} has kind {getattr(cls, 'kind', None)!r}"
            )
        return cls


@dataclass
class Registry:
    """Every kind this installation knows (:func:`registry`): by name, built-in kinds first, then plugins; and the
    plugin entry points that did not load, each with why."""

    kinds: dict[str, Kind]
    #: entry points that did not load: name -> why
    broken: dict[str, str]


@functools.cache
def builtin_names() -> tuple[str, ...]:
    """The modules of this package, each a built-in kind named after its module (``pose``, ``vectors``, ...).
    Listed once: :func:`get_kind` runs on the service's request path (a store's distance class), where a listing
    of this folder per call cost ~40 us against a dictionary look-up."""
    return tuple(sorted(info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")))


@functools.cache
def builtin_kind(name: str) -> Kind:
    """The ``KIND`` of the built-in kind module ``labeldist.kinds.<name>``; KindError where the module declares no
    Kind, or one of another name (the module's name is how :func:`get_kind` finds it)."""
    kind = getattr(importlib.import_module(f"{__name__}.{name}"), "KIND", None)
    if not isinstance(kind, Kind) or kind.name != name:
        raise KindError(f"{__name__}.{name} must define KIND, a Kind named {name!r}; it has {kind!r}")
    return kind


def _builtin() -> list[Kind]:
    return [builtin_kind(name) for name in builtin_names()]


@functools.cache
def registry() -> Registry:
    """Every kind: built-in, then plugins (a plugin may not take a built-in kind's name or command)."""
    kinds: dict[str, Kind] = {}
    broken: dict[str, str] = {}
    for kind in _builtin():
        kinds[kind.name] = kind
    for ep in importlib.metadata.entry_points(group=ENTRY_POINTS):
        origin = f"plugin {ep.dist.name if ep.dist else '?'}: {ep.name} = {ep.value}"
        try:
            kind = ep.load()
        except Exception as e:  # a plugin's own error: it must not break the other kinds
            broken[ep.name] = f"{origin} failed to load: {type(e).__name__}: {e}"
            log.warning("%s", broken[ep.name])
            continue
        if not isinstance(kind, Kind):
            broken[ep.name] = f"{origin} is a {type(kind).__name__}, not a labeldist.kinds.Kind"
            log.warning("%s", broken[ep.name])
            continue
        clash = next((k for k in kinds.values() if kind.name == k.name or kind.subcommand == k.subcommand), None)
        if clash is not None:
            broken[ep.name] = f"{origin} takes the name of kind {clash.name!r} ({clash.origin}): left out"
            log.warning("%s", broken[ep.name])
            continue
        kinds[kind.name] = dataclasses.replace(kind, origin=origin)
    return Registry(kinds, broken)


def get_kind(name: str) -> Kind:
    """The :class:`Kind` called ``name``; :class:`KindError` naming the known kinds (and a plugin that failed)."""
    if name in builtin_names():
        return builtin_kind(name)
    reg = registry()
    if name in reg.kinds:
        return reg.kinds[name]
    if name in reg.broken:
        raise KindError(f"kind {name!r}: {reg.broken[name]}")
    raise KindError(
        f"unknown kind {name!r}; known: {', '.join(sorted(reg.kinds))} (a plugin kind needs its "
        f"package installed: entry points {ENTRY_POINTS!r})"
    )


def distance_class(name: str) -> type[LabelDistance]:
    """The LabelDistance class of kind ``name``."""
    return get_kind(name).distance_class()


def distance_meaning(kind: str, params: dict[str, Any]) -> str:
    """What the distances of a store of ``kind`` made with ``params`` mean, in words
    (:meth:`LabelDistance.meaning`); for a kind not installed here, that it is not."""
    try:
        return distance_class(kind).meaning(params if isinstance(params, dict) else {})
    except KindError:
        return f"the {kind} distance (its kind is not installed here)"


def check_block(kind: str, block: Any, rows: int, cols: int, *, row_ids: Any = None, col_ids: Any = None) -> None:
    """Refuse what a kind's ``block`` returned unless it is a float array of shape ``(rows, cols)`` with no NaN:
    a plugin's mistake is named here, not written into a store or served. A NaN is named by the pairs of items
    that gave it (``row_ids``, ``col_ids``: the ids of the block's rows and columns, else their positions) and the
    kind: the engine, the service and the client all check every block they compute with it."""
    import numpy as np

    if not isinstance(block, np.ndarray) or block.shape != (rows, cols) or block.dtype.kind != "f":
        what = f"{type(block).__name__} {getattr(block, 'shape', '')} {getattr(block, 'dtype', '')}".strip()
        raise KindError(f"kind {kind!r}: block() must return a float array of shape ({rows}, {cols}), got {what}")
    nan = np.isnan(block)
    if nan.any():
        r, c = np.nonzero(nan)
        pairs = ", ".join(_pair(int(i), int(j), row_ids, col_ids) for i, j in zip(r[:3], c[:3]))
        more = ", ..." if len(r) > 3 else ""
        raise KindError(
            f"kind {kind!r}: block() returned NaN distances for {len(r)} of {nan.size} pairs: "
            f"{pairs}{more}: its distance is undefined for them (a value too large or too small for its "
            "formula?); nothing is stored or answered for them"
        )


def _pair(i: int, j: int, row_ids: Any, col_ids: Any) -> str:
    """``'a' to 'b'`` (the items' ids), or ``row 0 to column 1`` where the ids are not known."""
    a = repr(str(row_ids[i])) if row_ids is not None else f"row {i}"
    b = repr(str(col_ids[j])) if col_ids is not None else f"column {j}"
    return f"{a} to {b}"


def is_builtin_distance(distance: LabelDistance) -> bool:
    """Whether ``distance`` is the distance class of a built-in kind (whose blocks the project's own tests check
    against independent computations, :class:`labeldist.testing.DistanceSuite`), not a plugin's or a subclass."""
    return distance.kind in builtin_names() and type(distance) is builtin_kind(distance.kind).distance_class()


def probe(distance: LabelDistance, labels: LabelSet) -> None:
    """Check ``labels`` against the distance's own limits (:meth:`LabelDistance.check_labels`: a LabelError
    naming the item), then, for a distance that is not a built-in kind's (a plugin's), run it on a small block of
    them and check what it returns, before anything is written. A built-in distance is not run here: a sentence
    kind's would load its model in this process as well as in every worker (11 s of a 26 s precompute of three
    sentences)."""
    import numpy as np

    distance.check_labels(labels)
    if is_builtin_distance(distance):
        return
    n = min(len(labels), 3)
    rows, cols = labels.subset(np.arange(min(n, 2))), labels.subset(np.arange(n))
    try:
        block = distance.block(rows, cols)
    except Exception as e:
        raise KindError(f"kind {distance.kind!r}: block() raised {type(e).__name__}: {e}") from e
    check_block(distance.kind, block, len(rows), len(cols), row_ids=rows.ids, col_ids=cols.ids)


def check_file_labels(distance: LabelDistance, labels: LabelSet, path: str) -> None:
    """:meth:`LabelDistance.check_labels` on the labels a kind's ``load`` read from the file ``path``: values whose
    distances would overflow are refused with a LabelError naming the file, before any work."""
    from labeldist.labels.base import LabelError

    try:
        distance.check_labels(labels)
    except LabelError as e:
        raise LabelError(f"{path}: {e}") from None


def read_label(value: Any, labels: LabelSet, distance: LabelDistance) -> LabelSet:
    """A new label given in its kind's JSON form (a parsed JSON value), as a set of one item made as ``labels``
    were (:meth:`LabelSet.from_json`), for ``distance`` to compare with them: the search of a store by a label.

    Every kind, a plugin's included, gets the same checks around its own parser: the value first
    (:func:`~labeldist.labels.base.check_json_value`: no lone surrogate, no integer past a float64, named by its
    place, ``label[0][1]``), and the label made, against the distance's own limits together with ``labels``
    (:meth:`LabelDistance.check_labels`: values whose distances would overflow). Raises LabelError naming what
    is wrong (the kind's own errors after ``label: ``), or NotImplementedError: the kind has no JSON form.
    """
    from labeldist.labels.base import LabelError, check_json_value

    check_json_value(value, "label")
    try:
        query = type(labels).from_json(value, like=labels)
    except LabelError as e:
        raise LabelError(f"label: {e}") from None
    distance.check_labels(query, labels)
    return query
