"""Three lower bounds of the caption-set WMD for an exact kNN search: a cheap one for all pairs, tighter ones for few.

Kim et al., CVPR 2019, Eq. 13 sums, over the captions of each image, the WMD to the nearest caption of the other:

.. math::  W(X, Y) = \\sum_{x \\in X} \\min_{y \\in Y} WMD(x, y) + \\sum_{y \\in Y} \\min_{x \\in X} WMD(x, y)

- :func:`image_word_bounds`, the cheap one: every word of every caption of X moves to the nearest word of *any*
  caption of Y, and the other way (:math:`\\min_y WMD(x, y) \\ge \\sum_{w \\in x} d_{x,w} \\min_{v \\in \\cup Y}
  c_{wv}`, the relaxed WMD of Kusner et al., ICML 2015, §4, with the minimum over a superset of Y's words):

  .. math::  B(X, Y) = \\sum_{w} D_{X,w} \\min_{v \\in \\cup Y} c_{wv} + \\sum_{v} D_{Y,v} \\min_{w \\in \\cup X} c_{wv}
             \\le W(X, Y)

  with :math:`D_{X,w} = \\sum_{x \\in X} d_{x,w}` a word's weight summed over the image's captions. It needs one
  table per image, not per caption pair: about 1/7 of the caption-level bound's work per pair.
- :func:`pair_set_rwmd`, the tight one, for the pairs that :math:`B` does not rule out: Eq. 13 over caption-pair
  relaxed WMDs :math:`R = \\max(\\ell_1, \\ell_2) \\le WMD` (the bound ``CaptionSetWMD.lower_bound_block`` computes
  for whole rows), pair by pair.
- :func:`pair_set_reduction`, the tightest, for the pairs that :math:`R` does not rule out: Eq. 13 over each
  caption pair's Hungarian reduction bound (:func:`~labeldist.distances.wmd_bounds.reduction_bound`, at least
  :math:`R`), from each caption pair's whole cost matrix.

All read word distances from one table per chunk of row images (:class:`ChunkTables`): lower bounds on the
distances between the chunk's words and every column word (one BLAS product, rounded down), so the bounds stay
bounds after rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from labeldist.distances.nbow import Bags, longest_bag
from labeldist.distances.wmd_bounds import euclidean_lower_bounds, nearest_in_texts, reduction_bound

# the bounds are shrunk by this relative margin before they are compared with exact values: float32 tables and
# sums in another order than the exact kernel's stay far below it (each under 1e-6 relative)
BOUND_MARGIN = 1e-6


@dataclass(frozen=True)
class ImageWords:
    """Each image's distinct words (every word of any of its captions) and their weights summed over its captions,
    :math:`D_{X,w} = \\sum_{x \\in X} d_{x,w}` (the nBOW weights of :func:`~labeldist.distances.nbow.nbow`)."""

    words: np.ndarray  # (E,) int64 word id, image by image
    weights: np.ndarray  # (E,) float64
    offsets: np.ndarray  # (n+1,) int64: image i owns words[offsets[i]:offsets[i+1]]


def image_words(
    bags: Bags, image_words_: np.ndarray, image_offsets: np.ndarray, local: np.ndarray, caption_offsets: np.ndarray
) -> ImageWords:
    """:class:`ImageWords` from a caption set's bags: ``image_words_``/``image_offsets`` the distinct words of each
    image, ``local`` each bag entry's place among its image's words.

    >>> from labeldist.distances.nbow import Bags, longest_bag
    >>> bags = Bags(np.array([3, 5, 3]), np.array([0.5, 0.5, 1.0]), np.array([0, 2, 3]), np.zeros((6, 1)))
    >>> w = image_words(bags, np.array([3, 5]), np.array([0, 2]), np.array([0, 1, 0]), np.array([0, 2]))
    >>> w.weights.tolist()
    [1.5, 0.5]
    """
    caption_of_entry = np.repeat(np.arange(len(bags.offsets) - 1), np.diff(bags.offsets))
    image_of_caption = np.repeat(np.arange(len(caption_offsets) - 1), np.diff(caption_offsets))
    slot = image_offsets[image_of_caption[caption_of_entry]] + local
    weights = np.bincount(slot, weights=bags.weights, minlength=len(image_words_))
    return ImageWords(np.asarray(image_words_, dtype=np.int64), weights, np.asarray(image_offsets, dtype=np.int64))


@dataclass(frozen=True)
class ChunkTables:
    """The word tables of one chunk of row images against every column word.

    ``dist_t`` (V_cols, U) float32: lower bounds on the distance from each column word to each of the chunk's U
    distinct words; ``near`` (V_cols, captions of the chunk): each column word's distance to the nearest word of
    each row caption; ``near_image`` (V_cols, images of the chunk): to the nearest word of each row image. The
    row side's bags and image words are renumbered into the chunk (words into ``0..U-1``, captions from 0)."""

    dist_t: np.ndarray
    near: np.ndarray
    near_image: np.ndarray
    ids: np.ndarray  # (entries,) the chunk's bag entries, as chunk words
    weights: np.ndarray
    offsets: np.ndarray  # (captions + 1,) from 0
    caption_offsets: np.ndarray  # (images + 1,) from 0
    local: np.ndarray  # (entries,) each entry's place among its image's words
    words: np.ndarray  # (image words,) chunk words of each image
    word_weights: np.ndarray
    word_offsets: np.ndarray  # (images + 1,) from 0


def chunk_tables(
    rows: Bags,
    row_words: ImageWords,
    local: np.ndarray,
    caption_offsets: np.ndarray,
    i0: int,
    i1: int,
    col_vectors: np.ndarray,
) -> ChunkTables:
    """:class:`ChunkTables` of row images ``i0:i1`` (of the set ``rows``, ``row_words``, ``caption_offsets``; ``local``
    each bag entry's place among its image's words) against ``col_vectors`` (the column set's word vectors,
    normalised as the distance's)."""
    c0, c1 = caption_offsets[i0], caption_offsets[i1]
    e0, e1 = rows.offsets[c0], rows.offsets[c1]
    used, ids = np.unique(rows.ids[e0:e1], return_inverse=True)
    w0, w1 = row_words.offsets[i0], row_words.offsets[i1]
    words = np.searchsorted(used, row_words.words[w0:w1])
    dist_t = euclidean_lower_bounds(col_vectors, rows.vectors[used], np.float32)
    offsets = rows.offsets[c0 : c1 + 1] - e0
    ids = ids.reshape(-1).astype(np.int64)
    word_offsets = row_words.offsets[i0 : i1 + 1] - w0
    return ChunkTables(
        dist_t=dist_t,
        near=nearest_in_texts(dist_t, ids, offsets),
        near_image=nearest_in_texts(dist_t, words, word_offsets),
        ids=ids,
        weights=rows.weights[e0:e1],
        offsets=offsets,
        caption_offsets=caption_offsets[i0 : i1 + 1] - c0,
        local=np.asarray(local[e0:e1], dtype=np.int64),
        words=words,
        word_weights=row_words.weights[w0:w1],
        word_offsets=word_offsets,
    )


@numba.njit(cache=True, nogil=True)
def _image_word_bounds(dist_t, near_image, words_a, wt_a, off_a, words_b, wt_b, off_b, shrink, out):  # pragma: no cover
    n_a, n_b = len(off_a) - 1, len(off_b) - 1
    z = np.empty(dist_t.shape[1], dtype=dist_t.dtype)
    acc = np.empty(n_a)
    for j in range(n_b):
        # each word of the chunk to the nearest word of column image j
        z[:] = np.inf
        for e in range(off_b[j], off_b[j + 1]):
            row = dist_t[words_b[e]]
            for w in range(len(z)):
                z[w] = min(z[w], row[w])
        # each word of column image j to the nearest word of each row image
        acc[:] = 0.0
        for e in range(off_b[j], off_b[j + 1]):
            row = near_image[words_b[e]]
            wt = wt_b[e]
            for i in range(n_a):
                acc[i] += wt * row[i]
        for i in range(n_a):
            s = acc[i]
            for e in range(off_a[i], off_a[i + 1]):
                s += wt_a[e] * z[words_a[e]]
            out[i, j] = s * shrink


def image_word_bounds(tables: ChunkTables, cols: ImageWords) -> np.ndarray:
    """:math:`B(X, Y)` (module docstring) of every row image of the chunk and every column image: (n_a, n_b)
    float32, shrunk by :data:`BOUND_MARGIN` so that it stays below the exact W after rounding.

    Per column image, its words' minima over the chunk's words (one pass over ``dist_t``'s rows, vectorised) and
    its words' distances to each row image (``near_image``); then a sum over each row image's words. About 4,000
    operations per column image and chunk of 128 images, against 29,000 for the caption-level bound.
    """
    out = np.empty((len(tables.word_offsets) - 1, len(cols.offsets) - 1), dtype=np.float32)
    _image_word_bounds(
        tables.dist_t,
        tables.near_image,
        tables.words,
        tables.word_weights,
        tables.word_offsets,
        cols.words,
        cols.weights,
        cols.offsets,
        1.0 - BOUND_MARGIN,
        out,
    )
    return out


@numba.njit(cache=True, nogil=True)
def _pair_set_rwmd(  # pragma: no cover - compiled
    dist_t, near, ids_a, w_a, off_a, cap_a, local_a, words_a, word_off_a, ids_b, w_b, off_b, cap_b, pi, pj, shrink
):
    n_words = dist_t.shape[0]
    widest, most = max(1, longest_bag(word_off_a)), max(1, longest_bag(cap_a))
    # the word distances of one row image, column word by column word: a pair reads a few contiguous rows
    table = np.empty((n_words, widest), dtype=dist_t.dtype)
    filled = np.full(n_words, -1, dtype=np.int64)  # the row image whose distances row v of table holds
    z = np.empty(widest, dtype=dist_t.dtype)
    rmin = np.empty(most)
    out = np.empty(len(pi))
    for t in range(len(pi)):
        i, j = pi[t], pj[t]
        x0, x1 = cap_a[i], cap_a[i + 1]
        u0, u1 = word_off_a[i], word_off_a[i + 1]
        rmin[: x1 - x0] = np.inf
        total = 0.0
        for y in range(cap_b[j], cap_b[j + 1]):
            b0, b1 = off_b[y], off_b[y + 1]
            z[: u1 - u0] = np.inf  # each word of image i to its nearest word of y
            for f in range(b0, b1):
                v = ids_b[f]
                if filled[v] != i:
                    filled[v] = i
                    for u in range(u1 - u0):
                        table[v, u] = dist_t[v, words_a[u0 + u]]
                row = table[v]
                for u in range(u1 - u0):
                    z[u] = min(z[u], row[u])
            cmin = np.inf
            for x in range(x0, x1):
                l1 = 0.0  # each word of x to its nearest word of y
                for e in range(off_a[x], off_a[x + 1]):
                    l1 += w_a[e] * z[local_a[e]]
                l2 = 0.0  # each word of y to its nearest word of x
                for f in range(b0, b1):
                    l2 += w_b[f] * near[ids_b[f], x]
                r = max(l1, l2)
                rmin[x - x0] = min(rmin[x - x0], r)
                cmin = min(cmin, r)
            total += cmin
        for x in range(x1 - x0):
            total += rmin[x]
        out[t] = total * shrink
    return out


def pair_set_rwmd(
    tables: ChunkTables, cols: Bags, col_caption_offsets: np.ndarray, i: np.ndarray, j: np.ndarray
) -> np.ndarray:
    """Eq. 13 over caption-pair relaxed WMDs, :math:`\\sum_x \\min_y R(x, y) + \\sum_y \\min_x R(x, y) \\le W`, for
    the pairs (row image ``i[t]`` of the chunk, column image ``j[t]``): (len(i),) float64, shrunk by
    :data:`BOUND_MARGIN`. About 750 table reads a pair of 5-caption images, all within a few rows of ``dist_t``."""
    return _pair_set_rwmd(
        tables.dist_t,
        tables.near,
        *_pair_arrays(tables, cols, col_caption_offsets),
        np.asarray(i, dtype=np.int64),
        np.asarray(j, dtype=np.int64),
        1.0 - BOUND_MARGIN,
    )


def _pair_arrays(tables: ChunkTables, cols: Bags, col_caption_offsets: np.ndarray) -> tuple[np.ndarray, ...]:
    """The row side's bags and image words (of the chunk) and the column side's bags, as the pair kernels take them."""
    return (
        tables.ids,
        tables.weights,
        tables.offsets,
        tables.caption_offsets,
        tables.local,
        tables.words,
        tables.word_offsets,
        cols.ids,
        cols.weights,
        cols.offsets,
        np.asarray(col_caption_offsets, dtype=np.int64),
    )


@numba.njit(cache=True, nogil=True)
def _pair_set_reduction(  # pragma: no cover - compiled
    dist_t, ids_a, w_a, off_a, cap_a, local_a, words_a, word_off_a, ids_b, w_b, off_b, cap_b, pi, pj, shrink
):
    n_words = dist_t.shape[0]
    widest, most_a, most_b = max(1, longest_bag(word_off_a)), max(1, longest_bag(cap_a)), max(1, longest_bag(cap_b))
    longest = max(1, longest_bag(off_a), longest_bag(off_b))
    # the word distances of one row image, column word by column word, as in _pair_set_rwmd
    table = np.empty((n_words, widest), dtype=dist_t.dtype)
    filled = np.full(n_words, -1, dtype=np.int64)
    cost = np.empty((longest, longest))
    u = np.empty(longest)
    v = np.empty(longest)
    m = np.empty((most_a, most_b))
    out = np.empty(len(pi))
    for t in range(len(pi)):
        i, j = pi[t], pj[t]
        x0, x1, y0, y1 = cap_a[i], cap_a[i + 1], cap_b[j], cap_b[j + 1]
        u0, u1 = word_off_a[i], word_off_a[i + 1]
        for f in range(off_b[y0], off_b[y1]):
            w = ids_b[f]
            if filled[w] != i:
                filled[w] = i
                for e in range(u1 - u0):
                    table[w, e] = dist_t[w, words_a[u0 + e]]
        for x in range(x0, x1):
            a0, a1 = off_a[x], off_a[x + 1]
            for y in range(y0, y1):
                b0, b1 = off_b[y], off_b[y + 1]
                for r in range(a1 - a0):
                    for s in range(b1 - b0):
                        cost[r, s] = table[ids_b[b0 + s], local_a[a0 + r]]
                m[x - x0, y - y0] = reduction_bound(cost, a1 - a0, b1 - b0, w_a[a0:a1], w_b[b0:b1], u, v)
        total = 0.0  # Eq. 13 over the caption-pair bounds
        for x in range(x1 - x0):
            low = np.inf
            for y in range(y1 - y0):
                low = min(low, m[x, y])
            total += low
        for y in range(y1 - y0):
            low = np.inf
            for x in range(x1 - x0):
                low = min(low, m[x, y])
            total += low
        out[t] = total * shrink
    return out


def pair_set_reduction(
    tables: ChunkTables, cols: Bags, col_caption_offsets: np.ndarray, i: np.ndarray, j: np.ndarray
) -> np.ndarray:
    """The tightest bound of the search, for the pairs that :func:`pair_set_rwmd` leaves: Eq. 13 over each caption
    pair's Hungarian reduction bound (:func:`~labeldist.distances.wmd_bounds.reduction_bound`, never below its
    relaxed WMD), :math:`\\sum_x \\min_y H(x, y) + \\sum_y \\min_x H(x, y) \\le W`, for the pairs (row image ``i[t]``
    of the chunk, column image ``j[t]``): (len(i),) float64, shrunk by :data:`BOUND_MARGIN`.

    Each caption pair's cost matrix is read from ``dist_t`` (lower bounds of the word distances, so the bound stays
    one), through a copy of the row image's columns made once per run of pairs with the same row image: pairs are
    visited by row image. About 2.5x :func:`pair_set_rwmd`'s time a pair (4.7 us at 40,000 images), a fifth of an
    exact W's."""
    i = np.asarray(i, dtype=np.int64)
    j = np.asarray(j, dtype=np.int64)
    by_row = np.argsort(i, kind="stable")
    out = np.empty(len(i))
    out[by_row] = _pair_set_reduction(
        tables.dist_t,
        *_pair_arrays(tables, cols, col_caption_offsets),
        i[by_row],
        j[by_row],
        1.0 - BOUND_MARGIN,
    )
    return out
