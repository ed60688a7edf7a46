"""labeldist's client side: minibatches of label distances for a training loop of your own.

- :class:`LabelDistClient`: the HTTP client of a labeldist service (retries, clear errors, ``.npz`` answers);
- :class:`LocalSource`: stores read in this process, with the same methods and answers (no server);
- :class:`MinibatchStream`: a torch ``IterableDataset`` of training steps from either, prefetched, with each item's
  input (:class:`FeatureInputs`, or any :class:`Inputs`);
- :func:`pml_labels`, :func:`pml_triplets`: a minibatch as pytorch-metric-learning's losses and miners take it;
- :class:`Store`: one store through either source; :class:`Minibatch`: the one minibatch type of all of them.

The data flows labels -> distances -> engine -> store -> api -> client -> trainer: this package imports neither the
service (``labeldist.api``) nor the trainer (``labeldist.trainer``).
"""

import lazy_loader

# each name imported on first use: a Store of a pose store loads neither torch nor httpx
__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "data": ["FeatureInputs", "MinibatchStream", "Source"],
        "answers": ["Hits", "Neighbors", "RequestRejected", "ServiceError", "ServiceUnavailable", "StoreNotFound"],
        "http": ["LabelDistClient"],
        "inputs": ["InputError", "Inputs"],
        "local": ["LocalSource", "StoreMovedOn"],
        "minibatch": ["Minibatch"],
        "pml": ["binary_split", "pml_labels", "pml_triplets"],
        "prefetch": ["Prefetcher"],
        "store": ["Store"],
    },
)
