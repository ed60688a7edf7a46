"""Minibatches for deep metric learning with continuous labels, from a labeldist service or a store read in-process.

Dense triplet mining (Kim et al., CVPR 2019, §3.2): a minibatch is an anchor, its ``neighbors`` nearest items
in label space and random others, with the label distances from the anchor to every item (and, for the ladder
loss, the batch's whole pairwise matrix). A :class:`Source` draws them: the service (``POST
/v1/stores/{store}/batches`` through :class:`~labeldist.client.http.LabelDistClient`) or a store read in this
process (:class:`~labeldist.client.local.LocalSource`, the same draws for the same seed, no server). This module
adds each item's *input* (a row of a feature array indexed like the store, or any
:class:`~labeldist.client.inputs.Inputs`, such as the trainer's images) and feeds them to the training loop ahead
of time (background threads, or DataLoader worker processes: :mod:`labeldist.client.loader`), so the loop never
waits on the source while results are ready.

Paper settings: batch size 150 for poses and 50 for captions, ``neighbors`` k = 5.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import IterableDataset

from labeldist.client.inputs import InputError, Inputs
from labeldist.client.loader import steps_in_processes
from labeldist.client.minibatch import Minibatch
from labeldist.client.prefetch import Prefetcher
from labeldist.core.reading import open_regular
from labeldist.errors import UsageError
from labeldist.labels.base import LabelError, read_npy


class Source(Protocol):
    """Where minibatches come from: a :class:`~labeldist.client.http.LabelDistClient` (a service over HTTP) or a
    :class:`~labeldist.client.local.LocalSource` (stores read in this process). Both answer the same
    :class:`~labeldist.client.minibatch.Minibatch`."""

    def batches(
        self,
        store: str,
        *,
        anchors: np.ndarray,
        size: int,
        neighbors: int,
        pairwise: bool,
        seed: int,
        pool: np.ndarray | None = None,
        exclude: np.ndarray | None = None,
    ) -> Minibatch:
        """One minibatch per anchor: the anchor's ``neighbors`` nearest, then random others (``seed``); with
        ``pool`` or ``exclude`` (only passed when the stream has a pool) every member an item of the pool."""
        ...

    def fresh(self) -> Source:
        """The same source with its own connections or files, for a forked worker process."""
        ...


class FeatureInputs:
    """A feature array indexed like the store: a ``.npy`` file (memory-mapped), a Zarr array, or an array.

    Called with an array of store indices, it answers their rows as a float32 tensor of shape
    ``indices.shape + item_shape``.

    Parameters
    ----------
    source : str or Path or numpy.ndarray
        A ``.npy`` file, a Zarr array's path, or the array itself, of shape ``(N, ...)`` (numbers).
    in_memory : bool
        Read the whole array into memory as float32 (default); False reads the rows asked for each time.

    Raises
    ------
    InputError
        When ``source`` is no feature array, has fewer than 2 dimensions, or does not hold numbers.

    Examples
    --------
    >>> FeatureInputs(np.eye(3, dtype=np.float32))(np.array([[2, 0]])).shape
    torch.Size([1, 2, 3])
    """

    def __init__(self, source: str | Path | np.ndarray, *, in_memory: bool = True) -> None:
        if isinstance(source, np.ndarray):
            array: Any = source
        elif str(source).endswith(".npy"):
            array = _open_npy(source)
        else:
            import zarr

            try:
                array = zarr.open_array(str(source), mode="r")
            except (FileNotFoundError, ValueError, zarr.errors.ArrayNotFoundError) as e:
                raise InputError(f"{source}: no feature array there (a .npy file or a Zarr array): {e}") from None
        if array.ndim < 2:
            raise InputError(f"features must have shape (N, ...), got {array.shape} from {source!r:.80}")
        if np.dtype(array.dtype).kind not in "biuf":
            raise InputError(
                f"features must be numbers (integers or floats), got dtype {array.dtype} from {source!r:.80}"
            )
        self.array = np.array(array[...], dtype=np.float32) if in_memory else array
        self.n_items = int(array.shape[0])
        self.item_shape = tuple(int(s) for s in array.shape[1:])

    def __call__(self, indices: np.ndarray) -> torch.Tensor:
        flat = np.asarray(indices, dtype=np.int64).reshape(-1)
        rows = np.asarray(self.array[np.sort(flat)] if not isinstance(self.array, np.ndarray) else self.array[flat])
        if not isinstance(self.array, np.ndarray):  # Zarr reads want sorted indices: undo the sort
            rows = rows[np.argsort(np.argsort(flat))]
        return torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32)).reshape(
            *np.shape(indices), *self.item_shape
        )


def _open_npy(path: str | Path) -> np.ndarray:
    """A ``.npy`` file memory-mapped; InputError naming it when it cannot be (a FIFO or a device, refused before it
    could block: :func:`~labeldist.core.reading.open_regular`; no ``.npy`` file, Python objects, which are never
    unpickled: :func:`labeldist.labels.base.read_npy` says which). The map is made of the file opened and
    checked, not of its name opened again."""
    from numpy.lib import format as npy

    try:
        with open_regular(path, "features file") as f:
            headers = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
            header = headers.get(npy.read_magic(f))
            if header is None:
                raise UsageError("a .npy version this reader does not know")
            shape, fortran, dtype = header(f)
            if dtype.hasobject:
                raise UsageError("Python objects")
            order = "F" if fortran else "C"
            return np.memmap(f, dtype=dtype, mode="r", shape=shape, order=order, offset=f.tell())
    except OSError as e:
        raise InputError(f"{path}: cannot read as features: {e.strerror or e}") from None
    except (ValueError, EOFError) as e:
        try:
            read_npy(path, "features file")
        except LabelError as why:
            raise InputError(str(why)) from None
        raise InputError(f"{path}: cannot read as features: {e}") from None


class MinibatchStream(IterableDataset):
    """Training steps of dense-triplet minibatches from a :class:`Source`, prefetched in background threads.

    Each epoch visits the anchors (all store items, or ``anchors``) in a seeded random order; a step takes
    ``batches_per_step`` anchors, each with its own minibatch of ``size`` items (anchor included): its
    ``neighbors`` nearest, then random others. Requests ask for ``anchors_per_request`` minibatches at once,
    with a seed derived from ``seed`` and the request's number, so a run (and a resumed run, ``start_step``)
    sees the same minibatches.

    **Held-out items never appear.** With ``anchors`` (say, the training items), every *member* of every minibatch
    is one of them too, not only the anchors: ``pool="anchors"``, the default, asks the source for minibatches
    drawn from the anchors alone (each anchor's nearest *among the anchors*, random others among them), so the
    items left out of ``anchors`` (a test split) never reach training. ``pool`` may also be an array of items
    (it must hold every anchor), or None to draw members from the whole store (items outside ``anchors`` then
    appear in minibatches, as they did before pools). The pool needs at least ``size`` items. The stream sends
    it as ``pool`` or as its complement ``exclude`` (``inputs.n_items`` being the store's items), whichever is
    shorter. Without ``anchors`` every item is an anchor and nothing is restricted.

    ``client`` is any :class:`Source`: a :class:`~labeldist.client.http.LabelDistClient` or a
    :class:`~labeldist.client.local.LocalSource` (``store`` is then a store's folder name under its root, or a
    path); the same seed draws the same minibatches from either.

    ``processes=None`` makes requests in ``workers`` background threads (enough for feature arrays: the work is
    HTTP or reading the store). ``processes=N`` makes them in N DataLoader worker processes
    (:mod:`labeldist.client.loader`), which also make the inputs there (the trainer decodes and augments images
    there, out of the training process's GIL); ``pin_memory`` (for CUDA) pins each step there too. Inputs with a
    true ``needs_processes`` attribute (images) need ``processes`` (0: in the calling process).

    Parameters
    ----------
    client : Source
        Where minibatches come from: a ``LabelDistClient`` or a ``LocalSource``.
    store : str
        The store's name at the source (a folder name under a ``LocalSource``'s root, or a path).
    inputs : Inputs
        Each item's input, indexed like the store (:class:`FeatureInputs`, or the trainer's images).
    size : int
        Items per minibatch, anchor included (150 in the paper for poses, 50 for captions).
    neighbors : int
        The anchor's nearest items in each minibatch; the rest are drawn at random.
    pairwise : bool
        Also fetch each minibatch's whole pairwise label-distance matrix (the ladder loss, ``anchors="all"``
        triplets).
    batches_per_step : int
        Minibatches in one training step.
    anchors_per_request : int
        Minibatches asked for in one request; a multiple of ``batches_per_step``.
    anchors : numpy.ndarray or None
        The anchors an epoch visits (say, the training items); None: every item of the store.
    pool : numpy.ndarray or str or None
        The items minibatch members are drawn from: ``"anchors"`` (the default), an array holding every anchor, or
        None for the whole store.
    epochs : int
        Passes over the anchors.
    seed : int
        Seeds the anchors' order and every request's draw: the same seed, the same minibatches.
    start_step : int
        The step to start at (a resumed run).
    prefetch : int
        Steps made ahead of the training loop.
    workers : int
        Background threads making requests (``processes=None``).
    processes : int or None
        DataLoader worker processes that make the requests and the inputs; None: threads in this process.
    pin_memory : bool
        Pin each step's tensors in the worker processes (for CUDA).

    Raises
    ------
    ValueError
        When the options do not go together: image inputs without ``processes``, ``anchors_per_request`` not a
        multiple of ``batches_per_step``, fewer anchors than ``batches_per_step``, or a pool without every anchor
        or with fewer than ``size`` items.
    """

    def __init__(
        self,
        client: Source,
        store: str,
        inputs: Inputs,
        *,
        size: int = 150,
        neighbors: int = 5,
        pairwise: bool = False,
        batches_per_step: int = 1,
        anchors_per_request: int = 8,
        anchors: np.ndarray | None = None,
        pool: np.ndarray | str | None = "anchors",
        epochs: int = 1,
        seed: int = 0,
        start_step: int = 0,
        prefetch: int = 8,
        workers: int = 2,
        processes: int | None = None,
        pin_memory: bool = False,
    ) -> None:
        super().__init__()
        if processes is None and getattr(inputs, "needs_processes", False):
            raise UsageError("image inputs are decoded in DataLoader processes: give processes (0: in this one)")
        if anchors_per_request % batches_per_step:
            raise UsageError(
                f"anchors_per_request={anchors_per_request} must be a multiple of batches_per_step={batches_per_step}"
            )
        self.client, self.store, self.inputs = client, store, inputs
        self.size, self.neighbors, self.pairwise = size, neighbors, pairwise
        self.bps, self.per_request = batches_per_step, anchors_per_request
        self.anchors = np.arange(inputs.n_items) if anchors is None else np.asarray(anchors, dtype=np.int64)
        self.pool = self._pool(pool, None if anchors is None else self.anchors, inputs.n_items, size)
        #: how the pool travels with each request: {}, {"pool": items} or {"exclude": the other items}
        self.restrict: dict[str, np.ndarray] = {}
        if self.pool is not None:
            rest = np.setdiff1d(np.arange(inputs.n_items), self.pool)
            self.restrict = {"exclude": rest} if rest.size < self.pool.size else {"pool": self.pool}
        self.epochs, self.seed, self.start_step = epochs, seed, start_step
        self.prefetch, self.workers = prefetch, workers
        self.processes, self.pin_memory = processes, pin_memory
        self.steps_per_epoch = len(self.anchors) // batches_per_step
        if self.steps_per_epoch < 1:
            raise UsageError(f"{len(self.anchors)} anchors are fewer than batches_per_step={batches_per_step}")
        self.requests_per_epoch = math.ceil(self.steps_per_epoch * batches_per_step / anchors_per_request)
        #: seconds the consumer spent waiting for a step that was not ready yet
        self.waited = 0.0

    @staticmethod
    def _pool(pool: np.ndarray | str | None, anchors: np.ndarray | None, n_items: int, size: int) -> np.ndarray | None:
        """The items minibatch members are drawn from, sorted and distinct; None: the whole store."""
        if isinstance(pool, str):
            if pool != "anchors":
                raise UsageError(f"pool={pool!r}: give 'anchors' (the default), an array of items, or None")
            if anchors is None:
                return None
            items, what = np.unique(anchors), "the anchors"
        elif pool is None:
            return None
        else:
            items, what = np.unique(np.asarray(pool, dtype=np.int64)), "the pool"
            if anchors is not None and np.setdiff1d(anchors, items).size:
                a = int(np.setdiff1d(anchors, items)[0])
                raise UsageError(
                    f"anchor {a} is not in the pool: every member of a minibatch, its anchor included, "
                    "is drawn from the pool"
                )
        if items.size and (items[0] < 0 or items[-1] >= n_items):
            raise UsageError(
                f"{what} name item {int(items[0] if items[0] < 0 else items[-1])}, not one of the "
                f"inputs' {n_items} items"
            )
        if items.size < size:
            why = (
                "minibatch members are drawn from the anchors alone (pool='anchors', the default), so that items "
                "left out of anchors never appear"
                if what == "the anchors"
                else "members are drawn from it"
            )
            raise UsageError(
                f"{what} hold {items.size} items, fewer than size={size}: {why}; pass pool=None to "
                "draw members from the whole store"
            )
        return items

    def __len__(self) -> int:
        return self.steps_per_epoch * self.epochs - self.start_step

    def _epoch_anchors(self, epoch: int) -> np.ndarray:
        order = np.random.default_rng([self.seed, epoch]).permutation(self.anchors)
        return order[: self.steps_per_epoch * self.bps]

    def _fetch(self, request: int) -> list[Minibatch]:
        epoch, r = divmod(request, self.requests_per_epoch)
        anchors = self._epoch_anchors(epoch)[r * self.per_request : (r + 1) * self.per_request]
        seed = int(np.random.default_rng([self.seed, epoch, r]).integers(2**31))  # JSON-safe everywhere
        got = self.client.batches(
            self.store,
            anchors=anchors,
            size=self.size,
            neighbors=self.neighbors,
            pairwise=self.pairwise,
            seed=seed,
            **self.restrict,
        )
        members = got.members
        inputs = self.inputs(members)
        steps = []
        for s in range(0, len(anchors), self.bps):
            sl = slice(s, s + self.bps)
            pw = None if got.pairwise is None else torch.from_numpy(got.pairwise[sl])
            steps.append(
                Minibatch(
                    indices=torch.from_numpy(members[sl]),
                    distances=torch.from_numpy(got.distances[sl]),
                    pairwise=pw,
                    inputs=inputs[sl],
                    seed=got.seed,
                )
            )
        return steps

    def __iter__(self) -> Iterator[Minibatch]:
        steps_per_request = self.per_request // self.bps
        # every request holds steps_per_request steps but an epoch's last one, which may hold fewer
        first_epoch, r = divmod(self.start_step, self.steps_per_epoch)
        first = first_epoch * self.requests_per_epoch + (r // steps_per_request)
        skip = r % steps_per_request
        stop = self.epochs * self.requests_per_epoch
        if self.processes is not None:
            steps = steps_in_processes(
                self, first, stop, workers=self.processes, prefetch=self.prefetch, pin_memory=self.pin_memory
            )
            source: Any = contextlib.closing(steps)
        else:
            source = Prefetcher(self._fetch, depth=self.prefetch, workers=self.workers, start=first, stop=stop)
        with source as queue:
            while True:
                t0 = time.perf_counter()
                try:
                    steps = next(queue)
                except StopIteration:
                    return
                self.waited += time.perf_counter() - t0
                yield from steps[skip:]
                skip = 0
