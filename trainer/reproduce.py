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
from pathlib import Path
from typing import Any

import numpy as np
from labeldist.trainer.client import LabelDistClient
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


def reproduce(
    url: str,
    dataset: str,
    runs: Path,
    *,
    epochs: int,
    seeds: Sequence[int],
    dims: Sequence[int],
    small_dim_seeds: Sequence[int],
    lr: float,
    k_max: int,
    methods: Sequence[str] = tuple(METHODS),
    images: bool = False,
    backbone: str = "resnet18",
    input_size: int | None = None,
    loader_workers: int | None = None,
    max_steps: int | None = None,
) -> str:
    """Train and evaluate every method; returns the markdown table (also written to ``table.md``)."""
    kind, size = DATASETS[dataset]
    train, test = f"{dataset}-train-{kind}", f"{dataset}-test-{kind}"
    base = runs / dataset
    queries, gallery = load_split(base / "split.json")
    if images:
        train_inputs = {"images": str(runs / "images" / train), "backbone": backbone, "input_size": input_size,
                        "loader_workers": loader_workers}  # fmt: skip
        test_features, source = None, ImageSource(str(runs / "images" / test), input_size=input_size,
                                                  workers=loader_workers)  # fmt: skip
        untrained_name = f"untrained {backbone} (random weights)"
    else:
        train_inputs = {"features": str(runs / "features" / f"{train}.npy")}
        test_features, source, untrained_name = (
            str(runs / "features" / f"{test}.npy"),
            None,
            "input features (untrained)",
        )
    with LabelDistClient(url) as client:
        untrained = evaluate(client, test, test_features, queries, gallery, k_max=k_max, images=source,
                             backbone=backbone, embedding_dim=max(dims))  # fmt: skip
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for dim in dims:
        for method in methods:
            loss, options, _ = METHODS[method]
            for seed in seeds if dim == max(dims) else small_dim_seeds:
                out = base / f"{method}-d{dim}-s{seed}"
                eval_path = out / "eval.json"
                if not eval_path.exists():  # finished runs are reused
                    summary = fit(FitConfig(url=url, store=train, out=str(out), loss=loss, loss_options=options,
                                            size=size, neighbors=5, epochs=epochs, lr=lr, embedding_dim=dim,
                                            seed=seed, resume=True, progress=False, max_steps=max_steps,
                                            **train_inputs))  # fmt: skip
                    with LabelDistClient(url) as client:
                        result = evaluate(client, test, test_features, queries, gallery, images=source,
                                          checkpoint=str(out / "checkpoint.pt"), k_max=k_max)  # fmt: skip
                    result["train_seconds"] = summary["seconds"]
                    result["data_wait_share"] = summary["data_wait_share"]
                    eval_path.write_text(json.dumps(result), encoding="utf-8")
                results.setdefault((method, dim), []).append(json.loads(eval_path.read_text(encoding="utf-8")))

    header = " | ".join(f"MLD@{k}" for k in TABLE_K) + " | " + " | ".join(f"nDCG@{k}" for k in TABLE_K)
    lines = [f"| method ({dataset}, {len(queries)} queries x {len(gallery)} gallery) | {header} |",
             "|---" * (1 + 2 * len(TABLE_K)) + "|", _row(untrained_name, [untrained])]  # fmt: skip
    for dim in sorted(dims, reverse=True):
        for method in methods:
            got, name = results[(method, dim)], METHODS[method][2]
            seeds_used = ",".join(str(r["seed"]) for r in got)
            minutes = np.mean([r.get("train_seconds", np.nan) for r in got]) / 60
            lines.append(_row(f"{name}, {dim}-d (seeds {seeds_used}; {minutes:.1f} min/run)", got))
    table = "\n".join(lines)
    (base / "table.md").write_text(table + "\n", encoding="utf-8")

    def mean_curves(items: list[dict[str, Any]]) -> dict[str, Any]:
        return {key: np.mean([r[key] for r in items], axis=0) for key in ("k", "ndcg", "mean_label_distance")}

    top = max(dims)
    plot_curves({untrained_name: untrained, **{METHODS[m][2]: mean_curves(results[(m, top)]) for m in methods}},
                base / "fig3.png", title=f"{dataset}: {top}-d embeddings (mean over seeds)",
                styles={METHODS[m][2]: {"color": f"C{i + 1}"} for i, m in enumerate(methods)})  # fmt: skip
    curves, styles = {}, {}
    for i, m in enumerate(methods):
        for dim in dims:
            label = f"{METHODS[m][2]}, {dim}-d"
            curves[label] = mean_curves(results[(m, dim)])
            styles[label] = {"color": f"C{i + 1}", "linestyle": "-" if dim == top else "--"}
    plot_curves(curves, base / "fig5.png", title=f"{dataset}: {' vs '.join(f'{d}-d' for d in dims)} (dashed: smaller)",
                styles=styles)  # fmt: skip
    return table


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m labeldist.trainer.reproduce", description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--dataset", choices=sorted(DATASETS), required=True)
    p.add_argument("--runs", type=Path, required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the largest dimension")
    p.add_argument("--dims", type=int, nargs="+", default=[128, 16])
    p.add_argument("--small-dim-seeds", type=int, nargs="+", default=[0], help="seeds of the other dimensions")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--k-max", type=int, default=100)
    p.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    p.add_argument("--images", action="store_true", help="train a CNN on <runs>/images/<store>/ (trainer render)")
    p.add_argument("--backbone", default="resnet18", help="--images: torchvision ResNet (default: %(default)s)")
    p.add_argument("--input-size", type=int, help="--images: input side (default: the images' own)")
    p.add_argument("--loader-workers", type=int, help="--images: decoding processes (default: the trainer's)")
    p.add_argument("--max-steps", type=int, help="stop each run after this many steps (default: the epochs')")
    args = p.parse_args(argv)
    print(reproduce(args.url, args.dataset, args.runs, epochs=args.epochs, seeds=args.seeds, dims=args.dims,
                    small_dim_seeds=args.small_dim_seeds, lr=args.lr, k_max=args.k_max,
                    methods=args.methods, images=args.images, backbone=args.backbone, input_size=args.input_size,
                    loader_workers=args.loader_workers, max_steps=args.max_steps))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
