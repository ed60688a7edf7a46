"""The bi-encoder through ONNX Runtime: the sentence model exported once to ONNX, run by its CPU kernels.

A sentence embedding is :math:`f(s)`, the bi-encoder's pooled (and, for all-MiniLM-L6-v2, normalised) output
(Sentence-BERT, Reimers and Gurevych, EMNLP 2019). The whole ``SentenceTransformer`` (transformer, pooling,
normalisation: whatever its modules.json lists) is traced once with ``torch.onnx.export`` and run by ONNX Runtime,
whose fused CPU kernels embed COCO captions 1.4x as fast as torch's ``encode`` in one process on two cores, 1.65x
on a job's two one-core workers (``benchmarks/floors.py``). The values equal torch's to about 3e-7 a component
(other kernels, other roundings).

The export is cached under :func:`onnx_cache_dir` ``/<model digest>-v<ONNX_FORMAT>/model.onnx``, keyed by
:func:`~labeldist.sts.models.files_sha256` of the model folder, so a model retrained in place is exported again;
never inside the model folder (its digest is the store's record of the model, and the packaged model lies in
site-packages). Nothing is fetched: the tokenizer is the folder's own, read with ``local_files_only``.

Which backend embeds is a parameter of the sentence distance (``backend``, recorded in the store's manifest):
:func:`default_backend` is ``"onnx"`` on a machine without CUDA when onnxruntime is installed, else ``"torch"``
(on a GPU, torch's CUDA kernels).
"""

from __future__ import annotations

import json
import logging
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.core.files import written_whole
from labeldist.core.options import check_regular_file
from labeldist.core.threads import thread_budget, usable_cores
from labeldist.errors import UsageError
from labeldist.sts.models import (
    cache_root,
    cached_once,
    file_sha256,
    files_sha256,
    offline,
    truncation_warning,
)

#: the backends a bi-encoder can embed with
BACKENDS = ("onnx", "torch")
#: what a store records when its manifest names no backend: every store before backends existed used torch
LEGACY_BACKEND = "torch"
#: bumped when the export changes what it writes, so that a cached file of another export is never read
ONNX_FORMAT = 1
#: the opset of the export (ONNX Runtime 1.17 and later run it)
OPSET = 17
#: word pieces of the torch model traced and checked (the export itself takes any length its positions allow)
EXPORT_LENGTH = 256

log = logging.getLogger(__name__)


def onnx_installed() -> bool:
    """Whether onnxruntime can be imported here."""
    import importlib.util

    return importlib.util.find_spec("onnxruntime") is not None


def cuda_present() -> bool:
    """Whether a CUDA device is here: torch's answer where torch is imported already, else whether the NVIDIA
    driver's device files are there (importing torch costs seconds a process that embeds by ONNX never needs)."""
    import glob
    import sys

    if "torch" in sys.modules:
        return bool(sys.modules["torch"].cuda.is_available())
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def default_backend() -> str:
    """``"torch"`` where a CUDA device is present (its kernels there beat any CPU), else ``"onnx"`` where
    onnxruntime is installed, else ``"torch"``."""
    if cuda_present() or not onnx_installed():
        return "torch"
    return "onnx"


def check_backend(backend: str) -> str:
    """``backend`` if it is one of :data:`BACKENDS` and can run here; a ValueError saying what to do otherwise."""
    if backend not in BACKENDS:
        raise UsageError(f"unknown sentence model backend {backend!r}; known: {', '.join(BACKENDS)}")
    if backend == "onnx" and not onnx_installed():
        raise UsageError(
            "backend 'onnx' needs onnxruntime (pip install onnxruntime, part of the [sts] extra); or choose "
            "--backend torch"
        )
    return backend


def onnx_cache_dir() -> Path:
    """Where exported models are kept: ``$LABELDIST_ONNX_CACHE`` where set, else ``$LABELDIST_CACHE/onnx``
    (default ``~/.cache/labeldist/onnx``). An export depends on the model alone, so jobs with caches of their own
    may share one folder of exports."""
    if os.environ.get("LABELDIST_ONNX_CACHE"):
        return Path(os.environ["LABELDIST_ONNX_CACHE"])
    return cache_root() / "onnx"


def onnx_model_file(path: Path) -> Path:
    """The ONNX export of the bi-encoder at ``path``, exported now (a few seconds) unless cached
    (:func:`onnx_cache_dir`, keyed by the model folder's digest and :data:`ONNX_FORMAT`) and whole: a cached file
    whose digest is not the one its export recorded beside it (``model.onnx.json``) is exported again, with a
    warning."""
    file = onnx_cache_dir() / f"{files_sha256(path)[:32]}-v{ONNX_FORMAT}" / "model.onnx"
    if os.path.lexists(file):
        problem = cached_export_problem(file)
        if problem is None:
            return file
        warnings.warn(f"{file}: {problem}; exporting the model again", stacklevel=2)
    export_onnx(path, file)
    return file


def record_file(file: Path) -> Path:
    """The record an export leaves beside ``file``: its SHA-256 and the largest difference from torch found."""
    return file.with_name(file.name + ".json")


def cached_export_problem(file: Path) -> str | None:
    """What is wrong with the cached export ``file`` (not a regular file, no record, another digest), or None."""
    if os.path.islink(file) or os.path.islink(record_file(file)):
        return "a link, not a file an export wrote (never read through)"
    try:
        check_regular_file(file, "cached ONNX model")
        check_regular_file(record_file(file), "record of a cached ONNX model")
        recorded = json.loads(record_file(file).read_text()).get("sha256")
    except (OSError, ValueError) as err:
        return f"not a usable cached export ({err})"
    if recorded != file_sha256(file):
        return "its contents are not what its export wrote (another digest)"
    return None


def model_inputs(path: Path) -> list[str]:
    """The inputs the model's tokenizer makes, in the order the export names them (input_ids, attention_mask,
    and token_type_ids for a BERT)."""
    names = list(load_tokenizer(path).model_input_names)
    return [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in names]


def export_onnx(path: Path, file: Path) -> None:
    """Trace the SentenceTransformer at ``path`` (all its modules) into ``file``, atomically (written aside, then
    renamed: two processes exporting at once each leave a whole file). Attention is traced in its eager form,
    the pattern ONNX Runtime fuses; batch and sequence axes are dynamic."""
    import torch
    from sentence_transformers import SentenceTransformer

    started = time.perf_counter()
    offline()
    # a copy of its own on the CPU: the process's shared model may be on a GPU, and its attention is switched here
    model = SentenceTransformer(str(path), device="cpu", local_files_only=True).eval()
    model.max_seq_length = EXPORT_LENGTH
    names = model_inputs(path)

    class Embed(torch.nn.Module):
        """The sentence model's forward from positional tensors to its ``sentence_embedding``."""

        def __init__(self, st: Any) -> None:
            super().__init__()
            self.st = st

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            return self.st(dict(zip(names, tensors)))["sentence_embedding"]

    sample = load_tokenizer(path)(["a man rides a horse", "two dogs"], padding=True, return_tensors="pt")
    transformer = model[0].auto_model
    previous = getattr(transformer.config, "_attn_implementation", None)
    file.parent.mkdir(parents=True, exist_ok=True)
    try:
        if hasattr(transformer, "set_attn_implementation"):
            transformer.set_attn_implementation("eager")
        with written_whole(file) as aside, torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on shape-dependent Python branches
            torch.onnx.export(
                Embed(model).eval(),
                tuple(sample[n] for n in names),
                str(aside),
                input_names=names,
                output_names=["sentence_embedding"],
                dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names}, "sentence_embedding": {0: "batch"}},
                opset_version=OPSET,
                dynamo=False,
            )
    finally:
        if previous is not None and hasattr(transformer, "set_attn_implementation"):
            transformer.set_attn_implementation(previous)
    difference = export_difference(path, file, model)
    if not difference <= EXPORT_TOLERANCE:
        os.unlink(file)
        raise UsageError(
            f"{path}: its ONNX export differs from the torch model by {difference:.2g} on test sentences (more than "
            f"{EXPORT_TOLERANCE:g}); embed with --backend torch"
        )
    record = {"sha256": file_sha256(file), "model": str(path), "max_difference": difference, "opset": OPSET}
    with written_whole(record_file(file)) as aside:
        aside.write_text(json.dumps(record, indent=1))
    log.info("exported %s to ONNX (%s) in %.1f s", path, file, time.perf_counter() - started)


#: the largest difference, a component of a unit embedding, between the export and torch on :data:`PROBES`
EXPORT_TOLERANCE = 1e-4
#: sentences of other lengths the export is checked on against the torch model
PROBES = (
    "A man with a red helmet on a small moped on a dirt road.",
    "two dogs",
    "A young girl inhales with the intent of blowing out a candle, while her family watches from the kitchen "
    "table and someone takes a photograph.",
)


def export_difference(path: Path, file: Path, model: Any) -> float:
    """The largest absolute difference between the unit embeddings of :data:`PROBES` by the export at ``file``
    and by the torch ``model`` (both in one batch, and each alone)."""
    encoder = OnnxEncoder(path, EXPORT_LENGTH, start_session(file, onnx_threads()))
    worst = 0.0
    for batch in (list(PROBES), *([p] for p in PROBES)):
        ours = encoder.encode(batch)
        theirs = model.encode(batch, convert_to_numpy=True, show_progress_bar=False)
        unit = [x / np.linalg.norm(x, axis=1, keepdims=True) for x in (ours, theirs)]
        worst = max(worst, float(np.abs(unit[0] - unit[1]).max()))
    return worst


@cached_once(maxsize=8)
def load_tokenizer(path: Path) -> Any:
    """The model folder's own fast tokenizer (``transformers.AutoTokenizer``, local files only)."""
    offline()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def lower_case(path: Path) -> bool:
    """Whether the model lower-cases its input before tokenizing (sentence_bert_config.json's do_lower_case, as
    sentence-transformers' Transformer module reads it)."""
    config = path / "sentence_bert_config.json"
    return bool(json.loads(config.read_text()).get("do_lower_case")) if config.is_file() else False


#: the inputs a BERT-like export takes, and the field of a ``tokenizers.Encoding`` that fills each
ENCODING_FIELDS = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}


class FastTokenizer:
    """The model folder's ``tokenizer.json`` run by the ``tokenizers`` library itself: what transformers' fast
    tokenizer wraps, without importing transformers (and so torch) in a worker that only embeds.

    Two copies of the Rust tokenizer, each set once and never changed (so threads may share them): one truncating
    to ``max_length`` word pieces (longest first, as transformers does), one not, to count a long text's pieces
    for the warning. The file's own padding and truncation settings are replaced.
    """

    def __init__(self, path: Path, max_length: int) -> None:
        from tokenizers import Tokenizer

        file = path / "tokenizer.json"
        if not file.is_file():
            raise UsageError(
                f"{path}: no tokenizer.json, which the onnx backend reads (a model saved by sentence-transformers "
                "with a fast tokenizer has one); embed with --backend torch"
            )
        check_regular_file(file, "tokenizer file of a sentence model")
        self.cut, self.whole = Tokenizer.from_file(str(file)), Tokenizer.from_file(str(file))
        for tokenizer in (self.cut, self.whole):
            tokenizer.no_padding()
            tokenizer.no_truncation()
        self.cut.enable_truncation(max_length)
        self.max_length = max_length
        self.pad_id = pad_id(path, self.cut)

    def encode(self, texts: list[str]) -> list[Any]:
        """The ``tokenizers.Encoding`` of each text, special tokens added, truncated to ``max_length`` with a
        warning naming the first text that was (:func:`~labeldist.sts.models.truncation_warning`)."""
        encoded = self.cut.encode_batch(texts)
        long = [i for i, e in enumerate(encoded) if e.overflowing]
        if long:
            pieces = len(self.whole.encode(texts[long[0]]).ids)
            warnings.warn(truncation_warning(len(long), self.max_length, texts[long[0]], pieces), stacklevel=4)
        return encoded


def pad_id(path: Path, tokenizer: Any) -> int:
    """The id of the model's padding token: tokenizer_config.json's ``pad_token``, else ``[PAD]``, else 0 (the
    attention mask hides padding either way; the same id keeps the inputs those of transformers)."""
    config = path / "tokenizer_config.json"
    token = json.loads(config.read_text()).get("pad_token") if config.is_file() else None
    if isinstance(token, dict):
        token = token.get("content")
    found = tokenizer.token_to_id(token) if isinstance(token, str) else tokenizer.token_to_id("[PAD]")
    return int(found) if found is not None else 0


class OnnxEncoder:
    """A bi-encoder run by ONNX Runtime, with ``encode`` as a SentenceTransformer has it.

    ``encode`` does what sentence-transformers' does before the model: strips each text (lower-cases it where
    the model does), tokenizes with truncation to ``max_length`` word pieces (:class:`FastTokenizer`), and
    batches texts of equal length (sorted by their number of word pieces: almost no padding), then puts the rows
    back in order.
    """

    def __init__(self, path: Path, max_length: int, session: Any) -> None:
        self.path, self.max_length, self.session = path, max_length, session
        self.tokenizer = FastTokenizer(path, max_length)
        self.lower = lower_case(path)
        self.inputs = [i.name for i in session.get_inputs()]
        unknown = set(self.inputs) - set(ENCODING_FIELDS)
        if unknown:
            raise UsageError(f"{path}: its ONNX export takes {sorted(unknown)}, which no tokenizer gives")

    def encode(self, texts: Sequence[str], batch_size: int = 64, **_: Any) -> np.ndarray:
        """(len(texts), d) float32 embeddings, the model's output for each text (the keyword arguments of
        ``SentenceTransformer.encode`` that change nothing here are accepted and ignored)."""
        texts = [str(t).strip() for t in texts]
        if self.lower:
            texts = [t.lower() for t in texts]
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        encoded = self.tokenizer.encode(texts)
        lengths = np.array([len(e.ids) for e in encoded])
        order = np.argsort(-lengths, kind="stable")
        out: np.ndarray | None = None
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            width = int(lengths[rows].max())
            feed = {}
            for name in self.inputs:
                field = ENCODING_FIELDS[name]
                fill = self.tokenizer.pad_id if name == "input_ids" else 0
                array = np.full((len(rows), width), fill, dtype=np.int64)
                for r, t in enumerate(rows):
                    array[r, : lengths[t]] = getattr(encoded[t], field)
                feed[name] = array
            emb = self.session.run(None, feed)[0]
            if out is None:
                out = np.empty((len(texts), emb.shape[1]), dtype=np.float32)
            out[rows] = emb
        return out


def start_session(file: Path, threads: int) -> Any:
    """An ONNX Runtime CPU session of ``file`` on ``threads`` threads (one operator at a time: a transformer's
    are a chain), every graph optimisation on."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: its notes on unused initializers are not the user's
    return ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])


def onnx_threads() -> int:
    """The threads one ONNX Runtime session may run: the engine's budget for the task at hand
    (:func:`~labeldist.core.threads.thread_budget`), else every core this process may run on."""
    budget = thread_budget()
    return usable_cores() if budget is None else budget


@cached_once(maxsize=8)
def load_onnx_encoder(path: Path, max_length: int, threads: int) -> OnnxEncoder:
    """The process's :class:`OnnxEncoder` of the model at ``path``, loaded once for each thread count."""
    started = time.perf_counter()
    file = onnx_model_file(path)
    encoder = OnnxEncoder(path, max_length, start_session(file, threads))
    log.info("loaded the sentence model %s in %.1f s (ONNX Runtime: %s)", path, time.perf_counter() - started, file)
    return encoder
