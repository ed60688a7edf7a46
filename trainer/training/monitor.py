"""Say when training goes wrong: the spread of a step's embeddings, and a watch over the loss, its chance level and
the spread.

A metric-learning run can fail silently: its loss never gets below its *chance level*
(:meth:`labeldist.trainer.losses.BatchLoss.chance_level`, the loss of embeddings that know nothing of the labels),
every embedding collapses onto one direction, or its weights do not move. The fit loop measures each step's
:func:`embedding_spread` and :func:`rank_agreement` (how well embedding distances order the labels, whatever their
scale) and feeds them, with the loss and its chance level, to a :class:`TrainingWatch`, which returns a one-line
warning the first time a run looks stuck::

    warning = watch.update(step, loss, embedding_spread(embeddings), chance=loss_fn.chance_level(distances, pairwise),
                           order=rank_agreement(embeddings, distances, loss_fn.normalized))

Everything here is deterministic (no wall clock): the same losses and embeddings give the same warnings.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from labeldist.errors import UsageError

#: mean pairwise cosine above which a minibatch's embeddings count as collapsed. An untrained ImageNet-style
#: ResNet already gives 0.96-0.97 (the pooled ReLU features share a large positive mean, which the linear head
#: maps to a common direction); a collapsed dense-triplet run sat at 0.996-0.999 (RESULTS.md). Embeddings that
#: bunched can still rank well: an all-anchor dense triplet run learned at 0.985-0.994 (RESULTS.md), so a loss
#: below its chance level vetoes this warning.
COLLAPSE_COSINE = 0.99
#: consecutive steps the cosine must stay above :data:`COLLAPSE_COSINE`, and the window of the flat test
WINDOW = 50
#: steps not judged at the start: the untrained network's embeddings are already close together (above), and
#: the first steps of any run may tighten them before the loss spreads them out
WARMUP = 20
#: steps before the chance test judges: a run that learns may sit above its chance level at first (random
#: embedding distances add their own variance to the log-ratio loss). The all-anchor log-ratio run on MPII images
#: with the pose augmentation was at 1.41 of it over its first 50 steps, 0.98 over steps 301-500 and 0.85 over
#: steps 501-700, on its way to nDCG@10 0.75; the runs that learned nothing stayed at 0.99-1.9 of it
#: (RESULTS.md, "The chance level")
CHANCE_WARMUP = 500
#: steps whose losses and chance levels the chance test compares, after :data:`CHANCE_WARMUP`
CHANCE_WINDOW = 200
#: the loss must lie this fraction below its chance level (means over the window) to count as learning: a
#: triplet loss on the plateau of embeddings that order nothing sits 1-4 % under its margin (a CPU run of
#: RESULTS.md: 0.029 +- 8 % against 0.03), since some triplets are satisfied by a hair
CHANCE_TOL = 0.05
#: a loss this fraction or more below its chance level vetoes the collapse warning: the all-anchor dense triplet
#: run of RESULTS.md was 0.9 % under its margin when its embeddings bunched, and learned; a loss at its chance
#: level up to float rounding (identical embeddings) is not below it
COLLAPSE_VETO_TOL = 0.005
#: a loss without a chance level is flat when its standard deviation over the window is below this fraction of
#: its mean (a minibatch loss of a run that learns moves by 10-50 % from step to step)
FLAT_STD_ANY = 0.005
#: mean :func:`rank_agreement` over a window at or above which the embeddings order the labels, whatever the loss
#: says: a run that learns is not warned. The ladder and multi-similarity runs on MPII pose features that learned
#: (nDCG@10 0.82 and 0.85 against 0.64 for the inputs) kept a loss at its chance level (the ladder: collapsed
#: cosine similarities, so hinges at their margins) or flat within 0.5 % (multi-similarity), and were warned before;
#: embeddings that know nothing of the labels agree at 0 (identical embeddings: exactly 0)
ORDER_MIN = 0.1
#: weights whose change over the last :data:`CHANCE_WINDOW` steps is below this fraction of their norm have not
#: moved: the learning rate is far too small (Adam at 1e-9 moves them by about 1e-6 of their norm; at 1e-3, 0.1-1)
STILL_REL = 1e-4

#: what to try when a loss is stuck, per loss, after the advice of :func:`stuck_advice`
ADVICE: dict[str, str] = {
    "dense_triplet": "--loss log_ratio (it has no margin, so no plateau at it)",
    "binary_triplet": "--loss log_ratio (it uses the label distances' values, not only their order)",
    "ladder": "--ladder-calibrate percentile so that each anchor's rungs hold pairs",
    "lifted": "another --margin",
    "multi_similarity": "another --positives",
    "proxy_anchor": "another --margin",
}
GENERIC_ADVICE = "a lower --lr"
#: what to try when the weights do not move
STILL_ADVICE = "a higher --lr"


def stuck_advice(loss: str, *, anchors: str, optimizer: str, pretrained: bool) -> str:
    """What to try when a run of ``loss`` learns nothing, most likely first: every member of a minibatch an anchor,
    the recipe that learns from random weights, the loss's own remedy, a lower learning rate.

    >>> stuck_advice("log_ratio", anchors="first", optimizer="adam", pretrained=False)
    '--anchors all (every member of a minibatch an anchor), or a lower --lr'
    """
    tries = []
    if anchors == "first":
        tries.append("--anchors all (every member of a minibatch an anchor)")
    if optimizer == "sgd" and not pretrained:
        tries.append("--recipe scratch (Adam 1e-3; the papers' SGD recipe was made for ImageNet weights)")
    if loss in ADVICE:
        tries.append(ADVICE[loss])
    tries.append(GENERIC_ADVICE)
    return ", or ".join(tries)


@torch.no_grad()
def rank_agreement(embeddings: torch.Tensor, distances: torch.Tensor, normalized: bool = False) -> float:
    r"""How well a step's embedding distances order its label distances: Spearman's :math:`\rho` between the
    distances from each minibatch's anchor (its first member) to the others in the embedding and in the labels,
    averaged over the minibatches.

    ``embeddings`` ``(B, n, d)`` or ``(n, d)``; ``distances`` ``(B, n - 1)`` or ``(n - 1,)``: the label distances
    from the anchor. Embedding distances are Euclidean, between L2-normalised embeddings when ``normalized`` (the
    loss ranks by cosine). :math:`\rho` is scale-free: embeddings bunched onto one direction that still order the
    labels agree as well as spread ones, and embeddings that know nothing of the labels agree at about 0. A
    minibatch whose embedding or label distances are all equal agrees at 0 (scipy's ``spearmanr``, NaN there).
    """
    from scipy.stats import spearmanr

    e = embeddings.detach().float()
    d = distances.detach().float()
    if e.dim() == 2:
        e, d = e[None], d[None]
    if normalized:
        e = torch.nn.functional.normalize(e, dim=-1)
    ours = (e[:, 1:] - e[:, :1]).norm(dim=-1).cpu().double().numpy()
    theirs = d.cpu().double().numpy()
    rhos = []
    for a, b in zip(ours, theirs):
        if np.ptp(a) == 0 or np.ptp(b) == 0:
            rhos.append(0.0)
        else:
            rhos.append(float(spearmanr(a, b).statistic))
    return float(np.mean(rhos))


def parameter_vector(module: torch.nn.Module) -> torch.Tensor:
    """The module's parameters as one detached float32 vector (a copy): what :func:`relative_change` compares."""
    return torch.cat([p.detach().reshape(-1).float() for p in module.parameters()]).clone()


def relative_change(before: torch.Tensor, after: torch.Tensor) -> float:
    r"""How far the weights moved: :math:`\lVert \theta_1 - \theta_0 \rVert / \lVert \theta_0 \rVert` (inf
    from zero weights that moved, 0 when neither moved).

    >>> relative_change(torch.tensor([3.0, 4.0]), torch.tensor([3.0, 4.5]))
    0.1
    """
    norm = float(before.norm())
    moved = float((after - before).norm())
    return moved / norm if norm > 0 else (math.inf if moved > 0 else 0.0)


@torch.no_grad()
def embedding_spread(embeddings: torch.Tensor) -> dict[str, float]:
    r"""How spread out a step's embeddings are: ``{"mean_cosine", "variance", "norm"}``.

    ``embeddings``: ``(B, n, d)`` (B minibatches of n items) or ``(n, d)``. With :math:`\hat f_k` the
    L2-normalised embeddings of one minibatch (a zero vector stays zero),

    .. math::
        \text{mean\_cosine} = \frac{1}{n(n-1)} \sum_{k \ne l} \hat f_k \cdot \hat f_l
            = \frac{\lVert \sum_k \hat f_k \rVert^2 - \sum_k \lVert \hat f_k \rVert^2}{n(n-1)},
        \qquad
        \text{variance} = \frac{1}{n} \sum_k \lVert \hat f_k - \bar f \rVert^2
            = \frac{1}{n} \sum_k \lVert \hat f_k \rVert^2 - \lVert \bar f \rVert^2,

    each averaged over the B minibatches; ``norm`` is the mean Euclidean norm of the raw embeddings. The
    variance is the sum over dimensions of each dimension's (population) variance: 0 when every item maps to one
    direction, :math:`1 - \lVert \bar f \rVert^2` in general, near 1 for directions spread evenly over the
    sphere. For unit rows the two are tied, :math:`\text{variance} = \frac{n-1}{n}(1 - \text{mean\_cosine})`:
    the cosine is the number to read (1 = collapsed), the variance the one to plot on a log scale (it shows how
    far a collapse has gone: 0.9987 is 1e-3). Both are computed on the normalised embeddings whatever the loss,
    since retrieval by cosine is what a collapse ruins; ``norm`` shows a loss without normalisation shrinking
    (or blowing up) its scale. Cost: O(B n d), no n x n matrix, on a detached float32 copy.
    """
    e = embeddings.detach().float()
    if e.dim() == 2:
        e = e[None]
    if e.dim() != 3 or e.shape[1] < 2:
        raise UsageError(f"embeddings must have shape (B, n, d) or (n, d) with n >= 2, got {tuple(embeddings.shape)}")
    n = e.shape[1]
    norms = e.norm(dim=-1)  # (B, n)
    f = e / norms.clamp_min(1e-12)[..., None]
    sq = (norms > 0).to(e)  # |f_k|^2: 1, or 0 for a zero row
    total = f.sum(1)  # (B, d)
    cosine = (total.pow(2).sum(-1) - sq.sum(1)) / (n * (n - 1))
    variance = sq.mean(1) - (total / n).pow(2).sum(-1)
    mean_cosine, var, norm = torch.stack([cosine.mean(), variance.mean(), norms.mean()]).tolist()
    return {"mean_cosine": mean_cosine, "variance": max(var, 0.0), "norm": norm}


class TrainingWatch:
    """Fed ``(step, loss, spread, chance=)`` every step; returns a one-line warning (at most once per kind) when

    - ``chance``: after ``chance_warmup`` steps, the loss's mean over the last ``chance_window`` steps is not at
      least ``chance_tol`` below the mean of its chance level there (the loss of embeddings that know nothing of
      the labels): the run is not learning;
    - ``collapse``: the mean pairwise cosine of the step's embeddings (:func:`embedding_spread`) stayed above
      ``collapse_cosine`` for ``window`` consecutive steps, after ``warmup`` steps, unless the loss's mean over
      those steps lies below its chance level (by :data:`COLLAPSE_VETO_TOL`: a triplet loss below its margin, whose
      bunched embeddings still order the labels);
    - ``flat``: for a loss without a chance level, over the last ``window`` steps (after ``warmup``) its standard
      deviation is below :data:`FLAT_STD_ANY` of its mean;
    - ``still``: the weights moved, but by less than :data:`STILL_REL` of their norm, over the last
      ``chance_window`` steps (``moved``, given every ``chance_window`` steps by the fit loop): the learning rate
      is far too small.

    A run whose embeddings order the labels (``order``, :func:`rank_agreement`, at least :data:`ORDER_MIN` on
    average over the window judged) learns whatever its loss says: it gets no ``chance``, ``collapse`` or ``flat``
    warning.

    The warning names the loss, what was seen (with the numbers) and what to try (``advice``, e.g.
    :func:`stuck_advice`). When several fire at the same step they share one line. ``warnings`` keeps ``{"step",
    "kind", "message"}`` of each, for the run's log and its end summary. Non-finite losses are not judged (the fit
    loop fails on those itself).
    """

    def __init__(
        self,
        loss: str,
        *,
        advice: str | None = None,
        window: int = WINDOW,
        warmup: int = WARMUP,
        collapse_cosine: float = COLLAPSE_COSINE,
        chance_warmup: int = CHANCE_WARMUP,
        chance_window: int = CHANCE_WINDOW,
        chance_tol: float = CHANCE_TOL,
    ) -> None:
        if window < 2 or chance_window < 2:
            raise UsageError(f"windows must be at least 2 steps, got {window} and {chance_window}")
        self.loss, self.window, self.warmup = loss, window, warmup
        self.advice = advice or ", or ".join(filter(None, (ADVICE.get(loss), GENERIC_ADVICE)))
        self.collapse_cosine = collapse_cosine
        self.chance_warmup, self.chance_window, self.chance_tol = chance_warmup, chance_window, chance_tol
        self.losses: deque[float] = deque(maxlen=max(window, chance_window))
        self.chances: deque[float] = deque(maxlen=max(window, chance_window))
        self.orders: deque[float] = deque(maxlen=max(window, chance_window))
        self.collapsed_for = 0  # consecutive judged steps above the cosine threshold
        self.last_cosine = math.nan
        self.warnings: list[dict[str, Any]] = []
        self.fired: set[str] = set()

    def restore(self, warnings: Sequence[dict[str, Any]]) -> None:
        """Take the warnings a resumed run gave before (its log's ``warning`` rows): each kind warns once a run,
        not once each time it resumes."""
        for row in warnings:
            self.fired.add(row["kind"])
            self.warnings.append({key: row[key] for key in ("step", "kind", "message")})

    def update(
        self,
        step: int,
        loss: float,
        spread: dict[str, float] | None = None,
        *,
        chance: float | None = None,
        order: float | None = None,
        moved: float | None = None,
    ) -> str | None:
        """Take one step's loss, spread, the loss's chance level, the embeddings' :func:`rank_agreement` and (every
        ``chance_window`` steps) the weights' :func:`relative_change` over those steps; the warning to print and
        log, or None."""
        if step <= self.warmup or not math.isfinite(loss):
            return None
        self.losses.append(float(loss))
        self.chances.append(math.nan if chance is None else float(chance))
        self.orders.append(math.nan if order is None else float(order))
        if spread is not None:
            self.last_cosine = spread["mean_cosine"]
            self.collapsed_for = self.collapsed_for + 1 if self.last_cosine > self.collapse_cosine else 0
        seen: list[tuple[str, str]] = []
        # weights that did not move at all had no gradient (identical embeddings): a rate would not help them
        still = moved is not None and step >= self.chance_warmup and 0 < moved < STILL_REL
        if "still" not in self.fired and still:
            seen.append(
                (
                    "still",
                    f"its weights barely moved ({moved:.2g} of their norm over the last {self.chance_window} steps)",
                )
            )
        if "chance" not in self.fired and step >= self.chance_warmup + self.chance_window:
            stuck = None if self.ordering(self.chance_window) else self.at_chance(self.chance_window)
            if stuck is not None:
                seen.append(("chance", stuck))
        if (
            "collapse" not in self.fired
            and self.collapsed_for >= self.window
            and not self.below_chance(self.window, tol=COLLAPSE_VETO_TOL)
            and not self.ordering(self.window)
        ):
            seen.append(
                (
                    "collapse",
                    f"its embeddings collapsed (mean pairwise cosine above {self.collapse_cosine} "
                    f"for {self.collapsed_for} steps, now {self.last_cosine:.4f})",
                )
            )
        if (
            "flat" not in self.fired
            and len(self.losses) >= self.window
            and self._window_chance(self.window) is None
            and not self.ordering(self.window)
        ):
            flat = self.flat_reason()
            if flat:
                seen.append(("flat", flat))
        if not seen:
            return None
        advice = self.advice
        if still:  # the rate is too small: not "a lower --lr"
            advice = ", or ".join([t for t in advice.split(", or ") if t != GENERIC_ADVICE] + [STILL_ADVICE])
        message = (
            f"warning: {self.loss} training looks stuck at step {step}: "
            + " and ".join(w for _, w in seen)
            + f"; try {advice}"
        )
        for kind, _ in seen:
            self.fired.add(kind)
            self.warnings.append({"step": step, "kind": kind, "message": message})
        return message

    def _window_chance(self, n: int) -> tuple[float, float] | None:
        """The mean loss and mean chance level of the last ``n`` steps, or None unless all ``n`` had a chance
        level."""
        if len(self.losses) < n:
            return None
        chances = np.asarray(list(self.chances)[-n:], dtype=np.float64)
        if not np.isfinite(chances).all():
            return None
        return float(np.mean(list(self.losses)[-n:])), float(chances.mean())

    def ordering(self, n: int) -> bool:
        """Whether the embeddings ordered the labels over the last ``n`` steps: a mean :func:`rank_agreement` of at
        least :data:`ORDER_MIN` (False where it was not measured)."""
        orders = np.asarray(list(self.orders)[-n:], dtype=np.float64)
        return len(orders) >= n and bool(np.isfinite(orders).all()) and float(orders.mean()) >= ORDER_MIN

    def below_chance(self, n: int, tol: float | None = None) -> bool:
        """Whether the loss's mean over the last ``n`` steps lies ``tol`` (default ``chance_tol``) or more below the
        mean of its chance level."""
        means = self._window_chance(n)
        tol = self.chance_tol if tol is None else tol
        return means is not None and means[0] < (1 - tol) * means[1]

    def at_chance(self, n: int) -> str | None:
        """What shows the loss at or above its chance level over the last ``n`` steps, or None."""
        means = self._window_chance(n)
        if means is None or self.below_chance(n):
            return None
        loss, chance = means
        return (
            f"its loss ({loss:.4g}, mean of the last {n} steps) has not got below its chance level ({chance:.4g}, "
            "the loss of embeddings that know nothing of the labels)"
        )

    def flat_reason(self) -> str | None:
        """What makes the last window's loss flat, or None (losses without a chance level)."""
        x = np.asarray(list(self.losses)[-self.window :], dtype=np.float64)
        mean, std = float(x.mean()), float(x.std())
        if mean == 0.0:
            return None  # a loss of exactly zero (every triplet satisfied) is not stuck
        if std / abs(mean) < FLAT_STD_ANY:
            return f"its loss sat at {mean:.4g} +- {std:.2g} for {self.window} steps"
        return None
