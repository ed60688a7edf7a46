r"""Coarse-to-fine relevance (Zhou et al., AAAI 2020, §3.3) and its calibration.

The ladder-loss paper scores a pair with BERT only when the cheap CBoW score passes a threshold:

.. math:: R(s,t) = R_{\text{fine}}(s,t) \text{ if } R_{\text{coarse}}(s,t) \ge \theta, \text{ else } f(s,t)

with the fill :math:`f` the coarse score (``below="coarse"``, the paper's text) or 0 (``below="zero"``, its code).
The cascade applies the rule twice: CBoW gates the bi-encoder, the bi-encoder gates the cross-encoder. A threshold
depends on the vectors (the paper's 0.8 was tuned for 300-d ones), so here it is the score quantile that lets a
chosen share of pairs through (:func:`threshold_for_share`): on the STS-B training pairs for CBoW
(:func:`calibrate_cbow_threshold`), on the corpus for the bi-encoder gate (:func:`threshold_for_candidates`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from labeldist.errors import UsageError
from labeldist.labels.text import Tokenizer, WordVectors, default_word_vectors
from labeldist.sts.scorers import cosine_relevance, mean_vectors, unit_rows
from labeldist.sts.stsb import StsPairs

#: what a pair under the threshold gets
BELOW = ("coarse", "zero")
#: the scorer of a new store unless told (``SentenceRelevance(scorer=)``, ``--scorer``): BERT alone, chosen on
#: measurements (benchmarks/bench_cbow_gate.py; BENCHMARKS.md, "CBoW gate: recall and speed-up"). With the default
#: model, a bi-encoder, coarse-to-fine embeds every sentence all the same: as many BERT calls, and 0.97-1.00x the
#: CPU time of BERT alone. Its CBoW gate, at the calibrated 0.728, drops 4.4 % of each caption's BERT top 10 on
#: the 25,009 captions (a twentieth of the captions lose 3 or more) and 25 % on the STS-B dev sentences: "a kitten
#: naps in the sunlight near a window" ends at distance 1 from "a cat sleeps on a sunny windowsill". The gate pays
#: only in front of a cross-encoder, which scores pairs. A store records its scorer: one made under the old
#: default, ``coarse_to_fine``, keeps it.
DEFAULT_SCORER = "bert"
#: share of STS-B training pairs the default CBoW threshold lets through: 0.9 gives 0.728 with GloVe-50 (stop
#: words dropped), which keeps dev Pearson at 0.85 with the bi-encoder fine-tuned on STS-B (alone: 0.90) and at
#: 0.82 with the zero-shot one (alone: 0.87), ``below="zero"``; benchmarks/bench_sts.py prints the whole sweep
DEFAULT_PASS_SHARE = 0.9
#: what a pair under a threshold gets unless told, per scorer. Coarse-to-fine: 0, as the paper's code (better dev
#: Pearson than keeping CBoW at every pass share from 30 % up). Cascade: the bi-encoder score, so that a sentence's
#: list is its few cross-encoder-scored candidates followed by the rest in bi-encoder order, not by ties at 0.
DEFAULT_BELOW = {"coarse_to_fine": "zero", "cascade": "coarse"}


def check_below(below: str) -> None:
    if below not in BELOW:
        raise UsageError(f"unknown below-threshold rule {below!r}; known: {', '.join(BELOW)}")


def combine(coarse: np.ndarray, fine: np.ndarray, threshold: float, below: str = "coarse") -> np.ndarray:
    """The coarse-to-fine relevance: ``fine`` where ``coarse >= threshold`` or ``coarse`` is NaN, else
    ``coarse`` (or 0).

    A NaN coarse score is an undefined one (a sentence without any word vector): it cannot tell that a pair is
    far apart, so the pair goes to the fine scorer. ``fine`` is only read where the gate passes (it may hold
    anything, e.g. NaN, elsewhere).

    >>> combine(np.array([0.9, 0.3, np.nan]), np.array([0.5, np.nan, 0.6]), 0.8).tolist()
    [0.5, 0.3, 0.6]
    >>> combine(np.array([0.9, 0.3]), np.array([0.5, np.nan]), 0.8, below="zero").tolist()
    [0.5, 0.0]
    """
    check_below(below)
    gate = (coarse >= threshold) | np.isnan(coarse)
    return np.where(gate, fine, coarse if below == "coarse" else 0.0)


def threshold_for_share(scores: np.ndarray, pass_share: float) -> float:
    r"""The score at or above which a share ``pass_share`` of the (non-NaN) ``scores`` lies: the k-th largest,
    :math:`k = \lceil \text{pass\_share} \cdot n \rceil`.

    >>> threshold_for_share(np.arange(10.0), 0.3)
    7.0
    >>> threshold_for_share(np.array([3.0, 2.0, -np.inf, -np.inf]), 0.5)
    2.0
    """
    if not 0.0 < pass_share <= 1.0:
        raise UsageError(f"pass share must lie in (0, 1], got {pass_share}")
    x = np.asarray(scores, dtype=np.float64).ravel()
    x = x[~np.isnan(x)]  # -inf stays: a pair an earlier stage filtered counts, and does not pass
    k = max(1, math.ceil(pass_share * len(x) - 1e-9))  # the k-th largest score: k of them pass (more on ties)
    return float(np.partition(x, len(x) - k)[len(x) - k])


def cbow_pair_relevance(
    first: Sequence[str], second: Sequence[str], tokenizer: Tokenizer, vectors: WordVectors
) -> np.ndarray:
    """CBoW relevance of each sentence pair; 0 when a sentence has no word with a vector, 1 when identical.

    The calibration reads it, so there a pair whose CBoW is undefined counts as one the gate stops, although the
    distance lets such pairs through to BERT: counting them as passing would move the calibrated thresholds
    that existing stores record (STS-B train has two such sentences in 11,498).
    """

    def unit(texts: Sequence[str]) -> np.ndarray:
        words = [tokenizer.tokens(t, vectors) for t in texts]
        out = np.zeros((len(texts), vectors.dim))
        has = [i for i, w in enumerate(words) if w]
        flat = [x for i in has for x in words[i]]
        offsets = np.concatenate([[0], np.cumsum([len(words[i]) for i in has])]).astype(np.int64)
        out[has] = mean_vectors(np.arange(len(flat)), offsets, vectors.lookup(flat))
        return unit_rows(out)

    a, b = unit(first), unit(second)
    r = np.clip(np.sum(a * b, axis=1), 0.0, 1.0)
    r[np.array([x == y for x, y in zip(first, second)], dtype=bool)] = 1.0
    return r


def calibrate_cbow_threshold(
    pairs: StsPairs,
    pass_share: float = DEFAULT_PASS_SHARE,
    tokenizer: Tokenizer | None = None,
    vectors: WordVectors | None = None,
) -> tuple[float, dict[str, Any]]:
    """CBoW threshold that lets ``pass_share`` of the STS pairs through, and how it was found (for the manifest)."""
    tokenizer = tokenizer or Tokenizer()
    vectors = vectors or default_word_vectors()
    scores = cbow_pair_relevance(pairs.first, pairs.second, tokenizer, vectors)
    threshold = threshold_for_share(scores, pass_share)
    return threshold, {
        "method": "sts_quantile",
        "pass_share": pass_share,
        "file": pairs.source,
        "sha256": pairs.sha256,
        "pairs": len(pairs),
        "word_vectors": vectors.params()["source"],
    }


def threshold_for_candidates(
    embeddings: np.ndarray, candidates: float, *, sample: int = 2000, seed: int = 0, gate: Any = None
) -> float:
    """Bi-encoder relevance threshold passing on average ``candidates`` other items per item of a corpus.

    Computed on ``sample`` rows drawn with ``seed`` (all rows when fewer): the ``1 - candidates / (N - 1)``
    quantile of their relevances to every other item. ``gate(rows) -> (len(rows), N) bool`` (e.g. the CBoW gate)
    leaves out pairs an earlier stage already filtered (they count as not passing).
    """
    n = len(embeddings)
    if not 0 < candidates < n - 1:
        raise UsageError(f"candidates per item must lie in (0, {n - 1}), got {candidates}")
    unit = unit_rows(embeddings)
    rows = np.arange(n) if n <= sample else np.sort(np.random.default_rng(seed).choice(n, sample, replace=False))
    values = []
    for start in range(0, len(rows), 256):
        r = rows[start : start + 256]
        rel = cosine_relevance(unit[r], unit)
        rel[np.arange(len(r)), r] = np.nan  # the item itself: not a pair (threshold_for_share drops NaN)
        if gate is not None:
            rel[~gate(r)] = -np.inf
        values.append(rel.ravel())
    return threshold_for_share(np.concatenate(values), candidates / (n - 1))


def topk_recall(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Per row, the share of ``reference``'s neighbours that ``candidate``'s list of the same row also holds.

    Both are (n, k) neighbour indices (as :func:`labeldist.core.knn.topk_rows` returns, -1 for padding): e.g. each
    sentence's top k under BERT alone and under coarse-to-fine. A row whose reference list is all padding
    counts as fully kept (1.0): there was nothing to lose. Returns (n,) float64 in [0, 1].

    >>> topk_recall(np.array([[1, 2, 3], [0, 2, -1]]), np.array([[3, 1, 5], [1, 0, 2]])).tolist()
    [0.6666666666666666, 1.0]
    """
    reference, candidate = np.asarray(reference), np.asarray(candidate)
    if reference.shape[0] != candidate.shape[0]:
        raise UsageError(f"{reference.shape[0]} reference rows against {candidate.shape[0]} candidate rows")
    out = np.ones(len(reference), dtype=np.float64)
    for r, (ref, cand) in enumerate(zip(reference, candidate)):
        ref = ref[ref >= 0]
        if len(ref):
            out[r] = np.isin(ref, cand[cand >= 0]).sum() / len(ref)
    return out
