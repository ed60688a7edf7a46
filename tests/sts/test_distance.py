"""SentenceRelevance: the shared distance suite for every scorer, the gate, the parameters."""

import numpy as np
import pytest

from labeldist.distances.sts import SentenceRelevance, cbow_units
from labeldist.kinds import distance_class
from labeldist.sts.cascade import combine
from labeldist.sts.scorers import CrossEncoderScorer, cosine_relevance
from labeldist.testing import DistanceSuite

CBOW_THRESHOLD = 0.8


@pytest.fixture
def labels(coco_sentences):
    # 15 real captions of 3 images, plus the first caption again under another id (identical text)
    from labeldist.labels.sentences import sentences_from_texts

    sub = coco_sentences.subset(slice(0, 15))
    return sentences_from_texts(sub.ids.tolist() + ["dup"], sub.texts + [sub.texts[0]])


class TestCbow(DistanceSuite):
    @pytest.fixture
    def distance(self):
        return SentenceRelevance("cbow")


class TestBiEncoder(DistanceSuite):
    atol = 1e-6

    @pytest.fixture
    def distance(self):
        return SentenceRelevance("bert")


class TestCascadeZero(DistanceSuite):
    """CBoW, then the bi-encoder, then the cross-encoder (also the suite of a cross-encoder distance)."""

    atol = 1e-6

    @pytest.fixture
    def distance(self, tiny_cross):
        return SentenceRelevance(
            "cascade", cbow_threshold=0.85, cross_model=str(tiny_cross), bert_threshold=0.6, below="zero"
        )


def test_kind_is_registered_and_default_fills(tiny_cross):
    assert distance_class("sentence_relevance") is SentenceRelevance
    assert SentenceRelevance("coarse_to_fine", cbow_threshold=0.7).params()["below"] == "zero"
    cascade = SentenceRelevance("cascade", cbow_threshold=0.7, cross_model=str(tiny_cross), bert_threshold=0.5)
    assert cascade.params()["below"] == "coarse"


def test_identical_texts_are_at_distance_zero(labels):
    d = SentenceRelevance("bert").block(labels, labels)
    assert d[0, len(labels) - 1] == 0.0 and d[len(labels) - 1, 0] == 0.0
    assert (d[0, 1:-1] > 0).all()


def test_coarse_to_fine_never_calls_bert_for_a_filtered_pair(labels, tiny_cross, monkeypatch):
    seen: list[tuple[str, str]] = []
    original = CrossEncoderScorer.one_order

    def recording(self, a, b):
        seen.extend(zip(a, b))
        return original(self, a, b)

    monkeypatch.setattr(CrossEncoderScorer, "one_order", recording)
    distance = SentenceRelevance("coarse_to_fine", model=str(tiny_cross), cbow_threshold=CBOW_THRESHOLD, below="coarse")
    d = distance.block(labels, labels)

    cbow = cosine_relevance(cbow_units(labels), cbow_units(labels))
    texts = labels.texts
    index = {t: i for i, t in reversed(list(enumerate(texts)))}
    passing = {
        frozenset((texts[i], texts[j])) for i, j in zip(*np.nonzero(cbow >= CBOW_THRESHOLD)) if texts[i] != texts[j]
    }
    assert 0 < len(passing) < len(texts) * (len(texts) - 1) / 2, "the gate must pass some pairs and filter some"
    assert all(cbow[index[s], index[t]] >= CBOW_THRESHOLD for s, t in seen), "BERT saw a filtered pair"
    assert len(seen) == 2 * len(passing), "each passing pair costs two calls (both orders), nothing else"
    below = cbow < CBOW_THRESHOLD
    np.testing.assert_allclose(d[below], 1.0 - cbow[below], atol=1e-12)  # below="coarse" keeps CBoW


def test_below_zero_gives_distance_one_under_the_gate(labels):
    d = SentenceRelevance("coarse_to_fine", cbow_threshold=0.9, below="zero").block(labels, labels)
    cbow = cosine_relevance(cbow_units(labels), cbow_units(labels))
    assert (cbow < 0.9).any()
    assert (d[cbow < 0.9] == 1.0).all()
    bert = SentenceRelevance("bert").block(labels, labels)
    np.testing.assert_allclose(d[cbow >= 0.9], bert[cbow >= 0.9], atol=1e-12)


def test_block_agrees_with_combine_and_with_pairs(labels):
    distance = SentenceRelevance("coarse_to_fine", cbow_threshold=CBOW_THRESHOLD, below="coarse")
    cbow = cosine_relevance(cbow_units(labels), cbow_units(labels))
    bert = 1.0 - SentenceRelevance("bert").block(labels, labels)
    d = distance.block(labels, labels)
    np.testing.assert_allclose(d, 1.0 - combine(cbow, bert, CBOW_THRESHOLD, "coarse"), atol=1e-12)
    i, j = np.array([0, 3, 5, 15]), np.array([1, 3, 12, 0])
    np.testing.assert_allclose(distance.pairs(labels, i, j), d[i, j], atol=1e-9)


def test_params_are_json_and_rebuild_with_model_digest(labels, tiny_cross):
    import json

    distance = SentenceRelevance("coarse_to_fine", model=str(tiny_cross), cbow_threshold=0.7, below="zero")
    params = json.loads(json.dumps(distance.params()))
    assert params["model"] == str(tiny_cross) and len(params["model_sha256"]) == 64
    assert SentenceRelevance(**params).params() == distance.params()
    with pytest.raises(ValueError, match="its files changed"):
        SentenceRelevance(**(params | {"model_sha256": "0" * 64}))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scorer": "wmd"}, "unknown scorer 'wmd'; known: cbow, bert, coarse_to_fine, cascade"),
        ({"scorer": "coarse_to_fine"}, "needs cbow_threshold"),
        ({"scorer": "coarse_to_fine", "cbow_threshold": 0.5, "below": "nan"}, "unknown below-threshold rule 'nan'"),
        ({"scorer": "cascade", "cbow_threshold": 0.5}, "needs cross_model and bert_threshold"),
        ({"scorer": "bert", "model": "/nonexistent/model"}, "no sentence model at '/nonexistent/model'"),
    ],
)
def test_bad_settings_fail_loudly(kwargs, message):
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        SentenceRelevance(**kwargs)


def test_cascade_models_must_be_of_the_right_kind(tiny_cross):
    with pytest.raises(ValueError, match="cross_model must be a cross-encoder"):
        SentenceRelevance("cascade", cbow_threshold=0.5, cross_model="all-MiniLM-L6-v2", bert_threshold=0.5)


def test_embed_once_leaves_what_workers_load_without_a_transformer_call(labels, monkeypatch, tmp_path):
    from labeldist.sts.models import PACKAGED, resolve_model
    from labeldist.sts.scorers import BiEncoderScorer, bi_encoder_scorer

    monkeypatch.setenv("LABELDIST_CACHE", str(tmp_path))
    distance = SentenceRelevance("coarse_to_fine", cbow_threshold=CBOW_THRESHOLD)
    file = distance.embed_once(labels)
    assert file is not None and file.parent == tmp_path / "embeddings"
    texts = sorted(set(labels.texts))
    scorer = bi_encoder_scorer(resolve_model(PACKAGED), distance.max_length, distance.backend)
    np.testing.assert_array_equal(np.load(file), scorer.embed(texts))
    fresh = BiEncoderScorer(resolve_model(PACKAGED), backend=distance.backend)
    distance._embed_all(fresh, distance.model, texts)
    assert fresh.calls == 0 and len(fresh._cache) == len(texts)
    assert SentenceRelevance("cbow").embed_once(labels) is None


def test_candidate_threshold_counts_gated_pairs_as_not_passing():
    from labeldist.sts.cascade import threshold_for_candidates

    rng = np.random.default_rng(0)
    emb = rng.normal(size=(50, 8))
    gate_all = lambda r: np.ones((len(r), 50), dtype=bool)  # noqa: E731
    gate_half = lambda r: (np.arange(50) % 2 == 0)[None, :].repeat(len(r), axis=0)  # noqa: E731
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    rel = np.clip(unit @ unit.T, 0, 1)
    np.fill_diagonal(rel, -np.inf)
    for gate in (gate_all, gate_half):
        t = threshold_for_candidates(emb, 3.0, gate=gate)
        passing = (rel >= t) & gate(np.arange(50))
        assert passing.sum() == pytest.approx(3 * 50, abs=2), "3 candidates per item on average, gate or not"


@pytest.mark.parametrize("change", ["no tokenizer.json", "cls pooling"])
def test_a_model_folder_changed_anywhere_is_refused_not_only_its_weights(tmp_path, change):
    """The fifth adversarial run: with ``tokenizer.json`` removed from a copy of the model folder, or its pooling
    set to ``cls``, a store built on it answered searches with every distance 0.0, or in a wrong order; only a
    changed weights file was refused. The store records a digest of every file of the folder."""
    import json
    import shutil

    from labeldist.sts.models import PACKAGED, files_sha256, resolve_model, weights_sha256

    model = tmp_path / "model"
    shutil.copytree(resolve_model(PACKAGED), model)
    params = SentenceRelevance("bert", model=str(model)).params()
    assert params["model_sha256"] == files_sha256(model.resolve())
    if change == "no tokenizer.json":
        (model / "tokenizer.json").unlink()
    else:
        pooling = model / "1_Pooling" / "config.json"
        config = json.loads(pooling.read_text())
        pooling.write_text(json.dumps(config | {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}))
    files_sha256.cache_clear()  # this process read the folder before the change
    with pytest.raises(ValueError, match=r"its files changed .*the tokenizer, the pooling"):
        SentenceRelevance(**params)
    # a store of an earlier release recorded the weights' digest alone: still opened (its weights are unchanged)
    legacy = params | {"model_sha256": weights_sha256(model.resolve())}
    assert SentenceRelevance(**legacy).params()["model_sha256"] == legacy["model_sha256"]
