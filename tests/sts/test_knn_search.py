"""Sentence kNN by blocked float32 products (labeldist.distances.sts_knn) against the whole rows of
SentenceRelevance.block, the engine's other path, and a plain float64 brute force; its embedding as Dask tasks."""

import numpy as np
import pytest

from labeldist.distances.sts import SentenceRelevance
from labeldist.engine import precompute
from labeldist.engine.blocks import block_kernel
from labeldist.labels.sentences import read_caption_sentences, sentences_from_texts
from labeldist.store import StoreReader
from labeldist.sts.scorers import bi_encoder_scorer, encode_texts, load_embeddings
from tests.sts.conftest import COCO

SCORERS = [
    ("bert", {}),
    ("cbow", {}),
    ("coarse_to_fine", {"cbow_threshold": 0.8}),
    ("coarse_to_fine", {"cbow_threshold": 0.9, "below": "coarse"}),
    # so high that most rows have fewer than k pairs through the gate: their k-th is a tie at distance 1
    ("coarse_to_fine", {"cbow_threshold": 0.995}),
]


@pytest.fixture(scope="module")
def captions():
    """600 real captions, one repeated (items 562 and 567 share a text)."""
    return read_caption_sentences(COCO, limit=600)


@pytest.mark.parametrize(("scorer", "options"), SCORERS)
@pytest.mark.parametrize("k", [1, 10, 100])
def test_blocked_search_equals_the_whole_rows(captions, scorer, options, k):
    distance = SentenceRelevance(scorer, **options)
    distance.embed_once(captions)
    for start in range(0, len(captions), 151):
        stop = min(start + 151, len(captions))
        indices, dists, exact = distance.knn_block(captions, start, stop, k)
        _, want_indices, want_dists = block_kernel(captions, distance, start, stop, k)
        np.testing.assert_array_equal(indices, want_indices)
        np.testing.assert_array_equal(dists, want_dists)
        assert (stop - start) * k <= exact + (stop - start) <= (stop - start) * len(captions)


def test_a_repeated_text_is_each_others_nearest_at_zero(captions):
    distance = SentenceRelevance("bert")
    distance.embed_once(captions)
    assert captions.texts[562] == captions.texts[567]
    indices, dists, _ = distance.knn_block(captions, 560, 570, 3)
    assert indices[2, 0] == 567 and indices[7, 0] == 562 and dists[2, 0] == dists[7, 0] == 0.0
    assert 562 not in indices[2] and 567 not in indices[7], "an item is never its own neighbour"


def test_blocked_search_equals_a_float64_brute_force(captions):
    """Independent of the scorer's code: the packaged model's embeddings, one plain float64 product, argsort."""
    from labeldist.sts.models import PACKAGED, resolve_model

    distance = SentenceRelevance("bert")
    distance.embed_once(captions)
    texts, inverse = captions.text_ids
    unit = encode_texts(resolve_model(PACKAGED), distance.max_length, texts, backend=distance.backend).astype(
        np.float64
    )
    e = unit[inverse]
    rows = np.arange(0, len(captions), 37)
    brute = (1.0 - np.clip(e[rows] @ e.T, 0.0, 1.0)).astype(np.float32)
    brute[np.arange(len(rows)), rows] = np.inf
    for r, row in enumerate(rows):
        indices, dists, _ = distance.knn_block(captions, int(row), int(row) + 1, 20)
        order = np.lexsort((np.arange(len(captions)), brute[r]))[:20]
        np.testing.assert_allclose(dists[0], brute[r, order], atol=1e-6)
        assert len(set(indices[0]) ^ set(order)) <= 2, "only a near-tie at the 20th may differ"


def test_few_sentences_fewer_texts_than_k():
    """Five items, three texts: the lists hold every other item, ties at 0 by index."""
    labels = sentences_from_texts(list("abcde"), ["A dog runs.", "A cat.", "A dog runs.", "A cat.", "Rain."])
    distance = SentenceRelevance("bert")
    distance.embed_once(labels)
    indices, dists, _ = distance.knn_block(labels, 0, 5, 4)
    _, want_indices, want_dists = block_kernel(labels, distance, 0, 5, 4)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(dists, want_dists)
    assert indices[0, 0] == 2 and dists[0, 0] == 0.0


def test_a_worker_without_the_embeddings_file_says_it_embeds(tmp_path, monkeypatch):
    monkeypatch.setenv("LABELDIST_CACHE", str(tmp_path / "empty-cache"))
    labels = sentences_from_texts(["a", "b", "c"], ["A dog runs.", "A cat sleeps.", "Rain falls."])
    distance = SentenceRelevance("bert")
    with pytest.warns(UserWarning, match="embedding 3 sentences in this process"):
        values = distance.text_embeddings(labels.text_ids[0])
    assert values.dtype == np.float32 and values.shape[0] == 3
    file = distance._cache_file(distance.model, labels.text_ids[0])
    np.testing.assert_array_equal(load_embeddings(file, 3), values)


def test_a_damaged_embeddings_file_is_refused(tmp_path):
    file = tmp_path / "e.npy"
    np.save(file, np.ones((3, 4), dtype=np.float32))  # not unit rows
    with pytest.raises(ValueError, match="not unit rows"):
        load_embeddings(file, 3)
    np.save(file, np.eye(4, dtype=np.float32))
    with pytest.raises(ValueError, match="expected 3 rows"):
        load_embeddings(file, 3)
    np.save(file, np.array(["x"] * 3, dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="not a readable embeddings file|expected 3 rows"):
        load_embeddings(file, 3)


def test_the_engine_embeds_on_its_workers_once(dask_client, tmp_path):
    """precompute runs the embedding as Dask tasks, leaves the file, and its store equals the whole rows."""
    labels = read_caption_sentences(COCO, limit=300)
    distance = SentenceRelevance("bert")
    file = distance._cache_file(distance.model, labels.text_ids[0])
    file.unlink(missing_ok=True)
    out = tmp_path / "s"
    result = precompute(labels, distance, out, dataset="t", k=10, dense=False, client=dask_client, progress=False)
    assert result.blocks_computed == result.blocks_total > 1
    assert file.is_file()
    from labeldist.sts.models import PACKAGED, resolve_model

    np.testing.assert_array_equal(
        load_embeddings(file, len(labels.text_ids[0])),
        encode_texts(resolve_model(PACKAGED), distance.max_length, labels.text_ids[0], backend=distance.backend),
    )
    reader = StoreReader(str(out))
    _, want_indices, want_dists = block_kernel(labels, distance, 0, len(labels), 10)
    indices, dists = reader.knn()
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(dists, want_dists)


def test_text_ids_name_identical_texts_once():
    s = sentences_from_texts(["a", "b", "c"], ["A dog.", "A cat.", "A dog."])
    texts, inverse = s.text_ids
    assert texts == ["A cat.", "A dog."] and inverse.tolist() == [1, 0, 1]


def _tamper(file, how: str, values: np.ndarray) -> None:
    """Replace the cache file ``file`` as the fifth adversarial run did."""
    if how == "other numbers":  # the same shape, unit rows: only the spot check tells
        np.save(file, values[::-1].copy())
    elif how == "wrong width":
        np.save(file, np.eye(len(values), 7, dtype=np.float32))
    elif how == "1-D":
        np.save(file, np.ones(len(values), dtype=np.float32))
    elif how == "0-d":
        np.save(file, np.float32(1))
    elif how == "truncated":
        file.write_bytes(file.read_bytes()[:100])
    elif how == "objects":
        np.save(file, np.array(["x"] * len(values), dtype=object), allow_pickle=True)


@pytest.mark.parametrize("how", ["other numbers", "wrong width", "1-D", "0-d", "truncated", "objects"])
def test_a_tampered_embedding_cache_is_embedded_again_not_trusted(tmp_path, monkeypatch, how):
    """The fifth adversarial run: a cache file of other numbers of the same shape was trusted (searches answered
    distances 0, a precompute built a wrong store); one of the wrong shape or type gave 500 until a restart."""
    from labeldist.sts.models import PACKAGED, resolve_model

    monkeypatch.setenv("LABELDIST_CACHE", str(tmp_path / "cache"))
    texts = sorted(["A dog runs on grass.", "A cat sleeps on a sofa.", "Rain falls on the city.", "Two men ski."])
    labels = sentences_from_texts([str(i) for i in range(4)], texts)
    distance = SentenceRelevance("bert")
    file = distance.embed_once(labels)
    right = encode_texts(resolve_model(PACKAGED), distance.max_length, labels.text_ids[0], backend=distance.backend)
    _tamper(file, how, right)
    with pytest.warns(UserWarning, match=f"{file.name}.*embedding the 4 texts again"):
        values = distance.text_embeddings(labels.text_ids[0])
    np.testing.assert_allclose(values, right, atol=1e-6)
    np.testing.assert_allclose(load_embeddings(file, 4), right, atol=1e-6)  # written again, right
    _tamper(file, how, right)
    scorer = bi_encoder_scorer(resolve_model(distance.model), distance.max_length, distance.backend)
    with pytest.warns(UserWarning, match="embedding the 4 texts again"):  # the service's path: the scorer's load
        assert distance._load_cached(scorer, distance.model, texts) is False
    np.testing.assert_allclose(load_embeddings(file, 4), right, atol=1e-6)
    block = distance.block(labels, labels)
    np.testing.assert_allclose(block, 1.0 - np.clip(right @ right.T, 0.0, 1.0), atol=1e-5)


def test_a_worker_takes_the_jobs_checked_file_by_its_digest_without_the_model(tmp_path, monkeypatch):
    """The job's own process checks (or writes) the embedding file and records its SHA-256; a worker given that
    digest takes the file without loading the model for the spot check (before: every worker loaded it, 10 s of
    a 26 s precompute of three sentences). Other bytes at that path are spot-checked as ever."""
    from labeldist.sts.scorers import file_sha256, load_checked

    monkeypatch.setenv("LABELDIST_CACHE", str(tmp_path / "cache"))
    texts = sorted(["A dog runs on grass.", "A cat sleeps on a sofa.", "Rain falls on the city."])
    distance = SentenceRelevance("bert")
    file = distance.embed_once(sentences_from_texts([str(i) for i in range(3)], texts))
    assert distance.checked_files == {str(file): file_sha256(file)}
    no_model = tmp_path / "no-model"  # any use of the model fails
    values = load_checked(file, texts, no_model, distance.max_length, distance.checked_files[str(file)])
    np.testing.assert_array_equal(values, load_embeddings(file, 3))
    with pytest.warns(UserWarning, match="embedding the 3 texts again"):
        assert load_checked(file, texts, no_model, distance.max_length, "0" * 64) is None
    _tamper(file, "other numbers", load_embeddings(file, 3))
    with pytest.warns(UserWarning, match="embedding the 3 texts again"):
        assert load_checked(file, texts, no_model, distance.max_length, distance.checked_files[str(file)]) is None


def gated_interval_numpy(cbow, bert, rc, rb, row_defined, col_defined, threshold, coarse_fill):
    """The coarse-to-fine interval written with NumPy arrays, a pass per operation (the search's former form)."""
    sc, sb = cbow.astype(np.float64), bert.astype(np.float64)
    cbow_lo, cbow_hi = np.clip(sc - rc, 0.0, 1.0), np.clip(sc + rc, 0.0, 1.0)
    below_lo, below_hi = (1.0 - cbow_hi, 1.0 - cbow_lo) if coarse_fill else (1.0, 1.0)
    fine_lo, fine_hi = 1.0 - np.clip(sb + rb, 0.0, 1.0), 1.0 - np.clip(sb - rb, 0.0, 1.0)
    undefined = ~(row_defined[:, None] & col_defined[None, :])
    passes = undefined | (cbow_lo >= threshold)
    fails = ~undefined & (cbow_hi < threshold)
    lo = np.where(passes, fine_lo, np.where(fails, below_lo, np.minimum(fine_lo, below_lo)))
    hi = np.where(passes, fine_hi, np.where(fails, below_hi, np.maximum(fine_hi, below_hi)))
    return (hi + lo) / 2.0, (hi - lo) / 2.0


@pytest.mark.parametrize("coarse_fill", [False, True])
def test_gated_interval_kernel_equals_the_numpy_formula_bit_for_bit(coarse_fill):
    from labeldist.distances.sts_knn import gated_interval, product_radius

    rng = np.random.default_rng(int(coarse_fill))
    threshold, rc, rb = 0.728, product_radius(50), product_radius(384)
    cbow = rng.uniform(-0.2, 1.1, size=(37, 300)).astype(np.float32)
    cbow[:, :40] = (threshold + rng.uniform(-2, 2, size=(37, 40)) * rc).astype(np.float32)  # across the gate
    bert = rng.uniform(-0.2, 1.1, size=(37, 300)).astype(np.float32)
    row_defined, col_defined = rng.random(37) > 0.1, rng.random(300) > 0.1
    center, radius = np.empty((37, 300)), np.empty((37, 300))
    gated_interval(cbow, bert, rc, rb, row_defined, col_defined, threshold, coarse_fill, center, radius)
    want = gated_interval_numpy(cbow, bert, rc, rb, row_defined, col_defined, threshold, coarse_fill)
    want_center, want_radius = want
    np.testing.assert_array_equal(center, want_center)
    np.testing.assert_array_equal(radius, want_radius)
    # all three cases of the gate occur
    lo_c, hi_c = np.clip(cbow.astype(np.float64) - rc, 0, 1), np.clip(cbow.astype(np.float64) + rc, 0, 1)
    assert (lo_c >= threshold).any() and (hi_c < threshold).any() and ((lo_c < threshold) & (hi_c >= threshold)).any()
