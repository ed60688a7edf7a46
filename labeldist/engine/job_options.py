"""The options of a kind's job as the commands take them, and as :mod:`labeldist.library` reads them from keywords:
the options every ``precompute`` shares, ``append``'s parser for a store's kind, a kind's own options, and where a job
runs."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from labeldist.core.clusters import ClusterSpec, add_cluster_options
from labeldist.core.dense import DENSE_LIMIT
from labeldist.core.options import byte_size, positive_int, show_defaults
from labeldist.errors import UsageError

if TYPE_CHECKING:
    from labeldist.kinds import Kind


#: the options every kind's ``precompute`` command shares, which :func:`precompute` takes as its own keywords
JOB_OPTIONS = frozenset(
    {
        "out",
        "dataset",
        "k",
        "dense",
        "dense_limit",
        "block_rows",
        "overwrite",
        "no_progress",
        "scheduler",
        "scheduler_file",
        "cluster",
        "workers",
        "min_workers",
        "wait_timeout",
    }
)


def add_common_options(p: argparse.ArgumentParser, default_k: int = 100) -> None:
    """The options every kind's ``labeldist precompute`` command takes after its own: the output, ``--k``, dense or
    kNN-only, the cluster, ``--overwrite``, ``--no-progress``."""
    p.add_argument("--out", help="output store: a path or an fsspec URL (default: stores/<dataset>-<kind>)")
    p.add_argument("--dataset", help="dataset name recorded in the manifest (default: from the input)")
    p.add_argument(
        "--k",
        type=positive_int,
        default=default_k,
        help="neighbours per item, fewer than the items (default: %(default)s)",
    )
    # one dest for two flags: each states the default in words (the formatter would print "default: True" for both)
    dense = p.add_mutually_exclusive_group()
    dense.add_argument(
        "--dense",
        dest="dense",
        action="store_true",
        default=True,
        help="also store the full N x N float32 matrix (default: on, up to --dense-limit; above it "
        "the command refuses before writing anything)",
    )
    dense.add_argument(
        "--knn-only",
        dest="dense",
        action="store_false",
        help="store the kNN lists only, no dense matrix (default: off; needed above --dense-limit)",
    )
    # a string default goes through type= as a typed value would: --help shows "1GiB", the job gets bytes
    p.add_argument(
        "--dense-limit",
        type=byte_size,
        default=f"{DENSE_LIMIT >> 30}GiB",
        metavar="SIZE",
        help="largest dense matrix to build, 4 N^2 bytes: 1GiB holds 16,384 items, 4GiB 32,768 (default: %(default)s)",
    )
    add_cluster_options(p)
    p.add_argument("--block-rows", type=positive_int, help="rows per task (default: chosen from N)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a store made with other labels or parameters at --out (the new store is built "
        "beside it and swapped in once complete)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def append_parser(
    store: str, manifest: dict[str, Any], parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser
) -> argparse.ArgumentParser:
    """The parser of ``labeldist append STORE FILE [OPTIONS]`` for the store's kind: the kind's own options, as
    ``precompute`` takes them, those the store records (its distance's parameters and its reader's settings, under
    the same names) defaulting to the store's values, and the options of the job."""
    from labeldist.engine import FILE_PROVENANCE
    from labeldist.kinds import get_kind

    kind = get_kind(manifest["kind"])
    p = parser_class(
        prog=f"labeldist append {store}",
        description=f"Append the items of FILE to this {kind.name} store: {kind.help}. Options the store records "
        "default to the store's values; any other setting must be the one the store was made with.",
    )
    kind.add_arguments(p)
    params = dict(manifest.get("params") or {})
    reading = {key: v for key, v in (params.pop("labels", None) or {}).items() if key not in FILE_PROVENANCE}
    recorded = {**reading, **params}
    p.set_defaults(**{a.dest: recorded[a.dest] for a in p._actions if a.dest in recorded and a.dest != "help"})
    p.set_defaults(dataset=None)  # a kind's loader names a dataset; the store keeps its own
    p.add_argument(
        "--dense-limit",
        type=byte_size,
        default=f"{DENSE_LIMIT >> 30}GiB",
        metavar="SIZE",
        help="largest dense matrix the grown store may have (default: %(default)s)",
    )
    add_cluster_options(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return show_defaults(p)


class RefusingParser(argparse.ArgumentParser):
    """A parser whose errors are UsageErrors (one line), not a usage text and an exit: the library's reading of a
    kind's options."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def kind_options(kind: Kind) -> list[str]:
    """The names of a kind's own options (its reader's and its distance's), as keywords: ``format``, ``joints``,
    ``metric``, ..."""
    p = RefusingParser(add_help=False)
    kind.add_arguments(p)
    return [a.dest for a in p._actions if a.dest != "input" and a.option_strings]


def kind_namespace(
    kind: Kind, path: str | os.PathLike[str] | None, options: dict[str, Any], parser: argparse.ArgumentParser
) -> argparse.Namespace:
    """The parsed options a kind's ``load`` takes, as the command would have them for ``path`` and ``options``
    (keywords named as the options' destinations: ``min_joints`` for ``--min-joints``). A string value goes through
    the option's type as typed text does; a value outside its choices, or an option the kind does not have, is
    refused in one line."""
    args = parser.parse_args([] if path is None else [os.fspath(path)])
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    own = kind_options(kind)
    for name, value in options.items():
        action = actions.get(name)
        if action is None or name not in own:
            raise UsageError(
                f"kind {kind.name!r} has no option {name!r}; its options: {', '.join(own) or 'none'} "
                "(the job's own: k, dense, dense_limit, dataset, overwrite, cluster, ... are keywords of the call)"
            )
        if isinstance(value, str) and callable(action.type):
            value = action.type(value)
        if action.choices is not None and value not in action.choices:
            raise UsageError(f"{name}={value!r}: one of {', '.join(map(str, action.choices))}")
        setattr(args, name, value)
    return args


def precompute_parser(kind: Kind) -> argparse.ArgumentParser:
    p = RefusingParser(prog=f"labeldist precompute {kind.subcommand}", add_help=False)
    kind.add_arguments(p)
    add_common_options(p)
    return p


def cluster_of(
    cluster: ClusterSpec | str | None,
    scheduler: str | None,
    scheduler_file: str | None,
    workers: int | None,
    min_workers: int | None,
    wait_timeout: float,
) -> ClusterSpec:
    """Where a job runs, as the commands' cluster options say it: a ClusterSpec as given, else one made of the
    keywords (``cluster``: a job queue's name, ``"slurm"``, ``"pbs"``, ...)."""
    if isinstance(cluster, ClusterSpec):
        if scheduler or scheduler_file or workers is not None or min_workers is not None:
            raise UsageError("give the cluster as cluster=ClusterSpec(...) or as keywords (scheduler=, ...), not both")
        return cluster
    return ClusterSpec(
        scheduler=scheduler,
        scheduler_file=None if scheduler_file is None else os.fspath(scheduler_file),
        cluster=cluster,
        n_workers=workers,
        min_workers=min_workers,
        wait_timeout=wait_timeout,
    )
