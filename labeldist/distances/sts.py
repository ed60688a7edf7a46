r"""Sentence relevance distance :math:`D(s,t) = 1 - R(s,t)` (Zhou et al., "Ladder Loss for Coherent
Visual-Semantic Embedding", AAAI 2020, §3.3), kind ``sentence_relevance``.

Four scorers (``scorer=``), each symmetric with :math:`R(s,s) = 1`: ``"cbow"`` (:math:`R_c`, the clipped cosine of
averaged word vectors); ``"bert"``, the default (:math:`R_B`, the model ``model`` alone, a bi-encoder or a
cross-encoder averaged over both orders); ``"coarse_to_fine"``, the paper's (:math:`R_B` where
:math:`R_c \ge \theta_c`, else :math:`R_c` with ``below="coarse"`` or 0 with ``below="zero"``); ``"cascade"`` (CBoW
gates the bi-encoder at :math:`\theta_c`, the bi-encoder gates the cross-encoder ``cross_model`` at
:math:`\theta_b`: a threshold, since each sentence's top C would be neither symmetric nor a function of the pair).
A sentence with no CBoW vector has CBoW relevance 0, and the gates send its pairs to BERT.
:meth:`SentenceRelevance.block` and :meth:`~SentenceRelevance.pairs` are thread-safe (the shared models and caches
are guarded in :mod:`labeldist.sts.scorers` and :mod:`labeldist.sts.models`). Thresholds: :mod:`labeldist.sts.cascade`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.distances.base import LabelDistance, Preparation
from labeldist.errors import UsageError
from labeldist.labels.base import LabelError
from labeldist.labels.sentences import Sentences
from labeldist.sts.cascade import DEFAULT_BELOW, DEFAULT_SCORER, check_below
from labeldist.sts.models import (
    PACKAGED,
    architecture,
    files_sha256,
    load_bi_encoder,
    load_cross_encoder,
    model_lock,
    model_spec,
    resolve_model,
    weights_sha256,
)
from labeldist.sts.onnx_backend import LEGACY_BACKEND, check_backend, default_backend
from labeldist.sts.scorers import (
    ENCODE_CHUNK,
    MAX_LENGTH,
    BiEncoderScorer,
    bi_encoder_scorer,
    cosine_relevance,
    cross_encoder_scorer,
    embedding_cache_dir,
    embedding_key,
    encode_chunk,
    encode_texts,
    file_sha256,
    load_checked,
    mean_vectors,
    same_text,
    save_embeddings,
    save_quietly,
    unit_rows,
)

SCORERS = ("cbow", "bert", "coarse_to_fine", "cascade")


def cbow_units(labels: Sentences) -> np.ndarray:
    """Unit-norm averaged word vectors of every sentence, (N, d) float64; zero for a sentence without one."""
    return unit_rows(mean_vectors(labels.tokens, labels.token_offsets, labels.vectors))


def cbow_gate(cbow: np.ndarray, undefined: np.ndarray, threshold: float) -> np.ndarray:
    """The pairs the CBoW gate lets through to BERT: CBoW relevance at or above ``threshold``, or undefined.

    >>> cbow_gate(np.array([0.9, 0.3, 0.0]), np.array([False, False, True]), 0.8).tolist()
    [True, False, True]
    """
    return (cbow >= threshold) | undefined


class SentenceRelevance(LabelDistance):
    r""":math:`D(s, t) = 1 - R(s, t) \in [0, 1]` under one of :data:`SCORERS` (see the module docstring).

    Parameters
    ----------
    scorer : str
        ``"cbow"``, ``"bert"`` (the default, :data:`~labeldist.sts.cascade.DEFAULT_SCORER`),
        ``"coarse_to_fine"`` or ``"cascade"``.
    model : str
        The BERT of ``"bert"`` / ``"coarse_to_fine"`` (bi- or cross-encoder), the bi-encoder of
        ``"cascade"``: a model folder (e.g. from ``labeldist sts fit``) or ``"all-MiniLM-L6-v2"`` (packaged).
    cbow_threshold : float or None
        :math:`\theta_c`, needed by ``"coarse_to_fine"`` and ``"cascade"``; calibrate it with
        :func:`labeldist.sts.cascade.calibrate_cbow_threshold`.
    below : str or None
        ``"zero"`` (the paper's code) or ``"coarse"`` (the paper's text): the relevance of a pair under a
        threshold; None: ``"zero"`` for coarse-to-fine, ``"coarse"`` for the cascade (:data:`DEFAULT_BELOW`).
    cross_model : str or None
        The cascade's cross-encoder.
    bert_threshold : float or None
        The cascade's bi-encoder gate :math:`\theta_b`.
    max_length : int
        Word pieces per model input (a sentence, or a pair for a cross-encoder); longer inputs are truncated,
        with a warning.
    model_sha256, cross_model_sha256 : str or None
        Digests of the weights; filled in when None, checked when given (a store made with a model that was
        retrained since cannot silently be reused or verified).
    calibration : dict or None
        How the thresholds were found (recorded only).
    backend : str or None
        What runs the bi-encoder (:data:`~labeldist.sts.onnx_backend.BACKENDS`): ``"onnx"`` (ONNX Runtime, 1.4-1.65x
        torch on a CPU) or ``"torch"``; None: :func:`~labeldist.sts.onnx_backend.default_backend` (onnx on a
        machine without CUDA). Used by a scorer that embeds with a bi-encoder, None otherwise (CBoW and the
        cross-encoder always run as they do); recorded in params when it is not torch.

    Examples
    --------
    >>> from labeldist.labels.sentences import sentences_from_texts
    >>> s = sentences_from_texts(["a", "b"], ["A red car.", "The car is red!"])  # same words, other order
    >>> SentenceRelevance("cbow").block(s, s).round(12).tolist()
    [[0.0, 0.0], [0.0, 0.0]]
    """

    kind = "sentence_relevance"
    # what costs is embedding each sentence not seen before: 10.4 ms a sentence measured by
    # benchmarks/bench_pair_cost.py (MiniLM on 2 cores), rounded up
    cost_per_call_s, cost_per_pair_s, cost_per_item_s = 200e-6, 1e-6, 12e-3
    # a long sentence is read and tokenized whole before the model truncates it: 9.5 us a byte measured on a
    # 149 KB sentence of unknown words (0.80 s read and CBoW, 0.61 s the model's tokenizer), rounded up
    cost_per_label_byte_s = 12e-6
    labels_class = Sentences

    def __init__(
        self,
        scorer: str = DEFAULT_SCORER,
        model: str = PACKAGED,
        cbow_threshold: float | None = None,
        below: str | None = None,
        cross_model: str | None = None,
        bert_threshold: float | None = None,
        max_length: int = MAX_LENGTH,
        model_sha256: str | None = None,
        cross_model_sha256: str | None = None,
        calibration: dict[str, Any] | None = None,
        backend: str | None = None,
    ) -> None:
        if scorer not in SCORERS:
            raise UsageError(f"unknown scorer {scorer!r}; known: {', '.join(SCORERS)}")
        if scorer in DEFAULT_BELOW:  # only the gated scorers have pairs under a threshold
            below = below or DEFAULT_BELOW[scorer]
            check_below(below)
        elif below is not None:
            check_below(below)
            below = None
        if scorer in ("coarse_to_fine", "cascade") and cbow_threshold is None:
            raise UsageError(f"scorer {scorer!r} needs cbow_threshold (calibrate it: labeldist sts calibrate)")
        if scorer == "cascade" and (cross_model is None or bert_threshold is None):
            raise UsageError("scorer 'cascade' needs cross_model and bert_threshold")
        if max_length < 8:
            raise UsageError(f"max_length must be at least 8 word pieces, got {max_length}")
        self.scorer, self.below, self.max_length = scorer, below, int(max_length)
        self.cbow_threshold = None if cbow_threshold is None else float(cbow_threshold)
        self.bert_threshold = None if bert_threshold is None else float(bert_threshold)
        self.calibration = calibration
        self.model = self.model_sha256 = self.cross_model = self.cross_model_sha256 = None
        #: embedding files this job's process checked (or wrote) -> their SHA-256: a worker takes a file with that
        #: digest without loading the model to spot-check it (:func:`~labeldist.sts.scorers.load_checked`)
        self.checked_files: dict[str, str] = {}
        if scorer != "cbow":
            self.model, self.model_sha256 = _checked_model(model, model_sha256)
            if scorer == "cascade" and architecture(resolve_model(self.model)) != "bi":
                raise UsageError(f"the cascade's first model must be a bi-encoder; {self.model} is a cross-encoder")
        if scorer == "cascade":
            self.cross_model, self.cross_model_sha256 = _checked_model(cross_model, cross_model_sha256)
            if architecture(resolve_model(self.cross_model)) != "cross":
                raise UsageError(f"the cascade's cross_model must be a cross-encoder; {self.cross_model} is not")
        self.backend = None
        if scorer != "cbow" and architecture(resolve_model(self.model)) == "bi":
            self.backend = check_backend(backend or default_backend())

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> SentenceRelevance:
        """A store's distance from its manifest's params: one that records no backend was embedded by torch (the
        only backend before there were two), and is rebuilt so."""
        return cls(**{"backend": LEGACY_BACKEND, **params})

    def params(self) -> dict[str, Any]:
        """The parameters; ``backend`` only where it is not torch, so that a store embedded by torch records what
        every store before backends recorded (and is still reused and resumed)."""
        backend = {} if self.backend in (None, LEGACY_BACKEND) else {"backend": self.backend}
        return {
            "scorer": self.scorer,
            "model": self.model,
            "cbow_threshold": self.cbow_threshold,
            "below": self.below,
            "cross_model": self.cross_model,
            "bert_threshold": self.bert_threshold,
            "max_length": self.max_length,
            "model_sha256": self.model_sha256,
            "cross_model_sha256": self.cross_model_sha256,
            "calibration": self.calibration,
            **backend,
        }

    @classmethod
    def meaning(cls, params: dict[str, Any]) -> str:
        scorer, model = params.get("scorer", "bert"), params.get("model") or "all-MiniLM-L6-v2 (packaged)"
        by = {
            "cbow": "the cosine of the sentences' mean GloVe vectors (CBoW)",
            "bert": f"the sentence model {model}",
            "coarse_to_fine": f"CBoW, then the sentence model {model} for pairs above the CBoW threshold",
            "cascade": f"CBoW, then the bi-encoder {model}, then the cross-encoder for the pairs that pass",
        }.get(scorer, f"the {scorer} scorer")
        return f"1 - relevance of the two sentences, scored by {by} (0: as relevant as can be, 1: unrelated)"

    def check_labels(self, labels: Sentences, others: Sentences | None = None) -> None:
        """A sentence searched against ``others`` (a store's) with no word that has a vector, under the CBoW scorer
        alone, would be at distance 1 from every sentence: refused, naming it. (A store's own such sentences are
        the ``empty`` policy's, checked as they are read.)"""
        if others is None or self.scorer != "cbow" or labels.cbow_defined.all():
            return
        text = labels.texts[int(np.argmin(labels.cbow_defined))]
        raise LabelError(
            f"the sentence {text[:80]!r} has no word with a vector, and this store scores by CBoW alone: it would "
            "be at distance 1 from every sentence; use words the word vectors know"
        )

    def search_cost_s(self, labels: Sentences) -> float | None:
        """One new sentence against ``labels``: its CBoW against every sentence, and the models' calls. A
        bi-encoder embeds the new sentence, and the store's sentences too unless their embeddings are at hand (in
        memory, or in :func:`~labeldist.sts.scorers.embedding_cache_dir`, where the store's precompute left them:
        loaded now); a cross-encoder may score every pair, both ways."""
        n = len(labels)
        cost = self.cost_per_call_s + n * self.cost_per_pair_s
        models = {"cbow": [], "cascade": [self.model, self.cross_model]}.get(self.scorer, [self.model])
        for model in models:
            if architecture(resolve_model(model)) == "bi":
                cost += (1 + (0 if self._store_embedded(labels, model) else n)) * self.cost_per_item_s
            else:
                cost += 2 * n * self.cost_per_item_s
        return cost

    def _store_embedded(self, labels: Sentences, model: str) -> bool:
        """Whether the embeddings of every sentence of ``labels`` under the bi-encoder ``model`` are in its
        scorer's memory, after loading them from the embedding cache where a precompute left them."""
        scorer = bi_encoder_scorer(resolve_model(model), self.max_length, self.backend)
        texts = sorted(set(labels.texts))
        return scorer.has(texts) or self._load_cached(scorer, model, texts)

    def _cache_file(self, model: str, texts: list[str]) -> Path:
        """Where the embeddings of ``texts`` (in this order) under ``model`` are kept between processes."""
        digest = self.model_sha256 if model == self.model else self.cross_model_sha256
        return embedding_cache_dir() / f"{embedding_key(digest or '', self.max_length, texts, self.backend)}.npy"

    def _load_cached(self, scorer: BiEncoderScorer, model: str, texts: list[str]) -> bool:
        """Load the embeddings of ``texts`` into ``scorer`` from :meth:`_cache_file`; whether the file was there."""
        return scorer.load(texts, self._cache_file(model, texts))

    # ------------------------------------------------------------------ blocks and pairs
    def relevance(self, rows: Sentences, cols: Sentences) -> np.ndarray:
        """(len(rows), len(cols)) relevance :math:`R`, float64 in [0, 1]."""
        a, b = rows.texts, cols.texts

        def fine(gate: np.ndarray, model: str) -> np.ndarray:
            return self._fine_matrix(a, b, gate, model)

        if self.scorer == "bert":
            out = fine(np.ones((len(a), len(b)), dtype=bool), self.model)
        else:
            undefined = ~(rows.cbow_defined[:, None] & cols.cbow_defined[None, :])
            out = self._refine(cosine_relevance(cbow_units(rows), cbow_units(cols)), undefined, fine)
        out[same_text(a, b)] = 1.0
        return out

    def pair_relevance(self, labels: Sentences, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Relevance of the index pairs ``(i[t], j[t])`` of ``labels``, batched: what an on-demand look-up needs."""
        i, j = np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)
        a, b = [labels.texts[x] for x in i], [labels.texts[y] for y in j]

        def fine(gate: np.ndarray, model: str) -> np.ndarray:
            out = np.full(gate.shape, np.nan)
            t = np.flatnonzero(gate)
            out[t] = self._fine_pairs([a[x] for x in t], [b[x] for x in t], model)
            return out

        if self.scorer == "bert":
            out = fine(np.ones(len(a), dtype=bool), self.model)
        else:
            units, defined = cbow_units(labels), labels.cbow_defined
            cbow = np.clip(np.sum(units[i] * units[j], axis=1), 0.0, 1.0)
            out = self._refine(cbow, ~(defined[i] & defined[j]), fine)
        out[np.array([x == y for x, y in zip(a, b)], dtype=bool)] = 1.0
        return out

    def _refine(self, cbow: np.ndarray, undefined: np.ndarray, fine: Any) -> np.ndarray:
        """Gate ``cbow`` at the CBoW threshold, then (cascade) the bi-encoder at the BERT threshold.

        ``undefined`` marks the pairs with a sentence that has no CBoW vector (their ``cbow`` is 0): the CBoW
        scorer keeps that 0, the gate lets them through. ``fine(gate, model)`` returns the model's relevance
        where ``gate`` is true; nothing else is scored.
        """
        if self.scorer == "cbow":
            return cbow
        gate = cbow_gate(cbow, undefined, self.cbow_threshold)
        out = np.where(gate, np.nan, cbow if self.below == "coarse" else 0.0)
        out[gate] = fine(gate, self.model)[gate]
        if self.scorer == "cascade":
            gate &= out >= self.bert_threshold
            if self.below == "zero":
                out[~gate] = 0.0
            out[gate] = fine(gate, self.cross_model)[gate]
        return out

    def _fine_matrix(self, a: list[str], b: list[str], gate: np.ndarray, model: str) -> np.ndarray:
        """Relevance under ``model`` where ``gate`` is true (NaN elsewhere); BERT sees gated pairs only."""
        path = resolve_model(model)
        out = np.full(gate.shape, np.nan)
        if architecture(path) == "bi":
            r, c = np.flatnonzero(gate.any(axis=1)), np.flatnonzero(gate.any(axis=0))
            if len(r):
                scorer = bi_encoder_scorer(path, self.max_length, self.backend)
                # One embedding per sentence, all texts of both sides in one canonical order: the engine asks
                # (row block, all items), so every worker embeds the same batches and a store is reproducible
                # to the bit. A pair under the gate costs no transformer call either way, only a dot product.
                # The columns first (a store's items in a search, the job's file): only the rows they lack are
                # then embedded, not every item of a store searched by a sentence it does not hold.
                self._embed_all(scorer, model, sorted(set(b)))
                self._embed_all(scorer, model, sorted(set(a) | set(b)))
                out[np.ix_(r, c)] = scorer.relevance([a[i] for i in r], [b[j] for j in c])
        else:
            i, j = np.nonzero(gate)
            scorer = cross_encoder_scorer(path, self.max_length)
            out[i, j] = scorer.pair_relevance([a[t] for t in i], [b[t] for t in j])
        return np.where(gate, out, np.nan)

    def _embed_all(self, scorer: BiEncoderScorer, model: str, texts: list[str]) -> None:
        """Embed ``texts`` into the scorer's cache, from the file the job's preparation left when it is there: a
        block then reads the values the blocked search reads (:mod:`labeldist.distances.sts_knn`), whatever this
        process embedded before."""
        file = self._cache_file(model, texts)
        if file in scorer.loaded:
            return
        if not scorer.load(texts, file, self.checked_files.get(str(file))) and not scorer.has(texts):
            scorer.embed(texts)

    def prepare(self, labels: Sentences) -> None:
        """The engine's once-per-job hook: :meth:`embed_once` (nothing left to do after :meth:`preparation`)."""
        self.embed_once(labels)

    def _embeds(self) -> bool:
        """Whether this scorer reads a bi-encoder's embeddings of every sentence."""
        return self.scorer in ("bert", "coarse_to_fine") and architecture(resolve_model(self.model)) == "bi"

    def preparation(self, labels: Sentences) -> Preparation | None:
        """Every distinct sentence embedded once, as tasks of :data:`~labeldist.sts.scorers.ENCODE_CHUNK` sorted
        texts on the job's workers (:func:`~labeldist.sts.scorers.encode_chunk`), into the file the blocks read
        (:meth:`_cache_file`); None when the scorer reads no embeddings or the file is there already."""
        if not self._embeds():
            return None
        self._exported()
        texts = labels.text_ids[0]
        file = self._cache_file(self.model, texts)
        if load_checked(file, texts, resolve_model(self.model), self.max_length, backend=self.backend) is not None:
            self.checked_files[str(file)] = file_sha256(file)  # the workers take it by its digest
            return None
        chunks = [texts[i : i + ENCODE_CHUNK] for i in range(0, len(texts), ENCODE_CHUNK)]

        def finish(results: list[np.ndarray]) -> None:
            save_embeddings(results, file)
            self.checked_files[str(file)] = file_sha256(file)

        return Preparation(
            what=f"{self.kind}: embedding",
            function=encode_chunk,
            items=chunks,
            kwargs={"path": resolve_model(self.model), "max_length": self.max_length, "backend": self.backend},
            sizes=[len(c) for c in chunks],
            unit="sentence",
            finish=finish,
            visible=functools.partial(os.path.isfile, str(file)),
            unseen=f"cannot see {file}: it will embed all {len(texts):,} sentences itself (point LABELDIST_CACHE "
            "at a folder every worker sees)",
        )

    def _exported(self) -> None:
        """Under the onnx backend, the model's export made here, once, before any worker needs it: workers that
        found none would each export it at once (torch loaded in each, tens of seconds on a busy machine)."""
        if self.backend == "onnx":
            from labeldist.sts.onnx_backend import onnx_model_file

            onnx_model_file(resolve_model(self.model))

    def embed_once(self, labels: Sentences) -> Path | None:
        """Embed every distinct sentence of ``labels`` here, once (:func:`~labeldist.sts.scorers.encode_texts`,
        all of this machine's cores), into :func:`~labeldist.sts.scorers.embedding_cache_dir` for the engine's
        workers, unless the file is there. Returns the file, or None when the scorer uses no bi-encoder."""
        if not self._embeds():
            return None
        texts = labels.text_ids[0]
        file = self._cache_file(self.model, texts)
        known = self.checked_files.get(str(file))
        path = resolve_model(self.model)
        if load_checked(file, texts, path, self.max_length, known, self.backend) is None:
            save_embeddings(encode_texts(path, self.max_length, texts, backend=self.backend), file)
            self.checked_files[str(file)] = file_sha256(file)
        elif known is None:  # checked just now by the model: the workers take it by its digest
            self.checked_files[str(file)] = file_sha256(file)
        return file

    def text_embeddings(self, texts: list[str]) -> np.ndarray:
        """The (len(texts), d) float32 unit embeddings of the sorted distinct ``texts``, memory-mapped from the
        file the job's preparation left; where this process cannot see it, embedded here, saying so."""
        file = self._cache_file(self.model, texts)
        there = os.path.lexists(file)
        path = resolve_model(self.model)
        values = load_checked(file, texts, path, self.max_length, self.checked_files.get(str(file)), self.backend)
        if values is not None:
            return values
        if not there:
            from labeldist.distances.sts_knn import warn_embedding_here

            warn_embedding_here(len(texts), file)
        values = encode_texts(path, self.max_length, texts, backend=self.backend)
        save_quietly(values, file)
        return values

    def knn_block(self, labels: Sentences, start: int, stop: int, k: int) -> tuple[np.ndarray, np.ndarray, int] | None:
        """Blocked matrix products with exact candidates (:func:`labeldist.distances.sts_knn.search_block`) for
        CBoW, a bi-encoder and coarse-to-fine over one; None for a cross-encoder (its pairs are scored one by
        one, the whole rows)."""
        if not (self.scorer == "cbow" or self._embeds()):
            return None
        from labeldist.distances.sts_knn import search_block

        return search_block(self, labels, start, stop, k)

    def knn_block_rows(self, labels: Sentences) -> int | None:
        if not (self.scorer == "cbow" or self._embeds()):
            return None
        from labeldist.distances.sts_knn import SEARCH_ROWS

        return max(1, min(SEARCH_ROWS, -(-len(labels) // 8)))

    def _fine_pairs(self, a: list[str], b: list[str], model: str) -> np.ndarray:
        """Relevance under ``model`` of each pair ``(a[t], b[t])``."""
        path = resolve_model(model)
        if architecture(path) == "cross":
            return cross_encoder_scorer(path, self.max_length).pair_relevance(a, b)
        scorer = bi_encoder_scorer(path, self.max_length, self.backend)
        scorer.embed(sorted(set(a) | set(b)))
        out = np.clip(np.sum(scorer.embed(a) * scorer.embed(b), axis=1), 0.0, 1.0) if a else np.zeros(0)
        out[np.array([x == y for x, y in zip(a, b)], dtype=bool)] = 1.0
        return out

    def block(self, rows: Sentences, cols: Sentences) -> np.ndarray:
        return 1.0 - self.relevance(rows, cols)

    def pairs(self, labels: Sentences, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        return 1.0 - self.pair_relevance(labels, i, j)

    # ------------------------------------------------------------------ the slow oracle
    def reference(self, a: Sentences, i: int, b: Sentences, j: int) -> float:
        s, t = a.texts[i], b.texts[j]
        if s == t:
            return 0.0
        if self.scorer == "bert":  # BERT alone: the word vectors are never read
            return 1.0 - _pair_relevance(self.model, self.max_length, s, t)
        wa = a.tokens[a.token_offsets[i] : a.token_offsets[i + 1]]
        wb = b.tokens[b.token_offsets[j] : b.token_offsets[j + 1]]
        undefined = len(wa) == 0 or len(wb) == 0  # a sentence without CBoW vector: relevance 0, gate passed
        r = 0.0
        if not undefined:
            va, vb = (np.mean(v.astype(np.float64), axis=0) for v in (a.vectors[wa], b.vectors[wb]))
            r = min(max(float(va @ vb) / float(np.linalg.norm(va) * np.linalg.norm(vb)), 0.0), 1.0)
        stages = {"cbow": [], "coarse_to_fine": [self.model]}.get(self.scorer, [self.model, self.cross_model])
        for model, threshold in zip(stages, [self.cbow_threshold, self.bert_threshold]):
            if r < threshold and not undefined:
                return 1.0 - (r if self.below == "coarse" else 0.0)
            r, undefined = _pair_relevance(model, self.max_length, s, t), False
        return 1.0 - r


def _checked_model(model: str | None, sha256: str | None) -> tuple[str, str]:
    """The model's spec and the digest of its folder (:func:`~labeldist.sts.models.files_sha256`); ValueError when
    ``sha256`` (a store's record) names another. A store of an earlier release recorded the weights' digest alone
    (:func:`~labeldist.sts.models.weights_sha256`): it is still accepted, and checks the weights only."""
    spec = model_spec(model)
    path = resolve_model(spec)
    digest = files_sha256(path)
    if sha256 is None or sha256 == digest:
        return spec, digest
    if sha256 == weights_sha256(path):
        return spec, sha256
    raise UsageError(
        f"model {spec}: its files changed (sha256 {digest[:12]}..., expected {sha256[:12]}...): the weights, the "
        "tokenizer, the pooling or another of its files is not what the store was built with; rebuild the store"
    )


@functools.lru_cache(maxsize=4096)
def _embedding_alone(path: Path, max_length: int, text: str) -> np.ndarray:
    """The embedding of one sentence encoded on its own (no batch, no padding), float64."""
    model = load_bi_encoder(path, max_length)
    with model_lock(model):  # verify may run beside request threads that use the same model
        return model.encode([text], batch_size=1, convert_to_numpy=True)[0].astype(np.float64)


def _pair_relevance(model: str, max_length: int, s: str, t: str) -> float:
    """One pair, one plain model call per sentence or per order: the oracle of the batched scorers."""
    path = resolve_model(model)
    if architecture(path) == "bi":
        e, f = _embedding_alone(path, max_length, s), _embedding_alone(path, max_length, t)
        return min(max(float(e @ f) / float(np.linalg.norm(e) * np.linalg.norm(f)), 0.0), 1.0)
    model = load_cross_encoder(path, max_length)
    with model_lock(model):
        scores = model.predict([(s, t), (t, s)], batch_size=1, convert_to_numpy=True)
    return float((float(scores[0]) + float(scores[1])) / 2.0)
