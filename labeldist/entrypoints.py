"""Console scripts that stand in front of a part needing an extra (pyproject.toml's [project.scripts]).

The top layer: it may import anything, and imports the part only once :mod:`labeldist.core.extras` has found the
extra's packages installed, so that where they are not the command ends in the one line naming the extra, before
anything imports them. (The guard cannot live in the part: importing any module of ``labeldist.trainer`` runs its
``__init__``, which imports torch.)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from labeldist.core.extras import MissingExtra, extra_of, message, require


def trainer_main(argv: Sequence[str] | None = None) -> int:
    """The ``trainer`` command: one line naming [train] where its packages are missing, else
    :func:`labeldist.trainer.cli.main` (whose modules import torch as they load)."""
    try:
        require("trainer", "train")
        from labeldist.trainer.cli import main
    except ModuleNotFoundError as e:
        extra = extra_of(e)
        if extra is None:
            raise
        missing = e.missing if isinstance(e, MissingExtra) else [(e.name or "").partition(".")[0]]
        print(f"trainer: error: {message('trainer', extra, missing)}", file=sys.stderr)
        return 2
    return main(argv)
