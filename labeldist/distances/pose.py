"""Pose distance of thin-slicing (Kwak et al., 2016), as used for MPII in Kim et al. (CVPR 2019) §4.3."""

from __future__ import annotations

from typing import Any, Literal

import numba
import numpy as np

from labeldist.distances.base import STORED_MAX, LabelDistance, past_stored
from labeldist.errors import UsageError
from labeldist.labels.base import LabelError
from labeldist.labels.poses import Poses

Metric = Literal["euclidean", "sqeuclidean"]
Missing = Literal["rescale", "skip"]
METRICS = ("euclidean", "sqeuclidean")
MISSING = ("rescale", "skip")


@numba.njit(cache=True, nogil=True)
def _pose_block(xa, pa, xb, pb, squared, rescale):  # pragma: no cover - compiled; tested via PoseDistance
    n, m, J = xa.shape[0], xb.shape[0], xa.shape[1]
    out = np.empty((n, m), dtype=np.float64)
    for i in range(n):
        for j in range(m):
            total = 0.0
            shared = 0
            for t in range(J):
                if pa[i, t] and pb[j, t]:
                    dx = xa[i, t, 0] - xb[j, t, 0]
                    dy = xa[i, t, 1] - xb[j, t, 1]
                    sq = dx * dx + dy * dy
                    total += sq if squared else np.sqrt(sq)
                    shared += 1
            if rescale:
                out[i, j] = total * J / shared if shared > 0 else np.inf
            else:
                out[i, j] = total
    return out


class PoseDistance(LabelDistance):
    r"""Sum over joints of the distance between corresponding joints.

    .. math::

        D(P, Q) = \frac{J}{|S|} \sum_{j \in S} \lVert p_j - q_j \rVert_2
        \qquad\text{or, squared:}\qquad
        D_2(P, Q) = \frac{J}{|S|} \sum_{j \in S} \lVert p_j - q_j \rVert_2^2

    where :math:`p_j, q_j \in \mathbb{R}^2` are joint :math:`j` of poses :math:`P, Q`, :math:`J` is the number of
    joints, and :math:`S` the joints present in *both* poses. Thin-slicing (Kwak, Cho and Laptev, "Thin-slicing
    for pose: learning to understand pose without explicit pose estimation", CVPR 2016) and the log-ratio loss
    paper (Kim et al., CVPR 2019, §4.3) use the plain sum over all joints.

    Missing joints (``missing``):

    - ``"rescale"`` (default): sum over the shared joints, scaled by :math:`J/|S|` so that poses with fewer
      annotated joints are not artificially close; two poses sharing no joint are at :math:`+\infty`.
    - ``"skip"``: sum over the shared joints with no rescaling (:math:`J/|S|` dropped; 0 when nothing is shared).

    Examples
    --------
    >>> from labeldist.labels.poses import Poses
    >>> p = Poses(np.array(["a", "b"]), np.array([[[0, 0], [0, 0]], [[3, 4], [0, 1]]]),
    ...           np.ones((2, 2), bool), np.ones((2, 2), bool))
    >>> PoseDistance().block(p, p).tolist()
    [[0.0, 6.0], [6.0, 0.0]]
    """

    kind = "pose"
    # measured by benchmarks/bench_pair_cost.py (292 us, 0.49 us), rounded up
    cost_per_call_s, cost_per_pair_s = 400e-6, 1e-6
    labels_class = Poses

    @classmethod
    def meaning(cls, params: dict[str, Any]) -> str:
        squared = "squared " if params.get("metric") == "sqeuclidean" else ""
        rescale = params.get("missing", "rescale") == "rescale"
        shared = "the joints both poses have, scaled up to all joints" if rescale else "the joints both poses have"
        return f"the sum of the {squared}distances between corresponding joints, over {shared} (0: the same pose)"

    def __init__(self, metric: Metric = "euclidean", missing: Missing = "rescale") -> None:
        if metric not in METRICS:
            raise UsageError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
        if missing not in MISSING:
            raise UsageError(f"unknown missing-joint rule {missing!r}; known: {', '.join(MISSING)}")
        self.metric, self.missing = metric, missing

    def params(self) -> dict[str, Any]:
        return {"metric": self.metric, "missing": self.missing}

    def check_labels(self, labels: Poses, others: Poses | None = None) -> None:
        """Refuse poses whose distances could overflow the float32 a store holds (:meth:`LabelDistance.check_labels`),
        naming the pose (the label, with ``others``), the joint, its values and the bound. No distance is
        computed: the spread of each joint's coordinates over ``labels`` and ``others`` bounds every distance,
        :math:`J \\max_j \\lVert \\text{spread}_j \\rVert` (squared under ``sqeuclidean``), whatever the missing-joint
        rule (so poses far from the origin but close together are kept). An infinite distance between poses
        sharing no joint (``rescale``) is the distance's own, and is not refused."""
        xy, present = labels.xy, labels.present
        if others is not None:
            xy, present = np.concatenate([xy, others.xy]), np.concatenate([present, others.present])
        with np.errstate(over="ignore", invalid="ignore"):
            lo = np.where(present[..., None], xy, np.inf).min(axis=0)  # (J, 2)
            hi = np.where(present[..., None], xy, -np.inf).max(axis=0)
            spread = np.where(np.isfinite(lo) & np.isfinite(hi), hi - lo, 0.0)
            joint = np.hypot(spread[:, 0], spread[:, 1])
            bound = float(labels.n_joints * (joint.max(initial=0.0) ** (2 if self.metric == "sqeuclidean" else 1)))
        if bound <= STORED_MAX:
            return
        t = int(np.argmax(joint))
        axis = int(np.argmax(spread[t]))
        low, high = (
            int(np.argmin(np.where(present[:, t], xy[:, t, axis], np.inf))),
            int(np.argmax(np.where(present[:, t], xy[:, t, axis], -np.inf))),
        )
        n = len(labels)
        row = max([r for r in (high, low) if r < n] or [0], key=lambda r: abs(xy[r, t, axis]))

        def place(r: int) -> str:
            if r >= n and others is not None:
                return f"the store's pose {str(others.ids[r - n])!r}"
            return "the label" if others is not None and n == 1 else f"pose {str(labels.ids[r])!r}"

        name = labels.joint_names[t]
        whose = "the label's" if place(row) == "the label" else f"{place(row)}: its"
        raise LabelError(
            f"{whose} values are too large for the pose distance ({self.metric}): joint {t} ({name}) "
            f"{'xy'[axis]} spans {xy[low, t, axis]:.6g} ({place(low)}) to {xy[high, t, axis]:.6g} "
            f"({place(high)}), so that {past_stored(bound)}"
        )

    def block(self, rows: Poses, cols: Poses) -> np.ndarray:
        if rows.n_joints != cols.n_joints:
            raise UsageError(f"poses have {rows.n_joints} and {cols.n_joints} joints: cannot compare")
        return _pose_block(
            np.ascontiguousarray(rows.xy),
            np.ascontiguousarray(rows.present),
            np.ascontiguousarray(cols.xy),
            np.ascontiguousarray(cols.present),
            self.metric == "sqeuclidean",
            self.missing == "rescale",
        )

    def reference(self, a: Poses, i: int, b: Poses, j: int) -> float:
        shared = [t for t in range(a.n_joints) if a.present[i, t] and b.present[j, t]]
        terms = [float(np.sum((a.xy[i, t] - b.xy[j, t]) ** 2)) for t in shared]
        total = sum(terms) if self.metric == "sqeuclidean" else sum(np.sqrt(x) for x in terms)
        if self.missing == "skip":
            return float(total)
        return float(total * a.n_joints / len(shared)) if shared else float("inf")
