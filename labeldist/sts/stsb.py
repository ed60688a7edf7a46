"""STS Benchmark pairs (Cer et al., SemEval-2017): reading ``sts-train.csv`` / ``sts-dev.csv``.

Each line holds tab-separated fields ``genre, file, year, id, score, sentence1, sentence2`` and, on some
lines, two more source columns. Fields are split on tabs only (no csv quoting: quotes inside sentences are
literal). The gold score lies in [0, 5]; relevance is ``score / 5`` in [0, 1].
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labeldist.core.reading import decode_utf8, read_regular
from labeldist.labels.base import LabelError, label_file_errors

#: gold scores lie in [0, MAX_SCORE]
MAX_SCORE = 5.0


@dataclass(frozen=True)
class StsPairs:
    """Sentence pairs with gold similarity: ``first[t]``, ``second[t]``, ``score[t]`` in [0, 5].

    ``source`` names the file, ``lines[t]`` the 1-based line of pair ``t``, ``sha256`` the file's digest.
    """

    first: tuple[str, ...]
    second: tuple[str, ...]
    score: np.ndarray
    lines: tuple[int, ...]
    source: str
    sha256: str

    def __len__(self) -> int:
        return len(self.first)

    @property
    def relevance(self) -> np.ndarray:
        """Gold relevance ``score / 5`` in [0, 1], float64."""
        return self.score / MAX_SCORE

    def head(self, n: int | None) -> StsPairs:
        """The first ``n`` pairs (all when ``n`` is None): the tiny subsets of the tests."""
        if n is None:
            return self
        return StsPairs(self.first[:n], self.second[:n], self.score[:n], self.lines[:n], self.source, self.sha256)


def parse_sts_line(line: str, where: str) -> tuple[float, str, str]:
    """Score, sentence 1 and sentence 2 of one STS-B line; LabelError naming ``where`` if malformed.

    >>> parse_sts_line("g\\tf\\t2012\\t0001\\t4.750\\tA dog runs.\\tA dog is running.", "x:1")
    (4.75, 'A dog runs.', 'A dog is running.')
    """
    fields = line.rstrip("\r\n").split("\t")
    if len(fields) not in (7, 9):
        raise LabelError(f"{where}: expected 7 or 9 tab-separated fields, got {len(fields)}")
    try:
        score = float(fields[4])
    except ValueError:
        raise LabelError(f"{where}: score {fields[4]!r} is not a number") from None
    if not 0.0 <= score <= MAX_SCORE:
        raise LabelError(f"{where}: score {score} lies outside [0, {MAX_SCORE:g}]")
    first, second = fields[5].strip(), fields[6].strip()
    for name, text in (("sentence1", first), ("sentence2", second)):
        if not text:
            raise LabelError(f"{where}: {name} is empty")
    return score, first, second


def read_sts(path: str | Path) -> StsPairs:
    """All pairs of an STS-B file (UTF-8, one pair per line, blank lines skipped)."""
    path = Path(path)
    with label_file_errors(path):
        raw = read_regular(path, "STS-B file")
        text = decode_utf8(raw, str(path))
    scores, first, second, lines = [], [], [], []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        score, a, b = parse_sts_line(line, f"{path}:{number}")
        scores.append(score)
        first.append(a)
        second.append(b)
        lines.append(number)
    if not scores:
        raise LabelError(f"{path}: no sentence pairs")
    return StsPairs(
        tuple(first), tuple(second), np.asarray(scores), tuple(lines), str(path), hashlib.sha256(raw).hexdigest()
    )
