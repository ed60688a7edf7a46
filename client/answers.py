"""What a labeldist source answers besides minibatches, and its errors: the same from a store read in this process
(:class:`~labeldist.client.local.LocalSource`) and from a service (:class:`~labeldist.client.http.LabelDistClient`).
No httpx or torch here: a store read in this process needs neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from labeldist.errors import LabeldistError

__all__ = ["Hits", "Neighbors", "RequestRejected", "ServiceError", "ServiceUnavailable", "StoreNotFound"]


class ServiceError(LabeldistError, RuntimeError):
    """The service could not answer a request as asked."""

    def __init__(self, message: str, status: int | None = None, detail: Any = None) -> None:
        super().__init__(message)
        self.status, self.detail = status, detail


class ServiceUnavailable(ServiceError):
    """The service cannot be reached, or kept answering 5xx, after every retry."""


class StoreNotFound(ServiceError):
    """404: the store or item is unknown to the service."""


class RequestRejected(ServiceError):
    """Any other 4xx (bad parameters, a request over a limit, a missing API key)."""


class Neighbors(NamedTuple):
    """A store item's nearest (``neighbors``): ``indices`` (k,) int64 and ``distances`` (k,) float32, nearest
    first. A tuple too: ``indices, distances = client.neighbors(...)`` unpacks it."""

    indices: np.ndarray
    distances: np.ndarray


@dataclass
class Hits:
    """The nearest items of a new label (``search``): indices (k,) int64 and ids, nearest first; distances (k,)
    float32; how many exact distances were computed (fewer than the items where a lower bound ruled some out);
    labels, each hit's in its kind's JSON form, when asked for (else None)."""

    indices: np.ndarray
    ids: list[str]
    distances: np.ndarray
    computed: int
    labels: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.indices)
