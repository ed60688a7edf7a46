"""Retrieval evaluation against label distances, and the figures of Kim et al. (Fig. 3: nDCG@K and mean
label distance against K).

Queries and gallery are items of one (test) store; the label distances from each query to every gallery item
come from the service (``POST /v1/stores/{store}/distances``), the embeddings from a checkpoint's model over
the store's feature array or images, or, untrained, the features themselves or a backbone as initialised
(random, or ``--weights``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from labeldist.client import FeatureInputs, InputError, LabelDistClient
from labeldist.core.reading import SPLIT_FILE_BYTES, read_regular
from labeldist.errors import UsageError
from labeldist.trainer.training.checkpoints import CheckpointError, describe_model
from labeldist.trainer.training.metrics import retrieval_metrics
from labeldist.trainer.training.models import load_checkpoint
from labeldist.trainer.training.runtime import autocast, default_loader_workers, pick_device

#: the K at which summaries (RESULTS.md tables) report each curve
SUMMARY_K = (1, 5, 10, 20, 50, 100)
#: the untrained model over images when no --backbone or --embedding-dim is given
UNTRAINED_BACKBONE, UNTRAINED_DIM = "resnet34", 128


@torch.no_grad()
def embed(model: torch.nn.Module, features: np.ndarray, device: torch.device, batch: int = 4096) -> np.ndarray:
    """Embeddings of every row of ``features`` (float32, in eval mode)."""
    model = model.to(device).eval()
    out = [
        model(torch.from_numpy(features[i : i + batch]).to(device)).float().cpu()
        for i in range(0, len(features), batch)
    ]
    return torch.cat(out).numpy()


@dataclass
class ImageSource:
    """The test store's images (see :func:`labeldist.trainer.inputs.images.image_paths`), decoded by ``workers``
    processes."""

    root: str
    pattern: str | None = None
    index: str | None = None
    input_size: int | None = None
    workers: int | None = None
    #: "resize" (the image as rendered) or "center_crop" (the ImageNet eval); None: what the checkpoint was
    #: trained for (its augmentation's), "resize" for an untrained network
    transform: str | None = None


class _Items(torch.utils.data.Dataset):
    def __init__(self, inputs: Any, indices: np.ndarray) -> None:
        self.inputs, self.indices = inputs, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, j: int) -> torch.Tensor:
        return self.inputs(self.indices[j : j + 1])[0]


@torch.no_grad()
def embed_images(
    model: torch.nn.Module,
    inputs: Any,
    indices: np.ndarray,
    device: torch.device,
    *,
    workers: int,
    batch: int = 256,
    progress: bool | None = False,
) -> np.ndarray:
    """Embeddings (float32) of the images of ``indices`` (eval transform), decoded by ``workers`` processes;
    ``progress`` as :func:`labeldist.core.progress.progress_bar`'s ``enabled``."""
    from labeldist.client.loader import PASSED_ON, worker_message
    from labeldist.core.progress import progress_bar

    model = model.to(device).eval()
    amp, _ = autocast(device)
    loader = torch.utils.data.DataLoader(
        _Items(inputs, indices), batch_size=batch, num_workers=workers, pin_memory=device.type == "cuda"
    )
    out = []
    try:
        with progress_bar(len(indices), "eval: embedding images", unit="img", units="images", enabled=progress) as bar:
            for images in loader:
                with amp:
                    out.append(model(images.to(device, non_blocking=True)).float().cpu())
                bar.update(len(images))
    except PASSED_ON as e:  # a worker's error: its own line, not the worker's traceback
        raise type(e)(worker_message(e)) from None
    return torch.cat(out).numpy()


def checkpoint_model(
    path: str,
    *,
    images: bool,
    backbone: str | None = None,
    embedding_dim: int | None = None,
    features: int | None = None,
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The model of checkpoint ``path`` and the checkpoint, refused in one line saying what it was made with when
    it is not what was asked: ``images`` or features (``features`` columns), a ``backbone`` or ``embedding_dim``
    given (they describe an untrained model; with a checkpoint they can only be its own)."""
    model, state = load_checkpoint(path)
    config, made = state["model_config"], f"checkpoint {path} was made with {describe_model(state['model_config'])}"
    trained_on = state.get("inputs", {}).get("kind") or ("features" if config.get("kind") == "mlp" else "images")
    if images != (trained_on == "images"):
        other = "--features" if images else "--images"
        raise CheckpointError(
            f"{made}, trained on {trained_on}, not {'images' if images else 'features'}: evaluate it with {other}"
        )
    asked = []
    if backbone is not None and backbone != config.get("kind"):
        asked.append(f"--backbone {backbone}")
    if embedding_dim is not None and embedding_dim != config.get("out_dim"):
        asked.append(f"--embedding-dim {embedding_dim}")
    if asked:
        raise CheckpointError(
            f"{made}, but {' and '.join(asked)} was asked: leave it out to evaluate the checkpoint's model"
        )
    if features is not None and features != config.get("in_dim"):
        raise CheckpointError(
            f"{made}, but the features given have {features} columns: evaluate it on features "
            "like those it was trained on"
        )
    return model, state


def image_embeddings(
    client: LabelDistClient,
    store: str,
    source: ImageSource,
    indices: np.ndarray,
    checkpoint: str | None,
    device: torch.device,
    backbone: str | None,
    embedding_dim: int | None,
    weights: str | None,
    progress: bool | None = False,
) -> tuple[np.ndarray, dict[str, Any], bool]:
    """Embeddings of the store's images of ``indices``; the model's description; whether it L2-normalises."""
    from labeldist.trainer.inputs.images import open_images
    from labeldist.trainer.training.models import ResNetEmbedding

    if checkpoint is None:
        backbone = backbone or UNTRAINED_BACKBONE
        with torch.random.fork_rng(devices=[]):  # the same untrained network every time
            torch.manual_seed(0)
            model = ResNetEmbedding(backbone, embedding_dim or UNTRAINED_DIM, weights=weights)
        normalized = False
        info: dict[str, Any] = {"model": f"untrained {backbone}" + (f" ({weights})" if weights else " (seed 0)")}
        size, transform = source.input_size, source.transform or "resize"
    else:
        model, state = checkpoint_model(checkpoint, images=True, backbone=backbone, embedding_dim=embedding_dim)
        normalized = bool(state.get("normalized"))
        info = {
            "model": state["model_config"],
            "loss": state["loss"],
            "steps": state["step"],
            "seed": state["config"]["seed"],
        }
        size = source.input_size or state["inputs"]["input_size"]
        # checkpoints from before augmentations were recorded trained on ImageNet crops: their eval is the centre crop
        transform = source.transform or state["inputs"].get("eval_transform", "center_crop")
    inputs = open_images(
        source.root, client.ids(store), pattern=source.pattern, index=source.index, input_size=size, transform=transform
    )
    info["eval_transform"] = transform
    workers = default_loader_workers() if source.workers is None else source.workers
    return embed_images(model, inputs, indices, device, workers=workers, progress=progress), info, normalized


def label_distance_matrix(
    client: LabelDistClient,
    store: str,
    queries: np.ndarray,
    gallery: np.ndarray,
    max_pairs: int = 10_000,
    progress: bool | None = False,
) -> np.ndarray:
    """(Q, G) label distances from each query to every gallery item, from the service, in requests of at most
    ``max_pairs`` pairs (the service's default LABELDIST_MAX_ITEMS); ``progress`` (queries done) as
    :func:`labeldist.core.progress.progress_bar`'s ``enabled``."""
    from labeldist.core.progress import progress_bar

    rows = max(1, max_pairs // max(len(gallery), 1))
    out = []
    with progress_bar(len(queries), "eval: label distances", unit="query", units="queries", enabled=progress) as bar:
        for start in range(0, len(queries), rows):
            q = np.asarray(queries[start : start + rows], dtype=np.int64)
            if len(q) == 1:
                out.append(client.distances(store, int(q[0]), gallery)[None])
            else:
                pairs = np.stack(np.broadcast_arrays(q[:, None], np.asarray(gallery)[None, :]), axis=-1).reshape(-1, 2)
                out.append(client.pair_distances(store, pairs).reshape(len(q), len(gallery)))
            bar.update(len(q))
    return np.concatenate(out)


def evaluate(
    client: LabelDistClient,
    store: str,
    features: str | np.ndarray | None,
    queries: np.ndarray,
    gallery: np.ndarray,
    *,
    checkpoint: str | None = None,
    k_max: int = 100,
    device: str = "auto",
    images: ImageSource | None = None,
    backbone: str | None = None,
    embedding_dim: int | None = None,
    weights: str | None = None,
    metric: str | None = None,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Metrics of one model (``checkpoint``; None: untrained) for K = 1..k_max, over the store's ``features``
    or its ``images``. Untrained over features is the features themselves; over images, a ``backbone`` with
    an ``embedding_dim`` head as initialised (random, or from ``weights``; by default resnet34, 128-d). With a
    checkpoint, a ``backbone`` or ``embedding_dim`` given must be the checkpoint's.

    Retrieval ranks by ``metric`` when given (``cosine`` or ``euclidean``), else by cosine for models trained with
    a loss that L2-normalises embeddings and by squared Euclidean distance otherwise (and for raw features or an
    untrained network). A table that compares an untrained network with trained ones should rank the untrained
    one both ways (``metric``), so that each trained row has a like-for-like baseline; the result's ``metric``
    says which ran.

    ``progress``: the images embedded and the queries' label distances fetched, as tqdm's bar on a terminal and
    plain lines every few seconds off one (:func:`labeldist.core.progress.progress_bar`); False: none."""
    if (features is None) == (images is None):
        raise UsageError("give exactly one of --features or --images")
    queries, gallery = np.asarray(queries, dtype=np.int64), np.asarray(gallery, dtype=np.int64)
    check_split_items(queries, gallery, int(client.store(store)["n_items"]), store)
    if images is not None:
        needed = np.union1d(queries, gallery)
        emb_needed, model_info, normalized = image_embeddings(
            client, store, images, needed, checkpoint, pick_device(device), backbone, embedding_dim, weights, progress
        )
        emb = np.zeros((int(needed.max()) + 1, emb_needed.shape[1]), dtype=np.float32)
        emb[needed] = emb_needed
        metric = metric or ("cosine" if normalized else "euclidean")
        return _metrics(client, store, emb, metric, model_info, queries, gallery, k_max, progress)
    x = FeatureInputs(features).array
    x = x.reshape(len(x), -1)
    if checkpoint is None:
        emb, metric, model_info = x, metric or "euclidean", {"model": "input features (untrained)"}
    else:
        model, state = checkpoint_model(
            checkpoint, images=False, backbone=backbone, embedding_dim=embedding_dim, features=x.shape[1]
        )
        emb = embed(model, x, pick_device(device))
        metric = metric or ("cosine" if state.get("normalized") else "euclidean")
        model_info = {
            "model": state["model_config"],
            "loss": state["loss"],
            "steps": state["step"],
            "seed": state["config"]["seed"],
        }
    return _metrics(client, store, emb, metric, model_info, queries, gallery, k_max, progress)


def _metrics(
    client: LabelDistClient,
    store: str,
    emb: np.ndarray,
    metric: str,
    model_info: dict[str, Any],
    queries: np.ndarray,
    gallery: np.ndarray,
    k_max: int,
    progress: bool | None,
) -> dict[str, Any]:
    dist = label_distance_matrix(client, store, queries, gallery, progress=progress)
    metrics = retrieval_metrics(emb[queries], emb[gallery], dist, k_max=k_max, metric=metric)
    result: dict[str, Any] = {
        "store": store,
        "n_queries": len(queries),
        "n_gallery": len(gallery),
        "metric": metric,
        "embedding_dim": int(emb.shape[1]),
        **model_info,
    }
    # NaN (CS@1, undefined) as null, so the JSON is standard
    result.update({name: [None if v != v else v for v in np.asarray(a).tolist()] for name, a in metrics.items()})
    result["summary"] = {
        f"{name}@{k}": result[name][k - 1]
        for name in ("mean_label_distance", "ndcg", "coherent_score", "recall")
        for k in SUMMARY_K
        if k <= len(metrics["k"]) and not (name == "coherent_score" and k == 1)
    }
    return result


def load_split(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """``queries`` and ``gallery`` (positions in the test store) of a ``split.json``
    (:mod:`labeldist.engine.split`). Refused in one line naming the file (:class:`InputError`): a file that is
    not JSON or not an object, a missing or empty side, a position that is not an integer (a boolean, a fraction,
    a string) or is negative, a position twice on one side, and an item on both sides (it would find itself at
    rank 1: nDCG@1 = 1.0 whatever the model)."""
    try:
        split = json.loads(read_regular(path, "split file", limit=SPLIT_FILE_BYTES).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        why = _why(e)
        raise InputError(f"{path}: not a split file ({why}): give the split.json that trainer split writes") from None
    if not isinstance(split, dict):
        what = _json_type(split)
        raise InputError(f'{path}: a split is a JSON object with "queries" and "gallery" lists, not {what}')
    queries, gallery = (_positions(path, split, side) for side in ("queries", "gallery"))
    both = np.intersect1d(queries, gallery)
    if both.size:
        raise InputError(
            f"{path}: {both.size} item(s) are both queries and gallery (the first: {int(both[0])}); each query "
            "would find itself at rank 1: the two sides must not share items"
        )
    return queries, gallery


def _positions(path: str | Path, split: dict[str, Any], side: str) -> np.ndarray:
    """One side of a split: a non-empty list of distinct non-negative integers (``True`` and ``2.0`` refused)."""
    if side not in split:
        raise InputError(f'{path}: no "{side}" list (a split has "queries" and "gallery")')
    given = split[side]
    if not isinstance(given, list) or not given:
        raise InputError(f'{path}: "{side}" must be a non-empty list of item positions, not {_json_type(given)}')
    bad = [v for v in given if type(v) is not int or not 0 <= v < 2**63]
    if bad:
        raise InputError(
            f'{path}: "{side}" holds {json.dumps(bad[0])[:40]}: item positions are integers from 0 (not booleans, '
            "fractions, strings or null)"
        )
    positions = np.asarray(given, dtype=np.int64)
    unique, counts = np.unique(positions, return_counts=True)
    if (counts > 1).any():
        raise InputError(f'{path}: "{side}" names item {int(unique[np.argmax(counts > 1)])} more than once')
    return positions


def check_split_store(path: str | Path, info: dict[str, Any], store: str) -> None:
    """:class:`InputError` when the split at ``path`` was made for another store than ``store`` (``info``: its
    description, ``n_items`` and ``kind``). A split that ``labeldist split`` wrote says which test store its
    positions index: its ``test`` list (the items that store holds), its ``kind``, and, for a store's split, the
    test store's path (``stores``); a store of another size or kind is refused naming both."""
    try:
        split = json.loads(read_regular(path, "split file", limit=SPLIT_FILE_BYTES).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return  # load_split has refused it already, naming why
    if not isinstance(split, dict):
        return
    test, kind = split.get("test"), split.get("kind")
    where = (split.get("stores") or {}).get("test") if isinstance(split.get("stores"), dict) else None
    made_for = f"the test store {where}" if isinstance(where, str) else "its test store"
    n_items = int(info.get("n_items", -1))
    if isinstance(test, list) and len(test) != n_items:
        raise InputError(
            f"{path}: made for {made_for} ({len(test)} items); store {store!r} has {n_items}: its positions would "
            "name other items (training items among them): evaluate the split's own test store"
        )
    if isinstance(kind, str) and info.get("kind") not in (None, kind):
        raise InputError(f"{path}: made for a {kind} store; store {store!r} is a {info.get('kind')} store")


def check_split_items(queries: np.ndarray, gallery: np.ndarray, n_items: int, store: str) -> None:
    """:class:`InputError` when a split names an item past the store's ``n_items`` (the split of another store)."""
    top = int(max(queries.max(initial=-1), gallery.max(initial=-1)))
    if top >= n_items:
        raise InputError(
            f"the split names item {top}, but store {store!r} has {n_items} items (0..{n_items - 1}): "
            "is it the split of another store?"
        )


def _why(error: Exception) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"not JSON: {error.msg} at line {error.lineno}"
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    return "nested too deeply"


def _json_type(value: Any) -> str:
    names = {list: "a list", dict: "an object", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def plot_curves(
    results: dict[str, dict[str, Any]],
    out: str | Path,
    title: str = "",
    styles: dict[str, dict[str, Any]] | None = None,
    overwrite: bool = True,
) -> Path:
    """A PNG like Fig. 3 of Kim et al.: nDCG@K (left) and mean label distance@K (right) against K, one line
    per labelled result (``styles``: matplotlib line options per label). The labels are the dict's keys,
    so
    they are unique here; :func:`labeldist.trainer.results.plots.plot_evals` names results read from files after
    their runs."""
    from labeldist.trainer.results.plots import draw_curves, save

    return save(draw_curves(results, title=title, styles=styles), out, overwrite)
