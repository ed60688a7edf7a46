"""Caption-set distance: the Word Mover's Distance lifted from captions to images (sets of captions).

Kim, Sohn, Kim, Kwak, "Deep Metric Learning Beyond Binary Supervision", CVPR 2019, Eq. 13; WMD from Kusner
et al., ICML 2015 (see :mod:`labeldist.distances.wmd`).
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np

from labeldist.core.cascade import KnownPairs, cascaded_topk
from labeldist.distances.base import LabelDistance
from labeldist.distances.caption_bounds import (
    ChunkTables,
    ImageWords,
    chunk_tables,
    image_word_bounds,
    image_words,
    pair_set_reduction,
    pair_set_rwmd,
)
from labeldist.distances.caption_kernels import (
    block_w,
    caption_set_distance,
    pairs_w,
    ragged_set_distances,
    set_rwmd,
)
from labeldist.distances.nbow import nbow, unit_rows
from labeldist.distances.wmd import wmd_many, wmd_pairs
from labeldist.distances.wmd_bounds import (
    euclidean_lower_bounds,
    nearest_in_texts,
    rwmd_many,
    wcd_many,
)
from labeldist.errors import UsageError
from labeldist.labels.base import LabelSet
from labeldist.labels.captions import CaptionSets

# caption pairs per kernel call in _block_plain() and the old bound: bounds their (captions x captions) float64
# matrix to 16 MB
_CHUNK_PAIRS = 1 << 21
# lower_bound_block() shrinks its bounds by this relative margin, so that rounding (word distances from a
# dot product, float32 tables, sums of a few dozen terms in another order; each well under 1e-12 relative)
# can never lift a bound above the value block() computes for the same pair. Bounds are about 0.95 of W:
# a margin this small costs no pruning.
_LB_MARGIN = 1e-9
# lower_bound_block(): bytes of the two float32 word tables of one row chunk (word distances V_c x V_r and
# nearest-word distances V_c x captions); a 256-image block of COCO against 5,000 images takes 1 or 2 chunks
_LB_CHUNK_BYTES = 1 << 26
# _pairs_plain(): image pairs per wmd_pairs call, so that its caption-pair arrays stay a few tens of MB
_PAIRS_CHUNK = 1 << 16
# per-instance cache of the preprocessing of recently seen caption sets (labels are immutable)
_CACHE_ENTRIES = 4

TextKernel = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class _Texts:
    """The distinct captions of a caption set (same token multiset = same caption) and the caption map."""

    inverse: np.ndarray  # (K,) distinct-caption index of each caption
    tokens: np.ndarray  # flat tokens of the distinct captions
    offsets: np.ndarray  # (U+1,)
    vectors: np.ndarray  # (V, d) vectors the tokens index, normalised if asked


def _distinct_texts(labels: CaptionSets, normalize: bool) -> _Texts:
    # sorting tokens within each caption makes word order irrelevant: WMD sees a bag of words
    k = labels.n_captions
    caption = np.repeat(np.arange(k), np.diff(labels.token_offsets))
    order = np.lexsort((labels.tokens, caption))
    sorted_tokens = labels.tokens[order]
    off = labels.token_offsets
    seen: dict[bytes, int] = {}
    inverse = np.empty(k, dtype=np.int64)
    firsts: list[int] = []
    for c in range(k):
        key = sorted_tokens[off[c] : off[c + 1]].tobytes()
        u = seen.setdefault(key, len(seen))
        if u == len(firsts):
            firsts.append(c)
        inverse[c] = u
    firsts_arr = np.asarray(firsts, dtype=np.int64)
    lengths = off[firsts_arr + 1] - off[firsts_arr]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = np.repeat(off[firsts_arr] - offsets[:-1], lengths) + np.arange(offsets[-1])
    vectors = unit_rows(labels.vectors) if normalize else labels.vectors
    return _Texts(inverse, sorted_tokens[flat], offsets, vectors)


@dataclass(frozen=True)
class Bags:
    """Every caption of a caption set as a normalised bag of words (:func:`~labeldist.distances.wmd.nbow`),
    and the distinct words of each image."""

    ids: np.ndarray  # (B,) vocabulary index of each bag entry
    weights: np.ndarray  # (B,) nBOW weight
    offsets: np.ndarray  # (K+1,) caption k owns entries offsets[k]:offsets[k+1]
    vectors: np.ndarray  # (V, d) float64 word vectors, normalised if asked
    image_words: np.ndarray  # vocabulary index of each image's distinct words, image by image
    image_offsets: np.ndarray  # (N+1,) image i owns image_words[image_offsets[i]:image_offsets[i+1]]
    local: np.ndarray  # (B,) position of each bag entry's word among its image's words


def _bags(labels: CaptionSets, normalize: bool) -> Bags:
    ids, weights, offsets = nbow(labels.tokens, labels.token_offsets)
    vectors = unit_rows(labels.vectors) if normalize else labels.vectors
    # distinct (image, word) keys, sorted by image then word
    caption_of_image = np.repeat(np.arange(len(labels)), np.diff(labels.caption_offsets))
    image = np.repeat(caption_of_image, np.diff(offsets))
    n_words = max(len(labels.vocab), 1)
    keys, inverse = np.unique(image * n_words + ids, return_inverse=True)
    image_offsets = np.zeros(len(labels) + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // n_words, minlength=len(labels)), out=image_offsets[1:])
    local = inverse.reshape(-1) - image_offsets[image]
    return Bags(ids, weights, offsets, np.asarray(vectors, dtype=np.float64), keys % n_words, image_offsets, local)


class _Prepared:
    """Per-caption-set preprocessing, each part built on first use: distinct captions (the plain paths), bags
    and image word lists (``block``, ``pairs``, the bound). Holds no reference to the set itself.

    Shared by the API's request threads (the distance caches one per label set): each part is built once,
    under a lock, by the first thread that needs it, while the others wait for it instead of building their
    own copy of a few hundred MB for a large set. Double-checked: once built, a part is read without the lock
    (an attribute holds either None or the finished, never-changed part).
    """

    def __init__(self, normalize: bool) -> None:
        self._normalize = normalize
        self._texts: _Texts | None = None
        self._bags: Bags | None = None
        self._image_words: ImageWords | None = None
        self._lock = threading.Lock()

    def _part(self, name: str, build: Callable[[], Any]) -> Any:
        """The part held in attribute ``name``, made by ``build()`` by the first thread that needs it (under the
        lock, checked again once it is held); read without the lock once made."""
        part = getattr(self, name)
        if part is None:
            with self._lock:
                part = getattr(self, name)
                if part is None:
                    part = build()
                    setattr(self, name, part)
        return part

    def texts(self, labels: CaptionSets) -> _Texts:
        return cast(_Texts, self._part("_texts", lambda: _distinct_texts(labels, self._normalize)))

    def bags(self, labels: CaptionSets) -> Bags:
        return cast(Bags, self._part("_bags", lambda: _bags(labels, self._normalize)))

    def image_words(self, labels: CaptionSets) -> ImageWords:
        b = self.bags(labels)  # before the lock, which is not re-entrant

        def build() -> ImageWords:
            return image_words(b, b.image_words, b.image_offsets, b.local, labels.caption_offsets)

        return cast(ImageWords, self._part("_image_words", build))


def _caption_pairs(
    caption_offsets: np.ndarray, i: np.ndarray, j: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every caption pair of the image pairs ``(i[t], j[t])``, pair by pair, row-major within a pair.

    Returns the row captions ``x`` and column captions ``y`` (global caption indices), ``starts`` (n+1,) —
    pair ``t`` owns ``x[starts[t]:starts[t+1]]`` — and the caption counts ``n_rows``, ``n_cols`` of each pair.

    >>> x, y, starts, _, _ = _caption_pairs(np.array([0, 2, 3]), np.array([0, 1]), np.array([1, 0]))
    >>> x.tolist(), y.tolist(), starts.tolist()
    ([0, 1, 2, 2], [2, 2, 0, 1], [0, 2, 4])
    """
    n_rows = caption_offsets[i + 1] - caption_offsets[i]
    n_cols = caption_offsets[j + 1] - caption_offsets[j]
    sizes = n_rows * n_cols
    starts = np.zeros(len(i) + 1, dtype=np.int64)
    np.cumsum(sizes, out=starts[1:])
    pair = np.repeat(np.arange(len(i)), sizes)
    q = np.arange(starts[-1], dtype=np.int64) - starts[pair]
    x = caption_offsets[i][pair] + q // n_cols[pair]
    y = caption_offsets[j][pair] + q % n_cols[pair]
    return x, y, starts, n_rows, n_cols


def _row_chunks(caption_offsets: np.ndarray, bags: Bags, n_col_words: int, i0: int, i1: int) -> list[tuple[int, int]]:
    """Row-image ranges of ``i0:i1`` whose float32 tables for the bound — ``n_col_words`` x (distinct words +
    captions of the range) — fit ``_LB_CHUNK_BYTES``, by halving; one image is never split."""
    c0, c1 = caption_offsets[i0], caption_offsets[i1]
    words = len(np.unique(bags.ids[bags.offsets[c0] : bags.offsets[c1]]))
    if i1 - i0 <= 1 or 4 * n_col_words * (words + c1 - c0) <= _LB_CHUNK_BYTES:
        return [(i0, i1)]
    mid = (i0 + i1) // 2
    return _row_chunks(caption_offsets, bags, n_col_words, i0, mid) + _row_chunks(
        caption_offsets, bags, n_col_words, mid, i1
    )


def _select(texts: _Texts, which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and offsets of the distinct captions ``which``."""
    lengths = texts.offsets[which + 1] - texts.offsets[which]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = np.repeat(texts.offsets[which] - offsets[:-1], lengths) + np.arange(offsets[-1])
    return texts.tokens[flat], offsets


class CaptionSetWMD(LabelDistance):
    """Caption-set WMD between images (Kim et al., CVPR 2019, Eq. 13; Kusner et al., ICML 2015).

    .. math::  W(X, Y) = \\sum_{x \\in X} \\min_{y \\in Y} WMD(x, y) + \\sum_{y \\in Y} \\min_{x \\in X} WMD(x, y)

    :math:`X, Y` the caption sets of two images; :math:`WMD` the exact Word Mover's Distance between two
    captions (normalised bag of words, Euclidean ground distance between word vectors), as gensim's
    ``KeyedVectors.wmdistance``. Symmetric, zero on identical sets, not normalised by the number of
    captions (an image with 6 captions sums 6 terms on its side).

    Labels from two different :class:`CaptionSets` can be compared: each side's tokens index its own
    vectors, and the ground distance comes from the vectors, never from word ids.

    Parameters
    ----------
    normalize : bool
        Scale word vectors to unit length first (default True: gensim's ``wmdistance(norm=True)``).
    """

    kind: ClassVar[str] = "caption_wmd"
    # measured by benchmarks/bench_pair_cost.py (672-914 us, 48-74 us on COCO caption sets, from quiet to busy
    # runs), rounded up
    cost_per_call_s: ClassVar[float] = 1.2e-3
    cost_per_pair_s: ClassVar[float] = 100e-6
    labels_class: ClassVar[type[LabelSet]] = CaptionSets
    # WMD is symmetric (optimal transport under a symmetric ground distance) and Eq. 13 sums both directions
    symmetric: ClassVar[bool] = True
    # ... to the last bit (the transport solved in one orientation), and exact W is what a kNN search spends on
    shares_exact_pairs: ClassVar[bool] = True

    def __init__(self, normalize: bool = True) -> None:
        if not isinstance(normalize, bool):
            raise UsageError(f"normalize must be a bool, got {normalize!r}")
        self.normalize = normalize
        self._init_cache()

    def _init_cache(self) -> None:
        # id(labels) -> (weak reference to labels, preprocessing); the weak reference tells a recycled id
        # from the same object. Bounded, least recently used first out.
        self._cache: OrderedDict[int, tuple[weakref.ref[CaptionSets], _Prepared]] = OrderedDict()
        self._cache_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # the cache (weak references, a lock) stays behind when the distance is shipped to a worker
        return {"normalize": self.normalize}

    @classmethod
    def meaning(cls, params: dict[str, Any]) -> str:
        unit = "unit-length " if params.get("normalize", True) else ""
        return (
            "caption-set word mover's distance: each caption's WMD to the nearest caption of the other image, summed "
            f"both ways ({unit}word vectors; 0: the same captions)"
        )

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.normalize = state["normalize"]
        self._init_cache()

    def params(self) -> dict[str, Any]:
        return {"normalize": self.normalize}

    def _prepared(self, labels: CaptionSets) -> _Prepared:
        """The cached preprocessing of ``labels`` (caption sets are immutable); call its parts with ``labels``."""
        key = id(labels)
        with self._cache_lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0]() is labels:
                self._cache.move_to_end(key)
                return hit[1]
            prepared = _Prepared(self.normalize)
            self._cache[key] = (weakref.ref(labels), prepared)
            while len(self._cache) > _CACHE_ENTRIES:
                self._cache.popitem(last=False)
            return prepared

    def _check(self, rows: LabelSet, cols: LabelSet) -> tuple[CaptionSets, CaptionSets]:
        for name, labels in (("rows", rows), ("cols", cols)):
            if not isinstance(labels, CaptionSets):
                raise TypeError(f"{self.kind} needs CaptionSets, got {type(labels).__name__} for {name}")
        rows, cols = cast(CaptionSets, rows), cast(CaptionSets, cols)
        if rows.vectors.shape[1] != cols.vectors.shape[1]:
            raise UsageError(
                f"word vectors differ in size: {rows.vectors.shape[1]} (rows) vs {cols.vectors.shape[1]} (cols)"
            )
        return rows, cols

    def _reduce(self, rows: LabelSet, cols: LabelSet, kernel: TextKernel) -> np.ndarray:
        """Eq. 13 over a block, with ``kernel`` giving the caption-pair values, in row chunks.

        The kernel runs once per pair of *distinct* captions (repeated captions are common in COCO); the
        caption matrix of each chunk is then expanded and reduced by image segments.
        """
        rows, cols = self._check(rows, cols)
        out = np.empty((len(rows), len(cols)))
        if len(rows) == 0 or len(cols) == 0:
            return out
        a, b = _distinct_texts(rows, self.normalize), _distinct_texts(cols, self.normalize)
        b_tokens, b_offsets = _select(b, np.arange(len(b.offsets) - 1))
        per_image = max(1, rows.n_captions // len(rows)) * cols.n_captions
        step = max(1, _CHUNK_PAIRS // per_image)
        for i0 in range(0, len(rows), step):
            i1 = min(i0 + step, len(rows))
            c0, c1 = rows.caption_offsets[i0], rows.caption_offsets[i1]
            which, local = np.unique(a.inverse[c0:c1], return_inverse=True)
            tokens, offsets = _select(a, which)
            distinct = kernel(tokens, offsets, a.vectors, b_tokens, b_offsets, b.vectors)
            m = distinct[local.reshape(-1)][:, b.inverse]
            out[i0:i1] = caption_set_distance(m, rows.caption_offsets[i0 : i1 + 1] - c0, cols.caption_offsets)
        return out

    def block(self, rows: LabelSet, cols: LabelSet) -> np.ndarray:
        """W for every row image and column image, one compiled call.

        Per row image, the distances from its distinct words to the column vocabulary are computed once;
        per image pair, the caption pairs' cost matrices are gathered from them, and only the caption WMDs
        that can lower a row or column minimum of Eq. 13 are solved
        (:func:`~labeldist.distances.caption_kernels.pruned_w`: a relaxed WMD at or above both minima rules a pair
        out). On COCO about 2/3 of the caption WMDs of random image pairs are solved; the values equal those of
        the full caption table (:meth:`_block_plain`) to the last bit.
        """
        rows, cols = self._check(rows, cols)
        if len(rows) == 0 or len(cols) == 0:
            return np.empty((len(rows), len(cols)))
        a, b = self._prepared(rows).bags(rows), self._prepared(cols).bags(cols)
        out, _ = block_w(
            a.vectors,
            a.weights,
            a.offsets,
            rows.caption_offsets,
            a.image_words,
            a.image_offsets,
            a.local,
            b.vectors,
            b.ids,
            b.weights,
            b.offsets,
            cols.caption_offsets,
        )
        for i, j in zip(*np.nonzero(np.isnan(out))):
            out[i, j] = self._block_plain(rows.subset(np.array([i])), cols.subset(np.array([j])))[0, 0]
        return out

    def _block_plain(self, rows: LabelSet, cols: LabelSet) -> np.ndarray:
        """:meth:`block` the straightforward way, kept as its oracle and fallback: every caption-pair WMD of the
        block (over distinct captions, :func:`~labeldist.distances.wmd.wmd_many`, with its POT fallback) in
        row chunks, then Eq. 13 by image segments."""
        return self._reduce(rows, cols, wmd_many)

    def pairs(self, labels: LabelSet, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """W for the image pairs ``(i[t], j[t])`` of ``labels``, equal to the matching entries of :meth:`block`
        to the last bit, in one compiled call (no Python loop over pairs): :meth:`pairs_within` with no limit."""
        return self.pairs_within(labels, i, j, None)

    def pairs_within(self, labels: LabelSet, i: np.ndarray, j: np.ndarray, limits: np.ndarray | None) -> np.ndarray:
        """W for the image pairs ``(i[t], j[t])`` of ``labels`` where it is at most ``limits[t]`` (all of them when
        ``limits`` is None), equal to the matching entries of :meth:`block` to the last bit; where W is above
        ``limits[t]``, a lower bound of W that is above it (a kNN search needs no more of a pair it rules out).

        Pairs are taken by row image (a stable sort, undone on return); over each run of one row image, the
        distances from its distinct words to its partners' words are computed once. Per image pair, the
        caption pairs' cost matrices are gathered from them and only the caption WMDs that can lower a row
        or column minimum of Eq. 13 are solved (:func:`~labeldist.distances.caption_kernels.pruned_w`; about 60 %
        of them for the near pairs a pruned kNN asks for). The image word lists of ``labels`` are built once and
        cached on this instance.
        A pair the small solver cannot finish is recomputed by :meth:`_pairs_plain`.
        """
        labels = self._check(labels, labels)[0]
        i = np.asarray(i, dtype=np.int64).reshape(-1)
        j = np.asarray(j, dtype=np.int64).reshape(-1)
        if i.shape != j.shape:
            raise UsageError(f"i and j must have equal length, got {i.shape} and {j.shape}")
        n = len(labels)
        if len(i) and (min(i.min(), j.min()) < 0 or max(i.max(), j.max()) >= n):
            raise IndexError(f"image index outside [0, {n})")
        out = np.empty(len(i))
        if len(i) == 0:
            return out
        limits = np.full(len(i), np.inf) if limits is None else np.asarray(limits, dtype=np.float64).reshape(-1)
        b = self._prepared(labels).bags(labels)
        by_row = np.argsort(i, kind="stable")  # runs of one row image share their word distances
        out[by_row] = pairs_w(
            b.vectors,
            b.ids,
            b.weights,
            b.offsets,
            labels.caption_offsets,
            b.image_words,
            b.image_offsets,
            b.local,
            i[by_row],
            j[by_row],
            limits[by_row],
        )[0]
        bad = np.flatnonzero(np.isnan(out))
        if len(bad):
            out[bad] = self._pairs_plain(labels, i[bad], j[bad])
        return out

    def _pairs_plain(self, labels: CaptionSets, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """:meth:`pairs` without skipping: every caption pair of every image pair through one
        :func:`~labeldist.distances.wmd.wmd_pairs` call per chunk (with its POT fallback), then Eq. 13 per
        pair. The fallback of :meth:`pairs`, and its test oracle."""
        out = np.empty(len(i))
        texts = self._prepared(labels).texts(labels)
        tok, off, vec = texts.tokens, texts.offsets, texts.vectors
        for t0 in range(0, len(i), _PAIRS_CHUNK):
            t1 = min(t0 + _PAIRS_CHUNK, len(i))
            x, y, starts, n_rows, n_cols = _caption_pairs(labels.caption_offsets, i[t0:t1], j[t0:t1])
            values = wmd_pairs(tok, off, vec, tok, off, vec, texts.inverse[x], texts.inverse[y])
            out[t0:t1] = ragged_set_distances(values, starts, n_rows, n_cols)
        return out

    def lower_bound_block(self, rows: LabelSet, cols: LabelSet) -> np.ndarray:
        """A lower bound of :meth:`block`, entry by entry: Eq. 13 over caption-pair relaxed WMDs, computed with
        the linear-complexity RWMD (Atasu et al., IEEE Big Data 2017; see
        :func:`~labeldist.distances.wmd_bounds.rwmd_linear_many`).

        .. math::  LB(X, Y) = (1 - \\epsilon) \\Big(\\sum_{x} \\min_{y} R(x, y) + \\sum_{y} \\min_{x} R(x, y)\\Big),
                   \\quad R = \\max(\\ell_1, \\ell_2) \\le WMD

        (Kusner et al., ICML 2015, §4: the relaxed WMD is a lower bound of WMD; min and sum are monotone, so
        :math:`LB \\le W`.) Per chunk of row images: lower bounds on the distances between the chunk's words
        and the column vocabulary (one BLAS product, :func:`~labeldist.distances.wmd_bounds.euclidean_lower_bounds`),
        kept in float32 rounded down; each column word's distance to the nearest word of each row caption;
        then, one column caption at a time, its RWMD to every row caption from those tables, and Eq. 13 per
        image pair. Work is linear in the captions' bag sizes per caption pair instead of a word-distance
        table per caption pair. The word-centroid distance is left out: on COCO it is above the RWMD for
        about 0.2 % of image pairs and changes no pruning decision at k = 100. :math:`\\epsilon = 10^{-9}`
        absorbs rounding.
        """
        rows, cols = self._check(rows, cols)
        out = np.empty((len(rows), len(cols)))
        if len(rows) == 0 or len(cols) == 0:
            return out
        a, b = self._prepared(rows).bags(rows), self._prepared(cols).bags(cols)
        for i0, i1 in _row_chunks(rows.caption_offsets, a, len(b.vectors), 0, len(rows)):
            c0, c1 = rows.caption_offsets[i0], rows.caption_offsets[i1]
            e0, e1 = a.offsets[c0], a.offsets[c1]
            used, ids = np.unique(a.ids[e0:e1], return_inverse=True)
            dist_t = euclidean_lower_bounds(b.vectors, a.vectors[used], np.float32)
            offsets = a.offsets[c0 : c1 + 1] - e0
            ids = ids.reshape(-1).astype(np.int64)
            near = nearest_in_texts(dist_t, ids, offsets)
            cap = rows.caption_offsets[i0 : i1 + 1] - c0
            out[i0:i1] = set_rwmd(
                dist_t, near, ids, a.weights[e0:e1], offsets, cap, b.ids, b.weights, b.offsets, cols.caption_offsets
            )
            del dist_t, near
        out *= 1.0 - _LB_MARGIN
        return out

    def knn_block(self, labels: LabelSet, start: int, stop: int, k: int) -> tuple[np.ndarray, np.ndarray, int] | None:
        """The exact k nearest of images ``start:stop`` among all of ``labels``: :meth:`knn_block_shared` with no
        distance known beforehand."""
        indices, dists, computed, _ = self.knn_block_shared(labels, start, stop, k, KnownPairs.empty())
        return indices, dists, computed

    def knn_block_shared(
        self, labels: LabelSet, start: int, stop: int, k: int, known: KnownPairs
    ) -> tuple[np.ndarray, np.ndarray, int, KnownPairs]:
        """The exact k nearest of images ``start:stop`` among all of ``labels``, through three lower bounds
        (:mod:`labeldist.distances.caption_bounds`): the image-word bound for every pair, the caption-level bound
        (as :meth:`lower_bound_block`'s) for the pairs it leaves, the reduction bound for the pairs both leave, the
        exact W (:meth:`pairs_within`) for the pairs all three leave, by increasing bound
        (:func:`~labeldist.core.cascade.cascaded_topk`), except those ``known`` (exact W of pairs whose row lies in the
        block, computed by other blocks: W is the same float from either image, the transport being solved in one
        orientation, :func:`~labeldist.distances.transport.emd_small`). Row images go in chunks whose word tables
        fit ``_LB_CHUNK_BYTES``; a later chunk takes the reverse of the pairs an earlier one computed. Returns
        indices, distances, the number of exact distances computed and the pairs whose exact W it computed."""
        labels = self._check(labels, labels)[0]
        prepared = self._prepared(labels)
        bags, words = prepared.bags(labels), prepared.image_words(labels)
        found: list[tuple[np.ndarray, np.ndarray]] = []
        made: list[KnownPairs] = []
        computed = 0
        for i0, i1 in _row_chunks(labels.caption_offsets, bags, len(bags.vectors), start, stop):
            tables = chunk_tables(bags, words, bags.local, labels.caption_offsets, i0, i1, bags.vectors)

            def tight(r: np.ndarray, c: np.ndarray, tables: ChunkTables = tables) -> np.ndarray:
                return pair_set_rwmd(tables, bags, labels.caption_offsets, r, c)

            def tighter(r: np.ndarray, c: np.ndarray, tables: ChunkTables = tables) -> np.ndarray:
                return pair_set_reduction(tables, bags, labels.caption_offsets, r, c)

            def exact(r: np.ndarray, c: np.ndarray, limits: np.ndarray, i0: int = i0) -> np.ndarray:
                return self.pairs_within(labels, r + i0, c, limits)

            mine = known.taken((known.rows >= i0) & (known.rows < i1))
            cheap = image_word_bounds(tables, words)
            cascade = cascaded_topk(
                cheap,
                (tight, tighter),
                exact,
                k,
                exclude=np.arange(i0, i1),
                known=mine.moved(-i0),
            )
            found.append((cascade.indices, cascade.distances))
            computed += cascade.computed
            new = cascade.learned.moved(i0)
            made.append(new)
            known = KnownPairs.joined([known, new.taken((new.cols >= i1) & (new.cols < stop)).reversed()])
            del tables, cheap
        indices = np.concatenate([f[0] for f in found])
        return indices, np.concatenate([f[1] for f in found]), computed, KnownPairs.joined(made)

    def _lower_bound_pairwise(self, rows: LabelSet, cols: LabelSet) -> np.ndarray:
        """The previous bound, kept as a test oracle: Eq. 13 over :math:`\\max(RWMD, WCD)` with a word-distance
        table per caption pair (``rwmd_many``, ``wcd_many``); about 10x slower than :meth:`lower_bound_block`
        on a 256-image block against 5,000 images.
        """

        def bound(*args: np.ndarray) -> np.ndarray:
            return np.maximum(rwmd_many(*args), wcd_many(*args))

        return self._reduce(rows, cols, bound) * (1.0 - _LB_MARGIN)

    def reference(self, a: LabelSet, i: int, b: LabelSet, j: int) -> float:
        """W between image ``i`` of ``a`` and image ``j`` of ``b`` the plain way: POT's ``ot.emd2`` on every
        caption pair, cost matrices from explicit loops, Eq. 13 with Python ``min`` and ``sum``."""
        a, b = self._check(a, b)
        xs = [_bag(a, k, self.normalize) for k in range(a.caption_offsets[i], a.caption_offsets[i + 1])]
        ys = [_bag(b, k, self.normalize) for k in range(b.caption_offsets[j], b.caption_offsets[j + 1])]
        d = [[_pot_wmd(x, y) for y in ys] for x in xs]
        x_to_y = sum(min(row) for row in d)
        y_to_x = sum(min(d[r][c] for r in range(len(xs))) for c in range(len(ys)))
        return float(x_to_y + y_to_x)


def _bag(labels: CaptionSets, k: int, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """Vectors (float64) and nBOW weights of the distinct words of caption ``k``."""
    counts = Counter(labels.tokens[labels.token_offsets[k] : labels.token_offsets[k + 1]].tolist())
    vectors = labels.vectors[list(counts)]
    if normalize:
        vectors = unit_rows(vectors)
    weights = np.array(list(counts.values()), dtype=np.float64)
    return vectors.astype(np.float64), weights / weights.sum()


def _pot_wmd(x: tuple[np.ndarray, np.ndarray], y: tuple[np.ndarray, np.ndarray]) -> float:
    import ot

    (vx, dx), (vy, dy) = x, y
    cost = np.array([[np.sqrt(np.sum((p - q) ** 2)) for q in vy] for p in vx])
    return float(ot.emd2(dx, dy, cost))
