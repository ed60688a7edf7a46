"""The ``trainer`` command: ``fit``, ``eval``, ``plot``, ``demo-inputs``, ``split`` (an alias of ``labeldist split``,
which needs no torch) and ``render``.

    trainer fit --url http://127.0.0.1:8000 --store mpii-train-pose --features train.npy --out runs/lr
    trainer render stores/mpii-train-pose --out images/mpii-train           # images drawn from the labels
    trainer fit --store mpii-train-pose --images images/mpii-train --backbone resnet18 --out runs/cnn
    trainer eval --url http://127.0.0.1:8000 --store mpii-test-pose --features test.npy --split split.json \\
        --checkpoint runs/lr/checkpoint.pt --out runs/lr/eval.json --plot runs/lr/eval.png
    trainer plot runs/lr runs/triplet --out fig3.png            # eval.json of each run, named after the run
    trainer plot --loss-curves runs/lr runs/triplet --out loss.png
    trainer split stores/mpii-pose --out stores/mpii-split   # a train store and a test store, and split.json

``fit`` and ``eval`` end with a table; ``--json`` prints their JSON lines instead. Each command lives in its room of
:mod:`labeldist.trainer.commands`; here, the parser's assembly and ``main``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from labeldist import __version__
from labeldist.core.options import os_error_message, show_defaults
from labeldist.engine.split import add_split_parser
from labeldist.errors import LabeldistError
from labeldist.trainer.commands.eval import add_eval_parser
from labeldist.trainer.commands.fit import add_fit_parser
from labeldist.trainer.commands.inputs import add_demo_inputs_parser, add_render_parser
from labeldist.trainer.commands.plot import add_plot_parser


def build_parser() -> argparse.ArgumentParser:
    """The ``trainer`` command's parser: one subcommand each (fit, eval, plot, demo-inputs, split, render)."""
    parser = argparse.ArgumentParser(prog="trainer", description="Train and evaluate embeddings on labeldist stores")
    parser.add_argument("--version", action="version", version=f"trainer (labeldist {__version__})")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_fit_parser(subparsers)
    add_eval_parser(subparsers)
    add_plot_parser(subparsers)
    add_demo_inputs_parser(subparsers)
    add_split_parser(subparsers, "trainer split")
    add_render_parser(subparsers)
    return show_defaults(parser)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except LabeldistError as e:  # the user can fix it: one line
        print(f"trainer {args.command}: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a missing, unreadable or unwritable path, met up front or while working
        print(f"trainer {args.command}: {os_error_message(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
