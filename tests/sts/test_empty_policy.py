"""Sentences none of whose words has a word vector: 'You should do it.' is all stop words.

BERT scores such a sentence like any other; CBoW has no vector for it, and what then happens is the policy
``--empty error|drop|zero``; coarse-to-fine and the cascade send its pairs to BERT. Every number is checked
against a plain computation: GloVe vectors averaged by hand, a SentenceTransformer of its own, SciPy's
correlations.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from labeldist.cli import main
from labeldist.labels.base import LabelError
from labeldist.labels.sentences import sentences_from_texts
from labeldist.labels.text import Tokenizer, default_word_vectors
from labeldist.view.stored import stored_labels

STOP_ONLY = "You should do it."
#: (gold score, sentence 1, sentence 2): a small STS-B-like dev set whose third pair has a sentence of stop words
PAIRS = [
    (4.8, "A man is playing a guitar.", "A man plays the guitar."),
    (0.2, "A woman is slicing an onion.", "A man is riding a horse."),
    (3.0, STOP_ONLY, "I think you should try it."),
    (4.2, "A dog runs in the park.", "A dog is running through a park."),
    (0.0, "Two kids play soccer.", "The stock market fell sharply."),
    (4.6, "A cat sleeps on the sofa.", "A cat is sleeping on a couch."),
    (1.4, "A man is cutting bread.", "A woman is cutting a tomato."),
]
EMPTY = 2  # the pair holding STOP_ONLY


@pytest.fixture
def dev_file(tmp_path):
    path = tmp_path / "sts-heldout.csv"
    lines = [f"main-captions\tMSRvid\t2012test\t{n:04d}\t{g:.3f}\t{a}\t{b}" for n, (g, a, b) in enumerate(PAIRS)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _gold() -> np.ndarray:
    return np.array([g for g, _, _ in PAIRS]) / 5.0


def _plain_cbow(a: str, b: str) -> float | None:
    """CBoW relevance by hand: mean GloVe vector of the kept words, cosine clipped to [0, 1]; None if undefined."""
    vectors, tokenizer = default_word_vectors(), Tokenizer()
    wa, wb = tokenizer.tokens(a, vectors), tokenizer.tokens(b, vectors)
    if not wa or not wb:
        return None
    va = np.mean(vectors.lookup(wa).astype(np.float64), axis=0)
    vb = np.mean(vectors.lookup(wb).astype(np.float64), axis=0)
    return float(np.clip(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)), 0.0, 1.0))


def _plain_bert(packaged_path, a: list[str], b: list[str]) -> np.ndarray:
    """Bi-encoder relevance of the pairs from a SentenceTransformer of its own."""
    from sentence_transformers import SentenceTransformer

    e = SentenceTransformer(str(packaged_path), device="cpu").encode(a + b, convert_to_numpy=True).astype(np.float64)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    return np.clip(np.sum(e[: len(a)] * e[len(a) :], axis=1), 0.0, 1.0)


def _eval(capsys, *args: str) -> tuple[int, dict | str]:
    capsys.readouterr()
    code = main(["sts", "eval", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else err)


def _assert_correlations(report: dict, predicted: np.ndarray, gold: np.ndarray) -> None:
    assert report["pairs"] == len(gold)
    assert report["pearson"] == pytest.approx(pearsonr(predicted, gold)[0], abs=1e-4)
    assert report["spearman"] == pytest.approx(spearmanr(predicted, gold)[0], abs=1e-4)


def test_the_sentence_really_has_no_word_with_a_vector():
    assert _plain_cbow(STOP_ONLY, PAIRS[0][1]) is None
    assert all(_plain_cbow(a, b) is not None for n, (_, a, b) in enumerate(PAIRS) if n != EMPTY)


def test_bert_eval_needs_no_word_vectors(dev_file, packaged_path, capsys):
    """The command of the issue: BERT alone scores every pair, the stop-word one included, whatever the policy."""
    expected = _plain_bert(packaged_path, [a for _, a, _ in PAIRS], [b for _, _, b in PAIRS])
    for policy in ((), ("--empty", "error")):
        code, report = _eval(capsys, "--scorer", "bert", "--dev", str(dev_file), *policy)
        assert code == 0, report
        _assert_correlations(report, expected, _gold())


def test_cbow_eval_under_each_policy(dev_file, capsys):
    cbow = [_plain_cbow(a, b) for _, a, b in PAIRS]
    code, err = _eval(capsys, "--scorer", "cbow", "--dev", str(dev_file), "--empty", "error")
    assert code == 2
    assert "sts-heldout.csv: sentence 'line 3, sentence1' 'You should do it.' has no word with a vector" in err
    assert "--empty drop" in err and "--empty zero" in err and "Traceback" not in err

    code, report = _eval(capsys, "--scorer", "cbow", "--dev", str(dev_file), "--empty", "drop")
    assert code == 0, report
    kept = [n for n in range(len(PAIRS)) if n != EMPTY]
    _assert_correlations(report, np.array([cbow[n] for n in kept]), _gold()[kept])
    assert report["pairs_left_out"] == 1 and report["empty"] == "drop"

    code, report = _eval(capsys, "--scorer", "cbow", "--dev", str(dev_file), "--empty", "zero")
    assert code == 0, report
    _assert_correlations(report, np.array([0.0 if c is None else c for c in cbow]), _gold())
    assert report["pairs_left_out"] == 0 and report["empty"] == "zero"


def test_eval_default_policy_scores_every_pair(dev_file, capsys):
    code, report = _eval(capsys, "--scorer", "cbow", "--dev", str(dev_file))
    assert code == 0, report
    assert report["pairs"] == len(PAIRS) and report["empty"] == "zero"


def test_coarse_to_fine_eval_sends_the_undefined_pair_to_bert(dev_file, packaged_path, capsys):
    """A gate no defined pair passes (below -> 0): only the pair whose CBoW is undefined gets a BERT score."""
    bert = _plain_bert(packaged_path, [a for _, a, _ in PAIRS], [b for _, _, b in PAIRS])
    cbow = [_plain_cbow(a, b) for _, a, b in PAIRS]
    threshold = 0.999
    assert all(c < threshold for c in cbow if c is not None)
    expected = np.where([c is None for c in cbow], bert, 0.0)
    code, report = _eval(
        capsys,
        "--scorer",
        "coarse_to_fine",
        "--cbow-threshold",
        str(threshold),
        "--below",
        "zero",
        "--dev",
        str(dev_file),
    )
    assert code == 0, report
    _assert_correlations(report, expected, _gold())
    assert report["cbow_pass_share"] == pytest.approx(1 / len(PAIRS), abs=1e-4), "the undefined pair passes the gate"


def _labels(empty: str):
    texts = list(dict.fromkeys(t for _, a, b in PAIRS for t in (a, b)))
    return sentences_from_texts([f"s{n}" for n in range(len(texts))], texts, empty=empty), texts


def test_sentences_policies():
    with pytest.raises(LabelError, match=r"sentence 's4' 'You should do it.' has no word with a vector"):
        _labels("error")
    dropped, texts = _labels("drop")
    assert STOP_ONLY not in dropped.texts and len(dropped) == len(texts) - 1
    kept, _ = _labels("zero")
    assert kept.texts == texts and kept.words(texts.index(STOP_ONLY)) == []
    assert kept.provenance["empty"] == "zero"
    again = type(kept).from_arrays(kept.ids, kept.to_arrays())  # as a store reads it back
    assert again.sha256() == kept.sha256() and again.words(texts.index(STOP_ONLY)) == []
    sub = kept.subset(np.array([texts.index(STOP_ONLY), 0]))
    assert sub.words(0) == [] and sub.words(1) == kept.words(0)
    with pytest.raises(ValueError, match="unknown empty-sentence policy 'skip'; known: error, drop, zero"):
        _labels("skip")


def test_distances_with_a_sentence_without_vectors(packaged_path, tiny_cross):
    """cbow: relevance 0 (1 to itself); bert: what the model says; coarse-to-fine and cascade: the undefined
    pairs pass the CBoW gate (block, pairs and the reference agree)."""
    from labeldist.distances.sts import SentenceRelevance

    labels, texts = _labels("zero")
    e = texts.index(STOP_ONLY)
    others = [n for n in range(len(texts)) if n != e]
    n = len(texts)
    i, j = np.repeat(np.arange(n), n), np.tile(np.arange(n), n)

    cbow = SentenceRelevance("cbow").block(labels, labels)
    assert (cbow[e, others] == 1.0).all() and (cbow[others, e] == 1.0).all() and cbow[e, e] == 0.0
    for a, b in [(0, 1), (2, 3), (6, 7)]:
        assert cbow[a, b] == pytest.approx(1.0 - _plain_cbow(texts[a], texts[b]), abs=1e-12)

    bert = SentenceRelevance("bert").block(labels, labels)
    plain = _plain_bert(packaged_path, [texts[x] for x in i], [texts[y] for y in j]).reshape(n, n)
    np.fill_diagonal(plain, 1.0)
    np.testing.assert_allclose(bert, 1.0 - plain, atol=1e-6)

    for distance in (
        SentenceRelevance("coarse_to_fine", cbow_threshold=0.999, below="zero"),
        SentenceRelevance("coarse_to_fine", cbow_threshold=0.999, below="coarse"),
        SentenceRelevance("cascade", cbow_threshold=0.999, cross_model=str(tiny_cross), bert_threshold=0.0),
    ):
        d = distance.block(labels, labels)
        if distance.scorer == "coarse_to_fine":
            np.testing.assert_allclose(d[e], bert[e], atol=1e-9)  # the undefined row: BERT throughout
            np.testing.assert_allclose(d[:, e], bert[:, e], atol=1e-9)
        else:  # every pair passes the bi-encoder gate at 0: the cross-encoder's score
            cross = SentenceRelevance("bert", model=str(tiny_cross)).block(labels, labels)
            np.testing.assert_allclose(d[e], cross[e], atol=1e-9)
        defined = np.array(others)
        fill = 1.0 if distance.below == "zero" else cbow[np.ix_(defined, defined)]
        off = ~np.eye(len(defined), dtype=bool)
        np.testing.assert_allclose(d[np.ix_(defined, defined)][off], np.broadcast_to(fill, off.shape)[off])
        np.testing.assert_allclose(distance.pairs(labels, i, j), d.ravel(), atol=1e-9)
        for a, b in [(e, 0), (0, e), (e, e), (1, 2)]:
            assert distance.reference(labels, a, labels, b) == pytest.approx(d[a, b], abs=1e-5)


def test_combine_sends_an_undefined_coarse_score_to_the_fine_one():
    from labeldist.sts.cascade import combine

    got = combine(np.array([0.9, 0.3, np.nan]), np.array([0.5, 0.7, 0.6]), 0.8, below="zero")
    assert got.tolist() == [0.5, 0.0, 0.6]


def test_precompute_sentences_refuses_by_default_and_offers_the_choices(tmp_path, capsys):
    """``precompute sentences``: by default (error) one line naming the sentence and the other choices, nothing
    written; ``--empty`` takes each choice, and a store of ``bert`` keeps the sentence (what that reads is
    checked on a store in the next test). The cbow scorer here: no model is loaded."""
    from labeldist.cli import build_parser
    from labeldist.labels.sentences import read_caption_sentences

    captions = tmp_path / "caps.json"
    by_image = {7: ["A dog runs in the park.", STOP_ONLY], 8: ["A cat sleeps.", "Two kids play soccer."]}
    captions.write_text(
        json.dumps([{"image": f"val2014/COCO_val2014_{n:012d}.jpg", "caption": caps} for n, caps in by_image.items()])
    )
    common = ["precompute", "sentences", str(captions), "--scorer", "cbow", "--k", "2", "--no-progress"]
    capsys.readouterr()
    assert main([*common, "--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err
    assert "caps.json: sentence '7#1' 'You should do it.' has no word with a vector" in err and "--empty zero" in err
    assert not (tmp_path / "refused").exists(), "nothing written"
    for policy in ("error", "drop", "zero"):
        assert build_parser().parse_args([*common, "--out", "x", "--empty", policy]).empty == policy
    assert build_parser().parse_args([*common, "--out", "x"]).empty == "error"
    bert = read_caption_sentences(captions, needs_cbow=False)  # what --scorer bert reads under the default
    assert bert.ids.tolist() == ["7#0", "7#1", "8#0", "8#1"] and bert.provenance["empty"] == "error"


def test_a_store_holds_and_verifies_a_sentence_without_vectors(tmp_path):
    """A store of sentences read with ``empty="zero"``, written block by block by the engine's own task function
    (no cluster needed): it follows the contract, reads back equal, and verify recomputes it with the reference."""
    from labeldist.distances.sts import SentenceRelevance
    from labeldist.engine.blocks import compute_block
    from labeldist.engine.verify import verify_store
    from labeldist.store import StoreReader, build_manifest, create_store, n_blocks, publish
    from tests.conftest import check_store

    labels, texts = _labels("zero")
    distance, url, k, rows = SentenceRelevance("coarse_to_fine", cbow_threshold=0.9), str(tmp_path / "s"), 3, 4
    manifest = build_manifest(
        dataset="sts-empty",
        kind=distance.kind,
        params=distance.params(),
        labels=labels,
        k=k,
        dense=True,
        block_rows=rows,
    )
    create_store(url, manifest, labels)
    for block in range(n_blocks(len(labels), rows)):
        compute_block(block, labels=labels, distance=distance, url=url, k=k, block_rows=rows, dense=True)
    publish(url)
    check_store(url)
    reader = StoreReader(url)
    assert stored_labels(reader).sha256() == labels.sha256() and reader.manifest["params"]["labels"]["empty"] == "zero"
    np.testing.assert_allclose(reader.dense_rows(0, len(labels)), distance.block(labels, labels), atol=1e-6)
    report = verify_store(url, sample=len(labels) ** 2)
    assert report["ok"], report["problems"]
