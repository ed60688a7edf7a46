"""Room-layout distance: one minus the mean intersection-over-union of the surfaces of two layout maps.

Kim et al., "Deep Metric Learning Beyond Binary Supervision", CVPR 2019, §4.4, compare LSUN room layouts by
the mIoU of their surface-label maps. Intersections are counted on bit-packed surface masks, 64 pixels to a
machine word, by AND and popcount in a compiled kernel: one bit per pixel and class instead of the 32 of a
float32 one-hot matrix product, about ten times less work than BLAS on the same masks, and exact at any size.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from labeldist.distances.base import LabelDistance
from labeldist.errors import UsageError
from labeldist.labels.layouts import LayoutMaps

#: columns of a block handled together: their packed masks (a few hundred kB) stay in cache while every row
#: passes over them
_TILE = 64


@intrinsic
def _popcount(typingctx, word):
    """Number of set bits of a uint64 (LLVM ``ctpop``: one instruction, vectorised where the CPU has it)."""

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return types.int64(types.uint64), codegen


def _flat_maps(x: np.ndarray, y: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(N, P) views of two stacks of maps; ValueError unless they share a map size and labels fit n_classes."""
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim != 3 or y.ndim != 3 or x.shape[1:] != y.shape[1:]:
        raise UsageError(f"layout maps must be (N, H, W) stacks of one size, got {x.shape} and {y.shape}")
    for m in (x, y):
        if m.size and int(m.max()) > n_classes:
            raise UsageError(f"label value {int(m.max())} in the maps exceeds n_classes={n_classes}")
    return x.reshape(len(x), -1), y.reshape(len(y), -1)


def _bits(mask: np.ndarray) -> np.ndarray:
    """(N, P) bool -> (N, ceil(P / 64)) uint64, 64 pixels to a word (zero padded)."""
    packed = np.packbits(mask, axis=1)
    pad = -packed.shape[1] % 8
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed).view(np.uint64)


def _surface_bits(x: np.ndarray, y: np.ndarray, c: int, same: bool):
    """Bit-packed masks of surface c in two (N, P) blocks, and its areas.

    Returns bits_x (R, Q) and bits_y (C, Q) uint64, keeping only the Q words where c occurs in both blocks
    (elsewhere no intersection is possible), and areas_x (R,), areas_y (C,) int64 pixel counts.
    """
    in_x = x == c
    in_y = in_x if same else y == c
    bits_x = _bits(in_x)
    bits_y = bits_x if same else _bits(in_y)
    keep = bits_x.any(axis=0) & bits_y.any(axis=0)
    bits_x = np.ascontiguousarray(bits_x[:, keep])
    bits_y = bits_x if same else np.ascontiguousarray(bits_y[:, keep])
    return bits_x, bits_y, np.count_nonzero(in_x, axis=1), np.count_nonzero(in_y, axis=1)


@numba.njit(cache=True, nogil=True)
def _add_iou(bits_x, bits_y, area_x, area_y, iou_sum, n_present, upper):  # pragma: no cover - compiled
    """Add one surface's IoU of every pair (i, j) to ``iou_sum`` and count it in ``n_present`` where the union
    is not empty; the intersection is the popcount of ``bits_x[i] & bits_y[j]``. With ``upper`` only j >= i."""
    n_x, n_y, n_words = bits_x.shape[0], bits_y.shape[0], bits_x.shape[1]
    for j0 in range(0, n_y, _TILE):
        j1 = min(n_y, j0 + _TILE)
        for i in range(n_x):
            for j in range(max(i, j0) if upper else j0, j1):
                inter = 0
                for w in range(n_words):
                    inter += _popcount(bits_x[i, w] & bits_y[j, w])
                union = area_x[i] + area_y[j] - inter
                if union > 0:
                    iou_sum[i, j] += inter / union
                    n_present[i, j] += 1


@numba.njit(cache=True, nogil=True)
def _add_iou_pairs(bits, area, i, j, iou_sum, n_present):  # pragma: no cover - compiled
    """:func:`_add_iou` for the listed pairs (i[t], j[t]) of one set of maps."""
    for t in range(len(i)):
        inter = 0
        for w in range(bits.shape[1]):
            inter += _popcount(bits[i[t], w] & bits[j[t], w])
        union = area[i[t]] + area[j[t]] - inter
        if union > 0:
            iou_sum[t] += inter / union
            n_present[t] += 1


def _miou_distance(iou_sum: np.ndarray, n_present: np.ndarray) -> np.ndarray:
    """1 - (sum of IoUs) / (number of surfaces present); 0 where neither map has a labelled pixel."""
    miou = np.divide(iou_sum, n_present, out=np.ones_like(iou_sum), where=n_present > 0)
    return 1.0 - miou


def miou_distances(x: np.ndarray, y: np.ndarray, n_classes: int = 5) -> np.ndarray:
    r"""Layout distances between every map of ``x`` and every map of ``y``.

    .. math::

        d(R_i, R_j) = 1 - \frac{1}{|C_{ij}|} \sum_{c \in C_{ij}}
            \frac{|R_i^c \cap R_j^c|}{|R_i^c \cup R_j^c|},
        \qquad C_{ij} = \{c \in 1..n : |R_i^c \cup R_j^c| > 0\}

    where :math:`R_i^c` is the set of pixels of map :math:`i` labelled :math:`c` (surface :math:`c`), :math:`n`
    the number of surfaces, and :math:`C_{ij}` the surfaces present in either map. Pixels labelled 0 belong to
    no surface: they are in no :math:`R^c`, so they count in neither intersection nor union of their own map (a
    surface labelled in the other map still counts them in its union). Two maps with no labelled pixel at all
    have :math:`C_{ij} = \emptyset` and distance 0. The distance lies in [0, 1] and is 0 for identical maps
    (Kim et al., "Deep Metric Learning Beyond Binary Supervision", CVPR 2019, §4.4).

    Intersections are popcounts of the AND of bit-packed masks; unions are
    :math:`|R_i^c| + |R_j^c| - |R_i^c \cap R_j^c|`. All counts are exact integers. When ``x`` and ``y`` hold
    the same maps only the upper triangle is computed.

    Parameters
    ----------
    x : (R, H, W) integer maps, labels 0..n_classes.
    y : (C, H, W) integer maps of the same H, W.
    n_classes : surfaces are the labels 1..n_classes (5 for LSUN layouts).

    Returns
    -------
    (R, C) float64 distances.

    Examples
    --------
    Floor on the left and wall on the right, against floor on top and wall at the bottom: each surface
    shares 1 of its 3 pixels, so mIoU = 1/3.

    >>> a = np.array([[[1, 2], [1, 2]]])
    >>> b = np.array([[[1, 1], [2, 2]]])
    >>> miou_distances(np.concatenate([a, b]), b).round(4).tolist()
    [[0.6667], [0.0]]
    """
    x, y = _flat_maps(x, y, n_classes)
    same = x.shape == y.shape and (x is y or np.array_equal(x, y))
    iou_sum = np.zeros((len(x), len(y)))
    n_present = np.zeros((len(x), len(y)), dtype=np.int64)
    for c in range(1, n_classes + 1):
        bits_x, bits_y, area_x, area_y = _surface_bits(x, y, c, same)
        if area_x.any() or area_y.any():  # else no pair counts surface c
            # Surfaces are added in label order, as the reference sums them: the same floating-point result.
            _add_iou(bits_x, bits_y, area_x, area_y, iou_sum, n_present, same)
    distances = _miou_distance(iou_sum, n_present)
    if same:  # only the upper triangle was computed
        lower = np.tril_indices(len(x), -1)
        distances[lower] = distances.T[lower]
    return distances


def miou_distance_pair(a: np.ndarray, b: np.ndarray, n_classes: int = 5) -> float:
    """The layout distance of two (H, W) maps, computed plainly with boolean masks (the reference)."""
    ious = []
    for c in range(1, n_classes + 1):
        ra, rb = a == c, b == c
        union = np.count_nonzero(ra | rb)
        if union:
            ious.append(np.count_nonzero(ra & rb) / union)
    return 1.0 - sum(ious) / len(ious) if ious else 0.0


class LayoutMIoU(LabelDistance):
    """1 - mIoU of two room-layout maps over the surfaces present in either (see :func:`miou_distances`).

    Parameters
    ----------
    n_classes : int
        Surfaces are the labels 1..n_classes; 0 is unlabelled and ignored (default 5: LSUN's floor, middle wall,
        right wall, left wall, ceiling).
    """

    kind = "layout_miou"
    # measured by benchmarks/bench_pair_cost.py (1.05 ms, 5.0 us on 128 x 128 maps), rounded up
    cost_per_call_s, cost_per_pair_s = 1.5e-3, 8e-6
    labels_class = LayoutMaps

    def __init__(self, n_classes: int = 5) -> None:
        if not isinstance(n_classes, (int, np.integer)) or not 1 <= n_classes <= 255:
            raise UsageError(f"n_classes must be an integer in 1..255, got {n_classes!r}")
        self.n_classes = int(n_classes)

    def params(self) -> dict[str, Any]:
        return {"n_classes": self.n_classes}

    @classmethod
    def meaning(cls, params: dict[str, Any]) -> str:
        return (
            f"1 - mean IoU of the two room layouts' surfaces ({params.get('n_classes', 5)} classes; 0: the same "
            "layout, 1: no surface overlaps)"
        )

    def block(self, rows: LayoutMaps, cols: LayoutMaps) -> np.ndarray:
        return miou_distances(rows.maps, cols.maps, self.n_classes)

    def reference(self, a: LayoutMaps, i: int, b: LayoutMaps, j: int) -> float:
        return miou_distance_pair(a.maps[i], b.maps[j], self.n_classes)

    def pairs(self, labels: LayoutMaps, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Distances for index pairs ``(i[t], j[t])``; only the maps named in a pair are packed."""
        i, j = np.asarray(i, dtype=np.intp), np.asarray(j, dtype=np.intp)
        used = np.unique(np.concatenate([i, j]))
        i, j = np.searchsorted(used, i), np.searchsorted(used, j)
        flat, _ = _flat_maps(labels.maps[used], labels.maps[used], self.n_classes)
        iou_sum = np.zeros(len(i))
        n_present = np.zeros(len(i), dtype=np.int64)
        for c in range(1, self.n_classes + 1):
            bits, _, area, _ = _surface_bits(flat, flat, c, same=True)
            _add_iou_pairs(bits, area, i, j, iou_sum, n_present)
        return _miou_distance(iou_sum, n_present)
