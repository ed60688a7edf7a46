"""Training steps made in DataLoader worker processes: each worker asks the source (the service, or a store read
in-process) for its requests' minibatches and makes their inputs (the trainer decodes and augments images there),
so neither HTTP nor JPEG decoding holds the GIL of the training loop.

Worker ``w`` of ``W`` makes requests ``first + w``, ``first + w + W``, ...; a ``DataLoader`` over an
``IterableDataset`` takes one result from each worker in turn, so the steps arrive in request order, the same
for any ``W`` (and for ``W = 0``, everything in the calling process). The torch generator is seeded per request
(from the run's seed, the epoch and the request) around the request alone, so random crops depend on the seed
and not on which worker made them, and a resumed run sees the crops of an uninterrupted one.

With ``pin_memory`` (on CUDA) the DataLoader's pinning thread copies each step into page-locked memory, so the
copy to the GPU is asynchronous. Errors that a user can fix (inputs that cannot be read, such as an image that
does not decode; a service error; a damaged store) come back from the worker as one line, not as a worker's
traceback.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from labeldist.client.answers import ServiceError
from labeldist.client.inputs import InputError
from labeldist.store import StoreError

#: a step of a stream (a :class:`~labeldist.client.data.Minibatch`)
T = TypeVar("T")

#: errors a worker hands back as a message, re-raised in the training process with their own type (InputError
#: covers the trainer's ImageInputError; StoreError a store read in-process by LocalSource)
PASSED_ON = (InputError, ServiceError, StoreError)


class Stream(Protocol[T]):
    """What the workers use of a stream, a :class:`~labeldist.client.data.MinibatchStream` (whose module imports
    this one, not the other way): its source ``client`` (each forked worker takes ``client.fresh()``), ``seed``,
    ``requests_per_epoch``, and ``_fetch(request)``, the steps of one request."""

    client: Any
    seed: int
    requests_per_epoch: int

    def _fetch(self, request: int) -> list[T]: ...


@dataclass
class _Failed:
    kind: type[Exception]
    message: str


def worker_message(error: BaseException) -> str:
    """The error's own message, without the "Caught ... in DataLoader worker process" traceback that a
    DataLoader puts around an exception raised in a worker."""
    text = str(error).strip()
    if not text.startswith("Caught "):
        return text
    return text.splitlines()[-1].split(": ", 1)[-1]


def request_seed(seed: int, epoch: int, request: int) -> int:
    """The torch seed of one request's augmentation: a function of the run's seed, the epoch and the request."""
    return int(np.random.default_rng([seed, epoch, request, 1]).integers(2**63))


class _Requests(IterableDataset):
    """Requests ``first..stop`` of a :class:`~labeldist.client.data.MinibatchStream`, split between the loader's
    workers."""

    def __init__(self, stream: Stream[Any], first: int, stop: int) -> None:
        super().__init__()
        self.stream, self.first, self.stop = stream, first, stop

    def __iter__(self) -> Iterator[list[Any] | _Failed]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        stream = self.stream
        if info is not None:  # a forked worker: its own connections (or store handles)
            stream = copy.copy(stream)
            stream.client = stream.client.fresh()
        for request in range(self.first + worker, self.stop, workers):
            epoch = request // stream.requests_per_epoch
            try:
                with torch.random.fork_rng(devices=[]):  # the caller's generator is left as it was
                    torch.manual_seed(request_seed(stream.seed, epoch, request))
                    steps = stream._fetch(request)
            except PASSED_ON as e:
                yield _Failed(type(e), str(e))
                return
            yield steps


def steps_in_processes(
    stream: Stream[T], first: int, stop: int, *, workers: int, prefetch: int, pin_memory: bool
) -> Iterator[list[T]]:
    """The results of requests ``first..stop`` in order, made by ``workers`` processes (0: this one), up to about
    ``prefetch`` requests ahead."""
    options = {}
    if workers > 0:
        options = {"prefetch_factor": max(2, math.ceil(prefetch / workers)), "persistent_workers": False}
    loader = DataLoader(
        _Requests(stream, first, stop), batch_size=None, num_workers=workers, pin_memory=pin_memory, **options
    )
    for result in loader:
        if isinstance(result, _Failed):
            try:
                error = result.kind(result.message)
            except TypeError:  # an exception type whose constructor wants more than a message
                error = RuntimeError(result.message)
            raise error
        yield result
