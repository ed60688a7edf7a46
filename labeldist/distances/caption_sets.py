"""Caption-set distance: the Word Mover's Distance lifted from captions to images (sets of captions).

Kim, Sohn, Kim, Kwak, "Deep Metric Learning Beyond Binary Supervision", CVPR 2019, Eq. 13; WMD from Kusner
et al., ICML 2015 (see :mod:`labeldist.distances.wmd`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np

from labeldist.distances.base import LabelDistance
from labeldist.distances.wmd import rwmd_many, unit_rows, wcd_many, wmd_many
from labeldist.labels.base import LabelSet
from labeldist.labels.captions import CaptionSets

# caption pairs per kernel call in block(): bounds the (captions x captions) float64 matrix to 16 MB
_CHUNK_PAIRS = 1 << 21
# lower_bound_block() shrinks its bounds by this relative margin, so that rounding (sums of a few dozen
# terms in another order) can never lift a bound above the value block() computes for the same pair
_LB_MARGIN = 1e-12

TextKernel = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def caption_set_distance(m: np.ndarray, row_offsets: np.ndarray, col_offsets: np.ndarray) -> np.ndarray:
    """Set distances from the matrix of caption-pair distances (Kim et al., CVPR 2019, Eq. 13).

    .. math::  W(X, Y) = \\sum_{x \\in X} \\min_{y \\in Y} d(x, y) + \\sum_{y \\in Y} \\min_{x \\in X} d(x, y)

    :math:`X` the captions of a row image, :math:`Y` those of a column image, :math:`d` the caption distance
    (WMD). The same reduction applied to a lower bound of :math:`d` gives a lower bound of :math:`W`
    (min and sum are monotone).

    Parameters
    ----------
    m : (K_r, K_c) distances between every row caption and every column caption.
    row_offsets : (N_r+1,) row image ``i`` owns rows ``row_offsets[i]:row_offsets[i+1]`` (none empty).
    col_offsets : (N_c+1,) the same for columns.

    Returns
    -------
    (N_r, N_c) float64.

    >>> caption_set_distance(np.array([[0.0, 3.0], [1.0, 5.0]]), np.array([0, 2]), np.array([0, 1, 2])).tolist()
    [[1.0, 11.0]]
    """
    m = np.asarray(m, dtype=np.float64)
    n_r, n_c = len(row_offsets) - 1, len(col_offsets) - 1
    if n_r == 0 or n_c == 0:
        return np.zeros((n_r, n_c))
    rows, cols = np.asarray(row_offsets[:-1]), np.asarray(col_offsets[:-1])
    # each row caption's nearest caption of each column image, summed over the row image's captions
    x_to_y = np.add.reduceat(np.minimum.reduceat(m, cols, axis=1), rows, axis=0)
    # each column caption's nearest caption of each row image, summed over the column image's captions
    y_to_x = np.add.reduceat(np.minimum.reduceat(m, rows, axis=0), cols, axis=1)
    return x_to_y + y_to_x


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

    Parameters
    ----------
    normalize : scale word vectors to unit length first (default True: gensim's ``wmdistance(norm=True)``).

    Labels from two different :class:`CaptionSets` can be compared: each side's tokens index its own
    vectors, and the ground distance comes from the vectors, never from word ids.
    """

    kind: ClassVar[str] = "caption_wmd"
    labels_class: ClassVar[type[LabelSet]] = CaptionSets

    def __init__(self, normalize: bool = True) -> None:
        if not isinstance(normalize, bool):
            raise ValueError(f"normalize must be a bool, got {normalize!r}")
        self.normalize = normalize

    def params(self) -> dict[str, Any]:
        return {"normalize": self.normalize}

    def _check(self, rows: LabelSet, cols: LabelSet) -> tuple[CaptionSets, CaptionSets]:
        for name, labels in (("rows", rows), ("cols", cols)):
            if not isinstance(labels, CaptionSets):
                raise TypeError(f"{self.kind} needs CaptionSets, got {type(labels).__name__} for {name}")
        rows, cols = cast(CaptionSets, rows), cast(CaptionSets, cols)
        if rows.vectors.shape[1] != cols.vectors.shape[1]:
            raise ValueError(
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
        """W for every row image and column image: all caption-pair WMDs of the block in one batched kernel
        call per chunk, then the min/sum reductions of Eq. 13 by image segments."""
        return self._reduce(rows, cols, wmd_many)

    def lower_bound_block(self, rows: LabelSet, cols: LabelSet) -> np.ndarray:
        """A lower bound of :meth:`block`, entry by entry, about 10x cheaper.

        .. math::  LB(X, Y) = \\sum_{x} \\min_{y} \\ell(x, y) + \\sum_{y} \\min_{x} \\ell(x, y), \\quad
                   \\ell = \\max(RWMD, WCD) \\le WMD

        (Kusner et al., ICML 2015, §4: both relaxations are lower bounds of WMD; neither dominates the
        other, so the larger is taken. Min and sum are monotone, so :math:`LB \\le W`.) Shrunk by a relative
        ``1e-12`` so that rounding never lifts a bound above the computed :math:`W`.
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
