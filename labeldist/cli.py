"""The ``labeldist`` command: ``precompute``, ``append``, ``info``, ``verify``, ``export``, ``split`` and ``serve``.

Each command lives in its room of :mod:`labeldist.commands` (its parser beside its handler: build, stores, serve, sts);
here, the parser's assembly and ``main``, which prints every error of the project's root as one line.

labeldist precompute pose data/mpii/mpii_valid_2958.csv --out stores/mpii-pose
labeldist precompute layout --generate 2000 --out stores/lsun5-layout_miou
labeldist info stores/mpii-pose
labeldist verify stores/mpii-pose --sample 500
labeldist export stores/mpii-pose --format csv --out mpii-neighbors.csv
labeldist split stores/mpii-pose --out stores/mpii-split
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from labeldist import __version__
from labeldist.core.extras import extra_of, message, require
from labeldist.core.options import os_error_message, show_defaults
from labeldist.errors import LabeldistError

log = logging.getLogger("labeldist")


def build_parser() -> argparse.ArgumentParser:
    from labeldist.commands.build import add_build_parsers
    from labeldist.commands.serve import add_serve_parser
    from labeldist.commands.stores import add_store_parsers
    from labeldist.commands.sts import add_sts_parser

    parser = argparse.ArgumentParser(prog="labeldist", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress messages")
    parser.add_argument("--version", action="version", version=f"labeldist {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_build_parsers(sub)  # precompute, append
    add_store_parsers(sub)  # info, verify, export, split
    add_serve_parser(sub)
    add_sts_parser(sub)
    return show_defaults(parser)


def _command(args: argparse.Namespace) -> str:
    """The command as typed, up to its options: ``labeldist precompute captions``, ``labeldist verify``."""
    words = ["labeldist", args.command, getattr(args, "kind", None) or getattr(args, "sts_command", None)]
    return " ".join(w for w in words if w)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    try:
        if args.command == "sts":
            require(f"labeldist sts {args.sts_command}", "sts")
        return args.func(args)
    except ModuleNotFoundError as e:  # a package of an extra: one line naming the extra (labeldist.core.extras)
        extra = extra_of(e)
        if extra is None:
            raise
        missing = getattr(e, "missing", None) or [(e.name or "").partition(".")[0]]
        print(f"labeldist: error: {message(_command(args), extra, missing)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head`: the reader has all it wanted; not an error to report
        sys.stderr.close()
        return 141
    except OSError as e:  # a missing, unreadable or wrong path, checked up front or met while working
        print(f"labeldist: error: {os_error_message(e)}", file=sys.stderr)
        return 2
    except LabeldistError as e:  # every error of labeldist's own: one line
        print(f"labeldist: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
