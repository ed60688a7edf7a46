"""An opened store, for answering questions about it: the layer the service (``labeldist.api``) and the in-process
client (``labeldist.client.LocalSource``) share.

- :mod:`~labeldist.view.storeview`: :class:`StoreView`, one complete store opened read-only;
- :mod:`~labeldist.view.rowcache`: its kNN lists and dense rows, a row block at a time through bounded caches;
- :mod:`~labeldist.view.knnlookup`: a pair's distance found in either item's kNN list;
- :mod:`~labeldist.view.pairs`: the pairs a store does not hold, planned and computed from the labels;
- :mod:`~labeldist.view.search`: search by a new label, and its cost;
- :mod:`~labeldist.view.drawing`: the one rule that draws minibatches (anchors, neighbours, random others);
- :mod:`~labeldist.view.minibatch`: a minibatch request checked and assembled (anchors, items, distances);
- :mod:`~labeldist.view.folder`: the stores of one folder by name, reopened when they change.

Importing this package imports none of them: each is imported where it is used (numba, the kinds).
"""
