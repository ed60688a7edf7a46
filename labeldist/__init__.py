"""labeldist: pairwise label distances computed with Dask into Zarr stores, served over HTTP.

``import labeldist as ld`` is the whole Python face:

- :func:`ld.precompute <labeldist.library.precompute>`, :func:`ld.append <labeldist.library.append>`,
  :func:`ld.split <labeldist.library.split>`, :func:`ld.read_labels <labeldist.library.read_labels>`: the work of
  ``labeldist precompute``, ``append``, ``split``, and the kinds' readers, by the same paths;
- :func:`ld.open <labeldist.library.open>`: one :class:`~labeldist.client.store.Store`, a folder or a service's;
- :class:`ld.Minibatch <labeldist.client.minibatch.Minibatch>`, :class:`ld.MinibatchStream
  <labeldist.client.data.MinibatchStream>`, :func:`ld.pml_labels <labeldist.client.pml.pml_labels>`,
  :func:`ld.pml_triplets <labeldist.client.pml.pml_triplets>`: a training loop of your own;
- ``ld.distances``, ``ld.labels``, ``ld.kinds``, ``ld.errors``: the distances, label sets and readers, kinds, errors.

Each name is imported on first use (lazy_loader): ``import labeldist`` itself loads no Dask, Zarr or torch, so a
Dask worker, the command line and the service import only what they use.

>>> import labeldist as ld
>>> ld.distances.PoseDistance(metric="euclidean").kind
'pose'
"""

import lazy_loader

__version__ = "0.2.0"

#: the face: each public name and the module it is defined in (relative to this package)
FACE = {
    "library": ["append", "open", "precompute", "read_labels", "split"],
    "client.store": ["Store"],
    "client.minibatch": ["Minibatch"],
    "client.answers": ["Hits", "Neighbors", "RequestRejected", "ServiceUnavailable", "StoreNotFound"],
    "client.http": ["LabelDistClient"],
    "client.local": ["LocalSource", "StoreMovedOn"],
    "client.data": ["FeatureInputs", "MinibatchStream"],
    "client.pml": ["pml_labels", "pml_triplets"],
    "core.clusters": ["ClusterSpec"],
    "errors": ["LabeldistError", "UsageError"],
    "labels.base": ["LabelError", "LabelSet"],
    "store.errors": ["StoreError", "StoreMismatchError"],
}

__getattr__, _lazy_dir, _names = lazy_loader.attach(
    __name__, submodules=["client", "distances", "errors", "kinds", "labels"], submod_attrs=FACE
)
__all__ = ["__version__", *_names]


def __dir__() -> list[str]:
    return list(__all__)
