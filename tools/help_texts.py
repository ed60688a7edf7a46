"""Write the --help of every labeldist and trainer command, one file each, so that a change that must not alter
the command line (a refactor, a move) can be checked against the version before it with ``diff -r``.

    python tools/help_texts.py OUT_FOLDER
    diff -r BEFORE_FOLDER OUT_FOLDER

Walks the parsers themselves (every subcommand, at any depth), at a fixed width of 120 columns.
"""

import argparse
import os
from pathlib import Path

os.environ["COLUMNS"] = "120"


def walk(parser: argparse.ArgumentParser, words: list[str], out: Path) -> int:
    """Write ``parser``'s help to ``out/<words joined by _>.txt`` and recurse into its subcommands."""
    (out / ("_".join(words) + ".txt")).write_text(parser.format_help())
    written = 1
    for action in parser._actions:  # argparse offers no public walk over subcommands
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                written += walk(sub, [*words, name], out)
    return written


def main() -> None:
    from labeldist.cli import build_parser as labeldist_parser
    from labeldist.trainer.cli import build_parser as trainer_parser

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="folder for the help texts, one file per command")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    count = walk(labeldist_parser(), ["labeldist"], out) + walk(trainer_parser(), ["trainer"], out)
    print(f"{count} help texts in {out}")


if __name__ == "__main__":
    main()
