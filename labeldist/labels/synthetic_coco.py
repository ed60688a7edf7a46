"""COCO-2014-sized caption sets made from a smaller real split, for benchmarks and tests.

COCO-2014 has 123,287 images with about 616k captions; the repository ships the Karpathy test split (5,000
images, 25,009 captions, ``data/coco/coco_karpathy_test.json``). :func:`make_coco_like` grows such a split to any
size with entries in the same Karpathy layout (``{"image": ..., "caption": [str, ...]}``):

- the source images come first, unchanged (``entries[:len(source)] == source``);
- every further image is a *child* of a source image (its ``parent``, recorded in the entry): it keeps 5 of its
  parent's captions (a random 5 where the parent has more), of which 1 or 2 (even odds) are replaced by captions
  of one of the parent's :data:`IMAGE_NEIGHBOURS` nearest source images (one of them, chosen uniformly; kept
  verbatim unless ``swap_borrowed``), and in each of the others every *content word* is, with probability
  ``word_swap`` (at least one per caption where it has one), replaced by one of its :data:`WORD_NEIGHBOURS`
  nearest words (chosen uniformly);
- the nearest images are by the cosine of each image's mean unit GloVe vector over all the content words of its
  captions (a cheap stand-in for caption-set WMD, :func:`nearest_images`);
- a content word is a token of :class:`~labeldist.labels.text.Tokenizer` (lower-case ``[a-z]+``, not a stop
  word) that has a word vector; its neighbours are the nearest by cosine (:func:`word_neighbours`) among the
  content words of the source captions themselves (so a swap stays in the captions' own vocabulary: ``dog`` ->
  ``puppy``, ``cat``, ``dogs``), plus the ``top_words`` most frequent GloVe words where asked; a neighbour below
  cosine ``min_similarity`` is never used. The swapped word keeps the case of the word it replaces (``Dog`` ->
  ``Puppy``);
- ids look like COCO's: ``synthetic/COCO_synth_<12 digits>.jpg``, the number starting at the first power of ten
  (at least 10^6) above every source id, so no id repeats a real one (COCO-2014's largest is 581,929).

Deterministic from ``seed``, and prefix-stable: image ``j`` depends only on the seed, ``j`` and the source, never
on ``n_images`` (a 20,000-image set is the first 20,000 of the 123,287-image one). Parents are dealt in rounds of
a seeded permutation of the source, so each source image has ``n_images / len(source) - 1`` children, give or
take one.

Realism (BENCHMARKS.md, "Synthetic COCO-2014", ``benchmarks/bench_synthetic_coco.py``): at 5,000 images the
exact caption-set kNN (k = 100) of synthetic children prunes 94.1 % of the pairs with 294 exact WMDs per item,
against 94.9 % and 254 for the real test split (a synthetic benchmark errs on the slow side); captions are as long.
Borrowed captions are kept verbatim (``swap_borrowed=False``), so a third of the 616k captions of a 123k set repeat
another; ``swap_borrowed=True`` (``--swap-borrowed``) swaps their words too: 9 % repeats, 320 exact WMDs per item,
93.6 % pruned. What it is not: a synthetic image is close to its parent and its siblings (about 24 children per
real image at COCO-2014's size), so the nearest neighbours of a 123k synthetic set are nearer than those of real
COCO-2014; and its vocabulary is the source's (6,612 content words for the test split; COCO-2014's is larger).

Command line (progress on stderr; ``--help`` lists the knobs)::

    python -m labeldist.labels.synthetic_coco --images 123287 --seed 0 --out coco_like.json \\
        [--sentences-out coco_like.txt] [--source data/coco/coco_karpathy_test.json] [--swap-borrowed]

``--out`` is read by ``labeldist precompute captions`` (caption sets) and ``labeldist precompute sentences``
(one item per caption, ids ``<image id>#<n>``); ``--sentences-out`` writes every caption of every image, one a
line, in the same order (a ``.txt`` sentences file: ids ``0, 1, ...``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from labeldist.core.progress import progress_bar
from labeldist.errors import UsageError
from labeldist.labels.coco import load_json, parse_karpathy
from labeldist.labels.text import Tokenizer, WordVectors, default_word_vectors

#: the shipped split the command grows by default
DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "data" / "coco" / "coco_karpathy_test.json"
#: images of COCO-2014 (train 82,783 + val 40,504)
COCO_2014_IMAGES = 123_287
#: captions each synthetic image has
CAPTIONS_PER_IMAGE = 5
#: the nearest source images a child borrows captions from
IMAGE_NEIGHBOURS = 10
#: the nearest words a content word may be swapped for
WORD_NEIGHBOURS = 10
#: the chance that a content word of a kept caption is swapped
DEFAULT_WORD_SWAP = 0.25
#: whether the captions borrowed from a nearest image have their words swapped too
DEFAULT_SWAP_BORROWED = False
#: a neighbour word less similar than this (cosine) is never swapped in
DEFAULT_MIN_SIMILARITY = 0.5
#: how synthetic images are named: the number is 12 digits, as COCO's
SYNTHETIC_NAME = "synthetic/COCO_synth_{:012d}.jpg"

_STREAM_PARENTS = 0  # the seed stream of the parents' permutations (one per round)
_STREAM_CHILD = 1  # the seed stream of each child's own choices


# --------------------------------------------------------------------------------------------- vocabulary


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` (n, d) as float32 rows of unit length (a zero row stays zero)."""
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(norms > 0, norms, 1.0).astype(np.float32)


def content_words(texts: Sequence[str], tokenizer: Tokenizer, vectors: WordVectors) -> list[str]:
    """The distinct content words of ``texts`` (tokens of ``tokenizer``, stop words dropped, with a vector in
    ``vectors``), sorted."""
    words: set[str] = set()
    for text in texts:
        words.update(tokenizer.words(text))
    return sorted(w for w in words if w in vectors)


def frequent_words(vectors: WordVectors, tokenizer: Tokenizer, n: int) -> list[str]:
    """Of the first ``n`` words of ``vectors`` (GloVe's are by corpus frequency), those that are whole content
    tokens of ``tokenizer`` (``"the"``, ``"u.s."`` and ``"1990"`` are not)."""
    pattern = re.compile(tokenizer.pattern)
    return [w for w in vectors.words[:n] if pattern.fullmatch(w) and tokenizer.words(w) == [w]]


def word_neighbours(
    queries: np.ndarray, candidates: np.ndarray, k: int, *, exclude: np.ndarray | None = None, chunk: int = 2048
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` nearest candidates of each query by cosine, nearest first: indices (Q, k) int32 into
    ``candidates`` and cosines (Q, k) float32.

    ``queries`` (Q, d) and ``candidates`` (C, d) are unit rows (:func:`unit_rows`); ``exclude`` (Q,): a
    candidate index each query may not have (itself), or -1 for none. One float32 product of ``chunk`` queries
    against all candidates at a time. Ties are broken by the lower index. ``k`` is cut to the candidates there
    are (less the excluded one)."""
    q = np.asarray(queries, dtype=np.float32)
    c = np.asarray(candidates, dtype=np.float32)
    k = min(k, len(c) - (1 if exclude is not None else 0))
    indices = np.empty((len(q), max(k, 0)), dtype=np.int32)
    cosines = np.empty((len(q), max(k, 0)), dtype=np.float32)
    if k <= 0:
        return indices, cosines
    ct = np.ascontiguousarray(c.T)
    for start in range(0, len(q), chunk):
        stop = min(start + chunk, len(q))
        sims = q[start:stop] @ ct
        if exclude is not None:
            rows = np.arange(stop - start)
            mine = exclude[start:stop]
            sims[rows[mine >= 0], mine[mine >= 0]] = -np.inf
        # the k largest, then sorted by (-cosine, index): a stable order whatever argpartition picked among ties
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(sims, part, axis=1).min(axis=1, keepdims=True)
        for r in range(stop - start):
            row = sims[r]
            pick = np.flatnonzero(row >= kth[r, 0])
            order = np.lexsort((pick, -row[pick]))[:k]
            indices[start + r] = pick[order]
            cosines[start + r] = row[pick[order]]
    return indices, cosines


@dataclass(frozen=True)
class WordTable:
    """The swappable content words and their neighbours: ``words`` (V,), ``neighbours`` (V, k) indices into
    ``candidates``, and ``usable`` (V,): how many of each word's neighbours (nearest first) reach the least
    similarity (0: the word is never swapped)."""

    words: list[str]
    candidates: list[str]
    neighbours: np.ndarray
    cosines: np.ndarray
    usable: np.ndarray

    def index(self) -> dict[str, int]:
        """Each word's row."""
        return {w: i for i, w in enumerate(self.words)}


def word_table(
    words: Sequence[str],
    vectors: WordVectors,
    *,
    extra_candidates: Sequence[str] = (),
    k: int = WORD_NEIGHBOURS,
    min_similarity: float = DEFAULT_MIN_SIMILARITY,
) -> WordTable:
    """The neighbour table of ``words`` (which have vectors): their ``k`` nearest among ``words`` and
    ``extra_candidates`` (without repeats), by the cosine of their vectors, the word itself left out."""
    words = list(words)
    seen = set(words)
    candidates = words + [w for w in dict.fromkeys(extra_candidates) if w not in seen and w in vectors]
    unit = unit_rows(vectors.lookup(candidates))
    neighbours, cosines = word_neighbours(unit[: len(words)], unit, k, exclude=np.arange(len(words)))
    usable = (cosines >= min_similarity).sum(axis=1).astype(np.int32)  # cosines are sorted: a prefix
    return WordTable(words, candidates, neighbours, cosines, usable)


# ------------------------------------------------------------------------------------------------- images


def image_embeddings(
    captions: Sequence[Sequence[str]], tokenizer: Tokenizer, vectors: WordVectors, unit_words: np.ndarray
) -> np.ndarray:
    """Each image's mean of the unit vectors of all content words of all its captions, to unit length: (N, d)
    float32. ``unit_words``: ``unit_rows(vectors.vectors)`` (or any rows in ``vectors``' order). An image
    without a content word has a zero row."""
    out = np.zeros((len(captions), unit_words.shape[1]), dtype=np.float32)
    for i, caps in enumerate(captions):
        words = [w for c in caps for w in tokenizer.words(c) if w in vectors]
        if words:
            out[i] = unit_words[vectors.rows(words)].mean(axis=0)
    return unit_rows(out)


def nearest_images(embeddings: np.ndarray, k: int = IMAGE_NEIGHBOURS) -> np.ndarray:
    """The ``k`` nearest other images of each image by the cosine of ``embeddings`` (unit rows), nearest first:
    (N, k) int32."""
    indices, _ = word_neighbours(embeddings, embeddings, k, exclude=np.arange(len(embeddings)))
    return indices


def id_offset(ids: Sequence[str]) -> int:
    """The first synthetic image number: the smallest power of ten, at least 10^6, above every id in ``ids``
    (the integers of the source file names)."""
    top = max((int(i) for i in ids), default=0)
    offset = 10**6
    while offset <= top:
        offset *= 10
    return offset


def synthetic_name(number: int) -> str:
    """The file name of synthetic image ``number``, in COCO's style (12 digits)."""
    if not 0 <= number < 10**12:
        raise UsageError(f"synthetic image number {number} does not fit in 12 digits")
    return SYNTHETIC_NAME.format(number)


def parents(n_children: int, n_source: int, seed: int) -> np.ndarray:
    """The parent (a source index) of each of the first ``n_children`` children: round ``r`` deals the source
    images out in the order of a permutation seeded by ``(seed, 0, r)``, so every source image has a child
    before any has two more than another."""
    out = np.empty(n_children, dtype=np.int64)
    for r, start in enumerate(range(0, n_children, n_source)):
        stop = min(start + n_source, n_children)
        out[start:stop] = np.random.default_rng([seed, _STREAM_PARENTS, r]).permutation(n_source)[: stop - start]
    return out


# ----------------------------------------------------------------------------------------------- captions


@dataclass(frozen=True)
class Swappable:
    """Where the swappable words of one caption are: ``starts``, ``stops`` (character offsets) and ``rows``
    (rows of a :class:`WordTable`), in order."""

    starts: tuple[int, ...]
    stops: tuple[int, ...]
    rows: tuple[int, ...]


def swappable_words(text: str, tokenizer: Tokenizer, table_index: dict[str, int], usable: np.ndarray) -> Swappable:
    """The words of ``text`` that can be swapped: the tokenizer's tokens that are rows of the table with a usable
    neighbour. None swappable in a text whose lower-case form changes length (offsets would not line up)."""
    lowered = text.lower() if tokenizer.lowercase else text
    if len(lowered) != len(text):
        return Swappable((), (), ())
    starts, stops, rows = [], [], []
    for match in re.finditer(tokenizer.pattern, lowered):
        row = table_index.get(match.group())
        if row is not None and usable[row] > 0:
            starts.append(match.start())
            stops.append(match.end())
            rows.append(row)
    return Swappable(tuple(starts), tuple(stops), tuple(rows))


def same_case(word: str, like: str) -> str:
    """``word`` in the case of ``like``: all capitals (``DOG``), a capital first (``Dog``), or as it is."""
    if len(like) > 1 and like.isupper():
        return word.upper()
    if like[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def swap_words(
    text: str, where: Swappable, table: WordTable, rng: np.random.Generator, word_swap: float
) -> tuple[str, list[tuple[str, str]]]:
    """``text`` with each swappable word replaced, with probability ``word_swap`` (at least one where there is
    one), by one of its usable neighbours chosen uniformly; and the (old, new) lower-case pairs swapped."""
    m = len(where.rows)
    if m == 0:
        return text, []
    chosen = rng.random(m) < word_swap
    if not chosen.any():
        chosen[rng.integers(m)] = True
    picks = np.flatnonzero(chosen)
    rows = np.asarray(where.rows)[picks]
    which = (rng.random(len(picks)) * table.usable[rows]).astype(np.int64)
    pieces, swapped, last = [], [], 0
    for p, row, n in zip(picks.tolist(), rows.tolist(), which.tolist()):
        start, stop = where.starts[p], where.stops[p]
        new = table.candidates[table.neighbours[row, n]]
        pieces.append(text[last:start])
        pieces.append(same_case(new, text[start:stop]))
        swapped.append((table.words[row], new))
        last = stop
    pieces.append(text[last:])
    return "".join(pieces), swapped


@dataclass
class _Source:
    """What a child needs of the source, computed once: captions, their swappable words, the image
    neighbours."""

    names: list[str]
    captions: list[list[str]]
    swappable: list[list[Swappable]]
    nearest: np.ndarray
    table: WordTable


def make_child(
    parent: int, source: _Source, rng: np.random.Generator, word_swap: float, swap_borrowed: bool = False
) -> tuple[list[str], dict[str, Any]]:
    """The captions of one child of source image ``parent`` (see the module docstring) and what was done:
    ``{"neighbour": the source index captions came from, "replaced": caption positions, "swaps": word pairs}``."""
    caps = source.captions[parent]
    if len(caps) > CAPTIONS_PER_IMAGE:
        keep = np.sort(rng.choice(len(caps), CAPTIONS_PER_IMAGE, replace=False))
    else:
        keep = np.arange(len(caps))
    n_replace = min(int(rng.integers(1, 3)), len(keep) - 1)
    neighbour = int(source.nearest[parent, rng.integers(source.nearest.shape[1])])
    theirs = source.captions[neighbour]
    n_replace = min(n_replace, len(theirs))
    replaced = set(rng.choice(len(keep), n_replace, replace=False).tolist()) if n_replace > 0 else set()
    borrowed = iter(rng.choice(len(theirs), n_replace, replace=False).tolist()) if n_replace > 0 else iter(())
    out, swaps = [], []
    for position, c in enumerate(keep.tolist()):
        if position in replaced:
            b = next(borrowed)
            if not swap_borrowed:
                out.append(theirs[b])
                continue
            text, pairs = swap_words(theirs[b], source.swappable[neighbour][b], source.table, rng, word_swap)
        else:
            text, pairs = swap_words(caps[c], source.swappable[parent][c], source.table, rng, word_swap)
        out.append(text)
        swaps.extend(pairs)
    return out, {"neighbour": neighbour, "replaced": sorted(replaced), "swaps": swaps}


def prepare_source(
    source_images: Sequence[dict[str, Any]],
    *,
    tokenizer: Tokenizer | None = None,
    vectors: WordVectors | None = None,
    top_words: int = 0,
    min_similarity: float = DEFAULT_MIN_SIMILARITY,
) -> _Source:
    """The tables :func:`make_coco_like` draws from: the content words of the source's captions and their
    neighbours, each caption's swappable words and each image's nearest images."""
    tokenizer = tokenizer or Tokenizer()
    vectors = vectors or default_word_vectors()
    ids, captions = parse_karpathy(list(source_images), "source images")
    for n, caps in enumerate(captions):
        if not caps or not all(isinstance(c, str) for c in caps):
            raise UsageError(f"source image {n} ({source_images[n]['image']}): needs a list of caption strings")
    names = [item["image"] for item in source_images]
    words = content_words([c for caps in captions for c in caps], tokenizer, vectors)
    extra = frequent_words(vectors, tokenizer, top_words) if top_words else []
    table = word_table(words, vectors, extra_candidates=extra, min_similarity=min_similarity)
    index = table.index()
    swappable = [[swappable_words(c, tokenizer, index, table.usable) for c in caps] for caps in captions]
    unit_words = unit_rows(vectors.lookup(words))
    embeddings = image_embeddings(captions, tokenizer, WordVectors(words, unit_words, "content words"), unit_words)
    return _Source(names, captions, swappable, nearest_images(embeddings), table)


def make_coco_like(
    source_images: Sequence[dict[str, Any]],
    n_images: int,
    seed: int,
    *,
    word_swap: float = DEFAULT_WORD_SWAP,
    min_similarity: float = DEFAULT_MIN_SIMILARITY,
    top_words: int = 0,
    swap_borrowed: bool = DEFAULT_SWAP_BORROWED,
    tokenizer: Tokenizer | None = None,
    vectors: WordVectors | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """``n_images`` Karpathy-style entries: ``source_images`` unchanged, then ``n_images - len(source_images)``
    synthetic children (``{"image", "caption", "parent"}``, ``parent`` the source image's name), as the module
    docstring describes. ``n_images`` below the source's size gives its first ``n_images``.

    ``word_swap``: the chance a content word of a kept caption is swapped; ``min_similarity``: the least cosine
    of a word swapped in; ``top_words``: also take neighbours among the most frequent GloVe words (0: only the
    source's own words). ``tokenizer`` and ``vectors`` default to the caption kind's (GloVe 6B 50-d).
    ``progress``: a progress display on stderr."""
    if n_images < 0:
        raise UsageError(f"n_images must be >= 0, got {n_images}")
    if not 0.0 <= word_swap <= 1.0:
        raise UsageError(f"word_swap must be in [0, 1], got {word_swap}")
    if seed < 0:
        raise UsageError(f"seed must be >= 0, got {seed}")
    entries = [dict(item) for item in source_images[:n_images]]
    n_children = n_images - len(entries)
    if n_children <= 0:
        return entries
    source = prepare_source(
        source_images, tokenizer=tokenizer, vectors=vectors, top_words=top_words, min_similarity=min_similarity
    )
    ids, _ = parse_karpathy(list(source_images), "source images")
    offset = id_offset(ids)
    synthetic_name(offset + n_children - 1)  # fits in 12 digits
    parent_of = parents(n_children, len(source.captions), seed)
    with progress_bar(n_children, "synthetic images", unit="image", enabled=progress) as bar:
        for j, parent in enumerate(parent_of.tolist()):
            rng = np.random.default_rng([seed, _STREAM_CHILD, j])
            captions, _ = make_child(parent, source, rng, word_swap, swap_borrowed)
            entries.append({"image": synthetic_name(offset + j), "caption": captions, "parent": source.names[parent]})
            if (j + 1) % 1000 == 0:
                bar.update(1000)
        bar.update(n_children % 1000)
    return entries


# --------------------------------------------------------------------------------------------- the command


def write_entries(entries: Sequence[dict[str, Any]], path: Path) -> None:
    """``entries`` as a Karpathy-style JSON list (UTF-8, one entry a line)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("[\n")
        for n, entry in enumerate(entries):
            f.write(json.dumps(entry, ensure_ascii=False))
            f.write(",\n" if n + 1 < len(entries) else "\n")
        f.write("]\n")


def write_sentences(entries: Sequence[dict[str, Any]], path: Path) -> int:
    """Every caption of every entry, one a line, in order (line breaks inside a caption become spaces, so that
    a line stays a sentence); returns how many."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for entry in entries:
            for caption in entry["caption"]:
                f.write(" ".join(caption.splitlines()) + "\n")
                n += 1
    return n


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m labeldist.labels.synthetic_coco",
        description="COCO-2014-sized caption sets grown from a real split (see the module docstring)",
    )
    parser.add_argument("--images", type=int, default=COCO_2014_IMAGES, help="images in all (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="random seed, >= 0 (default: %(default)s)")
    parser.add_argument("--out", type=Path, required=True, help="Karpathy-style JSON file to write")
    parser.add_argument("--sentences-out", type=Path, help="also write every caption, one a line (.txt)")
    parser.add_argument(
        "--source", type=Path, default=DEFAULT_SOURCE, help="Karpathy-style split to grow (default: the test split)"
    )
    parser.add_argument(
        "--word-swap", type=float, default=DEFAULT_WORD_SWAP, help="chance a content word is swapped (%(default)s)"
    )
    parser.add_argument(
        "--min-similarity",
        type=float,
        default=DEFAULT_MIN_SIMILARITY,
        help="least cosine of a word swapped in (default: %(default)s)",
    )
    parser.add_argument(
        "--top-words",
        type=int,
        default=0,
        help="also swap in the most frequent N GloVe words (default: 0, only the source's words)",
    )
    parser.add_argument(
        "--swap-borrowed",
        action=argparse.BooleanOptionalAction,
        default=DEFAULT_SWAP_BORROWED,
        help="swap words in the captions borrowed from a nearest image too, not only in the parent's own",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress display")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    start = time.perf_counter()
    source = load_json(args.source)
    entries = make_coco_like(
        source,
        args.images,
        args.seed,
        word_swap=args.word_swap,
        min_similarity=args.min_similarity,
        top_words=args.top_words,
        swap_borrowed=args.swap_borrowed,
        progress=not args.no_progress,
    )
    write_entries(entries, args.out)
    n_captions = sum(len(e["caption"]) for e in entries)
    if args.sentences_out is not None:
        write_sentences(entries, args.sentences_out)
    print(
        f"{len(entries):,} images ({min(len(source), len(entries)):,} real), {n_captions:,} captions -> {args.out}"
        + (f" and {args.sentences_out}" if args.sentences_out else "")
        + f" in {time.perf_counter() - start:.1f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
