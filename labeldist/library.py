"""The Python face of labeldist: what ``import labeldist as ld`` gives, the same work the commands do.

Each function here is the one path its command takes too: ``labeldist precompute`` and :func:`precompute` read the
labels with the kind's reader (:meth:`labeldist.kinds.Kind.load`, its options by the same names) and build with
:func:`~labeldist.engine.jobs.build_store`; ``labeldist append`` and :func:`append` grow through
:func:`~labeldist.engine.jobs.grow_store`; ``labeldist split`` and :func:`split` run
:func:`labeldist.engine.split.split_input`. A kind's options are read as the commands read them
(:mod:`labeldist.engine.job_options`). A store comes back as a :class:`~labeldist.client.store.Store`.

    >>> import labeldist as ld
    >>> store = ld.open("stores/mpii-pose")
    >>> store.kind
    'pose'
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from labeldist.core.clusters import DEFAULT_WAIT_TIMEOUT, ClusterSpec
from labeldist.core.dense import DENSE_LIMIT
from labeldist.core.options import check_output
from labeldist.engine.job_options import RefusingParser, append_parser, cluster_of, kind_namespace, precompute_parser
from labeldist.engine.jobs import build_store, grow_store, workers_started
from labeldist.errors import UsageError
from labeldist.store import StoreError

if TYPE_CHECKING:
    from labeldist.client.store import Store
    from labeldist.distances.base import LabelDistance
    from labeldist.kinds import Kind
    from labeldist.labels.base import LabelSet

__all__ = ["append", "open", "precompute", "read_labels", "split"]


def _kind_of(kind: str | Kind | LabelDistance) -> tuple[Kind | None, LabelDistance | None]:
    """The registered kind and the distance given: a kind's name, a :class:`~labeldist.kinds.Kind`, or a distance
    object (a plugin's too; its kind registered or not)."""
    from labeldist.distances.base import LabelDistance
    from labeldist.kinds import Kind, KindError, get_kind

    if isinstance(kind, Kind):
        return kind, None
    if isinstance(kind, LabelDistance):
        try:
            return get_kind(kind.kind), kind
        except KindError:
            return None, kind
    if isinstance(kind, str):
        return get_kind(kind), None
    raise UsageError(f"kind must be a kind's name, a labeldist Kind or a LabelDistance, got {type(kind).__name__}")


def _label_set(kind: Kind | None, labels: Any) -> LabelSet:
    """Labels given in Python: a label set as it is, a NumPy array as a vectors kind's labels."""
    from labeldist.labels.base import LabelSet

    if isinstance(labels, LabelSet):
        return labels
    if isinstance(labels, np.ndarray) and (kind is None or kind.name == "vectors"):
        from labeldist.labels.vectors import vectors_from_array

        return vectors_from_array(labels)
    name = kind.name if kind is not None else "this"
    raise UsageError(
        f"labels for a {name} store: a label file's path, a LabelSet (ld.read_labels) or, for vectors, a NumPy "
        f"array; got {type(labels).__name__}"
    )


def _distance_from(kind: Kind, options: dict[str, Any]) -> LabelDistance:
    """The kind's distance made from ``options`` (its constructor's keywords), for labels given in Python."""
    cls = kind.distance_class()
    known = [p for p in inspect.signature(cls).parameters if p not in ("self", "args", "kwargs")]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UsageError(
            f"{cls.__name__} has no parameter {', '.join(map(repr, unknown))}; its parameters: "
            f"{', '.join(known) or 'none'} (reader options need a label file)"
        )
    return cls(**options)


# ---------------------------------------------------------------- the face
def read_labels(kind: str | Kind, path: str | os.PathLike[str] | None = None, **options: Any) -> LabelSet:
    """Read a label file with a kind's reader, as ``labeldist precompute KIND PATH [OPTIONS]`` reads it.

    Parameters
    ----------
    kind : str or Kind
        The kind: ``"pose"``, ``"vectors"``, ``"caption_wmd"``, ``"sentence_relevance"``, ``"layout_miou"`` or a
        plugin's (:func:`labeldist.kinds.registry`).
    path : str or path-like, optional
        The label file (none for a kind that makes its labels, e.g. ``layout_miou`` with ``generate=N``).
    **options
        The reader's options, named as the command's without dashes: ``format="coco"``, ``joints="mpii"``,
        ``min_joints=8``; a string goes through the option's type as typed text does.

    Returns
    -------
    LabelSet
        The kind's labels (:class:`~labeldist.labels.poses.Poses`, :class:`~labeldist.labels.vectors.Vectors`, ...).

    Raises
    ------
    LabelError
        For a file the reader cannot read, naming the file, the line and the column.
    UsageError
        For an option the kind does not have, or a value outside its choices.

    Examples
    --------
    >>> import labeldist as ld
    >>> poses = ld.read_labels("pose", "data/mpii/mpii_valid_2958.csv")
    >>> len(poses)
    2958
    """
    found, _ = _kind_of(kind)
    assert found is not None
    args = kind_namespace(found, path, options, precompute_parser(found))
    labels, _, _ = found.load(args)
    return labels


def precompute(
    kind: str | Kind | LabelDistance,
    labels: str | os.PathLike[str] | LabelSet | np.ndarray | None,
    out: str | os.PathLike[str],
    *,
    k: int = 100,
    dense: bool = True,
    dense_limit: int | None = DENSE_LIMIT,
    dataset: str | None = None,
    block_rows: int | None = None,
    cluster: ClusterSpec | str | None = None,
    scheduler: str | None = None,
    scheduler_file: str | os.PathLike[str] | None = None,
    workers: int | None = None,
    min_workers: int | None = None,
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
    client: Any = None,
    overwrite: bool = False,
    progress: bool | None = None,
    **options: Any,
) -> Store:
    """Compute a store of label distances: each item's exact k nearest, and the dense matrix where N allows.

    The same job as ``labeldist precompute KIND FILE --out OUT``, on a Dask cluster (a LocalCluster of one worker
    per core by default). A finished store made from the same labels and parameters is reused, an unfinished one
    resumed; one made with others is refused unless ``overwrite``.

    Parameters
    ----------
    kind : str, Kind or LabelDistance
        A kind's name (``"pose"``, ``"vectors"``, ...; a plugin's too), or a distance object, whose parameters
        are then its own.
    labels : str, path-like, LabelSet or ndarray
        A label file (read by the kind's reader, with ``options``), labels already read
        (:func:`read_labels`), or for vectors an (N, D) NumPy array (item ``i`` is id ``"i"``).
    out : str or path-like
        The store's folder (or an fsspec URL).
    k : int, default 100
        Neighbours per item, fewer than the items.
    dense : bool, default True
        Also store the N x N matrix (refused above ``dense_limit``; False: the kNN lists only).
    dense_limit : int or None, default 1 GiB
        The largest dense matrix to build, in bytes (4 N² of them).
    dataset : str, optional
        The dataset's name in the manifest (default: the file's stem, or the store folder's name).
    block_rows : int, optional
        Rows per task (default: chosen from N).
    cluster : ClusterSpec or str, optional
        Where the tasks run: a :class:`~labeldist.core.clusters.ClusterSpec`, or a job queue's name
        (``"slurm"``, ``"pbs"``, ``"sge"``, ``"lsf"``; with ``workers``).
    scheduler, scheduler_file : str, optional
        A running Dask scheduler's address, or the file it wrote.
    workers, min_workers : int, optional
        Worker processes to start (LocalCluster, job queue), and those to wait for.
    wait_timeout : float, default 600
        Seconds to wait for the workers.
    client : distributed.Client, optional
        Run on this Dask client instead.
    overwrite : bool, default False
        Replace a store made with other labels or parameters (built beside it, swapped in once complete).
    progress : bool, optional
        A progress bar (default: on a terminal).
    **options
        The kind's own options, named as the command's without dashes: for a file its reader's and its
        distance's (``metric="sqeuclidean"``, ``joints="mpii"``); for labels given in Python the distance's.

    Returns
    -------
    Store
        The finished store.

    Raises
    ------
    StoreMismatchError
        A store made with other labels or parameters is at ``out`` (pass ``overwrite``).
    UsageError
        Options that cannot make a store, named (``k`` of N items or more, a dense matrix over the limit, an
        unknown option).
    LabelError
        A label file the reader cannot read.

    References
    ----------
    Kim et al., CVPR 2019, "Deep Metric Learning Beyond Binary Supervision": the label distances a log-ratio loss
    and dense triplet mining need.

    Examples
    --------
    >>> import numpy as np, labeldist as ld
    >>> points = np.random.default_rng(0).normal(size=(50, 3))
    >>> store = ld.precompute("vectors", points, "stores/points", k=5, workers=1, progress=False)
    >>> len(store), store.neighbors(0).indices.shape
    (50, (5,))
    """
    found, distance = _kind_of(kind)
    spec = cluster_of(cluster, scheduler, scheduler_file, workers, min_workers, wait_timeout)
    out = os.fspath(out)
    check_output(out)  # before the labels are read, which can take minutes
    if labels is None or isinstance(labels, (str, os.PathLike)):
        from labeldist.store.outputs import check_not_inputs, command_paths

        if found is None:
            raise UsageError(f"kind {distance.kind!r} is not registered: give its labels as a LabelSet")  # type: ignore[union-attr]
        args = kind_namespace(found, labels, options, precompute_parser(found))
        # every file the kind reads (the label file, its word vectors, ...), as the command checks them
        check_not_inputs([], command_paths(vars(args), skip=("out",)), replaced=[out])
        args.dataset, args.dense, args.dense_limit, args.k = dataset, dense, dense_limit, k
        read, made, named = found.load(args)
        if distance is not None and options:
            raise UsageError("give the distance's parameters in the distance object, or as keywords, not both")
        distance, dataset = distance or made, dataset or named
    else:
        read = _label_set(found, labels)
        if distance is None:
            assert found is not None
            distance = _distance_from(found, options)
        elif options:
            raise UsageError(f"unknown keywords {', '.join(sorted(options))}: the distance object has its parameters")
        dataset = dataset or Path(out).name
    with workers_started():
        build_store(
            read,
            distance,
            out,
            dataset=dataset,
            k=k,
            dense=dense,
            dense_limit=dense_limit,
            block_rows=block_rows,
            cluster=spec,
            client=client,
            overwrite=overwrite,
            progress=progress,
        )
    return open_path(out)


def open(
    where: str | os.PathLike[str], name: str | None = None, *, pinned: bool = False, **client_options: Any
) -> Store:
    """Open one store: a folder read in this process, or a store of a labeldist service.

    Parameters
    ----------
    where : str or path-like
        The store's folder (``"stores/mpii-pose"``), a service's store URL
        (``"http://127.0.0.1:8000/v1/stores/mpii-pose"``), or a service's URL with ``name``.
    name : str, optional
        The store's name at the service ``where``.
    pinned : bool, default False
        A local store only: keep to the generation first opened, as a training run must (a store rebuilt or
        appended to afterwards raises :class:`~labeldist.client.local.StoreMovedOn`).
    **client_options
        For a service: :class:`~labeldist.client.http.LabelDistClient`'s ``timeout``, ``retries``, ``api_key``.

    Returns
    -------
    Store

    Raises
    ------
    StoreError
        No complete, intact store is in the folder (the reason named).
    StoreNotFound
        The service has no store of that name.

    Examples
    --------
    >>> import labeldist as ld
    >>> store = ld.open("stores/mpii-pose")
    >>> indices, distances = store.neighbors(0, k=5)
    >>> bool((distances[1:] >= distances[:-1]).all())
    True
    """
    text = os.fspath(where)
    if text.startswith(("http://", "https://")):
        from labeldist.client.http import LabelDistClient

        base, marker, rest = text.rstrip("/").partition("/v1/stores/")
        if marker and name is not None:
            raise UsageError(f"{text} names its store already; give name= only with the service's URL")
        name = rest if marker else name
        if not name:
            raise UsageError(f"{text}: which store? give the store's URL (.../v1/stores/NAME) or name=")
        store = LabelDistClient(base, **client_options).open(name)
        store.info  # noqa: B018  (a wrong name is refused here, not at the first question)
        return store
    if name is not None or client_options:
        raise UsageError("name= and client options are for a service's URL; a folder is opened by its path")
    return open_path(text, pinned=pinned)


def open_path(path: str | os.PathLike[str], *, pinned: bool = False) -> Store:
    """The store in the folder ``path``, read in this process (a :class:`~labeldist.client.local.LocalSource` over
    its parent folder); the store layer's own error where it is no complete, intact store."""
    from labeldist.client.local import LocalSource

    where = Path(path)
    if not where.name:  # "stores/x/" or "."
        where = Path(os.path.abspath(where))
    store = LocalSource(where.parent, pinned=pinned).open(where.name)
    store.info  # noqa: B018  (opens it: a wrong path is refused here, not at the first question)
    return store


def append(
    store: Store | str | os.PathLike[str],
    labels: str | os.PathLike[str] | LabelSet | np.ndarray,
    *,
    dense_limit: int | None = DENSE_LIMIT,
    cluster: ClusterSpec | str | None = None,
    scheduler: str | None = None,
    scheduler_file: str | os.PathLike[str] | None = None,
    workers: int | None = None,
    min_workers: int | None = None,
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
    client: Any = None,
    progress: bool | None = None,
    **options: Any,
) -> Store:
    """Append new items to a complete store: its next generation, exact, computing only the pairs with a new item.

    The same job as ``labeldist append STORE FILE``: a file is read by the store's kind with the settings the store
    records (``options`` may repeat them, never change them); the grown store equals a precompute of all items.

    Parameters
    ----------
    store : Store, str or path-like
        The store to grow (a local one).
    labels : str, path-like, LabelSet or ndarray
        The new items: a label file, labels read by :func:`read_labels`, or for vectors an array (numbered after
        the store's items).
    dense_limit : int or None, default 1 GiB
        The largest dense matrix the grown store may have.
    cluster, scheduler, scheduler_file, workers, min_workers, wait_timeout, client, progress
        As for :func:`precompute`.
    **options
        The kind's reader options, as for :func:`precompute`.

    Returns
    -------
    Store
        The grown store.

    Raises
    ------
    LabelError
        Ids already in the store.
    StoreMismatchError
        Labels read with other settings, or a distance with other parameters.

    Examples
    --------
    >>> import numpy as np, labeldist as ld
    >>> rng = np.random.default_rng(0)
    >>> store = ld.precompute("vectors", rng.normal(size=(20, 2)), "stores/grown", k=3, workers=1, progress=False)
    >>> len(ld.append(store, rng.normal(size=(5, 2)), workers=1, progress=False))
    25
    """
    from labeldist.client.store import Store
    from labeldist.kinds import get_kind
    from labeldist.store import read_manifest, store_url

    path = os.fspath(store.where if isinstance(store, Store) and store.is_local else store)
    if isinstance(store, Store) and not store.is_local:
        raise UsageError(f"append grows a store where its files are: {store.where} is served; append to its folder")
    spec = cluster_of(cluster, scheduler, scheduler_file, workers, min_workers, wait_timeout)
    manifest = read_manifest(store_url(path))
    if manifest is None:
        raise StoreError(f"{store_url(path)}: no labeldist store there (no manifest)")
    kind = get_kind(manifest["kind"])
    distance = None
    if isinstance(labels, (str, os.PathLike)):
        args = kind_namespace(kind, labels, options, append_parser(path, manifest, RefusingParser))
        from labeldist.store.outputs import check_not_inputs, command_paths

        check_not_inputs([], command_paths(vars(args)), replaced=[path])  # the store grows; nothing else
        read, distance, _ = kind.load(args)
    else:
        if options:
            raise UsageError(f"unknown keywords {', '.join(sorted(options))}: labels given in Python are not read")
        read = _label_set(kind, labels)
    with workers_started():
        grow_store(
            path, read, distance=distance, dense_limit=dense_limit, cluster=spec, client=client, progress=progress
        )
    return open_path(path)


def split(
    source: Store | str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    test_fraction: float = 0.2,
    query_fraction: float = 0.2,
    seed: int = 0,
    overwrite: bool = False,
    cluster: ClusterSpec | str | None = None,
    scheduler: str | None = None,
    scheduler_file: str | os.PathLike[str] | None = None,
    workers: int | None = None,
    min_workers: int | None = None,
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Split a store, or a label file, into a train part and a test part (with the test part's queries), as
    ``labeldist split`` does.

    A store gives two stores, ``out/train`` and ``out/test``, of its kind (a dense store's copied out of its
    matrix; a kNN-only store's precomputed); a label file gives ``out/train.EXT`` and ``out/test.EXT`` in its
    format. The same seed and fractions split a store and the file it was built from alike.

    Parameters
    ----------
    source : Store, str or path-like
        A local store, or a label file of any format precompute reads.
    out : str or path-like
        The folder of the two parts and ``split.json``.
    test_fraction : float, default 0.2
        The test part's share of the items.
    query_fraction : float, default 0.2
        The test part's share that are queries (the rest is the gallery).
    seed : int, default 0
        The split's seed.
    overwrite : bool, default False
        Replace parts made with other labels or parameters.
    cluster, scheduler, scheduler_file, workers, min_workers, wait_timeout, progress
        Where a kNN-only store's parts are precomputed, as for :func:`precompute`.

    Returns
    -------
    dict
        What ``split.json`` holds: ``train``, ``test``, ``queries`` and ``gallery`` item indices, ``source``,
        ``seed`` and the fractions, and for a store ``stores`` (each part's path: open it with :func:`open`).

    Examples
    --------
    >>> import labeldist as ld
    >>> parts = ld.split("stores/mpii-pose", "stores/mpii-split", test_fraction=0.2, seed=0)
    >>> len(parts["train"]) + len(parts["test"]) == len(ld.open("stores/mpii-pose"))
    True
    >>> ld.open(parts["stores"]["test"]).kind
    'pose'
    """
    from labeldist.client.store import Store
    from labeldist.engine.split import split_input

    path = source.where if isinstance(source, Store) and source.is_local else source
    if isinstance(source, Store) and not source.is_local:
        raise UsageError(f"split reads a store's files: {source.where} is served; split its folder")
    spec = cluster_of(cluster, scheduler, scheduler_file, workers, min_workers, wait_timeout)
    with workers_started():
        return split_input(
            Path(path),
            Path(out),
            test_fraction=test_fraction,
            query_fraction=query_fraction,
            seed=seed,
            overwrite=overwrite,
            cluster=spec,
            progress=progress,
        )
