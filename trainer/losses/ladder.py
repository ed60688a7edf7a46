"""The ladder loss with hard contrastive sampling of Zhou et al. (AAAI 2020), with thresholds calibrated on the
label distances when the paper's relevance thresholds cannot split them, or set per anchor at percentiles of its
relevances (the authors' adaptive thresholds)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from labeldist.errors import UsageError
from labeldist.trainer.losses.base import BatchLoss

RELEVANCE = ("one_minus", "inverse")
CALIBRATE = ("auto", "quantile", "off", "percentile")
#: slack on "relevance in [0, 1]" for float rounding of 1 - D
RANGE_TOLERANCE = 1e-6


def relevance(pairwise: torch.Tensor, kind: str) -> torch.Tensor:
    """Relevance from label distance: ``one_minus`` :math:`1 - D` (relevance stores hold :math:`1 - R`),
    ``inverse`` :math:`1 / (1 + D)`; both decrease with :math:`D`."""
    return 1.0 - pairwise if kind == "one_minus" else 1.0 / (1.0 + pairwise)


def ladder_levels(r: torch.Tensor, thresholds: Sequence[float]) -> torch.Tensor:
    """Level of each pair, 0 the most relevant: the number of thresholds its relevance falls below."""
    return sum((r < t).long() for t in thresholds)  # type: ignore[return-value]


def rungs_formed(level: torch.Tensor, n_rungs: int) -> torch.Tensor:
    """``(B,)`` whether some query of each minibatch has items on both sides of some rung (so a non-zero loss is
    possible); ``level`` ``(B, n, n)``."""
    other = ~torch.eye(level.shape[-1], dtype=torch.bool, device=level.device)
    formed = torch.zeros(level.shape[0], dtype=torch.bool, device=level.device)
    for rung in range(1, n_rungs + 1):
        near, far = other & (level < rung), other & (level >= rung)
        formed |= (near.any(-1) & far.any(-1)).any(-1)
    return formed


def off_diagonal(pairwise: torch.Tensor) -> torch.Tensor:
    """The distances between distinct items of each minibatch, flattened."""
    other = ~torch.eye(pairwise.shape[-1], dtype=torch.bool, device=pairwise.device)
    return pairwise[other.expand_as(pairwise)]


def quantile_thresholds(pairwise: torch.Tensor, shares: Sequence[float]) -> list[float]:
    """Distance thresholds :math:`d_l`: the ``shares[l]`` quantile of the batch's off-diagonal label distances
    (the ``lower`` value: a distance of the batch, with about that share of pairs at or below it); increasing with
    the share."""
    d = off_diagonal(pairwise).double()
    return torch.quantile(d, torch.tensor(list(shares), dtype=d.dtype, device=d.device), interpolation="lower").tolist()


def anchor_percentile_thresholds(r: torch.Tensor, percentiles: Sequence[float]) -> torch.Tensor:
    """``(B, n, L)`` per-anchor relevance thresholds: ``[b, q, l]`` is the ``percentiles[l]`` percentile (0-100,
    linear interpolation, as ``np.percentile``) of anchor ``q``'s relevances ``r[b, q, c]`` to the other items
    ``c != q`` of its minibatch; non-increasing in ``l`` for decreasing ``percentiles``."""
    b, n, _ = r.shape
    other = ~torch.eye(n, dtype=torch.bool, device=r.device)
    rows = r[:, other].reshape(b, n, n - 1)
    q = torch.tensor([p / 100.0 for p in percentiles], dtype=r.dtype, device=r.device)
    return torch.quantile(rows, q, dim=-1, interpolation="linear").permute(1, 2, 0)


def anchor_percentile_levels(r: torch.Tensor, thresholds: torch.Tensor) -> torch.Tensor:
    """Level of each pair under per-anchor thresholds ``(B, n, L)``: the number of rungs whose far side it is on.
    Far of rung ``l`` is :math:`r < t_l(q)`, or :math:`r \\le t_l(q)` where :math:`t_l(q)` is the anchor's
    smallest relevance (a tie at the bottom, e.g. a gated relevance that is 0 for most pairs: there ``r < t``
    would leave the far side empty and the rung unformed). The diagonal is not counted (level 0)."""
    n = r.shape[-1]
    other = ~torch.eye(n, dtype=torch.bool, device=r.device)
    lowest = r.masked_fill(~other, float("inf")).amin(-1, keepdim=True)  # (B, n, 1)
    level = torch.zeros(r.shape, dtype=torch.long, device=r.device)
    for rung in range(thresholds.shape[-1]):
        t = thresholds[..., rung : rung + 1]
        far = torch.where(t > lowest, r < t, r <= t) & other
        level += far.long()  # far sides are nested (t_1 >= t_2 >= ...), so this counts a prefix of rungs
    return level


def rung_counts(level: torch.Tensor, n_rungs: int) -> list[int]:
    """How many queries (rows, over all minibatches) have items on both sides of each rung."""
    other = ~torch.eye(level.shape[-1], dtype=torch.bool, device=level.device)
    counts = []
    for rung in range(1, n_rungs + 1):
        near, far = other & (level < rung), other & (level >= rung)
        counts.append(int((near.any(-1) & far.any(-1)).sum()))
    return counts


class LadderLoss(BatchLoss):
    r"""Ladder loss with hard contrastive sampling (Zhou et al., "Ladder Loss for Coherent Visual-Semantic
    Embedding", AAAI 2020, Eq. 6-8), every batch item acting as a query.

    Thresholds :math:`\theta_1 > \dots > \theta_{L-1}` on the relevance :math:`r(q, c)` split the other items
    :math:`c` of the batch into levels :math:`\mathcal{N}_1` (:math:`r \ge \theta_1`), ...,
    :math:`\mathcal{N}_L` (:math:`r < \theta_{L-1}`). With cosine similarity :math:`s`:

    .. math::
        L(q) = \sum_{l=1}^{L-1} \beta_l \Big[ \alpha_l - \min_{c \in \mathcal{N}_{1:l}} s(q, c)
                                                 + \max_{c \in \mathcal{N}_{l+1:L}} s(q, c) \Big]_+

    the hardest pair across each rung of the ladder (Eq. 8; a rung with an empty side adds 0); the minibatch's
    loss is the mean over its queries. Defaults: margins :math:`\alpha = (0.2, 0.01)` and weights
    :math:`\beta = (1, 0.25)` as the paper; thresholds ``(0.9, 0.63)``: 0.63 is the paper's, and 0.9 stands in
    for its first level, the ground-truth caption (relevance 1), which a single-modality store does not have.
    Relevance comes from the batch's pairwise label distances: ``one_minus`` :math:`r = 1 - D` for relevance
    stores (which hold :math:`1 - R`), ``inverse`` :math:`r = 1 / (1 + D)` for other distances.

    **Calibration.** The paper's thresholds are relevance scores in [0, 1]. On a store of other distances (pose
    distances in pixels run into the thousands) :math:`1 - D` is negative for every pair, no rung ever has items
    on both sides, and the loss is exactly 0 at every step. So the first minibatch (the first step's
    minibatches) decides, and the decision holds for the run (it is saved in the checkpoint):

    - ``calibrate="off"``: the thresholds as given (the paper's behaviour). A batch whose relevances fall
      outside [0, 1], or a first batch where they form no rung, is a ValueError saying why.
    - ``calibrate="quantile"``: distance thresholds :math:`d_1 \le \dots \le d_{L-1}` are the ``shares``
      quantiles of the first batch's label distances between distinct items, and relevance thresholds
      :math:`\theta_l = r(d_l)`: level 1 holds the pairs at most :math:`d_1` apart (the closest 5 % of pairs by
      default), level 2 those up to :math:`d_2` (the next 15 %), level 3 the rest. The batch's pairs rather
      than the store's, because they are what the loss sees (the anchor's neighbours and random others) and
      the trainer has them at no cost; quantiles because they need no unit or range. Small near levels keep
      "near" meaning near, as the paper's (the ground truth and the few captions with :math:`r \ge 0.63`),
      while a batch of 150 still gives a query ~7 items in level 1, so most rungs have both sides. The
      thresholds are frozen after the first batch, like the paper's fixed ones. ``shares`` needs one value per
      rung. If even then no rung can be formed (the distances take too few distinct values), a ValueError says
      so.
    - ``calibrate="auto"`` (default): ``off`` when every relevance of the first batch lies in [0, 1] and the
      given thresholds form a rung there; ``quantile`` otherwise.
    - ``calibrate="percentile"``: adaptive thresholds per anchor, recomputed on every minibatch, as the authors'
      ``AutoThreshLadderLoss`` (github.com/cdluminate/ladderloss, ``Code/ladderloss.py`` and
      ``autokmeans.AutoThresh``; ``config.atl.py``: percentile 85 with margin 0.01 and weight 1/4 below the
      ground-truth rung). For query :math:`q` of a minibatch and ``percentiles`` :math:`p_1 > \dots > p_{L-1}`
      (0-100), the thresholds are

      .. math::
          \theta_l(q) = \operatorname{percentile}_{p_l}\{\, r(q, c) : c \ne q \,\}

      (linear interpolation, ``np.percentile``), and level :math:`l` of :math:`q` holds the :math:`c` with
      :math:`\theta_l(q) \le r(q, c) < \theta_{l-1}(q)` (:math:`\theta_0 = \infty`,
      :math:`\theta_L = -\infty`): the top :math:`100 - p_1` % of that anchor's relevances are its level 1,
      and so on. Every anchor's ladder thus has items on both sides of every rung (for distinct relevances and
      at least two other items), whatever the store's scale or distribution; ``thresholds`` is not used, and
      ``percentiles`` sets the number of rungs. Two departures from the authors' code: the anchor's own pair is
      left out of its percentile (theirs includes the ground-truth pair, relevance 1, which a single-modality
      minibatch does not have); and, only in degenerate rows, where :math:`\theta_l(q)` equals the anchor's
      smallest relevance (most pairs tied at the bottom, as under a gate that makes 79 % of relevances 0), the
      far side is :math:`r \le \theta_l(q)` rather than :math:`r < \theta_l(q)`, so that the rung still
      separates the relevant items from the rest instead of leaving its far side empty (only a row of equal
      relevances then has no rung). Defaults :math:`p = (95, 85)`: 85 is the authors'; 95 stands in for the
      ground-truth level, as 0.9 does among the given thresholds (of 49 other items, levels 1 and 1-2 hold the
      top 3 and top 8).

    ``anchors="all"`` (the default, the paper's) makes every member of the minibatch a query; ``anchors="first"``
    only its first member, as the one-anchor losses of Kim et al. Chance level: equal similarities make each rung
    with both sides cost :math:`\beta_l \alpha_l`, so the loss of embeddings that know nothing of the labels is
    the mean over queries of :math:`\sum_l \beta_l \alpha_l` over the rungs the query has.

    :meth:`describe` gives the mode, the thresholds (relevance and distance; for ``percentile`` the percentiles
    and the mean, min and max of each rung's per-anchor thresholds over the first batch), why, how many
    minibatches had no rung at all, and how many queries had each rung formed; the fit loop writes it into the
    run log and the summary.
    """

    pairwise_always = True
    queries_itself = True
    default_anchors = "all"
    normalized = True

    def __init__(
        self,
        thresholds: Sequence[float] = (0.9, 0.63),
        margins: Sequence[float] = (0.2, 0.01),
        betas: Sequence[float] = (1.0, 0.25),
        relevance: str = "one_minus",
        calibrate: str = "auto",
        shares: Sequence[float] = (0.05, 0.2),
        percentiles: Sequence[float] = (95.0, 85.0),
        reduction: str = "mean",
        anchors: str | None = None,
    ) -> None:
        super().__init__(reduction, anchors)
        if calibrate == "percentile":
            if not len(percentiles) == len(margins) == len(betas) >= 1:
                raise UsageError(
                    f"percentiles, margins and betas need one value per rung, got {percentiles}, {margins}, {betas}"
                )
            if not all(0 < p < 100 for p in percentiles) or list(percentiles) != sorted(set(percentiles))[::-1]:
                raise UsageError(
                    f"percentiles must be decreasing (most relevant level first), in (0, 100); got {percentiles}"
                )
        elif not len(thresholds) == len(margins) == len(betas) >= 1:
            raise UsageError(
                f"thresholds, margins and betas need one value per rung, got {thresholds}, {margins}, {betas}"
            )
        if list(thresholds) != sorted(thresholds, reverse=True):
            raise UsageError(f"thresholds must be decreasing (most relevant level first), got {thresholds}")
        if relevance not in RELEVANCE:
            raise UsageError(f"unknown relevance {relevance!r}; known: {', '.join(RELEVANCE)}")
        if calibrate not in CALIBRATE:
            raise UsageError(f"unknown calibrate {calibrate!r}; known: {', '.join(CALIBRATE)}")
        if list(shares) != sorted(shares) or not all(0 < s < 1 for s in shares):
            raise UsageError(f"shares must be increasing, in (0, 1); got {shares}")
        self.thresholds, self.margins, self.betas = list(thresholds), list(margins), list(betas)
        self.relevance, self.calibrate, self.shares = relevance, calibrate, list(shares)
        self.percentiles = [float(p) for p in percentiles]
        #: "given", "quantile" or "percentile" once the first batch has decided; None before
        self.mode: str | None = None
        self.distance_thresholds: list[float] | None = None
        #: percentile mode: per rung, the mean, min and max of the per-anchor thresholds of the first batch
        self.anchor_thresholds: list[dict[str, float]] | None = None
        self.reason = ""
        self.minibatches = self.without_rung = self.queries = 0
        self.queries_with_rung = [0] * len(margins)

    def describe(self) -> dict[str, Any]:
        adaptive = self.mode == "percentile"
        return {
            "ladder_mode": self.mode,
            "thresholds": None if adaptive else self.thresholds,
            "distance_thresholds": self.distance_thresholds,
            "shares": self.shares if self.mode == "quantile" else None,
            "percentiles": self.percentiles if adaptive else None,
            "anchor_thresholds_first_batch": self.anchor_thresholds,
            "relevance": self.relevance,
            "reason": self.reason,
            "minibatches": self.minibatches,
            "minibatches_without_rung": self.without_rung,
            "queries": self.queries,
            "queries_with_rung": self.queries_with_rung,
        }

    def get_extra_state(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "thresholds": self.thresholds,
            "distance_thresholds": self.distance_thresholds,
            "reason": self.reason,
            "minibatches": self.minibatches,
            "without_rung": self.without_rung,
            "percentiles": self.percentiles,
            "anchor_thresholds": self.anchor_thresholds,
            "queries": self.queries,
            "queries_with_rung": self.queries_with_rung,
        }

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restores the run's decision (a resumed run does not calibrate again on another batch). Checkpoints
        written before the percentile mode lack its keys and the per-rung counts, which then start at 0."""
        self.mode, self.thresholds = state["mode"], list(state["thresholds"])
        self.distance_thresholds, self.reason = state["distance_thresholds"], state["reason"]
        self.minibatches, self.without_rung = state["minibatches"], state["without_rung"]
        if state.get("percentiles") is not None:
            self.percentiles = [float(p) for p in state["percentiles"]]
        self.anchor_thresholds = state.get("anchor_thresholds")
        self.queries = int(state.get("queries", 0))
        self.queries_with_rung = [int(c) for c in state.get("queries_with_rung", [0] * len(self.margins))]

    def _decide(self, pairwise: torch.Tensor, r: torch.Tensor) -> None:
        """Fix the run's thresholds on its first batch (see the class docstring)."""
        lo, hi = float(r.min()), float(r.max())
        in_range = lo >= -RANGE_TOLERANCE and hi <= 1 + RANGE_TOLERANCE
        forms = bool(rungs_formed(ladder_levels(r, self.thresholds), len(self.margins)).any())
        d = off_diagonal(pairwise)
        seen = (
            f"relevance {self.relevance} of the first batch's label distances (D in [{float(d.min()):.4g}, "
            f"{float(d.max()):.4g}]) lies in [{lo:.4g}, {hi:.4g}]"
        )
        why = (", outside the [0, 1] of the paper's relevance scores" if not in_range else "") + (
            f", so thresholds {self.thresholds} put every pair on one side of every rung" if not forms else ""
        )
        if self.calibrate == "off" or (self.calibrate == "auto" and in_range and forms):
            if why:
                raise UsageError(
                    f"ladder: no rung can be formed: {seen}{why}; calibrate the thresholds on the "
                    "distances (--ladder-calibrate quantile) or give thresholds in that range"
                )
            self.mode, self.reason = "given", "relevances in [0, 1] and the given thresholds form rungs"
            return
        if len(self.shares) != len(self.margins):  # checked only here: a run on given thresholds needs no shares
            raise UsageError(f"ladder: calibrating needs one share per rung ({len(self.margins)}), got {self.shares}")
        dist = quantile_thresholds(pairwise, self.shares)
        thresholds = relevance(torch.tensor(dist, dtype=r.dtype, device=r.device), self.relevance).tolist()
        if not bool(rungs_formed(ladder_levels(r, thresholds), len(self.margins)).any()):
            raise UsageError(
                f"ladder: no rung can be formed: the first batch's {d.numel()} label distances between "
                f"distinct items take {d.unique().numel()} distinct value(s), so the {self.shares} "
                f"quantiles ({dist}) split no query's items"
            )
        self.mode, self.thresholds, self.distance_thresholds = "quantile", thresholds, dist
        self.reason = f"calibrate=auto: {seen}{why}" if self.calibrate == "auto" else "calibrate=quantile"

    def _anchor_levels(self, r: torch.Tensor) -> torch.Tensor:
        """Levels under per-anchor percentile thresholds; the first batch's thresholds are recorded."""
        thresholds = anchor_percentile_thresholds(r.double(), self.percentiles)
        if self.mode is None:
            t = thresholds.reshape(-1, thresholds.shape[-1])
            self.anchor_thresholds = [
                {"mean": float(t[:, i].mean()), "min": float(t[:, i].min()), "max": float(t[:, i].max())}
                for i in range(t.shape[1])
            ]
            self.mode = "percentile"
            self.reason = (
                f"calibrate=percentile: per anchor and minibatch, percentiles {self.percentiles} of its "
                f"relevances ({self.relevance}) to the other items"
            )
        return anchor_percentile_levels(r.double(), thresholds)

    def compute(self, embeddings: torch.Tensor, distances: torch.Tensor, pairwise: torch.Tensor | None) -> torch.Tensor:
        assert pairwise is not None
        r = relevance(pairwise, self.relevance)
        if self.calibrate == "percentile" or self.mode == "percentile":
            pass  # no range to check: percentiles of each anchor's relevances need no unit
        elif self.mode is None:
            self._decide(pairwise, r)
        elif self.mode == "given" and not bool(((r >= -RANGE_TOLERANCE) & (r <= 1 + RANGE_TOLERANCE)).all()):
            raise UsageError(
                f"ladder: relevance {self.relevance} of this batch lies in [{float(r.min()):.4g}, "
                f"{float(r.max()):.4g}], outside the [0, 1] of thresholds {self.thresholds}"
            )
        f = F.normalize(embeddings, dim=-1)
        s = f @ f.transpose(1, 2)  # (B, n, n) cosine similarities
        if self.calibrate == "percentile" or self.mode == "percentile":
            level = self._anchor_levels(r)
        else:
            level = ladder_levels(r, self.thresholds)  # 0 = most relevant
        formed = rungs_formed(level, len(self.margins))
        self.minibatches += len(formed)
        self.without_rung += int((~formed).sum())  # counted, so that a run that trains nothing says so
        self.queries += level.shape[0] * level.shape[1]
        self.queries_with_rung = [a + b for a, b in zip(self.queries_with_rung, rung_counts(level, len(self.margins)))]
        other = ~torch.eye(s.shape[1], dtype=torch.bool, device=s.device)
        loss = torch.zeros(s.shape[:2], dtype=s.dtype, device=s.device)
        for rung, (alpha, beta) in enumerate(zip(self.margins, self.betas), start=1):
            near, far = other & (level < rung), other & (level >= rung)
            hardest_near = s.masked_fill(~near, float("inf")).amin(-1)
            hardest_far = s.masked_fill(~far, float("-inf")).amax(-1)
            both = near.any(-1) & far.any(-1)
            hinge = F.relu(alpha - hardest_near + hardest_far)
            loss = loss + beta * torch.where(both, hinge, torch.zeros_like(hinge))
        return self._per_minibatch(loss)

    def _per_minibatch(self, per_query: torch.Tensor) -> torch.Tensor:
        """``(B,)`` from ``(B, n)`` per-query values: the mean over queries, or the first member's."""
        return per_query[:, 0] if self.anchors == "first" else per_query.mean(-1)

    @torch.no_grad()
    def chance_level(
        self, distances: torch.Tensor, pairwise: torch.Tensor | None = None
    ) -> torch.Tensor | float | None:
        """The loss of equal similarities on this minibatch (see the class docstring), once the thresholds are
        decided (None before the first batch, unless they are per anchor)."""
        if pairwise is None:
            return None
        if pairwise.dim() == 2:
            pairwise = pairwise[None]
        r = relevance(pairwise.double(), self.relevance)
        if self.calibrate == "percentile" or self.mode == "percentile":
            level = anchor_percentile_levels(r, anchor_percentile_thresholds(r, self.percentiles))
        elif self.mode is None:
            return None
        else:
            level = ladder_levels(r, self.thresholds)
        other = ~torch.eye(r.shape[-1], dtype=torch.bool, device=r.device)
        chance = torch.zeros(r.shape[:2], dtype=r.dtype, device=r.device)
        for rung, (alpha, beta) in enumerate(zip(self.margins, self.betas), start=1):
            near, far = other & (level < rung), other & (level >= rung)
            chance += beta * alpha * (near.any(-1) & far.any(-1)).to(r)
        return self._reduce(self._per_minibatch(chance))
