"""Sentences as labels: one sentence per item, with the tokens and word vectors of its CBoW score.

A COCO captions file gives item ``<image id>#<n>``, caption ``n`` of an image; plain files (``.txt``,
``.csv``/``.tsv``, ``.jsonl``) are read by :func:`read_sentences`, the same sentences with the same ids giving the
same labels in every format. A :class:`Sentences` is a :class:`~labeldist.labels.captions.CaptionSets` of one
caption per item, so a store can recompute its CBoW and BERT scores. Bad input is a
:class:`~labeldist.labels.base.LabelError` naming the file, the item and the line; long sentences are kept whole.

A sentence none of whose words has a vector has no CBoW vector; the policy ``empty`` (:data:`EMPTY_SENTENCE_POLICIES`,
``--empty``) says what then happens: ``"error"`` (refused where the scorer reads CBoW), ``"drop"`` (left out, the
other ids unchanged) or ``"zero"`` (kept with no CBoW token: CBoW relevance 0, and coarse-to-fine and the cascade
send its pairs to BERT). The policy is recorded in :attr:`Sentences.provenance`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Self, cast

import numpy as np

from labeldist.errors import UsageError
from labeldist.labels.base import LabelError, LabelSet, report_repeated
from labeldist.labels.captions import CaptionSets, TokenizedTexts
from labeldist.labels.coco import CAPTION_FORMATS, load_json, parse_coco, parse_karpathy
from labeldist.labels.sentence_files import PLAIN_SUFFIXES, read_plain_sentences
from labeldist.labels.text import Tokenizer, WordVectors

#: what to do with a sentence none of whose words has a vector (see the module docstring)
EMPTY_SENTENCE_POLICIES = ("error", "drop", "zero")


def check_empty_sentence_policy(empty: str) -> None:
    """ValueError unless ``empty`` is one of :data:`EMPTY_SENTENCE_POLICIES`."""
    if empty not in EMPTY_SENTENCE_POLICIES:
        raise UsageError(f"unknown empty-sentence policy {empty!r}; known: {', '.join(EMPTY_SENTENCE_POLICIES)}")


class Sentences(CaptionSets):
    """N sentences with their ids, texts, CBoW tokens and word vectors.

    Arrays (as :class:`CaptionSets` less ``caption_offsets``, which is always ``0..N``): ``text`` (bytes,)
    uint8 and ``text_offsets`` (N+1,) int64; ``tokens`` (T,) int32 and ``token_offsets`` (N+1,) int64 into
    ``vocab`` (V,) str; ``vectors`` (V, d) float32. Unlike a caption, a sentence may own no token (read with
    ``empty="zero"``): its CBoW vector is then undefined (:attr:`cbow_defined`).
    """

    label_type: ClassVar[str] = "sentences"
    _ARRAYS: ClassVar[tuple[str, ...]] = ("text", "text_offsets", "tokens", "token_offsets", "vocab", "vectors")
    array_dimensions: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "text": ("byte",),
        "text_offsets": ("item_edge",),
        "tokens": ("token",),
        "token_offsets": ("item_edge",),
        "vocab": ("word",),
        "vectors": ("word", "vector_axis"),
    }

    def __init__(
        self,
        ids: np.ndarray | Sequence[str],
        *,
        text: np.ndarray,
        text_offsets: np.ndarray,
        tokens: np.ndarray,
        token_offsets: np.ndarray,
        vocab: np.ndarray,
        vectors: np.ndarray,
        provenance: dict[str, Any] | None = None,
        caption_offsets: np.ndarray | None = None,
    ) -> None:
        n = len(ids)
        one_each = np.arange(n + 1, dtype=np.int64)
        if caption_offsets is not None and not np.array_equal(caption_offsets, one_each):
            raise LabelError("Sentences hold exactly one sentence per item")
        super().__init__(
            ids,
            caption_offsets=one_each,
            text=text,
            text_offsets=text_offsets,
            tokens=tokens,
            token_offsets=token_offsets,
            vocab=vocab,
            vectors=vectors,
            provenance=provenance,
        )
        blank = [i for i, t in enumerate(self.texts) if not t.strip()]
        if blank:
            raise LabelError(f"sentence {self.ids[blank[0]]!r} is empty")

    _tokens_required = False  # a sentence may own no token (empty="zero"), where a caption must own one

    @classmethod
    def from_json(cls, value: object, *, like: LabelSet) -> Self:
        """A new sentence from its JSON form, a string, made as the sentences of ``like`` were
        (:func:`query_sentence`): what a sentence store is searched by."""
        if not isinstance(like, Sentences):
            raise TypeError(f"like must be Sentences, got {type(like).__name__}")
        return cast(Self, query_sentence(value, like))

    def to_json(self, i: int) -> str:
        """Sentence ``i`` as its JSON form: the raw sentence, a string (decoded alone, not through :attr:`texts`,
        which decodes every sentence)."""
        return self.text[self.text_offsets[i] : self.text_offsets[i + 1]].tobytes().decode("utf-8")

    @property
    def cbow_defined(self) -> np.ndarray:
        """(N,) bool: whether each sentence has a CBoW vector (a word with a vector)."""
        return np.diff(self.token_offsets) > 0

    @cached_property
    def texts(self) -> list[str]:
        """The raw sentences, in item order."""
        raw, off = self.text.tobytes(), self.text_offsets
        return [raw[off[i] : off[i + 1]].decode("utf-8") for i in range(len(self.ids))]

    @cached_property
    def text_ids(self) -> tuple[list[str], np.ndarray]:
        """The distinct texts, sorted, and each item's index among them, (N,) int64: two items have the same
        text exactly when they have the same id (``["A dog.", "A cat.", "A dog."]`` gives ``["A cat.", "A dog."]``
        and ``[1, 0, 1]``; tests/sts/test_knn_search.py)."""
        distinct, inverse = np.unique(np.array(self.texts, dtype=object), return_inverse=True)
        return [str(t) for t in distinct], inverse.astype(np.int64).reshape(-1)

    def words(self, i: int) -> list[str]:
        """The kept (CBoW) words of sentence ``i``."""
        return self.caption_words(i)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("texts", None)  # decoded lazily on the worker; ship the flat bytes only
        state.pop("text_ids", None)
        return state


class _SentenceTexts(TokenizedTexts):
    """:class:`TokenizedTexts` that can also keep a text without any word that has a vector (``empty="zero"``)."""

    def add_without_words(self, text: str) -> bool:
        """Keep ``text`` with no CBoW token; True."""
        self._text.append(text.encode("utf-8"))
        self._words.append([])
        return True


def query_sentence(value: object, like: Sentences) -> Sentences:
    """One new sentence from its JSON form (a string), tokenized as ``like``'s were: the tokenizer of
    ``like.provenance["tokenizer"]`` and the word vectors of :func:`~labeldist.labels.captions.query_vocabulary`
    (the table the store's words came from, or the store's own vocabulary). A sentence with no word that has a
    vector is kept with no CBoW token (its pairs then go to BERT, as ``empty="zero"`` keeps one in a store; a
    CBoW-only distance refuses it in its ``check_labels``).

    No longer than the store's longest sentence in words with a vector (the service's cost estimate is measured
    on such items). LabelError naming what is wrong: not a string, blank, too long."""
    from labeldist.labels.base import json_repr, json_text
    from labeldist.labels.captions import query_vocabulary

    if not isinstance(value, str):
        raise LabelError(f"a sentence store is searched by one sentence, a JSON string, got {json_repr(value)}")
    json_text(value, "the sentence")
    if not value.strip():
        raise LabelError("the sentence is empty")
    params = like.provenance.get("tokenizer")
    tokenizer = Tokenizer(**params) if isinstance(params, dict) else Tokenizer()
    vectors = query_vocabulary(like)
    longest = int(np.diff(like.token_offsets).max()) if len(like) else 0
    n_words = len(tokenizer.tokens(value, vectors))
    if n_words > max(longest, 1):
        raise LabelError(
            f"the sentence has {n_words} words with a vector: at most {max(longest, 1)}, as many as the store's "
            "longest sentence"
        )
    kept = _SentenceTexts(tokenizer, vectors, "zero")
    if not kept.add(value):
        kept.add_without_words(value)
    fields = kept.fields()
    fields["provenance"] = {**like.provenance, **fields["provenance"]}
    return Sentences(np.array(["query"]), **fields)


def sentences_from_texts(
    ids: Sequence[str],
    texts: Sequence[Any],
    *,
    tokenizer: Tokenizer | None = None,
    vectors: WordVectors | None = None,
    empty: str = "error",
    source: str = "<memory>",
    needs_cbow: bool = True,
    lines: Sequence[int] | None = None,
) -> Sentences:
    """Tokenize sentences and keep the vectors of the words they use.

    Parameters
    ----------
    ids, texts : N unique item ids and their sentences.
    tokenizer : default ``Tokenizer()`` (lower-case, ``[a-z]+``, gensim stop words dropped).
    vectors : default :func:`~labeldist.labels.text.default_word_vectors` (GloVe 6B 50-d).
    empty : a sentence without any word that has a vector is a LabelError (``"error"``), is left out
        (``"drop"``) or is kept with no CBoW token (``"zero"``; see the module docstring); a blank sentence is
        always an error.
    source : the file named in errors.
    needs_cbow : False when the sentences are for a scorer that never reads CBoW (``scorer="bert"``): nothing
        needs the CBoW vector a sentence lacks, so ``"error"`` keeps it instead (and is recorded as asked).
    lines : the line of each sentence in ``source``, named in errors (``FILE, line 7: sentence '6' ...``).
    """
    check_empty_sentence_policy(empty)
    if len(ids) != len(texts):
        raise LabelError(f"{source}: {len(ids)} ids but {len(texts)} sentences")
    if lines is not None and len(lines) != len(ids):
        raise UsageError(f"{len(lines)} line numbers for {len(ids)} sentences")
    kept = _SentenceTexts(tokenizer, vectors, empty)
    keep_without_words = empty == "zero" or (empty == "error" and not needs_cbow)
    kept_ids: list[str] = []
    for n, (item, text) in enumerate(zip(ids, texts)):
        where = f"{source}, line {lines[n]}" if lines is not None else source
        if not isinstance(text, str):
            raise LabelError(f"{where}: sentence {item!r} is {type(text).__name__}, not a string")
        if not text.strip():
            raise LabelError(f"{where}: sentence {item!r} is empty")
        if kept.add(text) or (keep_without_words and kept.add_without_words(text)):
            kept_ids.append(str(item))
        elif empty == "error":
            raise LabelError(
                f"{where}: sentence {item!r} {text[:80]!r} has no word with a vector (tokenizer "
                f"{kept.tokenizer.params()}), so its CBoW score is undefined; pass --empty drop (empty='drop') to "
                "leave it out, or --empty zero to keep it with a zero CBoW vector (its pairs then go to BERT "
                "under coarse_to_fine and cascade)"
            )
    if not kept_ids:
        raise LabelError(f"{source}: no sentences")
    sentences = Sentences(np.array(kept_ids, dtype=str), **kept.fields())
    report_repeated(sentences.texts, kept_ids, source, "sentences")
    return sentences


def read_caption_sentences(
    path: str | Path,
    *,
    format: str = "auto",
    tokenizer: Tokenizer | None = None,
    vectors: WordVectors | None = None,
    empty: str = "error",
    limit: int | None = None,
    needs_cbow: bool = True,
) -> Sentences:
    """Every caption of a COCO captions JSON or Karpathy-style list as one sentence item ``<image id>#<n>``.

    ``format`` as :func:`labeldist.labels.captions.read_captions`; ``limit`` keeps the first N sentences (of the
    file, before any is dropped); ``empty`` and ``needs_cbow`` as :func:`sentences_from_texts`.
    """
    if format not in CAPTION_FORMATS:
        raise UsageError(f"unknown caption format {format!r}; known: {', '.join(CAPTION_FORMATS)}")
    path = Path(path)
    data = load_json(path)
    if format == "auto":
        format = "karpathy" if isinstance(data, list) else "coco"
    image_ids, captions = (parse_coco if format == "coco" else parse_karpathy)(data, str(path))
    ids = [f"{image}#{n}" for image, caps in zip(image_ids, captions) for n in range(len(caps))]
    texts = [cap for caps in captions for cap in caps]
    if limit is not None:
        ids, texts = ids[:limit], texts[:limit]
    sentences = sentences_from_texts(
        ids, texts, tokenizer=tokenizer, vectors=vectors, empty=empty, source=str(path), needs_cbow=needs_cbow
    )
    sentences.provenance["format"] = format
    return sentences


# ---------------------------------------------------------------- sentences of plain files
#: ``format`` of :func:`read_sentences` (the ``--format`` of ``labeldist precompute sentences``)
SENTENCE_FORMATS = ("auto", "coco", "karpathy", "txt", "csv", "tsv", "jsonl")


def read_sentences(
    path: str | Path,
    *,
    format: str = "auto",
    column: str | None = None,
    id_column: str | None = None,
    tokenizer: Tokenizer | None = None,
    vectors: WordVectors | None = None,
    empty: str = "error",
    limit: int | None = None,
    needs_cbow: bool = True,
) -> Sentences:
    """The sentences of a file: COCO/Karpathy captions JSON (:func:`read_caption_sentences`, unchanged) or a
    plain file of sentences.

    ``format="auto"`` reads ``.txt``, ``.csv``, ``.tsv``, ``.jsonl`` (or ``.ndjson``) by the suffix, and any
    other file as captions JSON (an object COCO, a list Karpathy); ``txt``, ``csv``, ``tsv``, ``jsonl``,
    ``coco`` or ``karpathy`` name the format whatever the suffix. Plain files are UTF-8 (a byte-order mark is
    tolerated) and each sentence is kept exactly as written, spaces included, so that the same sentences give
    the same labels (arrays and sha256) in every format, as long as their ids are the same:

    - ``txt``: one sentence a line. Item ids are the 0-based line numbers (line 1 is item ``"0"``), counted
      over every line, so leaving out a blank line does not renumber the others. A line cannot hold a line
      break: a sentence with one needs csv, tsv or jsonl.
    - ``csv`` (commas) and ``tsv`` (tabs): a header row, then one sentence a row, with standard CSV quoting
      (a quoted field may hold the delimiter, ``""`` and line breaks). The sentence is in ``column``
      (default: a column named ``sentence``, else ``text``; else an error listing the columns); the id in
      ``id_column`` (default: a column named ``id`` where there is one, else the row numbers 0, 1, ... below
      the header, as ``precompute vectors`` numbers rows).
    - ``jsonl``: one JSON value a line, every line a string (the sentence; ids the 0-based line numbers, as
      txt) or every line an object, with the sentence and the id under ``column`` and ``id_column`` (defaults
      as csv; an id is an integer or a non-empty string).

    A blank line, or an empty (or blank) sentence of a plain file, is no sentence: under ``empty="drop"`` it is
    left out (the other ids do not change), under ``"error"`` and ``"zero"`` (which keeps sentences without
    a word vector, but cannot keep one without text) it is a LabelError naming the file and the line. Blank
    lines at the end of a file are ignored under every policy. ``limit`` keeps the first N sentences of the
    file (blank lines do not count; counted before any sentence without a word vector is dropped); ``empty``
    and ``needs_cbow`` as :func:`sentences_from_texts`. Bad input is a LabelError naming the file and line.
    """
    if format not in SENTENCE_FORMATS:
        raise UsageError(f"unknown sentence format {format!r}; known: {', '.join(SENTENCE_FORMATS)}")
    check_empty_sentence_policy(empty)
    path = Path(path)
    kind = PLAIN_SUFFIXES.get(path.suffix.lower()) if format == "auto" else format
    if kind is None or kind in CAPTION_FORMATS:
        if column is not None or id_column is not None:
            raise LabelError(
                f"{path}: --column and --id-column are for .csv, .tsv and .jsonl files; in a captions "
                "JSON the sentences are the captions and their ids '<image id>#<n>'"
            )
        try:
            return read_caption_sentences(
                path,
                format=kind or "auto",
                tokenizer=tokenizer,
                vectors=vectors,
                empty=empty,
                limit=limit,
                needs_cbow=needs_cbow,
            )
        except LabelError as e:
            if kind is None and path.suffix.lower() != ".json" and "malformed JSON" in str(e):
                raise LabelError(
                    f"{e} (read as captions JSON: the suffix is not one of "
                    f"{', '.join(PLAIN_SUFFIXES)}; pass --format for a plain file)"
                ) from None
            raise
    ids, texts, lines, keys = read_plain_sentences(path, kind, column, id_column, empty=empty, limit=limit)
    sentences = sentences_from_texts(
        ids,
        texts,
        tokenizer=tokenizer,
        vectors=vectors,
        empty=empty,
        source=str(path),
        needs_cbow=needs_cbow,
        lines=lines,
    )
    sentences.provenance.update({"format": kind, **keys})
    return sentences
