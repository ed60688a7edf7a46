"""Zhou et al. (AAAI 2020) Table 3 on the sentence-relevance store: the ladder loss against the triplet loss by
Coherent Score (CS@K) and recall (R@K), through a running service.

    python -m labeldist.trainer.experiments.ladder --url http://127.0.0.1:8765 --runs /tmp/zhou --epochs 1 --seeds 0 1

expects under ``--runs`` the split by image (``coco/split.json``, ``coco/test.json``) and the demo inputs
(``features/<store>.npy``) of the served ``coco-train-sentence_relevance`` and ``coco-test-sentence_relevance``.
Relevance is 1 - the stored label distance. CS@K is Kendall's tau-b between the embedding's and the relevance
ranking of a query's top K (:func:`labeldist.trainer.training.metrics.coherent_score`); R@K counts its label-nearest
gallery sentence in its top K; CS@1000 is computed here (:func:`coherent_at`). The ladder and its one-rung baseline
run on the thresholds θ = (0.9, 0.63) and on the authors' adaptive ones (``calibrate="percentile"``). Writes
``<runs>/coco-ladder/<method>-d<dim>-s<seed>/`` and ``<runs>/coco-ladder/table.md``; results: RESULTS.md,
"Zhou et al. Table 3".
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.client import FeatureInputs, LabelDistClient
from labeldist.errors import UsageError
from labeldist.labels.coco import load_json, parse_karpathy
from labeldist.trainer.losses import LadderLoss
from labeldist.trainer.training.config import LOG, FitConfig
from labeldist.trainer.training.evaluate import embed, evaluate, label_distance_matrix
from labeldist.trainer.training.fit import fit
from labeldist.trainer.training.metrics import coherent_score, retrieve
from labeldist.trainer.training.models import load_checkpoint
from labeldist.trainer.training.runtime import pick_device

TRAIN, TEST = "coco-train-sentence_relevance", "coco-test-sentence_relevance"
#: run name: loss, its options, the name in the table
METHODS: dict[str, tuple[str, dict[str, Any], str]] = {
    # Zhou et al.: 3 levels, relevance thresholds (0.9 standing in for the ground truth, 0.63), margins (0.2, 0.01),
    # weights (1, 0.25): LadderLoss's defaults. The store's distances are 1 - R, so the relevance is R itself and
    # the thresholds are used as given ("off": never recalibrated on the batch's distances).
    "ladder": ("ladder", {"calibrate": "off"}, "Ladder loss, θ = (0.9, 0.63) (Zhou et al.)"),
    # The authors' adaptive thresholds (their code's AutoThreshLadderLoss, config.atl.py: percentile 85 below the
    # ground-truth rung): per anchor, the 95th and 85th percentiles of its relevances to the other items, so
    # every anchor has items on both sides of both rungs; margins and weights as above.
    "ladder_percentile": (
        "ladder",
        {"calibrate": "percentile", "percentiles": [95.0, 85.0]},
        "Ladder loss, adaptive per-anchor thresholds (Zhou et al.'s code)",
    ),
    # Zhou et al.'s baseline, VSE++: relevant or not (here R >= 0.63, the paper's threshold), one margin 0.2, the
    # hardest negative: the ladder with one rung. (One rung at 0.9 cannot run here: most minibatches have no pair
    # that relevant, and the first is refused or recalibrated.)
    "triplet_hardest": (
        "ladder",
        {"thresholds": [0.63], "margins": [0.2], "betas": [1.0], "calibrate": "off"},
        "Triplet, hardest negative, relevant = R ≥ 0.63 (VSE++)",
    ),
    # Its adaptive counterpart, the adaptive ladder's first rung alone (as VSE++ is the paper's ladder's first
    # rung alone): relevant = the anchor's top 5 % (at or above its 95th percentile), margin 0.2, weight 1.
    "triplet_hardest_percentile": (
        "ladder",
        {"calibrate": "percentile", "percentiles": [95.0], "margins": [0.2], "betas": [1.0]},
        "Triplet, hardest negative, relevant = the anchor's top 5 % (VSE++)",
    ),
    "binary_triplet": ("binary_triplet", {"positives": 5}, "L(Triplet)+M(Binary), the 5 label-nearest positive"),
    "dense_triplet": ("dense_triplet", {}, "L(Triplet)+M(Dense) (Kim et al.)"),
}
CS_K = (10, 20, 50, 100, 1000)
R_K = (1, 5, 10, 20, 50)


def thresholds_used(loss: str, options: dict[str, Any]) -> str:
    """What a method's rungs are set by, for the table: the given relevance thresholds or the per-anchor
    percentiles (the loss's defaults where the options name none).

    >>> thresholds_used("ladder", {"calibrate": "off"})
    'given θ = (0.9, 0.63)'
    >>> thresholds_used("ladder", {"calibrate": "percentile", "percentiles": [95.0], "margins": [0.2], "betas": [1]})
    'adaptive, per-anchor percentiles p = (95)'
    >>> thresholds_used("dense_triplet", {})
    '-'
    """
    if loss != "ladder":
        return "-"
    made = LadderLoss(**options)
    if made.calibrate == "percentile":
        return "adaptive, per-anchor percentiles p = (" + ", ".join(f"{p:g}" for p in made.percentiles) + ")"
    return "given θ = (" + ", ".join(f"{t:g}" for t in made.thresholds) + ")"


def sentence_split(
    split: dict[str, Any], test_images: Sequence[str], sentence_ids: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Queries and gallery of the sentence store: the positions of the sentences (ids ``<image id>#<n>``) of the
    split's query and gallery images (``split["queries"]`` / ``["gallery"]`` index ``test_images``).

    >>> sentence_split({"queries": [1], "gallery": [0]}, ["7", "9"], ["7#0", "9#0", "9#1"])
    (array([1, 2]), array([0]))
    """
    query_images = {str(test_images[i]) for i in split["queries"]}
    gallery_images = {str(test_images[i]) for i in split["gallery"]}
    image = [str(s).rpartition("#")[0] for s in sentence_ids]
    queries = np.array([i for i, m in enumerate(image) if m in query_images], dtype=np.int64)
    gallery = np.array([i for i, m in enumerate(image) if m in gallery_images], dtype=np.int64)
    unknown = set(image) - query_images - gallery_images
    if unknown:
        raise UsageError(
            f"{len(unknown)} images of the test store are in neither queries nor gallery "
            f"(e.g. {sorted(unknown)[0]!r}): the split is not the store's"
        )
    return queries, gallery


def coherent_at(
    query_emb: np.ndarray, gallery_emb: np.ndarray, label_distances: np.ndarray, k: int, metric: str
) -> float:
    """CS@k over the queries, as :func:`labeldist.trainer.training.metrics.retrieval_metrics` scores it (the same
    retrieval and
    embedding scores), one query at a time so that a large k needs only (k, k) memory. NaN if defined nowhere."""
    k = min(k, len(gallery_emb))
    retrieved = retrieve(query_emb, gallery_emb, k, metric)
    q, g = np.asarray(query_emb, dtype=np.float64), np.asarray(gallery_emb, dtype=np.float64)
    if metric == "cosine":
        q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        g = g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
    taus = []
    for i in range(len(q)):
        scores = -((q[i] - g[retrieved[i]]) ** 2).sum(-1)
        taus.append(coherent_score(label_distances[i : i + 1], retrieved[i : i + 1], scores[None])[k - 1])
    taus = np.asarray(taus)
    return float(np.nanmean(taus)) if np.isfinite(taus).any() else float("nan")


def _embeddings(features: str, checkpoint: str | None) -> tuple[np.ndarray, str]:
    """What :func:`labeldist.trainer.training.evaluate.evaluate` ranks by: the features (Euclidean) or the checkpoint's
    embeddings
    (cosine when its loss normalises)."""
    x = FeatureInputs(features).array
    x = x.reshape(len(x), -1)
    if checkpoint is None:
        return x, "euclidean"
    model, state = load_checkpoint(checkpoint)
    return embed(model, x, pick_device("cpu")), "cosine" if state.get("normalized") else "euclidean"


def run_log_end(out: Path) -> dict[str, Any]:
    """The last ``end`` event of a run's log (training seconds, data waits, the ladder's decision)."""
    ends = [json.loads(line) for line in (out / LOG).read_text(encoding="utf-8").splitlines() if '"end"' in line]
    return ends[-1] if ends else {}


def _cell(values: Sequence[float], bold: bool = False) -> str:
    mean = f"**{np.mean(values):.3f}**" if bold else f"{np.mean(values):.3f}"
    return mean + (f" ± {np.std(values):.3f}" if len(values) > 1 else "")


def table(
    rows: dict[str, list[dict[str, Any]]], n_queries: int, n_gallery: int, thresholds: dict[str, str] | None = None
) -> str:
    """Markdown: one row per method (mean ± std over its results), CS@K then R@K, then training time; the best
    mean of each column in bold. With ``thresholds`` (method name: what set its rungs), a column for it after the
    method's name."""
    cols = [("cs", k) for k in CS_K] + [("r", k) for k in R_K]
    best = {c: max(np.mean([r[c[0]][str(c[1])] for r in got]) for got in rows.values()) for c in cols}
    head = " | ".join(f"CS@{k}" for k in CS_K) + " | " + " | ".join(f"R@{k}" for k in R_K)
    extra = " thresholds |" if thresholds is not None else ""
    lines = [
        f"| method ({n_queries} queries x {n_gallery} gallery sentences) |{extra} {head} | training time |",
        "|---" * (2 + len(cols) + bool(extra)) + "|",
    ]
    for name, got in rows.items():
        cells = []
        for c in cols:
            values = [r[c[0]][str(c[1])] for r in got]
            cells.append(_cell(values, bold=len(rows) > 1 and np.isclose(np.mean(values), best[c], atol=5e-4)))
        times = [r["train_s"] for r in got if r.get("train_s") is not None]
        when = "-" if not times else " / ".join(f"{t / 60:.1f}" for t in times) + " min"
        used = f" {thresholds.get(name, '-')} |" if thresholds is not None else ""
        lines.append(f"| {name} |{used} " + " | ".join(cells) + f" | {when} |")
    return "\n".join(lines)


def ladder_note(name: str, seed: int, info: dict[str, Any]) -> str:
    """One line on what a ladder run's thresholds were and how often its rungs could be formed."""
    if info.get("ladder_mode") == "percentile":
        stats = "; ".join(
            f"p{p:g}: mean {s['mean']:.3f}, min {s['min']:.3f}, max {s['max']:.3f}"
            for p, s in zip(info["percentiles"], info["anchor_thresholds_first_batch"])
        )
        used = f"per-anchor percentiles {info['percentiles']} (first batch's per-anchor thresholds: {stats})"
    else:
        used = f"relevance thresholds {info['thresholds']} ({info['ladder_mode']})"
    line = (
        f"{name}, seed {seed}: {used}, {info['minibatches_without_rung']} of {info['minibatches']} minibatches "
        "without a rung"
    )
    if info.get("queries"):
        shares = ", ".join(
            f"rung {i}: {100 * c / info['queries']:.1f} %" for i, c in enumerate(info["queries_with_rung"], start=1)
        )
        line += f"; queries with items on both sides of each rung: {shares}"
    return line


def _scores(result: dict[str, Any], cs_1000: float) -> dict[str, Any]:
    """The table's numbers of one evaluation: CS@K (K <= 100 from ``evaluate``, 1000 from :func:`coherent_at`)."""
    cs = {str(k): (cs_1000 if k > len(result["coherent_score"]) else result["coherent_score"][k - 1]) for k in CS_K}
    return {"cs": cs, "r": {str(k): result["recall"][k - 1] for k in R_K}}


def _train(
    url: str, method: str, seed: int, out: Path, features: str, *, size: int, epochs: int, lr: float, dim: int
) -> None:
    """One run of ``method`` with ``seed`` into ``out`` (resumed where it stopped), its time and loss printed."""
    loss, options, _ = METHODS[method]
    t0 = time.perf_counter()
    summary = fit(
        FitConfig(
            url=url,
            store=TRAIN,
            features=features,
            out=str(out),
            loss=loss,
            loss_options=options,
            size=size,
            neighbors=5,
            epochs=epochs,
            lr=lr,
            embedding_dim=dim,
            seed=seed,
            resume=True,
            progress=False,
        )
    )
    print(
        f"{method} seed {seed}: {summary['steps']} steps in {time.perf_counter() - t0:.0f} s (data waits "
        f"{summary['data_wait_s']:.0f} s), loss {summary['loss']:.4f}",
        flush=True,
    )


def reproduce(
    url: str,
    runs: Path,
    *,
    epochs: int,
    seeds: Sequence[int],
    size: int,
    dim: int,
    lr: float,
    methods: Sequence[str] = tuple(METHODS),
) -> str:
    """Train and evaluate every method; returns the markdown table (also written to ``table.md``)."""
    base = runs / "coco-ladder"
    base.mkdir(parents=True, exist_ok=True)
    split = json.loads((runs / "coco" / "split.json").read_text(encoding="utf-8"))
    test_images, _ = parse_karpathy(load_json(runs / "coco" / "test.json"), str(runs / "coco" / "test.json"))
    features = {s: str(runs / "features" / f"{s}.npy") for s in (TRAIN, TEST)}
    with LabelDistClient(url) as client:
        queries, gallery = sentence_split(split, test_images, client.ids(TEST))
        t0 = time.perf_counter()
        dist = label_distance_matrix(client, TEST, queries, gallery)
        print(
            f"{len(queries)} queries x {len(gallery)} gallery sentences: label distances in "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )

    def scored(out: Path | None) -> dict[str, Any]:
        eval_path = (out or base) / ("eval.json" if out else "untrained-eval.json")
        if eval_path.exists():  # finished evaluations are reused
            return json.loads(eval_path.read_text(encoding="utf-8"))
        checkpoint = None if out is None else str(out / "checkpoint.pt")
        with LabelDistClient(url) as client:
            result = evaluate(client, TEST, features[TEST], queries, gallery, checkpoint=checkpoint, k_max=100)
        emb, metric = _embeddings(features[TEST], checkpoint)
        assert metric == result["metric"]
        check = coherent_at(emb[queries], emb[gallery], dist, 100, metric)
        if not np.isclose(check, result["coherent_score"][99], atol=1e-9):  # the same definition as evaluate's
            raise RuntimeError(f"CS@100 here {check} but evaluate {result['coherent_score'][99]}")
        result["coherent_score_1000"] = coherent_at(emb[queries], emb[gallery], dist, 1000, metric)
        if out is not None:
            result["train"] = run_log_end(out)
        eval_path.write_text(json.dumps(result), encoding="utf-8")
        return result

    untrained = scored(None)
    rows: dict[str, list[dict[str, Any]]] = {
        "input features (untrained MiniLM of a sibling caption)": [
            {**_scores(untrained, untrained["coherent_score_1000"]), "train_s": None}
        ]
    }
    notes, used = [], {}
    for method in methods:
        loss, options, name = METHODS[method]
        got = []
        for seed in seeds:
            out = base / f"{method}-d{dim}-s{seed}"
            if not (out / "eval.json").exists():
                _train(url, method, seed, out, features[TRAIN], size=size, epochs=epochs, lr=lr, dim=dim)
            result = scored(out)
            end = result.get("train", {})
            got.append({**_scores(result, result["coherent_score_1000"]), "train_s": end.get("seconds")})
            info = end.get("loss_info")
            if info and seed == seeds[0]:
                notes.append(ladder_note(name, seed, info))
        seeds_used = ",".join(str(s) for s in seeds)
        rows[f"{name}, {dim}-d (seeds {seeds_used})"] = got
        used[f"{name}, {dim}-d (seeds {seeds_used})"] = thresholds_used(loss, options)
    text = table(rows, len(queries), len(gallery), used)
    if notes:
        text += "\n\n" + "\n".join(f"- {n}" for n in notes)
    (base / "table.md").write_text(text + "\n", encoding="utf-8")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m labeldist.trainer.experiments.ladder", description=__doc__.split("\n")[0]
    )
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--runs", type=Path, required=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--size", type=int, default=50, help="minibatch size (anchor, its 5 nearest, random others)")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    args = p.parse_args(argv)
    print(
        reproduce(
            args.url,
            args.runs,
            epochs=args.epochs,
            seeds=args.seeds,
            size=args.size,
            dim=args.dim,
            lr=args.lr,
            methods=args.methods,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
