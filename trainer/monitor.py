"""Say when training goes wrong: the spread of a step's embeddings, and a watch over the loss and the spread.

A metric-learning run can fail silently: the embeddings of every input collapse onto one direction (all
retrieval is then a tie broken by noise) while the loss, far from diverging, sits still at the value it takes
for collapsed embeddings (a triplet loss: its margin). The fit loop measures the spread of each step's
embeddings with :func:`embedding_spread` (a few vector operations, no gradient) and feeds it, with the loss,
to a :class:`TrainingWatch`, which returns a one-line warning the first time a run looks collapsed or stuck:

.. code-block:: python

    watch = TrainingWatch(config.loss, flat_at=flat_value(loss_fn))
    ...
    spread = embedding_spread(embeddings)          # every step, before or after backward
    warning = watch.update(step, value, spread)    # value: the step's loss as a float
    if warning:
        log the event {"event": "warning", "step": step, "kind": ..., "message": warning}; print(warning)

Everything here is deterministic (no wall clock): the same losses and embeddings give the same warnings.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
import torch

#: mean pairwise cosine above which a minibatch's embeddings count as collapsed. An untrained ImageNet-style
#: ResNet already gives 0.96-0.97 (the pooled ReLU features share a large positive mean, which the linear head
#: maps to a common direction); a run that learns spreads them (0.2-0.9 in our runs); the collapsed dense-triplet
#: run of issue 18 sat at 0.996-0.999. 0.99 is a squared distance of 0.02 between unit vectors, below the
#: smallest margin any of the losses uses.
COLLAPSE_COSINE = 0.99
#: consecutive steps the condition must hold: long enough that one odd minibatch (five near-identical
#: neighbours and a few look-alikes) does not fire, short enough to say so within the first minutes of a run
WINDOW = 50
#: steps not judged at the start: the untrained network's embeddings are already close together (above), and
#: the first steps of any run may tighten them before the loss spreads them out
WARMUP = 20
#: a loss is flat when its standard deviation over the window is below this fraction of its mean. A minibatch
#: loss of a run that learns moves by 10-50 % from step to step (each step draws a new anchor and new items); the
#: stuck dense-triplet run of issue 18 moved by 3 % (0.030 +- 0.001), all of which is the margin's share of
#: the triplets that happen to be satisfied by a hair.
FLAT_STD = 0.05
#: with a known stuck value (``flat_at``: a margin), the mean over the window must also lie within this
#: fraction of it; without one, only a loss that barely moves at all counts as flat (:data:`FLAT_STD_ANY`)
FLAT_AT_TOL = 0.05
#: the flat test without a known stuck value: stricter, since a converged loss is also fairly flat
FLAT_STD_ANY = 0.005
#: a triplet loss at its margin while the embeddings stay this close together is on the plateau of embeddings
#: that do not order their triplets: for label-blind embeddings the dense triplet loss equals its margin (0.03)
#: wherever their mean pairwise cosine is above about 0.96, and rises below (benchmarks/
#: study_dense_triplet_collapse.py --chance), so descent leads there and nothing leads out. The dense triplet run
#: of RESULTS.md's CPU pose table sat there (loss 0.029 +- 8 %, cosine 0.965) for 2,000 steps, too noisy per step
#: for the flat test above; a run that learns spreads its embeddings below 0.9 as its loss passes the margin.
PLATEAU_COSINE = 0.9
#: ... for this many windows in a row: every dense-triplet run of a CNN from random weights starts on the plateau
#: (an untrained ResNet's embeddings have cosines of 0.91-0.97), so only a run that stays there is stuck
PLATEAU_WINDOWS = 4

#: what to try, per loss; :data:`GENERIC_ADVICE` otherwise
ADVICE: dict[str, str] = {
    "dense_triplet": (
        "--loss log_ratio (it has no margin, so no plateau at it), pretrained --weights, or, if this ran Adam, the "
        "papers' recipe (--recipe kim2019-pose: SGD lr 0.01, momentum 0.9, weight decay 5e-4), under which the "
        "embeddings stay further apart"
    ),
    "binary_triplet": (
        "the papers' recipe (--optimizer sgd --lr 0.01 --momentum 0.9 --weight-decay 5e-4), a lower --lr, or "
        "another --margin"
    ),
    "log_ratio": "a lower --lr (the papers' recipe: --optimizer sgd --lr 0.01 --momentum 0.9 --weight-decay 5e-4)",
    "ladder": "a lower --lr, or --ladder-calibrate auto so that each level holds pairs",
    "lifted": "a lower --lr, or another --margin",
    "multi_similarity": "a lower --lr, or another --positives",
    "proxy_anchor": "a lower --lr, or another --margin",
}
GENERIC_ADVICE = "a lower --lr, or the papers' recipe (--optimizer sgd --lr 0.01 --momentum 0.9 --weight-decay 5e-4)"


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
        raise ValueError(f"embeddings must have shape (B, n, d) or (n, d) with n >= 2, got {tuple(embeddings.shape)}")
    n = e.shape[1]
    norms = e.norm(dim=-1)  # (B, n)
    f = e / norms.clamp_min(1e-12)[..., None]
    sq = (norms > 0).to(e)  # |f_k|^2: 1, or 0 for a zero row
    total = f.sum(1)  # (B, d)
    cosine = (total.pow(2).sum(-1) - sq.sum(1)) / (n * (n - 1))
    variance = sq.mean(1) - (total / n).pow(2).sum(-1)
    mean_cosine, var, norm = torch.stack([cosine.mean(), variance.mean(), norms.mean()]).tolist()
    return {"mean_cosine": mean_cosine, "variance": max(var, 0.0), "norm": norm}


def flat_value(loss_fn: Any) -> float | None:
    """The value a loss takes when every embedding coincides, where a collapsed run's loss sits: what the loss
    declares (``BatchLoss.collapsed_value``: a triplet loss's margin), None for a loss without one."""
    collapsed = getattr(loss_fn, "collapsed_value", None)
    return None if collapsed is None else collapsed()


class TrainingWatch:
    """Fed ``(step, loss, spread)`` every step; returns a one-line warning (at most once per kind) when

    - ``collapse``: the mean pairwise cosine of the step's embeddings (:func:`embedding_spread`) stayed above
      ``collapse_cosine`` for ``window`` consecutive steps, after ``warmup`` steps;
    - ``flat``: over the last ``window`` steps (after ``warmup``) the loss's mean lies within :data:`FLAT_AT_TOL`
      of ``flat_at`` (the value of the loss for collapsed embeddings, :func:`flat_value`) and either its standard
      deviation is below ``flat_std`` of the mean, or the mean pairwise cosine stayed above
      :data:`PLATEAU_COSINE` with the mean's standard error below ``flat_std``, :data:`PLATEAU_WINDOWS` windows
      running (the margin's plateau); without
      ``flat_at``, the standard deviation below :data:`FLAT_STD_ANY` of the mean.

    The warning names the loss, what was seen (with the numbers) and what to try (:data:`ADVICE`). When both
    fire at the same step they share one line. ``warnings`` keeps ``{"step", "kind", "message"}`` of each, for
    the run's log and its end summary. Non-finite losses are not judged (the fit loop fails on those itself).
    """

    def __init__(
        self,
        loss: str,
        *,
        flat_at: float | None = None,
        window: int = WINDOW,
        warmup: int = WARMUP,
        collapse_cosine: float = COLLAPSE_COSINE,
        flat_std: float = FLAT_STD,
    ) -> None:
        if window < 2:
            raise ValueError(f"window must be at least 2 steps, got {window}")
        self.loss, self.flat_at, self.window, self.warmup = loss, flat_at, window, warmup
        self.collapse_cosine, self.flat_std = collapse_cosine, flat_std
        self.losses: deque[float] = deque(maxlen=window)
        self.cosines: deque[float] = deque(maxlen=window)
        self.plateau_for = 0  # consecutive judged steps whose window was on the margin's plateau
        self.collapsed_for = 0  # consecutive judged steps above the cosine threshold
        self.last_cosine = math.nan
        self.warnings: list[dict[str, Any]] = []
        self.fired: set[str] = set()

    def update(
        self, step: int, loss: float, spread: dict[str, float] | None = None, *, chance: float | None = None
    ) -> str | None:
        """Take one step's loss, spread and the loss's chance level; the warning to print and log, or None."""
        if step <= self.warmup or not math.isfinite(loss):
            return None
        self.losses.append(float(loss))
        if spread is not None:
            self.last_cosine = spread["mean_cosine"]
            self.cosines.append(self.last_cosine)
            self.collapsed_for = self.collapsed_for + 1 if self.last_cosine > self.collapse_cosine else 0
        seen: list[tuple[str, str]] = []
        if "collapse" not in self.fired and self.collapsed_for >= self.window:
            seen.append(
                (
                    "collapse",
                    f"its embeddings collapsed (mean pairwise cosine above {self.collapse_cosine} "
                    f"for {self.collapsed_for} steps, now {self.last_cosine:.4f})",
                )
            )
        if "flat" not in self.fired and len(self.losses) == self.window:
            flat = self.flat_reason()
            if flat:
                seen.append(("flat", flat))
        if not seen:
            return None
        message = (
            f"warning: {self.loss} training looks stuck at step {step}: "
            + " and ".join(w for _, w in seen)
            + f"; try {ADVICE.get(self.loss, GENERIC_ADVICE)}"
        )
        for kind, _ in seen:
            self.fired.add(kind)
            self.warnings.append({"step": step, "kind": kind, "message": message})
        return message

    def flat_reason(self) -> str | None:
        """What makes the last window's loss flat, or None."""
        x = np.asarray(self.losses, dtype=np.float64)
        mean, std = float(x.mean()), float(x.std())
        if mean == 0.0:
            return None  # a loss of exactly zero (every triplet satisfied) is not stuck
        ratio = std / abs(mean)
        said = f"its loss sat at {mean:.4g} +- {std:.2g} for {self.window} steps"
        if self.flat_at is not None:
            if abs(mean - self.flat_at) > FLAT_AT_TOL * abs(self.flat_at):
                return None
            if ratio < self.flat_std:
                return said + f", the value of collapsed embeddings ({self.flat_at:g}, its margin)"
            cosine = float(np.mean(self.cosines)) if len(self.cosines) == self.window else math.nan
            # noisier per step, but its mean pinned at the margin (standard error within flat_std) while the
            # embeddings stay bunched, window after window: the plateau of PLATEAU_COSINE
            if cosine > PLATEAU_COSINE and ratio / math.sqrt(self.window) < self.flat_std:
                self.plateau_for += 1
                if self.plateau_for >= (PLATEAU_WINDOWS - 1) * self.window + 1:
                    return (
                        f"its loss sat at {mean:.4g} +- {std:.2g}, its margin ({self.flat_at:g}), for "
                        f"{self.plateau_for + self.window - 1} steps with the embeddings bunched (mean pairwise "
                        f"cosine {cosine:.3f}): the value of embeddings that do not order their "
                        "triplets"
                    )
                return None
            self.plateau_for = 0
            return None
        return said if ratio < FLAT_STD_ANY else None
