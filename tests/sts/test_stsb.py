import numpy as np
import pytest

from labeldist.labels.base import LabelError
from labeldist.sts.stsb import read_sts
from tests.sts.conftest import STS_DEV, STS_TRAIN

GOOD = "main-captions\tMSRvid\t2012test\t0001\t{score}\t{a}\t{b}"


def test_reads_the_real_files_with_their_extra_source_columns():
    dev, train = read_sts(STS_DEV), read_sts(STS_TRAIN)
    assert (len(dev), len(train)) == (1500, 5749)
    assert dev.score.min() == 0.0 and dev.score.max() == 5.0
    np.testing.assert_allclose(dev.relevance, dev.score / 5)
    # line 1 of dev, read by hand
    assert (dev.first[0], dev.second[0], dev.score[0]) == (
        "A man with a hard hat is dancing.",
        "A man wearing a hard hat is dancing.",
        5.0,
    )
    nine = [n for n, line in enumerate(STS_TRAIN.read_text().splitlines()) if line.count("\t") == 8]
    assert nine, "the training file has lines with two source columns"
    assert train.lines[nine[0]] == nine[0] + 1


def test_quotes_are_literal(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text(GOOD.format(score="3.0", a='He said "no, thanks.', b="x y") + "\n")
    assert read_sts(path).first == ('He said "no, thanks.',)


@pytest.mark.parametrize(
    "line, message",
    [
        ("only\tthree\tfields", "expected 7 or 9 tab-separated fields, got 3"),
        (GOOD.format(score="high", a="a b", b="c d"), "score 'high' is not a number"),
        (GOOD.format(score="5.5", a="a b", b="c d"), "score 5.5 lies outside [0, 5]"),
        (GOOD.format(score="2.0", a="  ", b="c d"), "sentence1 is empty"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.csv"
    path.write_text(GOOD.format(score="1.0", a="a b", b="c d") + "\n" + line + "\n")
    with pytest.raises(LabelError, match=f"bad.csv:2: {message}".replace("[", r"\[").replace("]", r"\]")):
        read_sts(path)


def test_empty_and_undecodable_files(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("\n\n")
    with pytest.raises(LabelError, match="empty.csv: no sentence pairs"):
        read_sts(empty)
    latin = tmp_path / "latin.csv"
    latin.write_bytes(GOOD.format(score="1.0", a="caf\xe9", b="x").encode("latin-1"))
    with pytest.raises(LabelError, match="latin.csv, line 1: not UTF-8 .byte 0xe9"):
        read_sts(latin)
    with pytest.raises(LabelError, match="cannot read"):
        read_sts(tmp_path / "missing.csv")
