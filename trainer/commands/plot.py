"""``trainer plot``: one figure of several runs' eval results or losses (wired in :mod:`labeldist.trainer.cli`)."""

from __future__ import annotations

import argparse


def _plot(args: argparse.Namespace) -> int:
    from labeldist.trainer.results.plots import legend_labels, plot_evals, plot_format, plot_losses

    plot_format(args.out)
    if args.loss_curves:
        fig = plot_losses(
            args.results,
            args.out,
            labels=args.label,
            title=args.title or "",
            y_scale=args.y_scale,
            overwrite=args.overwrite,
        )
    else:
        fig = plot_evals(args.results, args.out, labels=args.label, title=args.title or "", overwrite=args.overwrite)
    labels = legend_labels(fig)
    print(f"{args.out}: {len(labels)} curves: " + "; ".join(labels))
    return 0


def add_plot_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """``trainer plot``: one figure of several runs' eval results or losses."""
    pl = subparsers.add_parser("plot", help="one figure of several runs' eval results (Fig. 3 of Kim et al.) or losses")
    pl.add_argument("results", nargs="+", help="eval.json files or run folders (--loss-curves: log.jsonl or folders)")
    pl.add_argument("--out", required=True, help="PNG")
    pl.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    pl.add_argument("--title")
    pl.add_argument("--loss-curves", action="store_true", help="loss against step from each run's log.jsonl")
    pl.add_argument("--label", action="append", help="a curve's name, once per run in order (default: the run's)")
    pl.add_argument(
        "--y-scale",
        choices=("auto", "linear", "log"),
        default="auto",
        help="loss curves: auto is log where the losses span more than two decades",
    )
    pl.set_defaults(func=_plot)
    return pl
