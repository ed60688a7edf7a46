"""Retrieval metrics against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import kendalltau

from labeldist.trainer.training.metrics import (
    coherent_score,
    mean_label_distance,
    ndcg,
    recall_at_k,
    retrieval_metrics,
    retrieve,
)

# one query, a gallery of four with label distances 0, 1, 3, 7 to it
LD = np.array([[3.0, 0.0, 7.0, 1.0]])
ORACLE = np.array([[1, 3, 0, 2]])  # the gallery sorted by label distance
REVERSED = ORACLE[:, ::-1]


def test_ndcg_of_the_oracle_ranking_is_exactly_one() -> None:
    assert ndcg(LD, ORACLE).tolist() == [1.0, 1.0, 1.0, 1.0]


def test_ndcg_of_the_reversed_ranking_is_less_and_matches_a_hand_computation() -> None:
    got = ndcg(LD, REVERSED)
    # gains 2^{-log2(1 + D)} = 1 / (1 + D): oracle order 1, 1/2, 1/4, 1/8; reversed 1/8, 1/4, 1/2, 1
    gains_oracle, gains_rev = [1, 1 / 2, 1 / 4, 1 / 8], [1 / 8, 1 / 4, 1 / 2, 1]
    for k in range(1, 5):
        dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains_rev[:k]))
        ideal = sum(g / math.log2(i + 2) for i, g in enumerate(gains_oracle[:k]))
        assert got[k - 1] == pytest.approx(dcg / ideal, rel=1e-12)
    assert got[0] == pytest.approx(1 / 8)
    assert (got < 1).all()


def test_ndcg_averages_queries_and_uses_the_whole_gallery_for_the_oracle() -> None:
    ld = np.array([[0.0, 1.0, 2.0], [5.0, 0.0, 1.0]])
    got = ndcg(ld, np.array([[0], [0]]))  # query 2 retrieves its worst item first
    assert got[0] == pytest.approx((1.0 + (1 / 6) / 1.0) / 2)


def test_mean_label_distance_is_the_running_mean_averaged_over_queries() -> None:
    assert mean_label_distance(LD, REVERSED).tolist() == pytest.approx([7.0, 5.0, 11 / 3, 11 / 4])
    two = mean_label_distance(np.array([[1.0, 2.0], [3.0, 5.0]]), np.array([[1, 0], [0, 1]]))
    assert two.tolist() == pytest.approx([(2 + 3) / 2, (1.5 + 4) / 2])


def test_coherent_score_is_kendall_tau_of_the_top_k() -> None:
    scores = np.array([[4.0, 3.0, 2.0, 1.0]])  # the embedding's scores, best first
    assert coherent_score(LD, ORACLE, scores)[1:].tolist() == [1.0, 1.0, 1.0]
    assert coherent_score(LD, REVERSED, scores)[1:].tolist() == [-1.0, -1.0, -1.0]
    assert np.isnan(coherent_score(LD, ORACLE, scores)[0])
    # one swap among 4: (5 concordant - 1 discordant) / 6
    assert coherent_score(LD, np.array([[1, 0, 3, 2]]), scores)[3] == pytest.approx(4 / 6)


def test_coherent_score_matches_scipy_with_ties() -> None:
    rng = np.random.default_rng(0)
    ld = rng.integers(0, 4, (6, 20)).astype(float)  # many tied label distances
    retrieved = np.array([rng.permutation(20)[:9] for _ in range(6)])
    scores = -np.sort(rng.integers(0, 5, (6, 9)), axis=1).astype(float)  # tied embedding scores too
    got = coherent_score(ld, retrieved, scores)
    for k in (2, 5, 9):
        taus = [kendalltau(scores[q, :k], -ld[q, retrieved[q, :k]]).statistic for q in range(6)]
        assert got[k - 1] == pytest.approx(np.nanmean(taus), rel=1e-12)


def test_recall_at_k_counts_queries_with_their_ground_truth_in_the_top_k() -> None:
    retrieved = np.array([[2, 0, 1], [1, 2, 0], [0, 1, 2]])
    assert recall_at_k(retrieved, np.array([0, 0, 0])).tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_retrieve_by_euclidean_and_by_cosine() -> None:
    q = np.array([[1.0, 0.0]])
    g = np.array([[3.0, 0.0], [0.9, 0.5], [0.0, 1.0]])
    assert retrieve(q, g, 3).tolist() == [[1, 2, 0]]  # squared distances 4, 0.26, 2
    assert retrieve(q, g, 3, metric="cosine").tolist() == [[0, 1, 2]]
    with pytest.raises(ValueError, match="known: euclidean, cosine"):
        retrieve(q, g, 1, metric="manhattan")


def test_retrieval_metrics_of_embeddings_equal_to_the_labels_are_perfect() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 3))
    queries, gallery = x[:5], x[5:]
    ld = ((queries[:, None] - gallery[None]) ** 2).sum(-1)  # label distance = embedding distance
    m = retrieval_metrics(queries, gallery, ld, k_max=10)
    assert np.allclose(m["ndcg"], 1.0) and np.allclose(m["coherent_score"][1:], 1.0)
    assert m["recall"][0] == 1.0
    shuffled = retrieval_metrics(queries, rng.permutation(gallery), ld, k_max=10)
    assert shuffled["ndcg"][4] < 1.0 and shuffled["mean_label_distance"][0] > m["mean_label_distance"][0]
