"""The reproduction of RESULTS.md: every method of the table on one dataset, through a running service.

    python -m labeldist.trainer.reproduce --url http://127.0.0.1:8765 --dataset mpii --runs /tmp/trainer-runs \\
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
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.trainer.evaluate import ImageSource, evaluate, load_split, plot_curves
from labeldist.trainer.fit import FitConfig, fit

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
    from labeldist.trainer.fit import open_source

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
) -> str:
    """Train and evaluate every method with ``recipe`` (labeldist.trainer.recipes; ``epochs``, ``lr``, ``size``
    and ``augment`` override it); returns the markdown table (also written to ``table<tag>.md``).

    Each row names how it is ranked: the losses that L2-normalise rank by cosine, the others by Euclidean
    distance, and the untrained network is ranked both ways, so that each trained row has its baseline. With
    ``curve_every``, seed ``seeds[0]`` of each method at the largest dimension is evaluated every that many steps
    (``curve<tag>.png``, nDCG@10 against steps). With ``stores`` (the stores' folder) the runs read the stores in
    this process and the table has a ceiling row (:mod:`labeldist.trainer.ceiling`): a perfect model of the test
    pictures under the run's augmentation (``ceiling``: its jitter, ``{"scale": .., "shift": ..}``)."""
    from labeldist.trainer.fit import pick_device
    from labeldist.trainer.recipes import resolve_recipe

    kind, paper_size = DATASETS[dataset]
    train, test = f"{dataset}-train-{kind}", f"{dataset}-test-{kind}"
    base = runs / dataset
    queries, gallery = load_split(base / "split.json")
    if images:
        train_inputs = {
            "images": str(runs / "images" / train),
            "backbone": backbone,
            "input_size": input_size,
            "loader_workers": loader_workers,
        }
        test_features, source = (
            None,
            ImageSource(str(runs / "images" / test), input_size=input_size, workers=loader_workers),
        )
        untrained_name = f"untrained {backbone} (random weights)"
    else:
        train_inputs = {"features": str(runs / "features" / f"{train}.npy")}
        test_features, source, untrained_name = str(runs / "features" / f"{test}.npy"), None, "input features"
    where = {"url": url, "stores": None if stores is None else str(stores)}

    def evaluate_at(checkpoint: str | None, metric: str | None = None) -> dict[str, Any]:
        with _source(url, stores) as client:
            return evaluate(
                client,
                test,
                test_features,
                queries,
                gallery,
                k_max=k_max,
                images=source,
                checkpoint=checkpoint,
                backbone=None if checkpoint else backbone,
                embedding_dim=None if checkpoint else max(dims),
                metric=metric,
            )

    untrained = {m: evaluate_at(None, m) for m in ("euclidean", "cosine")}
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    curves: dict[str, tuple[list[int], list[float]]] = {}
    for dim in dims:
        for method in methods:
            loss, options, _ = METHODS[method]
            for seed in seeds if dim == max(dims) else small_dim_seeds:
                out = base / f"{method}-d{dim}-s{seed}{tag}"
                given: dict[str, Any] = {"loss": loss, "loss_options": options, "embedding_dim": dim}
                for name, value in (("epochs", epochs), ("lr", lr), ("augment", augment), ("size", size)):
                    if value is not None:
                        given[name] = value
                if size is None and recipe == "labeldist-v1":
                    given["size"] = paper_size
                values = resolve_recipe(recipe, kind=kind, images=images, given=given)
                config = FitConfig(
                    store=train,
                    out=str(out),
                    seed=seed,
                    resume=True,
                    progress=False,
                    max_steps=max_steps,
                    allow_image_flip=allow_image_flip,
                    **where,
                    **values,
                    **train_inputs,
                )
                if curve_every and dim == max(dims) and seed == seeds[0]:
                    total = max_steps or 10**9
                    curve = _curve(config, evaluate_at, curve_every, total, out / "curve.json")
                    curves[METHODS[method][2]] = (curve["steps"], curve["ndcg@10"])
                eval_path = out / "eval.json"
                if not eval_path.exists():  # finished runs are reused
                    _fit_and_eval(config, evaluate_at, eval_path)
                results.setdefault((method, dim), []).append(json.loads(eval_path.read_text(encoding="utf-8")))

    device = str(pick_device("auto"))
    header = " | ".join(f"MLD@{k}" for k in TABLE_K) + " | " + " | ".join(f"nDCG@{k}" for k in TABLE_K)
    lines = [
        f"| method ({dataset}, {len(queries)} queries x {len(gallery)} gallery; device {device}) | {header} |",
        "|---" * (1 + 2 * len(TABLE_K)) + "|",
    ]
    ceiling_row = None
    if stores is not None and images:
        from labeldist.trainer.augment import kind_augmentation
        from labeldist.trainer.ceiling import store_ceiling

        kind_aug = kind_augmentation(kind).augmentation  # the jitter the kind's own augmentation trains with
        jitter = ceiling or {"scale": kind_aug.scale, "shift": kind_aug.shift}
        ceiling_row = store_ceiling(str(stores / test), {"queries": queries, "gallery": gallery}, k_max=k_max, **jitter)
        lines.append(_row(f"ceiling: a perfect model of the test pictures ({ceiling_row['note']})", [ceiling_row]))
    for metric, result in untrained.items():
        lines.append(_row(f"{untrained_name}, ranked by {_ranked(metric)}", [result]))
    for dim in sorted(dims, reverse=True):
        for method in methods:
            got, name = results[(method, dim)], METHODS[method][2]
            seeds_used = ",".join(str(r["seed"]) for r in got)
            minutes = np.mean([r.get("train_seconds", np.nan) for r in got]) / 60
            steps = ",".join(sorted({str(r.get("steps", "?")) for r in got}))
            epochs_run = ",".join(sorted({f"{r.get('epochs', float('nan')):.2f}" for r in got}))
            lines.append(
                _row(
                    f"{name}, {dim}-d, ranked by {_ranked(got[0]['metric'])} (seeds {seeds_used}; "
                    f"{steps} steps = {epochs_run} epochs; {minutes:.1f} min/run)",
                    got,
                )
            )
    table = "\n".join(lines)
    (base / f"table{tag}.md").write_text(table + "\n", encoding="utf-8")

    def mean_curves(items: list[dict[str, Any]]) -> dict[str, Any]:
        return {key: np.mean([r[key] for r in items], axis=0) for key in ("k", "ndcg", "mean_label_distance")}

    top = max(dims)
    baseline = untrained["euclidean"]
    plot_curves(
        {f"{untrained_name}, Euclidean": baseline, **{METHODS[m][2]: mean_curves(results[(m, top)]) for m in methods}},
        base / f"fig3{tag}.png",
        title=f"{dataset}: {top}-d embeddings (mean over seeds)",
        styles={METHODS[m][2]: {"color": f"C{i + 1}"} for i, m in enumerate(methods)},
    )
    fig5, styles = {}, {}
    for i, m in enumerate(methods):
        for dim in dims:
            label = f"{METHODS[m][2]}, {dim}-d"
            fig5[label] = mean_curves(results[(m, dim)])
            styles[label] = {"color": f"C{i + 1}", "linestyle": "-" if dim == top else "--"}
    plot_curves(
        fig5,
        base / f"fig5{tag}.png",
        title=f"{dataset}: {' vs '.join(f'{d}-d' for d in dims)} (dashed: smaller)",
        styles=styles,
    )
    if curves:
        from labeldist.trainer.plots import draw_step_curves, save

        levels = {f"{untrained_name} ({_ranked(m)})": r["summary"]["ndcg@10"] for m, r in untrained.items()}
        if ceiling_row is not None:
            levels["ceiling"] = ceiling_row["summary"]["ndcg@10"]
        save(
            draw_step_curves(curves, title=f"{dataset}: {top}-d, seed {seeds[0]}", levels=levels),
            base / f"curve{tag}.png",
        )
    return table


def main(argv: Sequence[str] | None = None) -> int:
    from labeldist.trainer.recipes import RECIPES

    p = argparse.ArgumentParser(prog="python -m labeldist.trainer.reproduce", description=__doc__.split("\n")[0])
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
        help="labeldist.trainer.recipes (auto: the paper's over images, labeldist-v1 over features)",
    )
    p.add_argument("--epochs", type=int, help="override the recipe's epochs")
    p.add_argument("--lr", type=float, help="override the recipe's learning rate")
    p.add_argument("--size", type=int, help="override the recipe's minibatch size")
    p.add_argument("--augment", help="override the recipe's augmentation (kind, none, imagenet)")
    p.add_argument("--allow-image-flip", action="store_true", help="with --augment imagenet on poses or layouts")
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
    p.add_argument("--curve-every", type=int, help="evaluate the first seed of each method every N steps")
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
            tag=args.tag if not args.tag or args.tag.startswith("-") else f"-{args.tag}",
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
