#!/usr/bin/env python3
"""The disk size of each install of labeldist: the base package and each extra, measured in an environment that
has labeldist installed with every extra (``[all]``), as the sum of the files of every distribution that install
needs (the transitive closure of its requirements, markers evaluated for this interpreter).

Usage: ENV/bin/python tools/install_sizes.py        (prints one line per install; docs/guide.md quotes them)

``closure`` is also how tests/project/test_wheel_install.py makes a venv of exactly what an extra installs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from importlib import metadata

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

INSTALLS = ("", "serve", "train", "sts", "all")


def _applies(req: Requirement, extra: str) -> bool:
    return req.marker is None or req.marker.evaluate({**default_environment(), "extra": extra})


def closure(own: Iterable[str], extras: Iterable[str]) -> set[str]:
    """The canonical names of every distribution labeldist with ``extras`` needs, given labeldist's own
    requirement lines ``own`` (its Requires-Dist), through every requirement's requirements as installed here."""
    own_reqs = [Requirement(line) for line in own]
    asked, wanted, needed = set(extras), list(extras), set()
    while wanted:  # labeldist's own extras, [all] naming the others
        extra = wanted.pop()
        for req in own_reqs:
            if not _applies(req, extra):
                continue
            if canonicalize_name(req.name) == "labeldist":
                new = set(req.extras) - asked
                asked |= new
                wanted.extend(new)
            else:
                needed.add((canonicalize_name(req.name), frozenset(req.extras)))
    needed |= {(canonicalize_name(r.name), frozenset(r.extras)) for r in own_reqs if _applies(r, "")}
    todo, seen = list(needed), set()
    while todo:
        name, extras_of = todo.pop()
        if (name, extras_of) in seen:
            continue
        seen.add((name, extras_of))
        for line in metadata.distribution(name).requires or []:
            req = Requirement(line)
            if any(_applies(req, e) for e in ("", *extras_of)):
                todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return {name for name, _ in seen}


def distribution_bytes(name: str) -> int:
    """The bytes of the files a distribution installed (its RECORD), as they are on disk now."""
    total = 0
    for file in metadata.distribution(name).files or []:
        try:
            total += os.stat(file.locate()).st_size
        except OSError:
            pass
    return total


def main() -> int:
    own = metadata.distribution("labeldist").requires or []
    labeldist = distribution_bytes("labeldist")
    for install in INSTALLS:
        names = closure(own, [install] if install else [])
        size = labeldist + sum(distribution_bytes(n) for n in names)
        torch = f", torch {distribution_bytes('torch') / 2**30:.2f} GiB" if "torch" in names else ""
        cuda = sum(distribution_bytes(n) for n in names if n.startswith("nvidia-"))
        cuda_part = f", CUDA libraries {cuda / 2**30:.2f} GiB" if cuda else ""
        label = f"labeldist[{install}]" if install else "labeldist"
        print(f"{label}: {size / 2**30:.2f} GiB in {len(names) + 1} distributions{torch}{cuda_part}")
    print(f"(python {sys.version.split()[0]}, torch {metadata.version('torch')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
