"""The reproduction of RESULTS.md: every method of the table on one dataset, through a running service.

    python -m labeldist.trainer.experiments.reproduce --url http://127.0.0.1:8765 --dataset mpii --runs
    /tmp/trainer-runs \\
        --epochs 3 --seeds 0 1 2

expects, under ``--runs``: ``<dataset>/split.json`` (``trainer split``) and ``features/<store>.npy``
(``trainer demo-inputs``) for the stores ``<dataset>-train-<kind>`` and ``<dataset>-test-<kind>`` that the
service serves. With ``--images``, ``images/<store>/`` (``trainer render``) instead of the features: a
``--backbone`` CNN trains on the images, and the untrained row is that backbone as initialised.
Writes ``<runs>/<dataset>/<method>-d<dim>-s<seed>/`` (checkpoint, log, eval.json), the table
``<runs>/<dataset>/table.md`` and the figures ``fig3.png`` (nDCG@K and mean label distance@K, Fig. 3 of
Kim et al.) and ``fig5.png`` (16-d against 128-d, Fig. 5).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.trainer.training.config import FitConfig
from labeldist.trainer.training.evaluate import ImageSource, evaluate, load_split, plot_curves
from labeldist.trainer.training.fit import fit

DATASETS = {  # store kind, minibatch size (Kim et al.: 150 poses, 50 captions)
    "mpii": ("pose", 150),
    "coco": ("caption_wmd", 50),
    "lsun": ("layout_miou", 150),
}
METHODS: dict[str, tuple[str, dict[str, Any], str]] = {  # run name: loss, its options, the paper's name
    "log_ratio": ("log_ratio", {}, "L(Log-ratio)+M(Dense)"),
    "log_ratio_unsquared": ("log_ratio", {"squared": False}, "L(Log-ratio)+M(Dense), Euclidean D(f)"),
    "dense_triplet": ("dense_triplet", {}, "L(Triplet)+M(Dense)"),
    "binary_triplet": ("binary_triplet", {}, "L(Triplet)+M(Binary)"),
    # the binary baselines of pytorch-metric-learning: positives are each anchor's label-nearest items
    "lifted": ("lifted", {}, "Lifted structure (Oh Song et al. 2016), binary"),
    "proxy_anchor": ("proxy_anchor", {}, "Proxy anchor (Kim et al. 2020), binary"),
    "multi_similarity": ("multi_similarity", {}, "Multi-similarity (Wang et al. 2019), binary"),
}
TABLE_K = (1, 5, 10, 20, 50)


def _row(name: str, results: list[dict[str, Any]]) -> str:
    cells = []
    for metric in ("mean_label_distance", "ndcg"):
        for k in TABLE_K:
            values = [r[metric][k - 1] for r in results]
            spread = f" ± {np.std(values):.3f}" if len(values) > 1 else ""
            cells.append(f"{np.mean(values):.3f}{spread}")
    return f"| {name} | " + " | ".join(cells) + " |"


def _source(url: str, stores: Path | None) -> Any:
    """Stores read in this process (``--stores``), else the service at ``url``."""
    from labeldist.trainer.training.fit import open_source

    return open_source(None if stores is None else str(stores), url)


def _ranked(metric: str) -> str:
    return "cosine" if metric == "cosine" else "Euclidean"


def training_seconds(log: Path) -> float:
    """Seconds a run spent in its steps (each step's time and data wait, from its log): the same whether it
    trained at once or in segments between evaluations (``--curve-every``), which the last segment's summary
    alone would not count."""
    rows = (json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip())
    return float(sum(r.get("step_s", 0.0) + r.get("data_wait_s", 0.0) for r in rows if r.get("event") == "step"))


def _fit_and_eval(config: FitConfig, evaluate_at: Any, eval_path: Path) -> dict[str, Any]:
    """Train one run (resuming a finished or interrupted one), evaluate its checkpoint, keep the result."""
    summary = fit(config)
    result = evaluate_at(str(Path(config.out) / "checkpoint.pt"))
    result.update(
        train_seconds=training_seconds(Path(config.out) / "log.jsonl"),
        data_wait_share=summary["data_wait_share"],
        steps=summary["steps"],
        epochs=summary["epochs"],
        recipe=config.recipe,
        augment=config.augment,
    )
    eval_path.write_text(json.dumps(result), encoding="utf-8")
    return result


def _curve(config: FitConfig, evaluate_at: Any, every: int, total: int, path: Path) -> dict[str, list]:
    """nDCG@10 on the test split every ``every`` steps up to ``total``: the run trained in segments, each resuming
    the last checkpoint (the same minibatches as one uninterrupted run), its checkpoint evaluated after each."""
    curve = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"steps": [], "ndcg@10": []}
    for stop in range(every, total + every, every):
        stop = min(stop, total)
        if stop in curve["steps"]:
            continue
        done = fit(replace(config, max_steps=stop, resume=True))["steps"]
        if done in curve["steps"]:  # the run's epochs ended before this stop
            break
        result = evaluate_at(str(Path(config.out) / "checkpoint.pt"))
        curve["steps"].append(done)
        curve["ndcg@10"].append(result["summary"]["ndcg@10"])
        path.write_text(json.dumps(curve), encoding="utf-8")
        if done < stop:
            break
    return curve


@dataclass(frozen=True)
class _Inputs:
    """What the runs train on and the evaluation embeds: the features of ``trainer demo-inputs`` or, with
    ``--images``, the renders of ``trainer render`` under a CNN."""

    #: the training inputs, as FitConfig fields
    train: dict[str, Any]
    #: the test store's features (None over images)
    test_features: str | None
    #: the test store's images (None over features)
    source: ImageSource | None
    #: the untrained rows' name
    untrained_name: str


def _inputs(
    runs: Path,
    train: str,
    test: str,
    *,
    images: bool,
    backbone: str,
    input_size: int | None,
    loader_workers: int | None,
) -> _Inputs:
    """The inputs of the stores ``train`` and ``test`` under ``runs``: ``features/<store>.npy``, or with ``images``
    ``images/<store>/`` under ``backbone``."""
    if images:
        train_inputs = {
            "images": str(runs / "images" / train),
            "backbone": backbone,
            "input_size": input_size,
            "loader_workers": loader_workers,
        }
        source = ImageSource(str(runs / "images" / test), input_size=input_size, workers=loader_workers)
        return _Inputs(train_inputs, None, source, f"untrained {backbone} (random weights)")
    train_inputs = {"features": str(runs / "features" / f"{train}.npy")}
    return _Inputs(train_inputs, str(runs / "features" / f"{test}.npy"), None, "input features")


def _evaluator(
    url: str,
    stores: Path | None,
    test: str,
    inputs: _Inputs,
    queries: Any,
    gallery: Any,
    *,
    k_max: int,
    backbone: str,
    dims: Sequence[int],
) -> Callable[..., dict[str, Any]]:
    """``evaluate_at(checkpoint, metric=None)``: the retrieval metrics on the test store of a trained checkpoint,
    or (``checkpoint`` None) of the untrained ``backbone`` at the largest of ``dims``, ranked by ``metric``."""

    def evaluate_at(checkpoint: str | None, metric: str | None = None) -> dict[str, Any]:
        with _source(url, stores) as client:
            return evaluate(
                client,
                test,
                inputs.test_features,
                queries,
                gallery,
                k_max=k_max,
                images=inputs.source,
                checkpoint=checkpoint,
                backbone=None if checkpoint else backbone,
                embedding_dim=None if checkpoint else max(dims),
                metric=metric,
            )

    return evaluate_at


@dataclass(frozen=True)
class _RunSettings:
    """What every run of a reproduction shares: its training store and inputs, where its minibatches come from, the
    recipe and the values given over it; :meth:`config` makes one run's FitConfig."""

    store: str
    kind: str
    paper_size: int
    images: bool
    recipe: str
    epochs: int | None
    lr: float | None
    augment: str | None
    size: int | None
    max_steps: int | None
    allow_image_flip: bool
    anchors: str | None
    lr_schedule: str | None
    where: dict[str, Any]
    train_inputs: dict[str, Any]

    def config(self, method: str, dim: int, seed: int, out: Path) -> FitConfig:
        """The run of ``method`` at ``dim`` dimensions with ``seed`` into ``out``: the recipe's values
        (labeldist.trainer.training.recipes) with the method's loss, the dimension and the values given over them (the
        paper's minibatch size under labeldist-v1 when none is given), resuming what is there."""
        from labeldist.trainer.training.recipes import resolve_recipe

        loss, options, _ = METHODS[method]
        given: dict[str, Any] = {"loss": loss, "loss_options": options, "embedding_dim": dim}
        for name, value in (
            ("epochs", self.epochs),
            ("lr", self.lr),
            ("augment", self.augment),
            ("size", self.size),
            ("anchors", self.anchors),
            ("lr_schedule", self.lr_schedule),
        ):
            if value is not None:
                given[name] = value
        if self.size is None and self.recipe == "labeldist-v1":
            given["size"] = self.paper_size
        values = resolve_recipe(self.recipe, kind=self.kind, images=self.images, given=given)
        return FitConfig(
            store=self.store,
            out=str(out),
            seed=seed,
            resume=True,
            progress=False,
            max_steps=self.max_steps,
            allow_image_flip=self.allow_image_flip,
            **self.where,
            **values,
            **self.train_inputs,
        )


def _run_result(config: FitConfig, evaluate_at: Any, eval_path: Path) -> dict[str, Any]:
    """One run's evaluation, as saved in ``eval_path``: a finished run's is reused, else the run is trained (or
    its interrupted training resumed) and evaluated now (:func:`_fit_and_eval`)."""
    if not eval_path.exists():
        _fit_and_eval(config, evaluate_at, eval_path)
    return json.loads(eval_path.read_text(encoding="utf-8"))


def _train_runs(
    settings: _RunSettings,
    evaluate_at: Any,
    base: Path,
    tag: str,
    *,
    dims: Sequence[int],
    methods: Sequence[str],
    seeds: Sequence[int],
    small_dim_seeds: Sequence[int],
    curve_every: int | None,
) -> tuple[dict[tuple[str, int], list[dict[str, Any]]], dict[str, list[dict[str, list]]]]:
    """Every run, dimension by dimension, method by method: ``seeds`` at the largest dimension, ``small_dim_seeds``
    at the others, each in ``<base>/<method>-d<dim>-s<seed><tag>`` (:func:`_run_result`). With ``curve_every``, the
    runs of every seed at the largest dimension are first trained in segments (:func:`_curve`). Returns the
    results of each (method, dim) and the step curves of each seed by the methods' paper names."""
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    curves: dict[str, list[dict[str, list]]] = {}
    for dim in dims:
        for method in methods:
            for seed in seeds if dim == max(dims) else small_dim_seeds:
                out = base / f"{method}-d{dim}-s{seed}{tag}"
                config = settings.config(method, dim, seed, out)
                if curve_every and dim == max(dims):
                    total = settings.max_steps or 10**9
                    curve = _curve(config, evaluate_at, curve_every, total, out / "curve.json")
                    curves.setdefault(METHODS[method][2], []).append(curve)
                results.setdefault((method, dim), []).append(_run_result(config, evaluate_at, out / "eval.json"))
    return results, curves


def mean_curve(curves: list[dict[str, list]]) -> tuple[list[int], list[float], list[float]]:
    """The steps every seed's curve reached, and nDCG@10's mean and standard deviation over the seeds there.

    >>> mean_curve([{"steps": [5, 10], "ndcg@10": [0.5, 0.7]}, {"steps": [5], "ndcg@10": [0.6]}])
    ([5], [0.55], [0.05])
    """
    steps = sorted(set.intersection(*(set(c["steps"]) for c in curves)))
    at = [[c["ndcg@10"][c["steps"].index(s)] for c in curves] for s in steps]
    return steps, [round(float(np.mean(v)), 6) for v in at], [round(float(np.std(v)), 6) for v in at]


def curve_table(curves: dict[str, list[dict[str, list]]]) -> str:
    """nDCG@10 against steps, one row per method: the mean over its seeds ± their standard deviation.

    >>> print(curve_table({"log-ratio": [{"steps": [500], "ndcg@10": [0.75]}]}))
    | method (nDCG@10, mean ± sd over seeds) | 500 steps |
    |---|---|
    | log-ratio (1 seed) | 0.750 ± 0.000 |
    """
    steps = sorted({s for runs in curves.values() for s in mean_curve(runs)[0]})
    lines = [
        "| method (nDCG@10, mean ± sd over seeds) | " + " | ".join(f"{s:,} steps" for s in steps) + " |",
        "|---" * (1 + len(steps)) + "|",
    ]
    for name, runs in curves.items():
        at = {s: (m, sd) for s, m, sd in zip(*mean_curve(runs))}
        cells = [f"{at[s][0]:.3f} ± {at[s][1]:.3f}" if s in at else "" for s in steps]
        seeds = f"{len(runs)} seed" + ("s" if len(runs) != 1 else "")
        lines.append(f"| {name} ({seeds}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ceiling_row(
    store: Path,
    kind: str,
    queries: Any,
    gallery: Any,
    *,
    k_max: int,
    ceiling: dict[str, float] | None,
    augment: str = "kind",
) -> dict[str, Any]:
    """The ceiling of the test ``store`` (:func:`labeldist.trainer.experiments.ceiling.store_ceiling`): a perfect
    model of its
    pictures under ``ceiling``'s jitter, by default the one the runs' augmentation (``augment``) trains with: the
    kind's own jitter for "kind" (and "imagenet", whose crops it does not model), none for "flip" and "none"."""
    from labeldist.trainer.experiments.ceiling import store_ceiling
    from labeldist.trainer.inputs.augment import kind_augmentation

    kind_aug = kind_augmentation(kind).augmentation  # the jitter the kind's own augmentation trains with
    jittered = augment in ("kind", "imagenet")
    jitter = ceiling or {"scale": kind_aug.scale if jittered else 0.0, "shift": kind_aug.shift if jittered else 0.0}
    return store_ceiling(str(store), {"queries": queries, "gallery": gallery}, k_max=k_max, **jitter)


def _trained_row(method: str, dim: int, got: list[dict[str, Any]]) -> str:
    """The table's row of ``method`` at ``dim`` dimensions over its runs' results ``got``: its ranking, seeds,
    steps, epochs and minutes a run."""
    name = METHODS[method][2]
    seeds_used = ",".join(str(r["seed"]) for r in got)
    minutes = np.mean([r.get("train_seconds", np.nan) for r in got]) / 60
    steps = ",".join(sorted({str(r.get("steps", "?")) for r in got}))
    epochs_run = ",".join(sorted({f"{r.get('epochs', float('nan')):.2f}" for r in got}))
    return _row(
        f"{name}, {dim}-d, ranked by {_ranked(got[0]['metric'])} (seeds {seeds_used}; "
        f"{steps} steps = {epochs_run} epochs; {minutes:.1f} min/run)",
        got,
    )


def _table(
    title: str,
    ceiling_row: dict[str, Any] | None,
    untrained_name: str,
    untrained: dict[str, dict[str, Any]],
    results: dict[tuple[str, int], list[dict[str, Any]]],
    *,
    dims: Sequence[int],
    methods: Sequence[str],
) -> str:
    """The markdown table under the heading ``title``: the ceiling row if any, the untrained rows, then each
    method's row, the largest dimension first."""
    header = " | ".join(f"MLD@{k}" for k in TABLE_K) + " | " + " | ".join(f"nDCG@{k}" for k in TABLE_K)
    lines = [f"| method ({title}) | {header} |", "|---" * (1 + 2 * len(TABLE_K)) + "|"]
    if ceiling_row is not None:
        lines.append(_row(f"ceiling: a perfect model of the test pictures ({ceiling_row['note']})", [ceiling_row]))
    for metric, result in untrained.items():
        lines.append(_row(f"{untrained_name}, ranked by {_ranked(metric)}", [result]))
    for dim in sorted(dims, reverse=True):
        for method in methods:
            lines.append(_trained_row(method, dim, results[(method, dim)]))
    return "\n".join(lines)


def _mean_curves(items: list[dict[str, Any]]) -> dict[str, Any]:
    """nDCG@K and mean label distance@K averaged over runs (over seeds)."""
    return {key: np.mean([r[key] for r in items], axis=0) for key in ("k", "ndcg", "mean_label_distance")}


def _plot_methods(
    path: Path,
    dataset: str,
    baseline_name: str,
    baseline: dict[str, Any],
    results: dict[tuple[str, int], list[dict[str, Any]]],
    *,
    top: int,
    methods: Sequence[str],
) -> None:
    """Fig. 3: every method's curves at dimension ``top`` (mean over seeds) against the untrained ``baseline``."""
    plot_curves(
        {baseline_name: baseline, **{METHODS[m][2]: _mean_curves(results[(m, top)]) for m in methods}},
        path,
        title=f"{dataset}: {top}-d embeddings (mean over seeds)",
        styles={METHODS[m][2]: {"color": f"C{i + 1}"} for i, m in enumerate(methods)},
    )


def _plot_dimensions(
    path: Path,
    dataset: str,
    results: dict[tuple[str, int], list[dict[str, Any]]],
    *,
    dims: Sequence[int],
    methods: Sequence[str],
) -> None:
    """Fig. 5: every method's curves at each dimension, the smaller ones dashed."""
    top = max(dims)
    fig5, styles = {}, {}
    for i, m in enumerate(methods):
        for dim in dims:
            label = f"{METHODS[m][2]}, {dim}-d"
            fig5[label] = _mean_curves(results[(m, dim)])
            styles[label] = {"color": f"C{i + 1}", "linestyle": "-" if dim == top else "--"}
    plot_curves(
        fig5,
        path,
        title=f"{dataset}: {' vs '.join(f'{d}-d' for d in dims)} (dashed: smaller)",
        styles=styles,
    )


def _plot_step_curves(
    path: Path,
    title: str,
    curves: dict[str, list[dict[str, list]]],
    untrained_name: str,
    untrained: dict[str, dict[str, Any]],
    ceiling_row: dict[str, Any] | None,
) -> None:
    """nDCG@10 against steps of the curves (the mean over seeds), with the untrained rows' levels and the ceiling's
    if any."""
    from labeldist.trainer.results.plots import draw_step_curves, save

    levels = {f"{untrained_name} ({_ranked(m)})": r["summary"]["ndcg@10"] for m, r in untrained.items()}
    if ceiling_row is not None:
        levels["ceiling"] = ceiling_row["summary"]["ndcg@10"]
    means = {name: mean_curve(runs)[:2] for name, runs in curves.items()}
    save(draw_step_curves(means, title=title, levels=levels), path)


def reproduce(
    url: str,
    dataset: str,
    runs: Path,
    *,
    epochs: int | None,
    seeds: Sequence[int],
    dims: Sequence[int],
    small_dim_seeds: Sequence[int],
    lr: float | None,
    k_max: int,
    methods: Sequence[str] = tuple(METHODS),
    images: bool = False,
    backbone: str = "resnet18",
    input_size: int | None = None,
    loader_workers: int | None = None,
    max_steps: int | None = None,
    recipe: str = "auto",
    stores: Path | None = None,
    augment: str | None = None,
    allow_image_flip: bool = False,
    size: int | None = None,
    curve_every: int | None = None,
    tag: str = "",
    ceiling: dict[str, float] | None = None,
    anchors: str | None = None,
    lr_schedule: str | None = None,
) -> str:
    """Train and evaluate every method with ``recipe`` (labeldist.trainer.training.recipes; ``epochs``, ``lr``,
    ``size``, ``augment``, ``anchors`` and ``lr_schedule`` override it); returns the markdown table (also written
    to ``table<tag>.md``).

    Each row names how it is ranked: the losses that L2-normalise rank by cosine, the others by Euclidean
    distance, and the untrained network is ranked both ways, so that each trained row has its baseline. With
    ``curve_every``, every seed of each method at the largest dimension is evaluated every that many steps
    (``curve<tag>.png``, nDCG@10 against steps, and ``curve<tag>.md``, its table with the seeds' spread). With
    ``stores`` (the stores' folder) the runs read the stores in this process and the table has a ceiling row
    (:mod:`labeldist.trainer.experiments.ceiling`): a perfect model of the test pictures under the run's augmentation
    (``ceiling``: its jitter, ``{"scale": .., "shift": ..}``)."""
    kind, paper_size = DATASETS[dataset]
    train, test = f"{dataset}-train-{kind}", f"{dataset}-test-{kind}"
    base = runs / dataset
    queries, gallery = load_split(base / "split.json")
    inputs = _inputs(
        runs, train, test, images=images, backbone=backbone, input_size=input_size, loader_workers=loader_workers
    )
    evaluate_at = _evaluator(url, stores, test, inputs, queries, gallery, k_max=k_max, backbone=backbone, dims=dims)
    untrained = {m: evaluate_at(None, m) for m in ("euclidean", "cosine")}
    settings = _RunSettings(
        store=train,
        kind=kind,
        paper_size=paper_size,
        images=images,
        recipe=recipe,
        epochs=epochs,
        lr=lr,
        augment=augment,
        size=size,
        max_steps=max_steps,
        allow_image_flip=allow_image_flip,
        anchors=anchors,
        lr_schedule=lr_schedule,
        where={"url": url, "stores": None if stores is None else str(stores)},
        train_inputs=inputs.train,
    )
    runs_of = {"dims": dims, "methods": methods, "seeds": seeds, "small_dim_seeds": small_dim_seeds}
    results, curves = _train_runs(settings, evaluate_at, base, tag, curve_every=curve_every, **runs_of)
    ceiling_row = None
    if stores is not None and images:
        augment_used = settings.config(methods[0], max(dims), seeds[0], base).augment
        ceiling_row = _ceiling_row(
            stores / test, kind, queries, gallery, k_max=k_max, ceiling=ceiling, augment=augment_used
        )
    title, name = _title(dataset, queries, gallery), inputs.untrained_name
    table = _table(title, ceiling_row, name, untrained, results, dims=dims, methods=methods)
    (base / f"table{tag}.md").write_text(table + "\n", encoding="utf-8")
    _write_figures(
        base, tag, dataset, inputs.untrained_name, untrained, results, curves, ceiling_row, dims, methods, seeds
    )
    return table


def _title(dataset: str, queries: Sequence[int], gallery: Sequence[int]) -> str:
    """The table's title: the dataset, the test set's size and the device the runs used."""
    from labeldist.trainer.training.runtime import pick_device

    return f"{dataset}, {len(queries)} queries x {len(gallery)} gallery; device {pick_device('auto')}"


def _write_figures(
    base: Path,
    tag: str,
    dataset: str,
    untrained_name: str,
    untrained: dict[str, Any],
    results: dict[Any, Any],
    curves: Any,
    ceiling_row: Any,
    dims: Sequence[int],
    methods: Sequence[str],
    seeds: Sequence[int],
) -> None:
    """The figures of :func:`reproduce`: Fig. 3 (methods) and Fig. 5 (dimensions) of Kim et al., and with
    ``curves`` the nDCG@10 against steps (``curve<tag>.png``) and its table."""
    top = max(dims)
    baseline_name = f"{untrained_name}, Euclidean"
    _plot_methods(
        base / f"fig3{tag}.png", dataset, baseline_name, untrained["euclidean"], results, top=top, methods=methods
    )
    _plot_dimensions(base / f"fig5{tag}.png", dataset, results, dims=dims, methods=methods)
    if curves:
        curve_title = f"{dataset}: {top}-d, mean over seeds {', '.join(map(str, seeds))}"
        (base / f"curve{tag}.md").write_text(curve_table(curves) + "\n", encoding="utf-8")
        _plot_step_curves(base / f"curve{tag}.png", curve_title, curves, untrained_name, untrained, ceiling_row)


def main(argv: Sequence[str] | None = None) -> int:
    from labeldist.trainer.training.recipes import RECIPES, SCHEDULES

    p = argparse.ArgumentParser(
        prog="python -m labeldist.trainer.experiments.reproduce", description=__doc__.split("\n")[0]
    )
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument(
        "--stores",
        type=Path,
        help="read the stores from this folder in-process (no service); adds the ceiling row over images",
    )
    p.add_argument("--dataset", choices=sorted(DATASETS), required=True)
    p.add_argument("--runs", type=Path, required=True)
    p.add_argument(
        "--recipe",
        default="auto",
        choices=("auto", *RECIPES),
        help="labeldist.trainer.training.recipes (auto: the paper's over images, labeldist-v1 over features)",
    )
    p.add_argument("--epochs", type=int, help="override the recipe's epochs")
    p.add_argument("--lr", type=float, help="override the recipe's learning rate")
    p.add_argument("--size", type=int, help="override the recipe's minibatch size")
    p.add_argument("--augment", help="override the recipe's augmentation (kind, none, imagenet)")
    p.add_argument("--allow-image-flip", action="store_true", help="with --augment imagenet on poses or layouts")
    p.add_argument(
        "--anchors", choices=("first", "all"), help="override the recipe's anchors (first: the authors' one anchor)"
    )
    p.add_argument("--lr-schedule", choices=SCHEDULES, help="override the recipe's learning-rate schedule")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the largest dimension")
    p.add_argument("--dims", type=int, nargs="+", default=[128, 16])
    p.add_argument("--small-dim-seeds", type=int, nargs="+", default=[0], help="seeds of the other dimensions")
    p.add_argument("--k-max", type=int, default=100)
    p.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    p.add_argument("--images", action="store_true", help="train a CNN on <runs>/images/<store>/ (trainer render)")
    p.add_argument("--backbone", default="resnet18", help="--images: torchvision ResNet (default: %(default)s)")
    p.add_argument("--input-size", type=int, help="--images: input side (default: the images' own)")
    p.add_argument("--loader-workers", type=int, help="--images: decoding processes (default: the trainer's)")
    p.add_argument("--max-steps", type=int, help="stop each run after this many steps (default: the epochs')")
    p.add_argument("--curve-every", type=int, help="evaluate every seed of each method every N steps")
    p.add_argument(
        "--tag",
        default="",
        help="name of a variant (another augmentation, ...): its run folders and outputs end in -TAG",
    )
    p.add_argument(
        "--jitter",
        type=float,
        nargs=2,
        metavar=("SCALE", "SHIFT"),
        help="the ceiling's jitter (default: the kind's own augmentation's: 0.05 0.015 for poses, none for layouts)",
    )
    args = p.parse_args(argv)
    jitter = None if args.jitter is None else {"scale": args.jitter[0], "shift": args.jitter[1]}
    print(
        reproduce(
            args.url,
            args.dataset,
            args.runs,
            epochs=args.epochs,
            seeds=args.seeds,
            dims=args.dims,
            small_dim_seeds=args.small_dim_seeds,
            lr=args.lr,
            k_max=args.k_max,
            methods=args.methods,
            images=args.images,
            backbone=args.backbone,
            input_size=args.input_size,
            loader_workers=args.loader_workers,
            max_steps=args.max_steps,
            recipe=args.recipe,
            stores=args.stores,
            augment=args.augment,
            allow_image_flip=args.allow_image_flip,
            size=args.size,
            curve_every=args.curve_every,
            ceiling=jitter,
            anchors=args.anchors,
            lr_schedule=args.lr_schedule,
            tag=args.tag if not args.tag or args.tag.startswith("-") else f"-{args.tag}",
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
