"""Repeated labels in a sentence or caption file are reported: one warning naming how many and
the first pair; the items are kept (their distance is 0). And a sentence model's loading bar never writes a
carriage return into a log file."""

from __future__ import annotations

import logging
import subprocess
import sys

from labeldist.labels.captions import caption_sets_from_texts
from labeldist.labels.sentences import sentences_from_texts


def test_repeated_sentences_are_reported_and_kept(caplog) -> None:
    texts = ["A dog runs.", "A cat sleeps.", "A dog runs.", "Two men talk.", "A cat sleeps.", "A dog runs."]
    with caplog.at_level(logging.WARNING, logger="labeldist.labels"):
        sentences = sentences_from_texts([f"s{i}" for i in range(6)], texts, source="mine.txt")
    assert len(sentences) == 6
    (record,) = caplog.records
    assert record.getMessage().startswith(
        "mine.txt: 3 sentences repeat an earlier one's (the first: items 's0' and 's2')"
    )


def test_repeated_caption_lists_are_reported(caplog) -> None:
    captions = [["a dog", "a brown dog"], ["a cat"], ["a dog", "a brown dog"]]
    with caplog.at_level(logging.WARNING, logger="labeldist.labels"):
        sets = caption_sets_from_texts(["1", "2", "3"], captions, source="coco.json")
    assert len(sets) == 3 and "coco.json: 1 images' caption lists repeat" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="labeldist.labels"):
        sentences_from_texts(["a", "b"], ["A dog runs.", "A cat sleeps."])
    assert not caplog.records


def test_a_redirected_log_holds_no_carriage_return(tmp_path) -> None:
    """transformers draws its "Loading weights" bar with carriage returns; off a terminal it is not drawn."""
    (tmp_path / "s.txt").write_text("A dog runs.\nA cat sleeps.\nA red car drives by.\n")
    command = [sys.executable, "-m", "labeldist.cli", "precompute", "sentences", str(tmp_path / "s.txt")]
    with open(tmp_path / "log.txt", "w") as log:
        done = subprocess.run([*command, "--out", str(tmp_path / "s"), "--k", "2", "--workers", "1"], stderr=log)
    text = (tmp_path / "log.txt").read_text()
    assert done.returncode == 0, text
    assert "\r" not in text, text[:300]
