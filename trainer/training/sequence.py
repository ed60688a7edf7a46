"""A run read against its baseline: the untrained network evaluated first (step 0), the run trained, the trained
network evaluated on the held-out split, both kept (``eval.json``, ``log.jsonl``) and drawn (``eval.png``).
``trainer fit --eval-store`` and Python (:func:`fit_and_evaluate`) run this one sequence."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labeldist.errors import UsageError
from labeldist.trainer.training.config import FitConfig
from labeldist.trainer.training.fit import fit, open_source


@dataclass(frozen=True)
class HeldOut:
    """Where a run is evaluated: a store of held-out items, the split naming its queries and gallery, and the
    inputs indexed like that store (``features``, or ``images`` with their ``image_pattern`` / ``image_index``);
    metrics for K = 1..``k_max``."""

    store: str
    split: str
    features: str | None = None
    images: str | None = None
    image_pattern: str | None = None
    image_index: str | None = None
    k_max: int = 100

    def __post_init__(self) -> None:
        if (self.features is None) == (self.images is None):
            raise UsageError("a held-out evaluation needs exactly one of features or images")


def evaluate_run(config: FitConfig, held_out: HeldOut, checkpoint: str | None) -> dict[str, Any]:
    """The metrics of ``checkpoint`` on ``held_out``, or (None) of the untrained network: the input features, or the
    run's backbone and embedding size as initialised (seed 0, or its ``weights``), ranked as the trained network
    will be (cosine for a loss that L2-normalises, else Euclidean): a like-for-like baseline."""
    from labeldist.trainer.losses import LOSSES
    from labeldist.trainer.training.evaluate import ImageSource, check_split_store, evaluate, load_split

    queries, gallery = load_split(held_out.split)
    images = None
    if held_out.images is not None:
        images = ImageSource(
            held_out.images,
            pattern=held_out.image_pattern,
            index=held_out.image_index,
            input_size=config.input_size,
            workers=config.loader_workers,
        )
    untrained = checkpoint is None
    same_network = untrained and images is not None
    with open_source(config.stores, config.url, config.api_key) as client:
        check_split_store(held_out.split, client.store(held_out.store), held_out.store)
        return evaluate(
            client,
            held_out.store,
            held_out.features,
            queries,
            gallery,
            images=images,
            checkpoint=checkpoint,
            k_max=held_out.k_max,
            backbone=config.backbone if same_network else None,
            embedding_dim=config.embedding_dim if same_network else None,
            weights=config.weights if same_network else None,
            metric=("cosine" if LOSSES[config.loss].normalized else "euclidean") if untrained else None,
            progress=None if config.progress else False,
        )


def score_line(result: dict[str, Any], k: int = 10) -> str:
    """``nDCG@10 0.5540, MLD@10 0.2100 (untrained resnet18 (seed 0), cosine)``."""
    from labeldist.trainer.results.report import format_number

    summary = result.get("summary", {})
    scores = ", ".join(
        f"{name}@{k} {format_number(summary.get(f'{key}@{k}'))}"
        for key, name in (("ndcg", "nDCG"), ("mean_label_distance", "MLD"))
    )
    return f"{scores} ({result.get('model')}, {result.get('metric')})"


def eval_record(result: dict[str, Any]) -> dict[str, Any]:
    """An evaluation as a ``log.jsonl`` line keeps it: what was evaluated, how ranked, its summary metrics."""
    keep = ("store", "model", "loss", "metric", "n_queries", "n_gallery", "summary")
    return {key: result[key] for key in keep if key in result}


def fit_and_evaluate(config: FitConfig, held_out: HeldOut | None = None) -> dict[str, Any]:
    """Train the run of ``config`` (:func:`~labeldist.trainer.training.fit.fit`); with ``held_out``, read it against
    the untrained network: evaluated before the first step (printed on stderr as ``step 0: ...``) and after the
    last, both in ``OUT/eval.json`` (the trained result, the untrained one under ``untrained``), as ``eval`` lines
    of ``OUT/log.jsonl`` (steps 0 and the last) and in ``OUT/eval.png`` (the untrained curve grey, dashed).

    Returns ``{"fit": the run's summary, "eval": the trained result or None}``."""
    untrained = None
    if held_out is not None:
        untrained = evaluate_run(config, held_out, None)
        print(f"step 0: {score_line(untrained)}", file=sys.stderr)
    summary = fit(config)
    if held_out is None or untrained is None:
        return {"fit": summary, "eval": None}
    from labeldist.store.outputs import write_text
    from labeldist.trainer.results.plots import UNTRAINED_STYLE
    from labeldist.trainer.training.evaluate import plot_curves

    result = evaluate_run(config, held_out, summary["checkpoint"])
    result["untrained"] = untrained
    out = Path(config.out)
    write_text(out / "eval.json", json.dumps(result), overwrite=True)  # a regular file replaced, never a link
    with open(out / "log.jsonl", "a", encoding="utf-8") as log:  # the run's own log, beside its steps
        for step, scored in ((0, untrained), (summary["steps"], result)):
            log.write(json.dumps({"event": "eval", "step": step, **eval_record(scored)}) + "\n")
    baseline = f"{untrained['model']}, {untrained['metric']}"
    plot_curves(
        {config.loss: result, baseline: untrained},
        out / "eval.png",
        title=f"{held_out.store}: {config.loss}",
        styles={baseline: UNTRAINED_STYLE},
    )
    return {"fit": summary, "eval": result}
