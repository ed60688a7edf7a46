"""What the kinds registry costs: a kind looked up by name, and the registry built from a cold process.

- **Look-up** (the service's request path: a store's distance class, per on-demand distances, search and
  ``include_labels`` request): ``get_kind("pose")``, against its baseline in the same run, the look-up of the same
  Kind in the built registry's dictionary (``registry().kinds["pose"]``). Median of ``--repeats`` rounds of
  ``timeit``, microseconds a call; and the listing of the kinds package's folder that each look-up made before the
  list was cached.
- **Start-up**, each in a new Python process (median of ``--repeats``): importing ``labeldist.kinds`` and
  building the whole registry (what ``labeldist precompute`` and ``append`` do to make their sub-commands: every
  kind module, each importing its labels and distance modules), against one built-in kind (``get_kind("pose")``:
  what opening a pose store does) and against the bare ``import labeldist.kinds``.

    .venv/bin/python benchmarks/bench_registry.py --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import timeit

STARTUP = {
    "import labeldist.kinds": "import labeldist.kinds",
    "get_kind('pose'), cold": "import labeldist.kinds as k; k.get_kind('pose')",
    "registry(), cold": "import labeldist.kinds as k; k.registry()",
}


def lookup_us(statement: str, setup: str, repeats: int, number: int = 20_000) -> float:
    """Median microseconds a call of ``statement`` over ``repeats`` rounds of ``number`` calls."""
    rounds = timeit.repeat(statement, setup, repeat=repeats, number=number)
    return statistics.median(rounds) / number * 1e6


def startup_s(code: str, repeats: int) -> float:
    """Median seconds a new Python process takes to run ``code`` (the interpreter's own start included)."""
    program = f"import time; t = time.perf_counter(); {code}; print(time.perf_counter() - t)"
    times = [
        float(subprocess.run([sys.executable, "-c", program], check=True, capture_output=True, text=True).stdout)
        for _ in range(repeats)
    ]
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    setup = "from labeldist.kinds import get_kind, registry; registry()"
    lookup = lookup_us("get_kind('pose')", setup, args.repeats)
    baseline = lookup_us("registry().kinds['pose']", setup, args.repeats)
    listing = lookup_us("builtin_names.__wrapped__()", "from labeldist.kinds import builtin_names", args.repeats, 2_000)
    print(f"listing the kind modules (what each get_kind did before builtin_names was cached): {listing:.3f} us")
    print(
        f"get_kind('pose'): {lookup:.3f} us a call; registry().kinds['pose'] (baseline): {baseline:.3f} us; "
        f"ratio {lookup / baseline:.2f}"
    )
    bare = startup_s(STARTUP["import labeldist.kinds"], args.repeats)
    for name, code in STARTUP.items():
        seconds = startup_s(code, args.repeats)
        print(f"{name}: {seconds:.3f} s (median of {args.repeats} processes); x{seconds / bare:.2f} the bare import")


if __name__ == "__main__":
    main()
