"""labeldist's client side: minibatches of label distances for a training loop of your own.

- :class:`LabelDistClient`: the HTTP client of a labeldist service (retries, clear errors, ``.npz`` answers);
- :class:`LocalSource`: stores read in this process, with the same methods and answers (no server);
- :class:`MinibatchStream`: a torch ``IterableDataset`` of training steps from either, prefetched, with each item's
  input (:class:`FeatureInputs`, or any :class:`Inputs`);
- :func:`pml_labels`, :func:`pml_triplets`: a minibatch as pytorch-metric-learning's losses and miners take it.

The data flows labels -> distances -> engine -> store -> api -> client -> trainer: this package imports neither the
service (``labeldist.api``) nor the trainer (``labeldist.trainer``).
"""

from labeldist.client.data import FeatureInputs, MinibatchStream, Source
from labeldist.client.http import (
    Hits,
    LabelDistClient,
    Neighbors,
    RequestRejected,
    ServiceError,
    ServiceUnavailable,
    StoreNotFound,
)
from labeldist.client.inputs import InputError, Inputs
from labeldist.client.local import LocalSource, StoreMovedOn
from labeldist.client.minibatch import Minibatch
from labeldist.client.pml import binary_split, pml_labels, pml_triplets
from labeldist.client.prefetch import Prefetcher

__all__ = [
    "FeatureInputs",
    "Hits",
    "InputError",
    "Inputs",
    "LabelDistClient",
    "LocalSource",
    "Neighbors",
    "StoreMovedOn",
    "Minibatch",
    "MinibatchStream",
    "Prefetcher",
    "RequestRejected",
    "ServiceError",
    "ServiceUnavailable",
    "Source",
    "StoreNotFound",
    "binary_split",
    "pml_labels",
    "pml_triplets",
]
