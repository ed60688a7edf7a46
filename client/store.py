"""One object for one store, wherever it lies: :class:`Store`, what ``ld.open`` answers.

A store read in this process (:class:`~labeldist.client.local.LocalSource`) and a store served over HTTP
(:class:`~labeldist.client.http.LabelDistClient`) answer through the same :class:`Store`, whose methods take the
same arguments and answer the same types: the source does the work, the store names itself. What needs the store's
files (its labels as a label set, :meth:`Store.verify`, :meth:`Store.to_xarray`) is refused in one line for a
served store.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from labeldist.client.minibatch import Minibatch
from labeldist.errors import UsageError

if TYPE_CHECKING:
    import pandas
    import xarray

    from labeldist.client.answers import Hits, Neighbors
    from labeldist.labels.base import LabelSet


class Store:
    """One labeldist store: its items, their neighbours and label distances, minibatches, search by a new label.

    Made by :func:`labeldist.open` (a folder or a service's URL), by :func:`labeldist.precompute` and
    :func:`labeldist.append`, or by a source's ``open(name)``; every call reads the store as it is on disk now (a
    store rebuilt or appended to is opened again), and each answer comes whole from one generation.

    Parameters
    ----------
    source : LocalSource or LabelDistClient
        Where the store is read: in this process, or from a labeldist service.
    name : str
        The store's name in ``source`` (its folder's name under the source's root, or the service's name).

    Examples
    --------
    >>> import labeldist as ld
    >>> store = ld.open("stores/mpii-pose")
    >>> store.kind, len(store) == len(store.ids)
    ('pose', True)
    >>> store.neighbors(0, k=3).indices.shape
    (3,)
    """

    def __init__(self, source: Any, name: str) -> None:
        self.source, self.name = source, name

    def __repr__(self) -> str:
        return f"<labeldist.Store {self.name!r}: {self.where}>"

    @property
    def where(self) -> str:
        """The store's folder, or the service URL it is read from."""
        path = getattr(self.source, "path", None)
        return str(path(self.name)) if path is not None else f"{self.source.url}/v1/stores/{self.name}"

    @property
    def is_local(self) -> bool:
        """Whether the store's files are read in this process (else a service answers)."""
        return hasattr(self.source, "path")

    # ------------------------------------------------------------ what it is
    @property
    def info(self) -> dict[str, Any]:
        """The store's manifest (kind, distance parameters, dataset, ``n_items``, ``k``, generations, ...) with its
        ``name`` and ``has_dense``, read now (docs/store-format.md)."""
        return self.source.store(self.name)

    @property
    def kind(self) -> str:
        """The store's kind: ``pose``, ``vectors``, ``caption_wmd``, ``sentence_relevance``, ``layout_miou``, or a
        plugin's."""
        return str(self.info["kind"])

    @property
    def k(self) -> int:
        """The length of each item's neighbour list."""
        return int(self.info["k"])

    def __len__(self) -> int:
        """The number of items."""
        return int(self.info["n_items"])

    @property
    def ids(self) -> list[str]:
        """The id of every item, in index order."""
        return self.source.ids(self.name)

    @property
    def labels(self) -> LabelSet:
        """Every item's label, as the kind's label set (:class:`~labeldist.labels.base.LabelSet`).

        Raises
        ------
        UsageError
            For a served store: its labels are read where its files are (a hit's label: :meth:`search` with
            ``include_labels``).
        """
        return self._local("labels").labels(self.name)

    # ------------------------------------------------------------ the distances
    def neighbors(self, item: int, k: int | None = None) -> Neighbors:
        """The ``k`` nearest items of ``item`` in label space, nearest first.

        Parameters
        ----------
        item : int
            The item's index, ``0 <= item < len(store)``.
        k : int, optional
            How many, at most the store's ``k`` (default: all the store has).

        Returns
        -------
        Neighbors
            ``indices`` (k,) int64 and ``distances`` (k,) float32; unpacks as that pair.

        Raises
        ------
        StoreNotFound
            For an item the store does not have.
        RequestRejected
            For a ``k`` outside ``1..store.k``.
        """
        return self.source.neighbors(self.name, item, k)

    def distances(self, anchor: int, items: np.ndarray | list[int]) -> np.ndarray:
        """Label distances from ``anchor`` to each of ``items``, in that order: stored, or computed on demand.

        Parameters
        ----------
        anchor : int
            An item's index.
        items : array-like of int
            Item indices.

        Returns
        -------
        ndarray of shape (len(items),), float32
        """
        return self.source.distances(self.name, anchor, items)

    def pair_distances(self, pairs: np.ndarray | list[list[int]]) -> np.ndarray:
        """Label distances of index pairs, in that order.

        Parameters
        ----------
        pairs : array-like of shape (P, 2)
            Item index pairs ``(i, j)``.

        Returns
        -------
        ndarray of shape (P,), float32
        """
        return self.source.pair_distances(self.name, pairs)

    def search(self, label: Any, k: int = 10, *, include_labels: bool = False) -> Hits:
        """The exact ``k`` nearest items to a new label, nearest first.

        Parameters
        ----------
        label : object
            The new label in the kind's JSON form: a sentence, a list of captions, a vector's numbers, a pose's
            joints (docs/http-api.md, "Search by a new label").
        k : int, default 10
            How many items.
        include_labels : bool, default False
            Also answer each hit's label.

        Returns
        -------
        Hits
            ``indices``, ``ids``, ``distances`` and the number of exact distances ``computed``.

        Raises
        ------
        RequestRejected
            For a label the kind cannot read, named.
        """
        return self.source.search(self.name, label, k, include_labels=include_labels)

    def batches(
        self,
        *,
        anchors: np.ndarray | list[int] | None = None,
        count: int | None = None,
        size: int = 32,
        neighbors: int = 0,
        pairwise: bool = False,
        seed: int | None = None,
        pool: np.ndarray | list[int] | None = None,
        exclude: np.ndarray | list[int] | None = None,
    ) -> Minibatch:
        """Minibatches for dense triplet mining: one per anchor, its ``neighbors`` nearest, then random others.

        Parameters
        ----------
        anchors : array-like of int, optional
            The anchors; give exactly one of ``anchors`` and ``count``.
        count : int, optional
            How many anchors to draw.
        size : int, default 32
            Members of each minibatch, the anchor included.
        neighbors : int, default 0
            The anchor's nearest items put first.
        pairwise : bool, default False
            Also answer each minibatch's matrix of label distances.
        seed : int, optional
            The draw's seed (default: one drawn, answered as ``seed``).
        pool, exclude : array-like of int, optional
            The items every member is drawn from, or those none is.

        Returns
        -------
        Minibatch
            NumPy arrays: ``indices`` (B, size), ``distances`` (B, size - 1), ``pairwise`` or None, ``seed``;
            what :func:`~labeldist.client.pml.pml_labels` and :func:`~labeldist.client.pml.pml_triplets` take.

        References
        ----------
        Kim et al., CVPR 2019, "Deep Metric Learning Beyond Binary Supervision", §3.2.

        Examples
        --------
        >>> import labeldist as ld
        >>> mb = ld.open("stores/mpii-pose").batches(count=2, size=5, neighbors=2, seed=0)
        >>> mb.indices.shape, mb.distances.shape
        ((2, 5), (2, 4))
        """
        return self.source.batches(
            self.name,
            anchors=anchors,
            count=count,
            size=size,
            neighbors=neighbors,
            pairwise=pairwise,
            seed=seed,
            pool=pool,
            exclude=exclude,
        )

    def stream(self, inputs: Any, **options: Any) -> Any:
        """Training steps of minibatches with each member's input, prefetched: a
        :class:`~labeldist.client.data.MinibatchStream` over this store (needs the ``[train]`` extra).

        Parameters
        ----------
        inputs : Inputs, ndarray or str
            Each item's input: an :class:`~labeldist.client.inputs.Inputs`, or features indexed like the store (an
            array, a ``.npy`` file or a Zarr array: :class:`~labeldist.client.data.FeatureInputs`).
        **options
            :class:`~labeldist.client.data.MinibatchStream`'s options: ``size``, ``neighbors``, ``epochs``, ...

        Returns
        -------
        MinibatchStream
        """
        from labeldist.client.data import FeatureInputs, MinibatchStream

        if not callable(inputs):
            inputs = FeatureInputs(inputs)
        return MinibatchStream(self.source, self.name, inputs, **options)

    def warm(self) -> float:
        """Load now what a first search or computed distance would load (labels, a sentence store's model and
        embeddings); a served store is warmed by its service.

        Returns
        -------
        float
            Seconds it took (0 when already warm).
        """
        return self._local("warm").warm(self.name)[self.name]

    # ------------------------------------------------------------ the files
    def verify(self, sample: int = 200, seed: int = 0) -> dict[str, Any]:
        """Check every chunk's checksum, the labels' digests and the store contract, then recompute ``sample``
        entries with the distance's slow reference (``labeldist verify``).

        Parameters
        ----------
        sample : int, default 200
            Entries to recompute; 0 for the checksums only.
        seed : int, default 0
            The sample's seed.

        Returns
        -------
        dict
            The report ``labeldist verify`` prints; ``report["ok"]`` is whether everything held.
        """
        from labeldist.engine.verify import verify_store

        return verify_store(str(self._path("verify")), sample=sample, seed=seed)

    def to_pandas(self, k: int | None = None) -> pandas.DataFrame:
        """The neighbour lists as a table, one row per (item, rank): what ``labeldist export`` writes.

        Parameters
        ----------
        k : int, optional
            The first ``k`` neighbours of each item (default: all the store has).

        Returns
        -------
        pandas.DataFrame
            Columns ``item_index``, ``item_id``, ``rank`` (1 for the nearest), ``neighbor_index``, ``neighbor_id``,
            ``distance`` (docs/export.md), in item then rank order; needs the ``[io]`` extra.
        """
        from labeldist.engine.export import neighbor_table

        if self.is_local:
            table = neighbor_table(str(self._path("to_pandas")), k)
        else:
            table = self._served_table(k)
        return table.to_pandas()

    def _served_table(self, k: int | None) -> Any:
        """:meth:`to_pandas`'s table from a service: every item's neighbours, asked item by item."""
        from labeldist.engine.export import table_of

        ids = np.asarray(self.ids, dtype=object)
        rows = [self.neighbors(i, k) for i in range(len(ids))]
        indices = np.stack([r.indices for r in rows])
        distances = np.stack([r.distances for r in rows])
        return table_of(ids, indices, distances)

    def to_xarray(self) -> xarray.Dataset:
        """The store as an xarray Dataset, read lazily: the kNN lists (``indices``, ``distances`` on ``item`` and
        ``rank``), the dense matrix where the store has one (``dense`` on ``item`` and ``other_item``) and the
        items' ``ids`` as the ``item`` coordinate (needs the ``[io]`` extra).

        Returns
        -------
        xarray.Dataset
            Its ``attrs["labeldist"]`` is the store's manifest.
        """
        from labeldist.core.extras import needed

        path = str(self._path("to_xarray"))
        with needed("io", "Store.to_xarray"):
            import xarray as xr
        knn = xr.open_zarr(path, group="knn", consolidated=False, mask_and_scale=False)
        info = self.info
        parts = [knn]
        if info.get("dense"):
            dense = xr.open_zarr(path, group="dense", consolidated=False, mask_and_scale=False)
            parts.append(dense.rename({"distances": "dense"}))
        data = xr.merge(parts, combine_attrs="drop")
        data = data.assign_coords(item=np.asarray(self.ids, dtype=object))
        data.attrs["labeldist"] = info
        return data

    # ------------------------------------------------------------ where it lies
    def _local(self, what: str) -> Any:
        if not self.is_local:
            raise UsageError(
                f"Store.{what} reads the store's files: store {self.name!r} is served by {self.source.url}; "
                "open its folder where it lies (ld.open(PATH))"
            )
        return self.source

    def _path(self, what: str) -> Path:
        return self._local(what).path(self.name)
