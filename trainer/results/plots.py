"""Figures of runs that name every curve after its run: retrieval curves of ``eval.json`` files (Fig. 3 of Kim et
al.) and loss curves of ``log.jsonl`` files.

    trainer plot runs/a/eval.json runs/b/eval.json --out fig.png
    trainer plot --loss-curves runs/a runs/b --out loss.png

A curve is named after its run: the run folder's name for the files the trainer writes into it (``eval.json``,
``log.jsonl``), else the file's own name. Where several runs get one name, the recorded config that tells them
apart is added (loss, embedding size, seed, ...), then as much of their paths as differs, then a number: no
curve ever hides behind another of the same name.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from labeldist.core.reading import read_regular
from labeldist.errors import UsageError
from labeldist.store.outputs import make_parent, replacing

#: files that the trainer writes into a run folder: a curve read from one is named after the folder
RUN_FILES = {"eval.json", "log.jsonl"}


def run_path(path: str | Path) -> Path:
    """The path that stands for a run: its folder for a run folder's own files, else the file without suffix."""
    path = Path(path).absolute()  # absolute: the run of ./eval.json is the current folder, which has a name
    return path.parent if path.name in RUN_FILES else path.with_suffix("")


def run_file(path: str | Path, name: str) -> Path:
    """``path``, or the file ``name`` in it where it is a (run) folder."""
    path = Path(path)
    return path / name if path.is_dir() else path


def _groups(labels: Sequence[str]) -> list[list[int]]:
    """Indices of the labels that occur more than once, grouped by label."""
    seen: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        seen.setdefault(label, []).append(i)
    return [group for group in seen.values() if len(group) > 1]


def _path_suffix(paths: Sequence[Path]) -> list[str] | None:
    """The shortest trailing parts of each path that tell apart the different ones; None if all are one path."""
    distinct = len(set(paths))
    if distinct == 1:
        return None
    for d in range(1, max(len(p.parts) for p in paths) + 1):
        names = ["/".join(p.parts[-d:]) for p in paths]
        if len(set(names)) == distinct:
            return names
    return [p.as_posix() for p in paths]


class PlotError(UsageError):
    """Runs that cannot be plotted: one line naming the file and what is wrong."""


def _why(error: Exception) -> str:
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(error, RecursionError):
        return "JSON nested too deeply"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error)


def unique_labels(names: Sequence[str], details: Sequence[dict[str, str]], paths: Sequence[str | Path]) -> list[str]:
    """One distinct label per run. ``names``: the wanted labels; ``details``: per run, its recorded config as short
    readable values (``{"loss": "log_ratio", "dim": "16-d"}``); ``paths``: where each run was read from.

    Runs that share a name get, in turn, the config values that differ among them in parentheses, then the
    trailing parts of their paths that differ, then ``#2``, ``#3``: each step only where the earlier left a tie."""
    if len(names) != len(paths):
        raise PlotError(f"{len(names)} labels for {len(paths)} runs: give one --label per run")
    labels = list(names)
    for group in _groups(labels):
        keys = [
            k
            for k in dict.fromkeys(k for i in group for k in details[i])
            if len({details[i].get(k) for i in group}) > 1
        ]
        for i in group:
            values = [details[i][k] for k in keys if k in details[i]]
            if values:
                labels[i] = f"{labels[i]} ({', '.join(values)})"
    for group in _groups(labels):
        suffixes = _path_suffix([run_path(paths[i]) for i in group])
        for i, suffix in zip(group, suffixes or []):
            labels[i] = f"{labels[i]} [{suffix}]"
    for group in _groups(labels):  # the same file twice, or paths that differ only where we cut them
        for n, i in enumerate(group[1:], start=2):
            labels[i] = f"{labels[i]} #{n}"
    return labels


# ---------------------------------------------------------------- eval.json: nDCG@K and mean label distance@K


def read_eval(path: str | Path) -> dict[str, Any]:
    """An ``eval.json`` (a run folder holding one may be given instead); PlotError naming it if it has no curves."""
    path = run_file(path, "eval.json")
    if path.suffix == ".jsonl":
        raise PlotError(f"{path} is a log, not an eval result: plot its losses with --loss-curves")
    try:
        result = json.loads(read_regular(path, "eval result").decode("utf-8"))  # a FIFO refused, never waited on
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise PlotError(f"cannot read {path}: {_why(e)}") from None
    if not isinstance(result, dict) or not all(key in result for key in ("k", "ndcg", "mean_label_distance")):
        raise PlotError(f"{path} is no eval result (no k, ndcg and mean_label_distance curves)")
    return result


def _default_label(result: dict[str, Any]) -> str:
    """The label ``trainer eval`` stores when given no ``--label``: it names no run."""
    return result.get("loss") or "input features"


def eval_name(path: str | Path, result: dict[str, Any]) -> str:
    """A result's name: the label it was given (``trainer eval --label``), else its run's name."""
    label = result.get("label")
    if label and label != _default_label(result):
        return str(label)
    return run_path(path).name


def eval_details(result: dict[str, Any]) -> dict[str, str]:
    """The recorded config of an evaluated model, as short values that may tell runs apart."""
    details = {"loss": result.get("loss") or "untrained"}
    if result.get("embedding_dim") is not None:
        details["dim"] = f"{result['embedding_dim']}-d"
    if result.get("seed") is not None:
        details["seed"] = f"seed {result['seed']}"
    if result.get("steps") is not None:
        details["steps"] = f"{result['steps']} steps"
    if result.get("store"):
        details["store"] = str(result["store"])
    return details


def draw_curves(
    results: dict[str, dict[str, Any]], title: str = "", styles: dict[str, dict[str, Any]] | None = None
) -> Figure:
    """Fig. 3 of Kim et al.: nDCG@K (left) and mean label distance@K (right) against K, one line per labelled
    result (``styles``: matplotlib line options per label). A pyplot-free Figure: nothing global to close."""
    fig = Figure(figsize=(10, 4))
    left, right = fig.subplots(1, 2)
    for label, result in results.items():
        style = (styles or {}).get(label, {})
        left.plot(result["k"], result["ndcg"], label=label, **style)
        right.plot(result["k"], result["mean_label_distance"], label=label, **style)
    left.set(xlabel="K", ylabel="nDCG@K", title="nDCG@K (higher is better)")
    right.set(xlabel="K", ylabel="mean label distance@K", title="mean label distance (lower is better)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # K is a count: no tick at K = 2.5
    left.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def draw_step_curves(
    curves: dict[str, tuple[Sequence[int], Sequence[float]]],
    *,
    ylabel: str = "validation nDCG@10",
    title: str = "",
    levels: dict[str, float] | None = None,
) -> Figure:
    """A metric against training steps, one line per run (``curves``: label -> (steps, values)), and horizontal
    dashed lines at fixed ``levels`` (the untrained network, the ceiling): whether each run had stopped rising."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for i, (label, (steps, values)) in enumerate(curves.items()):
        ax.plot(steps, values, marker="o", markersize=3, label=label, color=f"C{i + 1}")
    for j, (label, value) in enumerate((levels or {}).items()):
        ax.axhline(value, linestyle="--", linewidth=1, color=("0.3", "0.6", "0.8")[j % 3], label=label)
    ax.set(xlabel="training step", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_format(out: str | Path) -> str:
    """The image format of the plot file ``out``, from its suffix (``png`` without one); UsageError naming the file
    and the formats matplotlib writes where it names another.

    >>> plot_format("runs/eval.svg"), plot_format("curves")
    ('svg', 'png')
    """
    suffix = Path(out).suffix[1:].lower()
    formats = Figure().canvas.get_supported_filetypes()
    if suffix and suffix not in formats:
        raise UsageError(
            f"{out}: a plot cannot be written as .{suffix}; name a file ending in {', '.join(sorted(formats))}"
        )
    return suffix or "png"


def save(fig: Figure, out: str | Path, overwrite: bool = True) -> Path:
    """Write ``fig`` at ``out`` (a PNG unless its suffix names another format; its folder made) by
    :mod:`labeldist.store.outputs`' rule: an existing file replaced only with ``overwrite``, and then only a regular
    file outside any store, whole or not at all. The path."""
    fmt = plot_format(out)
    out = make_parent(out)
    with replacing(out, overwrite) as partial:
        fig.savefig(partial, dpi=120, format=fmt)
    return out


#: an untrained network's curve: grey and dashed, a baseline rather than a run
UNTRAINED_STYLE = {"color": "0.5", "linestyle": "--"}


def plot_evals(
    paths: Sequence[str | Path],
    out: str | Path,
    labels: Sequence[str] | None = None,
    title: str = "",
    overwrite: bool = True,
) -> Figure:
    """``trainer plot``: one figure of several eval results, each curve named after its run (or ``labels``), and
    the untrained network each was evaluated against (its ``untrained`` entry) as a grey dashed line."""
    paths = [run_file(p, "eval.json") for p in paths]
    results = [read_eval(p) for p in paths]
    names = list(labels) if labels else [eval_name(p, r) for p, r in zip(paths, results)]
    labelled = unique_labels(names, [eval_details(r) for r in results], paths)
    curves, styles = dict(zip(labelled, results)), {}
    for result in results:  # each untrained network a run was read against (trainer fit --eval-store), once
        untrained = result.get("untrained")
        if isinstance(untrained, dict) and "k" in untrained and "ndcg" in untrained:
            label = f"{untrained.get('model', 'untrained')}, {untrained.get('metric', '?')}"
            if label not in curves:
                curves[label], styles[label] = untrained, UNTRAINED_STYLE
    fig = draw_curves(curves, title=title, styles=styles)
    save(fig, out, overwrite)
    return fig


# ---------------------------------------------------------------- log.jsonl: loss against step


def read_log(path: str | Path) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """The config of a run's last start and its (steps, losses) as one run would have made them: a resumed run
    drops the steps logged after the checkpoint it resumed from (they were done again), and a run started
    afresh in the same folder (start at step 0) replaces what came before. A run folder may be given."""
    path = run_file(path, "log.jsonl")
    config: dict[str, Any] = {}
    steps: dict[int, float] = {}
    try:
        lines = read_regular(path, "trainer log").decode("utf-8").splitlines()  # a FIFO refused, never waited on
    except (OSError, UnicodeDecodeError) as e:
        raise PlotError(f"cannot read {path}: {_why(e)}") from None
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            if n == len(lines):  # a run killed mid-write leaves a partial last line: the rest is good
                break
            raise PlotError(f"{path} line {n} is not JSON") from None
        try:
            if row.get("event") == "start":
                config = row.get("config") or {}
                config = {**config, "device": row.get("device")}
                steps = {s: v for s, v in steps.items() if s <= int(row.get("step", 0))}
            elif row.get("event") == "step" and row.get("loss") is not None:
                steps[int(row["step"])] = float(row["loss"])
        except (AttributeError, KeyError, TypeError, ValueError):
            raise PlotError(f"{path} line {n} is not a trainer log record (is it a trainer log.jsonl?)") from None
    if not steps:
        raise PlotError(f"{path} has no step with a loss (is it a trainer log.jsonl?)")
    order = sorted(steps)
    return config, np.asarray(order), np.asarray([steps[s] for s in order])


def log_details(config: dict[str, Any]) -> dict[str, str]:
    """The recorded config of a training run, as short values that may tell runs apart."""
    details = {}
    if config.get("loss"):
        details["loss"] = str(config["loss"])
    if config.get("loss_options"):
        details["options"] = ", ".join(f"{k}={v}" for k, v in sorted(config["loss_options"].items()))
    if config.get("embedding_dim") is not None:
        details["dim"] = f"{config['embedding_dim']}-d"
    if config.get("seed") is not None:
        details["seed"] = f"seed {config['seed']}"
    for key in ("lr", "size", "store"):
        if config.get(key) is not None:
            details[key] = f"{key} {config[key]}" if key != "store" else str(config[key])
    return details


def smooth(values: np.ndarray, span: int | None = None) -> np.ndarray:
    """A light exponential moving average (span: about 1/50 of the run unless given), debiased as TensorBoard's
    so the first steps are not pulled towards zero."""
    values = np.asarray(values, dtype=np.float64)
    span = span or max(1, round(len(values) / 50))
    alpha = 2.0 / (span + 1)
    out, mean, weight = np.empty_like(values), 0.0, 0.0
    for i, v in enumerate(values):
        mean = (1 - alpha) * mean + alpha * v
        weight = (1 - alpha) * weight + alpha
        out[i] = mean / weight
    return out


def wants_log_scale(losses: Sequence[np.ndarray]) -> bool:
    """Log scale where every loss is positive and they span more than two decades (else a linear scale reads
    better: the usual losses fall by a factor of a few)."""
    values = np.concatenate([np.asarray(v, dtype=np.float64) for v in losses])
    values = values[np.isfinite(values)]
    return bool(len(values) and values.min() > 0 and values.max() / values.min() > 100)


def draw_loss_curves(runs: dict[str, tuple[np.ndarray, np.ndarray]], title: str = "", y_scale: str = "auto") -> Figure:
    """Loss against step, one labelled smoothed line per run with its raw losses faint behind in the same colour.
    ``y_scale``: ``linear``, ``log`` or ``auto`` (:func:`wants_log_scale`)."""
    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    for i, (label, (steps, losses)) in enumerate(runs.items()):
        color = f"C{i % 10}"
        # the raw values unlabelled ("_" keeps them out of the legend): one legend entry per run
        ax.plot(steps, losses, color=color, alpha=0.2, linewidth=0.7, label=f"_raw {label}")
        ax.plot(steps, smooth(losses), color=color, linewidth=1.6, label=label)
    log = y_scale == "log" or (y_scale == "auto" and wants_log_scale([losses for _, losses in runs.values()]))
    if log:
        positive = np.concatenate([v[v > 0] for _, v in runs.values()])
        if len(positive) == sum(len(v) for _, v in runs.values()):
            ax.set_yscale("log")
        else:  # a loss of exactly 0 (or below) has no place on a log axis: linear near zero
            ax.set_yscale("symlog", linthresh=float(positive.min()) if len(positive) else 1e-6)
    ax.set(xlabel="step", ylabel="loss (smoothed; raw faint)", title=title or "training loss")
    ax.grid(alpha=0.3)
    if log:  # decades are read off the minor lines, drawn fainter so the curves stay in front
        ax.grid(alpha=0.1, which="minor")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_losses(
    paths: Sequence[str | Path],
    out: str | Path,
    labels: Sequence[str] | None = None,
    title: str = "",
    y_scale: str = "auto",
    overwrite: bool = True,
) -> Figure:
    """``trainer plot --loss-curves``: the loss curves of several runs (folders or their ``log.jsonl``)."""
    paths = [run_file(p, "log.jsonl") for p in paths]
    logs = [read_log(p) for p in paths]
    names = list(labels) if labels else [run_path(p).name for p in paths]
    labelled = unique_labels(names, [log_details(config) for config, _, _ in logs], paths)
    fig = draw_loss_curves({label: (s, v) for label, (_, s, v) in zip(labelled, logs)}, title=title, y_scale=y_scale)
    save(fig, out, overwrite)
    return fig


def legend_labels(fig: Figure) -> list[str]:
    """The texts of a figure's legends, in order (what a reader sees naming the curves)."""
    return [text.get_text() for ax in fig.axes if ax.get_legend() for text in ax.get_legend().get_texts()]
