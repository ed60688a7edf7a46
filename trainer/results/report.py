"""The tables ``trainer fit`` and ``trainer eval`` end with: small aligned text for people (``--json`` keeps
the JSON line for programs; the files a run writes do not change)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: summary metrics in the order and with the short names of the papers (Kim et al.: MLD, nDCG; Zhou et al.:
#: CS, R); a metric not named here is shown under its own name after them
METRIC_NAMES = {"mean_label_distance": "MLD", "ndcg": "nDCG", "coherent_score": "CS", "recall": "R"}
#: what each short name means, for the line under the table
METRIC_NOTES = {
    "mean_label_distance": "MLD: mean label distance (lower is better)",
    "ndcg": "nDCG (higher is better)",
    "coherent_score": "CS: coherent score (higher)",
    "recall": "R: recall (higher)",
}
#: the K shown by default: a few, so the table stays narrow (every K of the summary is in --json)
TABLE_K = (1, 5, 10, 20, 100)
_NUMBER = re.compile(r"^[-+]?(\d[\d.,]*|\.\d+)(e[-+]?\d+)?( ?[a-z%]+)?( \(\d+%\))?$")


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns aligned under ``header``, two spaces apart: numbers to the right, text to the left."""
    cells = [list(header), *[list(r) for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    numeric = [
        all(_NUMBER.match(row[i]) or row[i] == "-" for row in cells[1:]) and len(cells) > 1 for i in range(len(header))
    ]
    return "\n".join(
        "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric)).rstrip()
        for row in cells
    )


def format_seconds(seconds: float | None) -> str:
    """``0.84 s``, ``12.3 s``, ``4 min 05 s``, ``2 h 03 min``."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, s = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {s:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def format_number(value: float | None) -> str:
    """Four decimals for the usual metric and loss values, fewer for large ones; ``-`` for none (or NaN)."""
    if value is None or value != value:
        return "-"
    if abs(value) >= 1000:
        return f"{value:.0f}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    if value != 0 and abs(value) < 1e-3:
        return f"{value:.2e}"
    return f"{value:.4f}"


def _compact(value: Any) -> str:
    """A logged value short: floats to 4 significant digits, lists of them in brackets."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_compact(v) for v in value) + "]"
    return str(value)


def run_device(out: str | Path) -> str | None:
    """The device of a run's last start, from its ``log.jsonl`` (None where the log names none)."""
    device = None
    try:
        lines = (Path(out) / "log.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        if '"start"' in line:  # only start events name the device: skip parsing the many step lines
            try:
                device = json.loads(line).get("device") or device
            except json.JSONDecodeError:
                continue
    return device


def fit_table(summary: dict[str, Any], *, run: str, loss: str, device: str | None = None) -> str:
    """The end of ``trainer fit``: one row (run, loss, steps, time, final loss, data wait, device), then the
    checkpoint. ``summary``: what :func:`labeldist.trainer.training.fit.fit` returns."""
    seconds, waited = summary.get("seconds"), summary.get("data_wait_s")
    wait = format_seconds(waited)
    if waited is not None and seconds:
        wait += f" ({waited / seconds:.0%})"
    header = ["run", "loss", "steps", "time", "final loss", "data wait", "device"]
    row = [
        run,
        loss,
        str(summary.get("steps", "-")),
        format_seconds(seconds),
        format_number(summary.get("loss")),
        wait,
        device or "-",
    ]
    table = format_table(header, [row])
    if summary.get("loss_info"):  # what the loss decided in the run (the ladder's calibrated thresholds)
        table += "\nloss: " + ", ".join(f"{k} {_compact(v)}" for k, v in summary["loss_info"].items() if v is not None)
    if summary.get("checkpoint"):
        table += f"\ncheckpoint: {summary['checkpoint']}"
    return table


def _model_line(result: dict[str, Any]) -> str:
    """What was evaluated, in words: ``dense_triplet, 16-d, 40 steps, seed 0`` or ``input features (untrained)``."""
    if not result.get("loss"):
        model = result.get("model")
        what = model if isinstance(model, str) and model.startswith("untrained") else "input features (untrained)"
        return f"{what}, {result.get('embedding_dim', '?')}-d"
    parts = [str(result["loss"]), f"{result.get('embedding_dim', '?')}-d"]
    if result.get("steps") is not None:
        parts.append(f"{result['steps']} steps")
    if result.get("seed") is not None:
        parts.append(f"seed {result['seed']}")
    return ", ".join(parts)


def eval_table(result: dict[str, Any], ks: Sequence[int] = TABLE_K) -> str:
    """The end of ``trainer eval``: a title line (store, queries x gallery, model), then one row per metric of
    the result's summary (MLD@K, nDCG@K, then the others) and one column per K of ``ks`` it holds."""
    summary: dict[str, Any] = result.get("summary", {})
    by_metric: dict[str, dict[int, Any]] = {}
    for key, value in summary.items():
        name, _, k = key.rpartition("@")
        if name and k.isdigit():
            by_metric.setdefault(name, {})[int(k)] = value
    shown = sorted({k for values in by_metric.values() for k in values if k in ks})
    if not shown:  # a short k_max: show what there is
        shown = sorted({k for values in by_metric.values() for k in values})
    order = [m for m in METRIC_NAMES if m in by_metric] + [m for m in by_metric if m not in METRIC_NAMES]
    rows = [[f"{METRIC_NAMES.get(m, m)}@K", *(format_number(by_metric[m].get(k)) for k in shown)] for m in order]
    untrained = result.get("untrained")
    if isinstance(untrained, dict):  # the same metrics of the network before training, row under row
        before = untrained.get("summary", {})
        rows = [
            row
            for m, row in zip(order, rows)
            for row in (
                [row, ["  untrained", *(format_number(before.get(f"{m}@{k}")) for k in shown)]]
                if m in UNTRAINED_ROWS
                else [row]
            )
        ]
    title = (
        f"{result.get('store', '?')}: {result.get('n_queries', '?')} queries x {result.get('n_gallery', '?')} "
        f"gallery, {result.get('metric', '?')} ranking; {_model_line(result)}"
    )
    notes = "; ".join(METRIC_NOTES[m] for m in order if m in METRIC_NOTES)
    lines = [title, format_table(["K", *map(str, shown)], rows), *([notes] if notes else [])]
    versus = untrained_line(result)
    return "\n".join([*lines, *([versus] if versus else [])])


#: the metrics whose untrained values ``trainer fit`` shows under the trained ones
UNTRAINED_ROWS = ("mean_label_distance", "ndcg")


def untrained_line(result: dict[str, Any], k: int = 10) -> str | None:
    """``nDCG@10 0.851, untrained 0.554 (untrained resnet18 (seed 0), euclidean)``: a trained result beside the
    untrained network's (its ``untrained`` entry, which ``trainer fit --eval-store`` records); None without one."""
    untrained = result.get("untrained")
    if not isinstance(untrained, dict):
        return None
    key = f"ndcg@{k}"
    now, before = result.get("summary", {}).get(key), untrained.get("summary", {}).get(key)
    if now is None or before is None:
        return None
    what = f"{untrained.get('model', 'untrained')}, {untrained.get('metric', '?')}"
    return f"nDCG@{k} {format_number(now)}, untrained {format_number(before)} ({what})"
