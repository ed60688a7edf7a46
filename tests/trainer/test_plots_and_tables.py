"""Plots and summaries people read: ``trainer plot`` names every curve after its run (two runs, two labelled
curves, never one hidden behind the other), the loss-curve plot of ``log.jsonl``, and the tables that ``fit`` and
``eval`` end with (``--json`` keeps the JSON line). Real runs: tiny fits through a live ``labeldist serve``."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from labeldist.trainer.cli import main
from labeldist.trainer.results.plots import (
    PlotError,
    draw_loss_curves,
    legend_labels,
    plot_evals,
    plot_losses,
    read_log,
    smooth,
    unique_labels,
    wants_log_scale,
)
from labeldist.trainer.results.report import eval_table, fit_table, format_table
from tests.trainer.conftest import STORE

STEPS = 40


def run_main(*args: str) -> str:
    """stdout of ``trainer ARGS`` run in this process (exit status 0 asserted)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([str(a) for a in args]) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def runs(service: str, features: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two real runs whose folders are both named ``eval`` (``runs/a/eval``, ``runs/b/eval``), with different
    embedding sizes and seeds, each trained a few steps and evaluated by ``trainer fit --eval-store``; ``a``
    prints its table, ``b`` its JSON lines."""
    root = tmp_path_factory.mktemp("runs")
    split = root / "split.json"
    split.write_text(
        json.dumps({"queries": list(range(0, 300, 10)), "gallery": [i for i in range(1, 300, 3) if i % 10]})
    )
    stdout = {}
    for name, dim, seed, extra in (("a", 16, 0, ()), ("b", 8, 1, ("--json",))):
        stdout[name] = run_main(
            "fit",
            "--url",
            service,
            "--store",
            STORE,
            "--features",
            features,
            "--out",
            root / name / "eval",
            "--loss",
            "dense_triplet",
            "--size",
            "30",
            "--max-steps",
            STEPS,
            "--no-progress",
            "--embedding-dim",
            dim,
            "--seed",
            seed,
            "--eval-store",
            STORE,
            "--eval-features",
            features,
            "--split",
            split,
            "--k-max",
            "20",
            *extra,
        )
    return {"root": root, "split": split, "stdout": stdout}


def test_fit_ends_with_a_table_of_the_runs_figures(runs: dict) -> None:
    run = runs["root"] / "a" / "eval"
    end = next(r for r in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if r["event"] == "end")
    lines = runs["stdout"]["a"].splitlines()
    header = lines[0].split()
    assert header[:3] == ["run", "loss", "steps"] and "device" in header
    row = lines[1]
    assert row.startswith(str(run)) and "dense_triplet" in row and f" {STEPS} " in row
    assert f"{end['loss']:.4f}" in row and row.rstrip().endswith("cpu")  # the final loss, the device of the log
    assert f"checkpoint: {run / 'checkpoint.pt'}" in lines
    result = json.loads((run / "eval.json").read_text())
    assert "MLD@K" in runs["stdout"]["a"] and "nDCG@K" in runs["stdout"]["a"]
    assert f"{result['summary']['ndcg@10']:.4f}" in runs["stdout"]["a"]
    assert not any(line.startswith("{") for line in lines), "no JSON line without --json"


def test_fit_reads_the_trained_network_against_the_untrained_one(runs: dict, service: str, features: Path) -> None:
    """With an evaluation store, fit evaluates the untrained network first (the input features here, ranked as
    the trained one is: dense_triplet L2-normalises, so cosine) and keeps it in eval.json and log.jsonl, and
    prints it beside the trained score."""
    from labeldist.client import LabelDistClient
    from labeldist.trainer.training.evaluate import evaluate, load_split

    run = runs["root"] / "a" / "eval"
    result = json.loads((run / "eval.json").read_text())
    untrained = result["untrained"]
    queries, gallery = load_split(runs["split"])
    with LabelDistClient(service) as client:
        baseline = evaluate(client, STORE, str(features), queries, gallery, k_max=20, metric="cosine")
    assert untrained["summary"] == baseline["summary"] and untrained["metric"] == "cosine"
    assert result["summary"]["ndcg@10"] != untrained["summary"]["ndcg@10"]
    evals = [r for r in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if r["event"] == "eval"]
    assert [r["step"] for r in evals] == [0, STEPS]
    assert evals[0]["summary"] == untrained["summary"] and evals[1]["summary"] == result["summary"]
    now, before = result["summary"]["ndcg@10"], untrained["summary"]["ndcg@10"]
    stdout = runs["stdout"]["a"]
    assert f"nDCG@10 {now:.4f}, untrained {before:.4f} (input features (untrained), cosine)" in stdout
    rows = [line.split() for line in stdout.splitlines()]
    ndcg_row = next(i for i, r in enumerate(rows) if r and r[0] == "nDCG@K")
    assert rows[ndcg_row + 1][0] == "untrained" and f"{before:.4f}" in rows[ndcg_row + 1]


def test_the_progress_line_reads_the_loss_against_its_chance_level(
    service: str, features: Path, tmp_path: Path
) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert (
            main(
                [
                    "fit",
                    "--url",
                    service,
                    "--store",
                    STORE,
                    "--features",
                    str(features),
                    "--out",
                    str(tmp_path / "r"),
                    "--loss",
                    "dense_triplet",
                    "--size",
                    "30",
                    "--max-steps",
                    "5",
                ]
            )
            == 0
        )
    logged = [
        r for r in map(json.loads, (tmp_path / "r" / "log.jsonl").read_text().splitlines()) if r["event"] == "step"
    ]
    losses, chances = [r["loss"] for r in logged], [r["chance_level"] for r in logged]
    ratio = np.mean(losses) / np.mean(chances)
    last = [line for line in err.getvalue().splitlines() if "loss=" in line][-1]
    assert f"loss={np.mean(losses):.4f} = {ratio:.2f} of chance" in last


def test_fit_with_json_prints_the_json_lines_as_before(runs: dict) -> None:
    summary, metrics = (json.loads(line) for line in runs["stdout"]["b"].splitlines())
    assert summary["steps"] == STEPS and summary["checkpoint"].endswith("checkpoint.pt")
    result = json.loads((runs["root"] / "b" / "eval" / "eval.json").read_text())
    assert metrics == result["summary"] and result["embedding_dim"] == 8 and result["seed"] == 1


def test_plot_of_two_runs_in_folders_both_named_eval_draws_two_labelled_curves(runs: dict, tmp_path: Path) -> None:
    a, b = runs["root"] / "a" / "eval" / "eval.json", runs["root"] / "b" / "eval" / "eval.json"
    fig = plot_evals([a, b], tmp_path / "fig.png")
    labels = legend_labels(fig)
    # same folder name, told apart by what the runs recorded (embedding size, seed)
    # and the untrained network both were read against (the same input features, ranked alike), once, dashed
    assert labels == ["eval (16-d, seed 0)", "eval (8-d, seed 1)", "input features (untrained), cosine"]
    for ax in fig.axes:
        assert [line.get_label() for line in ax.get_lines()] == labels
    ndcg = fig.axes[0].get_lines()
    assert list(ndcg[0].get_ydata()) == json.loads(a.read_text())["ndcg"]
    assert list(ndcg[1].get_ydata()) == json.loads(b.read_text())["ndcg"]
    assert list(ndcg[2].get_ydata()) == json.loads(a.read_text())["untrained"]["ndcg"]
    assert ndcg[2].get_linestyle() == "--" and ndcg[0].get_linestyle() == "-"

    out = run_main("plot", a, b, "--out", tmp_path / "cli.png")
    assert "3 curves: eval (16-d, seed 0); eval (8-d, seed 1); input features (untrained), cosine" in out
    assert (tmp_path / "cli.png").read_bytes()[:4] == b"\x89PNG"


def plot_refused(capsys, args: list[str], match: str) -> None:
    """``trainer plot ARGS`` refused in one line matching ``match``, exit status 2."""
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainer plot: ") and err.count("\n") == 1 and re.search(match, err), err


def test_runs_of_one_name_and_one_config_are_told_apart_by_their_paths(runs: dict, tmp_path: Path) -> None:
    for where in ("x/lr", "y/lr"):
        (tmp_path / where).mkdir(parents=True)
        shutil.copy(runs["root"] / "a" / "eval" / "eval.json", tmp_path / where / "eval.json")
    fig = plot_evals([tmp_path / "x" / "lr", tmp_path / "y" / "lr" / "eval.json"], tmp_path / "fig.png")
    untrained = "input features (untrained), cosine"  # the baseline both were read against, drawn once
    assert legend_labels(fig) == ["lr [x/lr]", "lr [y/lr]", untrained]
    # the same file twice is still two curves, numbered
    fig = plot_evals([tmp_path / "x" / "lr"] * 2, tmp_path / "fig.png")
    assert legend_labels(fig) == ["lr", "lr #2", untrained] and len(fig.axes[0].get_lines()) == 3


def test_plot_takes_labels_and_a_label_given_to_eval(
    runs: dict, service: str, features: Path, tmp_path: Path, capsys
) -> None:
    a, b = runs["root"] / "a" / "eval", runs["root"] / "b" / "eval"
    out = run_main("plot", a, b, "--label", "ours", "--label", "baseline", "--out", tmp_path / "fig.png")
    assert out.strip().endswith("3 curves: ours; baseline; input features (untrained), cosine")
    plot_refused(
        capsys, ["plot", str(a), str(b), "--label", "ours", "--out", str(tmp_path / "fig.png")], "1 labels for 2 runs"
    )

    # trainer eval --label names the result; its default label (the loss) names no run and is not used
    labelled, default = tmp_path / "mine" / "eval.json", tmp_path / "base" / "eval.json"
    common = [
        "eval",
        "--url",
        service,
        "--store",
        STORE,
        "--features",
        features,
        "--split",
        runs["split"],
        "--k-max",
        "10",
        "--checkpoint",
        a / "checkpoint.pt",
    ]
    table = run_main(*common, "--out", labelled, "--label", "my model")
    assert "dense_triplet, 16-d" in table.splitlines()[0] and "MLD@K" in table
    assert json.loads(run_main(*common, "--out", default, "--json")) == json.loads(default.read_text())["summary"]
    assert legend_labels(plot_evals([labelled, default], tmp_path / "fig.png")) == ["my model", "base"]


def test_plot_refuses_what_is_no_eval_result(runs: dict, tmp_path: Path, capsys) -> None:
    log = runs["root"] / "a" / "eval" / "log.jsonl"
    plot_refused(
        capsys,
        ["plot", str(log), "--out", str(tmp_path / "fig.png")],
        "is a log, not an eval result: plot its losses with --loss-curves",
    )
    (tmp_path / "other.json").write_text(json.dumps({"k": [1, 2]}))
    plot_refused(
        capsys,
        ["plot", str(tmp_path / "other.json"), "--out", str(tmp_path / "fig.png")],
        "other.json is no eval result",
    )
    plot_refused(capsys, ["plot", str(tmp_path / "missing.json"), "--out", str(tmp_path / "fig.png")], "cannot read")
    good = runs["root"] / "a" / "eval" / "eval.json"  # the fifth adversarial run: matplotlib's ValueError before
    plot_refused(
        capsys,
        ["plot", str(good), "--out", str(tmp_path / "x.foo")],
        f"{tmp_path / 'x.foo'}: a plot cannot be written as .foo; name a file ending in ",
    )
    assert not (tmp_path / "x.foo").exists()


def test_loss_curves_of_two_runs_have_two_labelled_lines(runs: dict, tmp_path: Path) -> None:
    a, b = runs["root"] / "a" / "eval", runs["root"] / "b" / "eval"
    fig = plot_losses([a, b / "log.jsonl"], tmp_path / "loss.png")
    labels = legend_labels(fig)
    assert labels == ["eval (16-d, seed 0)", "eval (8-d, seed 1)"]
    (ax,) = fig.axes
    lines = ax.get_lines()
    assert len(lines) == 4  # per run: its raw losses (faint, out of the legend) and their smoothed line
    assert [line.get_label() for line in lines if not line.get_label().startswith("_")] == labels
    assert ax.get_xlabel() == "step" and list(lines[0].get_xdata()) == list(range(1, STEPS + 1))
    logged = [json.loads(line) for line in (a / "log.jsonl").read_text().splitlines()]
    assert list(lines[0].get_ydata()) == [r["loss"] for r in logged if r["event"] == "step"]

    out = run_main("plot", "--loss-curves", a, b, "--out", tmp_path / "cli.png", "--y-scale", "log")
    assert "2 curves" in out and (tmp_path / "cli.png").stat().st_size > 1000


def test_a_resumed_or_restarted_log_reads_as_one_run(tmp_path: Path) -> None:
    def start(step: int) -> str:
        return json.dumps({"event": "start", "step": step, "device": "cpu", "config": {"loss": "ladder"}})

    def steps(first: int, last: int, value: float) -> list[str]:
        return [json.dumps({"event": "step", "step": s, "loss": value}) for s in range(first, last + 1)]

    log = tmp_path / "log.jsonl"
    # steps 4-5 ran after the checkpoint at 3 and were done again on resume; the last line was cut by a kill
    log.write_text("\n".join([start(0), *steps(1, 5, 1.0), start(3), *steps(4, 6, 2.0), '{"event": "st']))
    config, x, y = read_log(log)
    assert config == {"loss": "ladder", "device": "cpu"}
    assert x.tolist() == [1, 2, 3, 4, 5, 6] and y.tolist() == [1, 1, 1, 2, 2, 2]
    log.write_text("\n".join([start(0), *steps(1, 5, 1.0), start(0), *steps(1, 2, 3.0)]))  # started afresh
    assert read_log(log)[1].tolist() == [1, 2]
    log.write_text(start(0) + "\n")
    with pytest.raises(PlotError, match="no step with a loss"):
        read_log(log)


def test_unique_labels_add_only_what_tells_runs_apart() -> None:
    details = [
        {"loss": "log_ratio", "dim": "128-d", "seed": "seed 0"},
        {"loss": "log_ratio", "dim": "16-d", "seed": "seed 0"},
        {"loss": "dense_triplet", "dim": "128-d", "seed": "seed 0"},
    ]
    assert unique_labels(["run", "run", "other"], details, ["a/run/eval.json", "b/run/eval.json", "c.json"]) == [
        "run (128-d)",
        "run (16-d)",
        "other",
    ]
    assert unique_labels(["a", "b"], [{}, {}], ["x", "y"]) == ["a", "b"]


def test_smoothing_and_the_log_scale_choice() -> None:
    assert smooth(np.full(200, 3.0)).tolist() == pytest.approx([3.0] * 200)
    noisy = np.where(np.arange(500) % 2, 1.0, 0.0)
    assert smooth(noisy)[0] == 0.0 and np.ptp(smooth(noisy)[100:]) < 0.5  # starts at the first value, not 0
    assert wants_log_scale([np.array([10.0, 0.05])]) and not wants_log_scale([np.array([1.0, 0.2])])
    assert not wants_log_scale([np.array([10.0, 0.0])])  # a zero loss has no place on a log axis
    fig = draw_loss_curves({"ladder": (np.arange(1, 4), np.array([1.0, 0.0, 0.001]))}, y_scale="log")
    assert fig.axes[0].get_yscale() == "symlog"


def test_tables_align_and_show_what_is_missing() -> None:
    table = format_table(["run", "steps"], [["a", "5"], ["longer", "300"]]).splitlines()
    assert table == ["run     steps", "a           5", "longer    300"]
    assert "-" in fit_table({"steps": 0, "loss": None, "seconds": 0.5, "data_wait_s": 0.0}, run="r", loss="l")
    ladder = {
        "steps": 3,
        "loss": 0.5,
        "loss_info": {"ladder_mode": "quantile", "thresholds": [0.51234567, 0.25], "reason": None},
    }
    assert "\nloss: ladder_mode quantile, thresholds [0.5123, 0.25]" in fit_table(ladder, run="r", loss="ladder")
    result = {
        "store": "s",
        "n_queries": 3,
        "n_gallery": 9,
        "metric": "euclidean",
        "embedding_dim": 4,
        "summary": {"ndcg@1": 0.5, "ndcg@5": 0.25, "mean_label_distance@1": 12.0, "other@5": 1.5},
    }
    lines = eval_table(result).splitlines()
    assert lines[0] == "s: 3 queries x 9 gallery, euclidean ranking; input features (untrained), 4-d"
    assert lines[1].split() == ["K", "1", "5"]
    assert lines[2].split() == ["MLD@K", "12.0000", "-"] and lines[3].split() == ["nDCG@K", "0.5000", "0.2500"]
    assert lines[4].split() == ["other@K", "-", "1.5000"]


def test_python_runs_the_same_sequence_as_the_command(runs: dict, service: str, features: Path, tmp_path: Path) -> None:
    """fit_and_evaluate (what `trainer fit --eval-store` calls): the same untrained baseline, files and log lines
    from Python, for the run of the same settings."""
    from labeldist.trainer.training.config import FitConfig
    from labeldist.trainer.training.sequence import HeldOut, fit_and_evaluate

    config = FitConfig(
        url=service,
        store=STORE,
        out=str(tmp_path / "py"),
        features=str(features),
        loss="dense_triplet",
        size=30,
        max_steps=STEPS,
        progress=False,
        embedding_dim=16,
        seed=0,
    )
    done = fit_and_evaluate(config, HeldOut(STORE, str(runs["split"]), features=str(features), k_max=20))
    assert done["fit"]["steps"] == STEPS
    cli = json.loads((runs["root"] / "a" / "eval" / "eval.json").read_text())
    mine = json.loads((tmp_path / "py" / "eval.json").read_text())
    assert mine["untrained"]["summary"] == cli["untrained"]["summary"] and mine == done["eval"]
    events = [r["event"] for r in map(json.loads, (tmp_path / "py" / "log.jsonl").read_text().splitlines())]
    assert events.count("eval") == 2 and (tmp_path / "py" / "eval.png").read_bytes()[:4] == b"\x89PNG"
