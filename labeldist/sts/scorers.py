r"""Sentence relevance scorers :math:`R(s, t) \in [0, 1]`: CBoW, bi-encoder, cross-encoder.

The relevance degree of the ladder loss (Zhou et al., "Ladder Loss for Coherent Visual-Semantic Embedding", AAAI
2020, §3.3), cheapest first:

- **CBoW**: :math:`R_c(s,t) = \mathrm{clip}(\cos(\bar v_s, \bar v_t), 0, 1)`, :math:`\bar v_s` the mean vector of
  the kept tokens of :math:`s` (GloVe by default);
- **bi-encoder**: :math:`R_b(s,t) = \mathrm{clip}(\cos(f(s), f(t)), 0, 1)` (Sentence-BERT, Reimers and Gurevych,
  EMNLP 2019); one transformer call per sentence;
- **cross-encoder**: :math:`R_x(s,t) = \frac12\big(\sigma(g(s,t)) + \sigma(g(t,s))\big)`, symmetric as a store needs;
  two transformer calls per pair.

Every scorer gives :math:`R(s, s) = 1`; inputs are truncated to ``max_length`` word pieces, with a warning. Caches
and counters change under a lock of their own, every model call holds :func:`~labeldist.sts.models.model_lock`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.core.files import written_whole
from labeldist.core.options import check_regular_file
from labeldist.errors import UsageError
from labeldist.sts.models import (
    cache_root,
    cached_once,
    file_sha256,
    load_bi_encoder,
    load_cross_encoder,
    model_lock,
    truncation_warning,
)

#: word pieces per model input unless told otherwise (all-MiniLM-L6-v2's own limit)
MAX_LENGTH = 256

log = logging.getLogger(__name__)


def mean_vectors(tokens: np.ndarray, offsets: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    r"""Average word vector of each sentence, :math:`\bar v_s = \frac{1}{|s|}\sum_{w \in s} v_w`, float64.

    ``tokens`` (T,) index rows of ``vectors`` (V, d); sentence ``s`` owns ``tokens[offsets[s]:offsets[s+1]]``
    (none, for a sentence without a word that has a vector: its row is zero, so its cosine with anything is 0).

    >>> mean_vectors(np.array([0, 1, 1]), np.array([0, 2, 2, 3]), np.array([[1.0, 0.0], [0.0, 1.0]])).tolist()
    [[0.5, 0.5], [0.0, 0.0], [0.0, 1.0]]
    """
    lengths = np.diff(offsets)
    out = np.zeros((len(lengths), vectors.shape[1]))
    has = np.flatnonzero(lengths > 0)
    if len(has):
        # reduceat over the non-empty segments only: for an empty one it would return the next token's vector
        sums = np.add.reduceat(np.asarray(vectors, dtype=np.float64)[tokens], offsets[has], axis=0)
        out[has] = sums / lengths[has, None]
    return out


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit Euclidean norm (float64); an all-zero row stays zero (cosine 0 with anything)."""
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def cosine_relevance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    r"""Relevance :math:`\mathrm{clip}(\cos(a_i, b_j), 0, 1)` for every row pair of unit-norm ``a`` and ``b``.

    >>> cosine_relevance(np.array([[1.0, 0.0]]), np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])).tolist()
    [[1.0, 0.0, 0.0]]
    """
    return np.clip(a @ b.T, 0.0, 1.0)


def same_text(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    """(len(a), len(b)) mask of identical texts, whose relevance is 1 by definition."""
    index: dict[str, list[int]] = {}
    for j, t in enumerate(b):
        index.setdefault(t, []).append(j)
    mask = np.zeros((len(a), len(b)), dtype=bool)
    for i, t in enumerate(a):
        mask[i, index.get(t, [])] = True
    return mask


#: texts per model call of :func:`encode_texts`: a Dask task of a job's embedding is one such chunk
ENCODE_CHUNK = 1024


def bi_encoder(path: Path, max_length: int, backend: str = "torch") -> Any:
    """The process's bi-encoder at ``path`` for ``backend``: a SentenceTransformer (``"torch"``) or an
    :class:`~labeldist.sts.onnx_backend.OnnxEncoder` on the threads the task at hand may use (``"onnx"``); both
    have ``encode``."""
    if backend == "onnx":
        from labeldist.sts.onnx_backend import load_onnx_encoder, onnx_threads

        return load_onnx_encoder(path, max_length, onnx_threads())
    return load_bi_encoder(path, max_length)


def encode_texts(
    path: Path, max_length: int, texts: Sequence[str], batch_size: int = 64, backend: str = "torch"
) -> np.ndarray:
    """Unit-norm float32 embeddings (len(texts), d) of ``texts`` under the bi-encoder at ``path``, run by
    ``backend`` (:func:`bi_encoder`).

    The model is called on consecutive chunks of :data:`ENCODE_CHUNK` texts, each in batches of ``batch_size``:
    the values depend on the batches a text falls in (in their last bits), so the chunks are part of the
    definition, and a job that embeds its sorted texts chunk by chunk on its Dask workers
    (:func:`encode_chunk`) gets exactly the values of one process embedding them all. The unit rows are kept as
    float32, the model's own precision: a relevance is the float64 product of two such rows.
    """
    model = bi_encoder(path, max_length, backend)
    out = []
    for start in range(0, len(texts), ENCODE_CHUNK):
        chunk = list(texts[start : start + ENCODE_CHUNK])
        with model_lock(model):
            if backend == "torch":  # the ONNX encoder tokenizes once and warns itself
                warn_truncated(model.tokenizer, chunk, max_length, "bi-encoder")
            emb = model.encode(chunk, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
        out.append(unit_rows(emb).astype(np.float32))
    return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)


def encode_chunk(texts: Sequence[str], *, path: Path, max_length: int, backend: str = "torch") -> np.ndarray:
    """One task of a job's embedding (:meth:`labeldist.distances.sts.SentenceRelevance.preparation`):
    :func:`encode_texts` of one chunk of at most :data:`ENCODE_CHUNK` of the job's sorted texts."""
    if len(texts) > ENCODE_CHUNK:
        raise UsageError(f"a chunk holds at most {ENCODE_CHUNK} texts, got {len(texts)}")
    return encode_texts(path, max_length, texts, backend=backend)


def save_embeddings(values: np.ndarray | Sequence[np.ndarray], path: Path) -> None:
    """Write float32 embeddings to ``path`` as ``.npy``: one array, or the chunks of one in order (written one by
    one, never joined in memory); atomically (aside, then rename), so a worker that reads it while it is written
    sees the whole file or none."""
    chunks = [values] if isinstance(values, np.ndarray) else list(values)
    rows = sum(len(c) for c in chunks)
    width = chunks[0].shape[1] if chunks and np.ndim(chunks[0]) == 2 else 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with written_whole(path) as aside:
        out = np.lib.format.open_memmap(aside, mode="w+", dtype=np.float32, shape=(rows, width))
        start = 0
        for chunk in chunks:
            out[start : start + len(chunk)] = chunk
            start += len(chunk)
        out.flush()
        del out


def load_embeddings(path: Path, n_texts: int, dim: int | None = None) -> np.ndarray:
    """The embeddings :func:`save_embeddings` wrote for ``n_texts`` texts, memory-mapped (read-only, float32):
    the processes of one machine share its pages. Refused (ValueError, naming the file) unless a 2-D float array
    of ``n_texts`` rows (of ``dim`` columns where given) with finite values of unit norm; a float64 file of an
    earlier release is rounded to float32."""
    check_regular_file(path, "cached embeddings file")  # a FIFO planted in the cache would block the load
    try:
        values = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise UsageError(f"{path}: not a readable embeddings file ({err})") from err
    if values.ndim != 2 or values.dtype.kind != "f" or values.shape[0] != n_texts or not values.shape[1]:
        raise UsageError(f"{path}: {values.shape} {values.dtype} embeddings, expected {n_texts} rows of floats")
    if dim is not None and values.shape[1] != dim:
        raise UsageError(f"{path}: embeddings of width {values.shape[1]}, the model's are {dim}")
    values = np.asarray(values, dtype=np.float32)  # a plain array on the same pages (a copy only from float64)
    probe = np.asarray(values[:: max(1, n_texts // 64)], dtype=np.float64)
    if not np.isfinite(probe).all() or not np.allclose(np.linalg.norm(probe, axis=1), 1.0, atol=1e-3):
        raise UsageError(f"{path}: embeddings that are not unit rows; delete the file to embed again")
    return values


#: a text embedded on request (a search) longer than this is not kept (it is embedded, used and dropped): a
#: sentence of a store is a few hundred characters; a search of a megabyte must not stay in memory
KEEP_CHARS = 2048
#: texts embedded on request kept, beyond a store's sentences that load() read (about 1.6 KB each with its key)
KEPT_ASKED = 65_536

#: rows of a cached embeddings file compared with fresh embeddings of their texts whenever it is loaded
SPOT_CHECK_ROWS = 4
#: how far a cached row may be from a fresh embedding of its text: another batch changes the last bits (about
#: 1e-7); other numbers, even of unit rows, differ by far more
SPOT_CHECK_TOLERANCE = 1e-3


def spot_check(
    values: np.ndarray, texts: Sequence[str], model_path: Path, max_length: int, path: Path, backend: str = "torch"
) -> None:
    """ValueError naming ``path`` unless :data:`SPOT_CHECK_ROWS` rows of ``values``, drawn afresh each time, equal
    the model's embeddings of their texts (:func:`encode_texts`, the few texts alone) within
    :data:`SPOT_CHECK_TOLERANCE`: a file of other numbers, of the right shape and unit rows, is not trusted."""
    if not len(texts):
        return
    rows = np.sort(np.random.default_rng().choice(len(texts), min(SPOT_CHECK_ROWS, len(texts)), replace=False))
    fresh = encode_texts(model_path, max_length, [texts[r] for r in rows], backend=backend)
    cached = np.asarray(values[rows], dtype=np.float64)
    if cached.shape != fresh.shape or not np.allclose(cached, fresh, rtol=0, atol=SPOT_CHECK_TOLERANCE):
        raise UsageError(
            f"{path}: cached embeddings that are not the model's embeddings of their texts (rows {rows.tolist()} "
            "checked against fresh ones)"
        )


def load_checked(
    path: Path,
    texts: Sequence[str],
    model_path: Path,
    max_length: int,
    sha256: str | None = None,
    backend: str = "torch",
) -> np.ndarray | None:
    """The embeddings of ``texts`` cached at ``path`` (:func:`load_embeddings`), spot-checked against the model
    (:func:`spot_check`); None, with a warning naming the file and what is wrong, when the file is not
    there, cannot be read as embeddings of these texts or fails the check: the caller embeds them again.

    ``sha256``: the digest of the file as the job's own process checked or wrote it (a worker of that job): a file
    with that digest is those values, and is taken without loading the model for the spot check."""
    if not os.path.lexists(path):
        return None
    t = time.perf_counter()
    try:
        values = load_embeddings(path, len(texts))
        if sha256 is None or file_sha256(path) != sha256:
            spot_check(values, texts, model_path, max_length, path, backend)
    except (ValueError, OSError) as err:
        warnings.warn(f"{err}; embedding the {len(texts):,} texts again", stacklevel=2)
        return None
    log.info("loaded the embeddings of %d texts from %s in %.1f s", len(texts), path, time.perf_counter() - t)
    return values


def save_quietly(values: np.ndarray, path: Path) -> None:
    """:func:`save_embeddings`, unless the cache cannot take it (read-only, full, or the name held by something
    that is not a regular file, which is never replaced): the values are right either way, only not kept."""
    try:
        save_embeddings(values, path)
    except OSError as err:
        warnings.warn(f"{path}: cannot keep the embeddings there ({err}); computed, not cached", stacklevel=2)


class BiEncoderScorer:
    """Relevance from sentence embeddings; each distinct text is embedded once per process and cached.

    ``calls`` counts the sentences embedded (transformer calls). Embeddings are computed in batches of
    ``batch_size`` and do not depend on which block asked first to better than 1e-6 (padding is masked).

    Safe to share between threads: a text is embedded by the first thread that needs it while the others wait
    for it, so each costs one call and every thread reads the same value (two threads embedding it in
    different batches would differ in the last bits, and a later request could get the other one).

    Bounded: what :meth:`load` reads (a store's sentences) is kept; of the texts embedded on request (searches),
    those over :data:`KEEP_CHARS` characters are not kept at all, and at most :data:`KEPT_ASKED` others, the
    least recently asked dropped first (a service answering searches for months must not keep every one).
    """

    def __init__(self, path: Path, max_length: int = MAX_LENGTH, batch_size: int = 64, backend: str = "torch") -> None:
        self.path, self.max_length, self.batch_size, self.backend = path, max_length, batch_size, backend
        self.calls = 0
        #: the files :meth:`load` read
        self.loaded: set[Path] = set()
        self._cache: dict[str, np.ndarray] = {}
        self._asked: OrderedDict[str, None] = OrderedDict()  # texts kept that no load() gave, oldest first
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm embeddings (len(texts), d): the float32 values kept (:func:`encode_texts`), as float64."""
        if not texts:
            return np.zeros((0, 0))
        # Double-checked: the lock only when something is missing. A value is never changed once made (a load()
        # puts values of the same texts), so a reader without the lock sees a whole one; entries are dropped only
        # under the lock, where the values are gathered again.
        got = [self._cache.get(t) for t in texts]
        if any(g is None for g in got):
            with self._lock:
                fresh = self._embed_missing(texts)
                got = [fresh[t] if t in fresh else self._cache[t] for t in texts]
                while len(self._asked) > KEPT_ASKED:  # after the values are gathered: this call's may go too
                    self._cache.pop(self._asked.popitem(last=False)[0], None)
        return np.stack(got).astype(np.float64)

    def has(self, texts: Sequence[str]) -> bool:
        """Whether every text of ``texts`` is embedded already."""
        return all(t in self._cache for t in texts)

    def _embed_missing(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Embed the texts not in the cache yet, keep those that may be kept (the caller holds ``self._lock``);
        all of them, kept or not."""
        todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if not todo:
            return {}
        emb = encode_texts(self.path, self.max_length, todo, self.batch_size, self.backend)
        fresh = dict(zip(todo, emb))
        self.calls += len(todo)
        for text, value in fresh.items():
            if len(text) <= KEEP_CHARS:
                self._cache[text] = value
                self._asked[text] = None
        return fresh

    def save(self, texts: Sequence[str], path: Path) -> None:
        """Embed ``texts`` (in this order) and write them to ``path`` (:func:`save_embeddings`)."""
        save_embeddings(self.embed(texts).astype(np.float32), path)

    def load(self, texts: Sequence[str], path: Path, sha256: str | None = None) -> bool:
        """Fill the cache with the embeddings :meth:`save` wrote for ``texts`` (a few transformer calls: the
        :func:`load_checked` spot check, unless the file has the digest ``sha256`` its job checked); whether the
        file was there and right. A file that is not is written again from fresh embeddings
        (:func:`save_quietly`), with a warning."""
        values = load_checked(path, texts, self.path, self.max_length, sha256, self.backend)
        if values is None:
            if os.path.lexists(path):
                save_quietly(self.embed(texts).astype(np.float32), path)
            return False
        with self._lock:
            self._cache.update(zip(texts, np.asarray(values)))
            for text in texts:  # a store's sentences: kept for good
                self._asked.pop(text, None)
            self.loaded.add(path)
        return True

    def relevance(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        """(len(a), len(b)) relevance, 1 for identical texts."""
        out = cosine_relevance(self.embed(a), self.embed(b))
        out[same_text(a, b)] = 1.0
        return out


class CrossEncoderScorer:
    """Relevance from a cross-encoder, averaged over both orders of each pair.

    ``calls`` counts transformer calls: two per distinct unordered pair of distinct texts scored. Safe to share
    between threads (no cache; the model call holds the model's lock).
    """

    def __init__(self, path: Path, max_length: int = MAX_LENGTH, batch_size: int = 64) -> None:
        self.path, self.max_length, self.batch_size = path, max_length, batch_size
        self.calls = 0
        self._lock = threading.Lock()  # ``calls += n`` is a read and a write: two threads could lose one

    def one_order(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        r""":math:`\sigma(g(a_t, b_t))` for each t (one order only, no identical-text rule)."""
        if not len(a):
            return np.zeros(0)
        model = load_cross_encoder(self.path, self.max_length)
        pairs = list(zip(a, b))
        with model_lock(model):
            warn_truncated(model.tokenizer, pairs, self.max_length, "cross-encoder")
            scores = model.predict(pairs, batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False)
        with self._lock:
            self.calls += len(pairs)
        return np.asarray(scores, dtype=np.float64).reshape(-1)

    def pair_relevance(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        r"""Symmetric relevance :math:`\frac12(\sigma(g(a_t,b_t)) + \sigma(g(b_t,a_t)))` of each pair; 1 if equal.

        Each distinct unordered pair is scored once (both orders in one batch), so asking for (s, t) and (t, s)
        costs two calls, not four.
        """
        out = np.ones(len(a), dtype=np.float64)
        keys = [(x, y) if x <= y else (y, x) for x, y in zip(a, b)]
        distinct = [k for k in dict.fromkeys(keys) if k[0] != k[1]]
        if distinct:
            first, second = zip(*distinct)
            both = self.one_order(list(first) + list(second), list(second) + list(first))
            n = len(distinct)
            value = dict(zip(distinct, (both[:n] + both[n:]) / 2.0))
            for t, k in enumerate(keys):
                if k[0] != k[1]:
                    out[t] = value[k]
        return out


def warn_truncated(
    tokenizer: object, inputs: Sequence[str] | Sequence[tuple[str, str]], max_length: int, what: str
) -> None:
    """Warn (naming the first one) when inputs, all texts or all pairs, exceed ``max_length`` word pieces and will
    be truncated.

    The caller holds the model's lock: a tokenizer call resets the padding the model's own call relies on.
    """
    if not inputs:
        return
    # one batch call (the Rust tokenizer's), not one call a text: a call a text cost the torch path 10-20 %
    if isinstance(inputs[0], tuple):  # a cross-encoder's pairs, all of them
        columns = ([a for a, _ in inputs], [b for _, b in inputs])  # type: ignore[misc]
    else:
        columns = (list(inputs),)
    lengths = [len(x) for x in tokenizer(*columns, verbose=False)["input_ids"]]  # type: ignore[operator]
    long = [i for i, n in enumerate(lengths) if n > max_length]
    if long:
        warnings.warn(truncation_warning(len(long), max_length, inputs[long[0]], lengths[long[0]], what), stacklevel=3)


def embedding_cache_dir() -> Path:
    """Where embeddings computed once per job are left for the workers: ``$LABELDIST_CACHE/embeddings``
    (default ``~/.cache/labeldist/embeddings``); one ``.npy`` per model and set of texts (38 MB for 25k)."""
    return cache_root() / "embeddings"


def embedding_key(model_sha256: str, max_length: int, texts: Sequence[str], backend: str = "torch") -> str:
    """Digest naming the embeddings of ``texts`` (in this order) under one model, truncation and backend (torch's
    keys are those of the releases before backends, so their files are still found)."""
    runner = "" if backend == "torch" else f"{backend}:"
    h = hashlib.sha256(f"{runner}{model_sha256}:{max_length}:{ENCODE_CHUNK}:".encode())
    h.update("\x00".join(texts).encode())
    return h.hexdigest()


@cached_once(maxsize=8)
def bi_encoder_scorer(path: Path, max_length: int = MAX_LENGTH, backend: str = "torch") -> BiEncoderScorer:
    """The process-wide scorer of a bi-encoder run by ``backend`` (so its embedding cache lives as long as the
    worker)."""
    scorer = BiEncoderScorer(path, max_length, backend=backend)
    _PROCESS_SCORERS.append(scorer)
    return scorer


@cached_once(maxsize=8)
def cross_encoder_scorer(path: Path, max_length: int = MAX_LENGTH) -> CrossEncoderScorer:
    """The process-wide scorer of a cross-encoder."""
    scorer = CrossEncoderScorer(path, max_length)
    _PROCESS_SCORERS.append(scorer)
    return scorer


_PROCESS_SCORERS: list[BiEncoderScorer | CrossEncoderScorer] = []


def transformer_calls() -> dict[str, int]:
    """Transformer calls made so far in this process by the process-wide scorers: ``{"bi": n, "cross": m}``
    (sentences embedded, pair orders scored). ``client.run(transformer_calls)`` asks every Dask worker."""
    out = {"bi": 0, "cross": 0}
    for scorer in _PROCESS_SCORERS:
        out["bi" if isinstance(scorer, BiEncoderScorer) else "cross"] += scorer.calls
    return out
