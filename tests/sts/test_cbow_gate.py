"""What the CBoW gate loses: the recall of coarse-to-fine against BERT alone as
benchmarks/bench_cbow_gate.py computes it, checked on hand-made cases and against an independent computation;
and the default scorer chosen from those measurements, as ``--help`` shows it and as a new store records it.
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import numpy as np
import pytest

from labeldist.cli import main
from labeldist.core.knn import topk_rows
from labeldist.distances.sts import SentenceRelevance
from labeldist.sts.cascade import DEFAULT_SCORER, topk_recall
from labeldist.view.stored import stored_distance

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_cbow_gate", ROOT / "benchmarks" / "bench_cbow_gate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- recall@k, by hand
def test_recall_of_a_hand_made_case():
    """Five items; BERT's distances, and coarse-to-fine's: the same where the CBoW gate passes, 1 elsewhere.

    BERT alone, top 2 (the item itself left out):   0: 1, 2   1: 0, 3   2: 0, 4   3: 1, 4   4: 3, 2
    The gate stops the pairs (0, 2) and (3, 4); coarse-to-fine, top 2:
                                                    0: 1, 3   1: 0, 3   2: 4, 1   3: 1, 0   4: 2, 0
    kept of BERT's two:                             0: 1/2    1: 2/2    2: 1/2    3: 1/2    4: 1/2
    """
    bert = np.array(
        [
            [0.0, 0.1, 0.2, 0.5, 0.6],
            [0.1, 0.0, 0.7, 0.3, 0.8],
            [0.2, 0.7, 0.0, 0.9, 0.4],
            [0.5, 0.3, 0.9, 0.0, 0.35],
            [0.6, 0.8, 0.4, 0.35, 0.0],
        ]
    )
    stopped = np.zeros((5, 5), dtype=bool)
    stopped[0, 2] = stopped[2, 0] = stopped[3, 4] = stopped[4, 3] = True
    c2f = np.where(stopped, 1.0, bert)
    exclude = np.arange(5)
    b, _ = topk_rows(bert, 2, exclude=exclude)
    c, _ = topk_rows(c2f, 2, exclude=exclude)
    assert b.tolist() == [[1, 2], [0, 3], [0, 4], [1, 4], [3, 2]]
    assert c.tolist() == [[1, 3], [0, 3], [4, 1], [1, 0], [2, 0]]
    assert topk_recall(b, c).tolist() == [0.5, 1.0, 0.5, 0.5, 0.5]
    assert topk_recall(b, b).tolist() == [1.0] * 5, "a list keeps all of itself"
    # the order within a list does not matter, nor does k beyond the reference's
    assert topk_recall(np.array([[4, 2]]), np.array([[2, 4]])).tolist() == [1.0]
    assert topk_recall(np.array([[4, 2]]), np.array([[0, 1]])).tolist() == [0.0]


def test_recall_with_padding():
    """-1 pads a list shorter than k: padding is not a neighbour to keep, nor one kept."""
    reference = np.array([[3, -1, -1], [-1, -1, -1], [0, 1, 2]])
    candidate = np.array([[-1, -1, 3], [5, 6, 7], [2, -1, -1]])
    assert topk_recall(reference, candidate).tolist() == [1.0, 1.0, pytest.approx(1 / 3)]
    with pytest.raises(ValueError, match="2 reference rows against 1"):
        topk_recall(reference[:2], candidate[:1])


def test_recall_equals_an_independent_computation():
    """Random distance matrices with many ties: recall through topk_rows and topk_recall equals a plain Python
    count over stable argsorts of each row (the item itself left out)."""
    rng = np.random.default_rng(7)
    for n, k in ((12, 3), (40, 10), (9, 8)):
        bert = rng.integers(0, 6, size=(n, n)).astype(np.float32) / 5  # ties on purpose
        c2f = np.where(rng.random((n, n)) < 0.4, 1.0, bert).astype(np.float32)
        got = topk_recall(topk_rows(bert, k, exclude=np.arange(n))[0], topk_rows(c2f, k, exclude=np.arange(n))[0])
        for i in range(n):
            top_b = [j for j in np.argsort(bert[i], kind="stable") if j != i][:k]
            top_c = [j for j in np.argsort(c2f[i], kind="stable") if j != i][:k]
            kept = len(set(top_b) & set(top_c))
            assert got[i] == kept / k


# ---------------------------------------------------------------- the benchmark's lists, on real sentences
def test_the_benchmark_measures_what_a_store_holds(packaged_path):
    """On a paraphrase pair the gate stops (CBoW 0.708 < the default 0.728): the benchmark's lists are each row's
    stable argsort of the whole matrix, BERT alone keeps the paraphrase nearest, coarse-to-fine loses it, and a
    gate every pair passes loses nothing."""
    from labeldist.labels.sentences import sentences_from_texts

    bench = _bench()
    # the kitten last: a list short of pairs past the gate ends in ties at distance 1, broken by index
    texts = [
        "a cat sleeps on a sunny windowsill",
        "a man rides a horse",
        "two dogs play in the snow",
        "a woman rides a brown horse",
        "a kitten naps in the sunlight near a window",
    ]
    labels = sentences_from_texts([str(i) for i in range(len(texts))], texts)
    bert, c2f = SentenceRelevance("bert"), SentenceRelevance("coarse_to_fine", cbow_threshold=0.728)
    b, c = bench.knn(bert, labels, 2), bench.knn(c2f, labels, 2)
    for distance, lists in ((bert, b), (c2f, c)):
        full = distance.block(labels, labels).astype(np.float32)
        for i in range(len(texts)):
            assert lists[i].tolist() == [j for j in np.argsort(full[i], kind="stable") if j != i][:2]
    assert b[0, 0] == 4 and 4 not in c[0], "BERT alone puts the kitten first; the gate drops it"
    assert topk_recall(b, c)[0] < 1.0
    everything = SentenceRelevance("coarse_to_fine", cbow_threshold=0.0)
    assert topk_recall(b, bench.knn(everything, labels, 2)).tolist() == [1.0] * len(texts)
    _, _, _, calls = bench.knn_cold(c2f, labels, 2)
    assert calls == len(texts), "a bi-encoder behind the gate still embeds every sentence"


# ---------------------------------------------------------------- the default chosen
def _help(capsys, monkeypatch, *command: str) -> str:
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    return capsys.readouterr().out


def test_the_default_scorer_is_what_help_shows_and_a_new_store_records(dask_client, tmp_path, monkeypatch, capsys):
    from labeldist.store import StoreReader

    assert inspect.signature(SentenceRelevance).parameters["scorer"].default == DEFAULT_SCORER == "bert"
    for command in (("precompute", "sentences"), ("sts", "eval")):
        lines = _help(capsys, monkeypatch, *command).splitlines()
        start = next(n for n, line in enumerate(lines) if line.lstrip().startswith("--scorer "))
        end = next(n for n in range(start + 1, len(lines)) if lines[n].lstrip().startswith("-"))
        scorer_help = " ".join(lines[start:end])  # the option's own help, whichever lines it takes
        assert f"(default: {DEFAULT_SCORER})" in scorer_help, scorer_help
    monkeypatch.chdir(tmp_path)
    Path("s.txt").write_text(
        "a cat sleeps on a sunny windowsill\na kitten naps in the sunlight near a window\n"
        "it is what it is\na man rides a horse\n"
    )
    scheduler = ["--scheduler", dask_client.scheduler.address, "--no-progress", "--k", "2"]
    assert main(["precompute", "sentences", "s.txt", "--out", "new", *scheduler]) == 0, capsys.readouterr().err
    new = StoreReader("new")
    params = new.manifest["params"]
    assert params["scorer"] == DEFAULT_SCORER and params["cbow_threshold"] is None and params["calibration"] is None
    assert stored_distance(new).params() == SentenceRelevance().params() | {"scorer": params["scorer"]}
    indices, _ = new.knn()
    assert indices[0, 0] == 1, "the paraphrase is the cat's nearest under the default"
    assert len(new.ids) == 4, "a sentence of stop words only is kept: BERT alone needs no CBoW vector"

    # a store made under the old default records its scorer and threshold: it reopens as it was made
    old = ["precompute", "sentences", "s.txt", "--scorer", "coarse_to_fine", "--empty", "zero", "--out", "old"]
    assert main([*old, *scheduler]) == 0, capsys.readouterr().err
    reader = StoreReader("old")
    assert stored_distance(reader).scorer == "coarse_to_fine"
    assert stored_distance(reader).cbow_threshold == reader.manifest["params"]["cbow_threshold"] is not None
    assert stored_distance(reader).params() == {k: v for k, v in reader.manifest["params"].items() if k != "labels"}
