"""The vectors kind, ``labeldist precompute vectors``: numeric labels (:mod:`labeldist.labels.vectors`) under a
SciPy metric (:mod:`labeldist.distances.vectors`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from labeldist.core.options import check_file
from labeldist.distances.vectors import VectorDistance
from labeldist.kinds import Kind, check_file_labels
from labeldist.labels.vectors import FORMATS, Vectors, read_vectors


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The input and the distance's options of ``labeldist precompute vectors``."""
    p.add_argument("input", help=".npy (N x D, or N numbers), .csv (a header row) or .parquet")
    p.add_argument(
        "--metric",
        choices=("euclidean", "sqeuclidean", "cosine", "cityblock", "chebyshev"),
        default="euclidean",
        help="distance between two labels (default: %(default)s)",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="auto",
        help="input format; auto: from the file's suffix (default: %(default)s)",
    )
    p.add_argument(
        "--columns", nargs="+", help="csv/parquet: the value columns (default: every column but the id column)"
    )
    p.add_argument(
        "--id-column", help="csv/parquet: the item ids (default: a column named id, else the row numbers 0..N-1)"
    )


def load(args: argparse.Namespace) -> tuple[Vectors, VectorDistance, str]:
    """Read the vectors of ``args.input`` and make the distance the options ask for."""
    check_file(args.input)
    labels = read_vectors(args.input, format=args.format, columns=args.columns, id_column=args.id_column)
    distance = VectorDistance(args.metric)
    check_file_labels(distance, labels, args.input)
    return labels, distance, args.dataset or Path(args.input).stem


KIND = Kind(
    name="vectors",
    distance="labeldist.distances.vectors:VectorDistance",
    command="vectors",
    help="numeric labels: vectors or numbers (a scipy metric)",
    add_arguments=add_arguments,
    load=load,
)
