"""The batched scorers against plain, direct sentence-transformers calls."""

import numpy as np
import pytest

from labeldist.sts.models import load_bi_encoder, load_cross_encoder
from labeldist.sts.scorers import BiEncoderScorer, CrossEncoderScorer, mean_vectors, same_text

TEXTS = ["A man rides a horse.", "A person is riding a horse.", "Two dogs play in the snow.", "A cat sleeps."]


def test_bi_encoder_equals_direct_cosine(packaged_path):
    from sentence_transformers import SentenceTransformer

    direct = SentenceTransformer(str(packaged_path), device="cpu")
    e = direct.encode(TEXTS, convert_to_numpy=True).astype(np.float64)
    expected = np.clip((e @ e.T) / np.outer(np.linalg.norm(e, axis=1), np.linalg.norm(e, axis=1)), 0, 1)
    np.fill_diagonal(expected, 1.0)
    scorer = BiEncoderScorer(packaged_path)
    got = scorer.relevance(TEXTS[:2], TEXTS)
    np.testing.assert_allclose(got, expected[:2], atol=1e-6)
    assert got[0, 1] > got[0, 2]  # the paraphrase is closer than the dogs
    assert scorer.calls == 4
    scorer.relevance(TEXTS, TEXTS)
    assert scorer.calls == 4, "each text is embedded once"


def test_cross_encoder_is_the_average_of_both_orders(tiny_cross):
    from sentence_transformers import CrossEncoder

    direct = CrossEncoder(str(tiny_cross), device="cpu")
    ab = direct.predict([(TEXTS[0], TEXTS[1]), (TEXTS[2], TEXTS[3])])
    ba = direct.predict([(TEXTS[1], TEXTS[0]), (TEXTS[3], TEXTS[2])])
    scorer = CrossEncoderScorer(tiny_cross)
    got = scorer.pair_relevance([TEXTS[0], TEXTS[3], TEXTS[1]], [TEXTS[1], TEXTS[2], TEXTS[0]])
    np.testing.assert_allclose(got, [(ab[0] + ba[0]) / 2, (ab[1] + ba[1]) / 2, (ab[0] + ba[0]) / 2], atol=1e-6)
    assert got[0] == got[2], "symmetric: (s, t) and (t, s) are one pair"
    assert scorer.calls == 4, "two distinct pairs, two orders each"
    assert scorer.pair_relevance([TEXTS[0]], [TEXTS[0]]).tolist() == [1.0] and scorer.calls == 4


def test_identical_texts_are_fully_relevant():
    assert same_text(["a", "b", "a"], ["a", "c"]).tolist() == [[True, False], [False, False], [True, False]]


def test_mean_vectors_counts_repeated_words():
    vectors = np.array([[2.0, 0.0], [0.0, 4.0]])
    np.testing.assert_array_equal(mean_vectors(np.array([0, 0, 1]), np.array([0, 3]), vectors), [[4 / 3, 4 / 3]])


def test_very_long_sentences_are_truncated_with_a_warning(packaged_path, tiny_cross):
    long = "A man rides a horse along the beach near the old wooden pier. " * 60  # about 900 word pieces
    tokenizer = load_bi_encoder(packaged_path, 32).tokenizer
    cut = tokenizer.decode(tokenizer(long, add_special_tokens=False, verbose=False)["input_ids"][:30])
    with pytest.warns(UserWarning, match="longer than max_length=32 word pieces are truncated"):
        r_long = BiEncoderScorer(packaged_path, max_length=32).relevance([long], [TEXTS[0]])
    r_cut = BiEncoderScorer(packaged_path, max_length=32).relevance([cut], [TEXTS[0]])
    np.testing.assert_allclose(r_long, r_cut, atol=1e-5)
    with pytest.warns(UserWarning, match="cross-encoder: 2 input"):
        r = CrossEncoderScorer(tiny_cross, max_length=64).pair_relevance([long], [TEXTS[1]])
    assert 0.0 <= r[0] <= 1.0
    assert load_cross_encoder(tiny_cross, 64).max_seq_length == 64


def test_the_texts_embedded_on_request_are_bounded_and_a_store_s_are_kept(packaged_path, tmp_path, monkeypatch):
    """The fifth adversarial run: the service kept every distinct search sentence's embedding forever, keyed by its
    full text (24 distinct 720 KB searches added 345 MB). A long text is embedded, used and dropped; short ones
    are kept up to a bound, least recently asked first out; a store's sentences (loaded from its file) stay."""
    import labeldist.sts.scorers as scorers
    from labeldist.sts.scorers import encode_texts, save_embeddings

    monkeypatch.setattr(scorers, "KEPT_ASKED", 3)
    scorer = BiEncoderScorer(packaged_path)
    store = ["A dog runs.", "A cat sleeps.", "Rain falls."]
    save_embeddings(encode_texts(packaged_path, scorer.max_length, store), tmp_path / "store.npy")
    assert scorer.load(store, tmp_path / "store.npy")
    long = "word " * 1000  # 5,000 characters
    first = scorer.embed([long])
    assert not scorer.has([long]) and scorer.calls == 1
    np.testing.assert_allclose(scorer.embed([long]), first)  # the same value, embedded again
    asked = [f"Query number {i}." for i in range(5)]
    values = scorer.embed(asked)
    assert [scorer.has([t]) for t in asked] == [False, False, True, True, True]  # the 3 most recent kept
    assert scorer.has(store)  # never dropped
    np.testing.assert_allclose(scorer.embed(asked), values, atol=1e-5)  # another batch: the last bits
    np.testing.assert_allclose(scorer.embed(store), encode_texts(packaged_path, scorer.max_length, store), atol=1e-6)
