"""Retrieval evaluation against label distances, and the figures of Kim et al. (Fig. 3: nDCG@K and mean
label distance against K).

Queries and gallery are items of one (test) store; the label distances from each query to every gallery item
come from the service (``POST /v1/stores/{store}/distances``), the embeddings from a checkpoint's model over
the store's feature array, or the features themselves for the untrained baseline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer.client import LabelDistClient
from trainer.data import FeatureInputs
from trainer.fit import load_checkpoint, pick_device
from trainer.metrics import retrieval_metrics

#: the K at which summaries (RESULTS.md tables) report each curve
SUMMARY_K = (1, 5, 10, 20, 50, 100)


@torch.no_grad()
def embed(model: torch.nn.Module, features: np.ndarray, device: torch.device, batch: int = 4096) -> np.ndarray:
    """Embeddings of every row of ``features`` (float32, in eval mode)."""
    model = model.to(device).eval()
    out = [
        model(torch.from_numpy(features[i : i + batch]).to(device)).float().cpu()
        for i in range(0, len(features), batch)
    ]
    return torch.cat(out).numpy()


def label_distance_matrix(
    client: LabelDistClient, store: str, queries: np.ndarray, gallery: np.ndarray, max_pairs: int = 10_000
) -> np.ndarray:
    """(Q, G) label distances from each query to every gallery item, from the service, in requests of at most
    ``max_pairs`` pairs (the service's default LABELDIST_MAX_ITEMS)."""
    rows = max(1, max_pairs // max(len(gallery), 1))
    out = []
    for start in range(0, len(queries), rows):
        q = np.asarray(queries[start : start + rows], dtype=np.int64)
        if len(q) == 1:
            out.append(client.distances(store, int(q[0]), gallery)[None])
            continue
        pairs = np.stack(np.broadcast_arrays(q[:, None], np.asarray(gallery)[None, :]), axis=-1).reshape(-1, 2)
        out.append(client.pair_distances(store, pairs).reshape(len(q), len(gallery)))
    return np.concatenate(out)


def evaluate(
    client: LabelDistClient,
    store: str,
    features: str | np.ndarray,
    queries: np.ndarray,
    gallery: np.ndarray,
    *,
    checkpoint: str | None = None,
    k_max: int = 100,
    device: str = "auto",
) -> dict[str, Any]:
    """Metrics of one model (``checkpoint``; None: the input features, untrained) for K = 1..k_max.

    Retrieval ranks by cosine for models trained with a loss that L2-normalises embeddings, else (and for
    raw features) by squared Euclidean distance."""
    x = FeatureInputs(features).array
    x = x.reshape(len(x), -1)
    if checkpoint is None:
        emb, metric, model_info = x, "euclidean", {"model": "input features (untrained)"}
    else:
        model, state = load_checkpoint(checkpoint)
        emb = embed(model, x, pick_device(device))
        metric = "cosine" if state.get("normalized") else "euclidean"
        model_info = {"model": state["model_config"], "loss": state["loss"], "steps": state["step"],
                      "seed": state["config"]["seed"]}  # fmt: skip
    queries, gallery = np.asarray(queries, dtype=np.int64), np.asarray(gallery, dtype=np.int64)
    dist = label_distance_matrix(client, store, queries, gallery)
    metrics = retrieval_metrics(emb[queries], emb[gallery], dist, k_max=k_max, metric=metric)
    result: dict[str, Any] = {"store": store, "n_queries": len(queries), "n_gallery": len(gallery),
                              "metric": metric, "embedding_dim": int(emb.shape[1]), **model_info}  # fmt: skip
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
    """``queries`` and ``gallery`` (positions in the test store) of a ``split.json`` (:mod:`trainer.split`)."""
    split = json.loads(Path(path).read_text(encoding="utf-8"))
    return np.asarray(split["queries"], dtype=np.int64), np.asarray(split["gallery"], dtype=np.int64)


def plot_curves(
    results: dict[str, dict[str, Any]],
    out: str | Path,
    title: str = "",
    styles: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """A PNG like Fig. 3 of Kim et al.: nDCG@K (left) and mean label distance@K (right) against K, one line
    per labelled result (``styles``: matplotlib line options per label). The labels are the dict's keys, so
    they are unique here; :func:`trainer.plots.plot_evals` names results read from files after their runs."""
    from trainer.plots import draw_curves, save

    return save(draw_curves(results, title=title, styles=styles), out)
