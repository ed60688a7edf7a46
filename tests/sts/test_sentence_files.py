"""Sentences from plain files: ``precompute sentences`` reads .txt, .csv, .tsv and .jsonl
besides COCO/Karpathy JSON, the same sentences making the same labels and the same store in every format; bad
plain input is one LabelError naming the file and the line, with nothing written; the STS-B defaults
(``--train``, ``--dev``) are absolute paths to the shipped files, shown in --help, whatever the working folder.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from labeldist.cli import build_parser, main
from labeldist.labels.base import LabelError
from labeldist.labels.sentences import Sentences, read_caption_sentences, read_sentences
from tests.conftest import write_store
from tests.sts.conftest import COCO, STS_DEV, STS_TRAIN


# ---------------------------------------------------------------- the same sentences in every format
@pytest.fixture(scope="module")
def captions(tmp_path_factory) -> Path:
    """A tiny Karpathy JSON of 3 real test images (15 captions): the first (captions with trailing spaces), the
    first whose captions hold a line break, and the first whose captions hold a quote and a comma."""
    data = json.loads(COCO.read_text())
    newline = next(item for item in data if any("\n" in c for c in item["caption"]))
    quoted = next(
        item for item in data if any('"' in c for c in item["caption"]) and any("," in c for c in item["caption"])
    )
    path = tmp_path_factory.mktemp("files") / "caps.json"
    path.write_text(json.dumps([data[0], newline, quoted]))
    return path


@pytest.fixture(scope="module")
def expected(captions) -> Sentences:
    """The JSON form: the reference every plain format must equal."""
    labels = read_caption_sentences(captions)
    texts = labels.texts
    assert len(labels) == 15 and labels.ids[0] == "391895#0"
    assert any(t != t.strip() for t in texts) and any("\n" in t for t in texts) and any('"' in t for t in texts)
    return labels


def _same_labels(got: Sentences, want: Sentences, *, same_ids: bool = True) -> None:
    """Equal texts and label arrays; with ``same_ids`` the ids and the sha256 (what a store's manifest records)
    too, else the sha256 once ``want``'s ids are given to ``got``'s arrays."""
    assert got.texts == want.texts
    ours, theirs = got.to_arrays(), want.to_arrays()
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert ours[name].dtype == theirs[name].dtype and np.array_equal(ours[name], theirs[name]), name
    if same_ids:
        assert got.ids.tolist() == want.ids.tolist() and got.sha256() == want.sha256()
    else:
        assert Sentences(want.ids, **ours).sha256() == want.sha256()


def _write_table(path: Path, header: list[str], rows: list[list[str]], delimiter: str = ",") -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, delimiter=delimiter).writerows([header, *rows])
    return path


def test_csv_with_an_id_column_equals_the_json_form(expected, tmp_path):
    rows = [[f"{n}", item, text] for n, (item, text) in enumerate(zip(expected.ids, expected.texts))]
    path = _write_table(tmp_path / "s.csv", ["n", "caption_id", "sentence"], rows)
    got = read_sentences(path, id_column="caption_id")
    _same_labels(got, expected)
    assert got.provenance["format"] == "csv" and got.provenance["column"] == "sentence"
    # without --id-column: the row numbers below the header
    by_row = read_sentences(path)
    assert by_row.ids.tolist() == [str(n) for n in range(15)]
    _same_labels(by_row, expected, same_ids=False)


def test_tsv_and_a_named_column_equal_the_json_form(expected, tmp_path):
    rows = [[item, text, "x"] for item, text in zip(expected.ids, expected.texts)]
    path = _write_table(tmp_path / "s.tsv", ["id", "caption", "other"], rows, delimiter="\t")
    _same_labels(read_sentences(path, column="caption"), expected)  # the column named id: the ids by default
    # the same file under another suffix, its format named
    other = tmp_path / "s.data"
    other.write_bytes(path.read_bytes())
    _same_labels(read_sentences(other, format="tsv", column="caption"), expected)


def test_jsonl_objects_and_strings_equal_the_json_form(expected, tmp_path):
    objects = tmp_path / "s.jsonl"
    objects.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in zip(expected.ids, expected.texts)))
    _same_labels(read_sentences(objects), expected)
    keyed = tmp_path / "keyed.jsonl"
    keyed.write_text("".join(json.dumps({"c": t, "k": i}) + "\n" for i, t in zip(expected.ids, expected.texts)))
    _same_labels(read_sentences(keyed, column="c", id_column="k"), expected)
    strings = tmp_path / "strings.jsonl"
    strings.write_text("".join(json.dumps(t) + "\n" for t in expected.texts))
    got = read_sentences(strings)
    assert got.ids.tolist() == [str(n) for n in range(15)], "the 0-based line numbers"
    _same_labels(got, expected, same_ids=False)


def test_txt_equals_the_json_form_of_the_same_sentences(expected, tmp_path):
    # a .txt line cannot hold a line break: the captions that have one are left out of both forms
    keep = np.array([n for n, t in enumerate(expected.texts) if "\n" not in t])
    want = expected.subset(keep)
    path = tmp_path / "s.txt"
    path.write_text("".join(t + "\n" for t in want.texts), encoding="utf-8")
    got = read_sentences(path)
    assert got.ids.tolist() == [str(n) for n in range(len(want))] and got.provenance["format"] == "txt"
    _same_labels(got, want, same_ids=False)
    # Windows line ends and a byte-order mark read the same
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(b"\xef\xbb\xbf" + "".join(t + "\r\n" for t in want.texts).encode())
    _same_labels(read_sentences(crlf), got)


def test_the_same_sentences_make_the_same_store(captions, tmp_path):
    """Store level, with the real scorer (the packaged MiniLM under coarse-to-fine, as tests/sts/test_store.py):
    15 sentences, a few seconds. The manifests differ only in params.labels (the format is recorded)."""
    from labeldist.distances.sts import SentenceRelevance
    from labeldist.store import StoreReader

    distance = SentenceRelevance("coarse_to_fine", cbow_threshold=0.8)
    # the images none of whose captions holds a line break, which a .txt line cannot hold
    items = [item for item in json.loads(captions.read_text()) if not any("\n" in c for c in item["caption"])]
    (tmp_path / "s.json").write_text(json.dumps(items))
    want = read_caption_sentences(tmp_path / "s.json")
    assert len(want) == 10
    (tmp_path / "s.txt").write_text("".join(t + "\n" for t in want.texts))
    jsonl = tmp_path / "s.jsonl"
    jsonl.write_text("".join(json.dumps({"id": i, "sentence": t}) + "\n" for i, t in zip(want.ids, want.texts)))
    stores = {}
    for name in ("s.json", "s.jsonl", "s.txt"):
        labels = read_sentences(tmp_path / name)
        out = write_store(tmp_path / f"store-{name}", labels, distance, dataset="s", k=3, dense=True, block_rows=5)
        stores[name] = StoreReader(str(out))
    reference = stores["s.json"]
    assert reference.ids.tolist() == want.ids.tolist()
    for name, reader in stores.items():
        knn_i, knn_d = reader.knn()
        ref_i, ref_d = reference.knn()
        assert np.array_equal(knn_i, ref_i) and np.array_equal(knn_d, ref_d), name
        assert np.array_equal(reader.dense_rows(0, len(want)), reference.dense_rows(0, len(want))), name
    assert stores["s.jsonl"].manifest["labels_sha256"] == reference.manifest["labels_sha256"]
    assert stores["s.txt"].ids.tolist() == [str(n) for n in range(len(want))]


# ---------------------------------------------------------------- what plain files may hold
def test_blank_lines_follow_the_empty_policy_and_keep_the_ids(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("A dog runs in the park.\n\nA cat sleeps on the sofa.\n   \nTwo men play chess.\n\n\n")
    for policy in ("error", "zero"):
        with pytest.raises(LabelError, match=r"s\.txt, line 2: a blank line: no sentence to keep; pass --empty drop"):
            read_sentences(path, empty=policy)
    kept = read_sentences(path, empty="drop")
    assert kept.ids.tolist() == ["0", "2", "4"] and kept.texts[2] == "Two men play chess."
    assert read_sentences(path, empty="drop", limit=2).ids.tolist() == ["0", "2"], "blank lines do not count"
    # blank lines at the end are no error under any policy
    ends = tmp_path / "ends.txt"
    ends.write_text("A dog runs.\nA cat sleeps.\n\n  \n")
    assert read_sentences(ends).ids.tolist() == ["0", "1"]


def test_a_sentence_without_word_vectors_is_named_by_its_line(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("A dog runs.\nYou should do it.\nA cat sleeps.\n")
    with pytest.raises(LabelError, match=r"s\.txt, line 2: sentence '1' 'You should do it\.' has no word"):
        read_sentences(path)
    assert read_sentences(path, empty="drop").ids.tolist() == ["0", "2"]
    assert read_sentences(path, empty="zero").cbow_defined.tolist() == [True, False, True]


def test_empty_cells_duplicate_ids_and_no_text_column(tmp_path):
    path = _write_table(tmp_path / "s.csv", ["id", "text"], [["a", "A dog runs."], ["b", ""], ["c", "A cat."]])
    with pytest.raises(LabelError, match=r"s\.csv, line 3: sentence 'b' is empty: no sentence to keep"):
        read_sentences(path)
    assert read_sentences(path, empty="drop").ids.tolist() == ["a", "c"]
    dup = _write_table(tmp_path / "dup.csv", ["id", "text"], [["a", "A dog runs."], ["a", "A cat sleeps."]])
    with pytest.raises(LabelError, match=r"dup\.csv, line 3: id 'a' again \(first on line 2\)"):
        read_sentences(dup)
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("id,text\na,A dog runs.\nb,A cat,sleeps\n")
    with pytest.raises(LabelError, match=r"ragged\.csv, line 3: 3 fields where the header has 2"):
        read_sentences(ragged)
    tabs = tmp_path / "tabs.csv"
    tabs.write_text("id\tsentence\na\tA dog runs.\n")
    with pytest.raises(LabelError, match=r"tabs\.csv, line 1: no column named 'sentence' or 'text'.*--format tsv"):
        read_sentences(tabs)


@pytest.mark.parametrize(
    ("lines", "options", "error"),
    [
        (['{"text": "A dog."}', '"A cat."'], {}, r"line 2: a JSON string, where line 1 holds a JSON object"),
        (['{"text": "A dog runs."}', '{"text": 3}'], {}, r"line 2: 'text' is a number, not a string"),
        (['{"text": "A dog runs."}', '{"sentence": "A cat."}'], {}, r"line 2: no key 'text'; the object's keys"),
        (['{"caption": "A dog runs."}'], {}, r"line 1: no key 'sentence' or 'text'; name .* --column"),
        (['{"text": "A dog.", "id": true}'], {}, r"line 1: id 'id' must be an integer or a non-empty string"),
        (['"A dog runs."'], {"column": "text"}, r"line 1: a JSON string, not an object"),
        (["[1, 2]"], {}, r"line 1: a list, where a JSON object or string is expected"),
    ],
)
def test_jsonl_lines_are_checked_one_by_one(lines, options, error, tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LabelError, match=r"s\.jsonl, " + error):
        read_sentences(path, **options)


def test_options_that_do_not_fit_the_format(tmp_path, captions):
    txt = tmp_path / "s.txt"
    txt.write_text("A dog runs.\n")
    with pytest.raises(LabelError, match=r"s\.txt: a \.txt file holds one sentence a line and has no columns"):
        read_sentences(txt, column="text")
    with pytest.raises(LabelError, match=r"caps\.json: --column and --id-column are for \.csv, \.tsv and \.jsonl"):
        read_sentences(captions, id_column="id")
    with pytest.raises(ValueError, match="unknown sentence format 'xml'"):
        read_sentences(txt, format="xml")
    odd = tmp_path / "s.lst"  # no plain suffix: read as captions JSON, as before, saying how to read it plainly
    odd.write_text("A dog runs.\n")
    with pytest.raises(LabelError, match=r"s\.lst: malformed JSON.*pass --format for a plain file"):
        read_sentences(odd)
    assert read_sentences(odd, format="txt").texts == ["A dog runs."]
    not_utf8 = tmp_path / "latin.txt"
    not_utf8.write_bytes(b"A dog runs.\nA caf\xe9 opens.\n")
    with pytest.raises(LabelError, match=r"latin\.txt, line 2: not UTF-8"):
        read_sentences(not_utf8)


# ---------------------------------------------------------------- bad input through the command: nothing written
def _refused(capsys, path: Path, out: Path, *options: str) -> str:
    """The one error line of ``precompute sentences PATH``, after checking that nothing was written."""
    capsys.readouterr()
    rc = main(["precompute", "sentences", str(path), "--scorer", "cbow", "--out", str(out), *options])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith(f"labeldist: error: {path}"), err
    assert not out.exists()
    return err


def test_bad_plain_files_are_one_line_naming_file_and_line(tmp_path, capsys):
    out = tmp_path / "store"
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "empty.txt: no sentences: the file is empty" in _refused(capsys, empty, out)
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n")
    assert "blank.txt: no sentences: its 2 lines are blank" in _refused(capsys, blank, out, "--empty", "drop")
    table = _write_table(tmp_path / "s.csv", ["id", "sentence"], [["a", "A dog runs."], ["b", "A cat sleeps."]])
    err = _refused(capsys, table, out, "--column", "caption")
    assert "s.csv, line 1: no column 'caption'; the header's columns: 'id', 'sentence'" in err
    untitled = _write_table(tmp_path / "untitled.csv", ["a", "b"], [["1", "A dog runs."]])
    assert "untitled.csv, line 1: no column named 'sentence' or 'text'" in _refused(capsys, untitled, out)
    jsonl = tmp_path / "s.jsonl"
    jsonl.write_text('{"text": "A dog runs."}\n{"text": "A cat sleeps.",\n{"text": "Two men."}\n')
    assert "s.jsonl, line 2: not JSON: " in _refused(capsys, jsonl, out)


def test_a_plain_file_makes_a_store_through_the_command(dask_client, tmp_path, monkeypatch, capsys):
    """The whole command on a .txt, run from a folder that is not the repository: the default --train (the
    CBoW gate's calibration, under --scorer coarse_to_fine) is found, and the store holds the file's sentences
    under their line numbers."""
    from labeldist.store import StoreReader
    from tests.conftest import check_store

    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.txt").write_text(
        "A dog runs in the park.\nA cat sleeps on the sofa.\nTwo men play chess.\nA man is riding a horse.\n"
    )
    code = main(
        [
            "precompute",
            "sentences",
            "s.txt",
            "--scorer",
            "coarse_to_fine",
            "--k",
            "2",
            "--scheduler",
            dask_client.scheduler.address,
            "--out",
            "store",
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err
    check_store(tmp_path / "store")
    reader = StoreReader(str(tmp_path / "store"))
    assert reader.ids.tolist() == ["0", "1", "2", "3"] and reader.manifest["dataset"] == "s"
    params = reader.manifest["params"]
    assert params["labels"]["format"] == "txt"
    assert params["calibration"]["cbow"]["file"] == "data/stsb/sts-train.csv", "not where the repository lies"


# ---------------------------------------------------------------- defaults naming files, from any folder
def _help(capsys, monkeypatch, *command: str) -> str:
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: a path is not wrapped at its hyphen
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("command", "defaults"),
    [
        (["precompute", "sentences", "s.txt"], {"train": STS_TRAIN}),
        (["sts", "eval"], {"train": STS_TRAIN, "dev": STS_DEV}),
        (["sts", "fit"], {"train": STS_TRAIN, "dev": STS_DEV}),
    ],
)
def test_stsb_defaults_are_the_shipped_files_from_any_folder(command, defaults, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(command)
    shown = _help(capsys, monkeypatch, *command[:2])
    for option, shipped in defaults.items():
        value = Path(getattr(args, option))
        assert value.is_absolute() and value.is_file() and value.samefile(shipped)
        assert f"default: {value}, the shipped file" in shown


def test_without_shipped_stsb_files_the_options_are_required(tmp_path, monkeypatch, capsys):
    """An installation without the shipped STS-B files: no default, --help says so, and a command that needs the
    file refuses in one line before reading anything; one that does not need it runs."""
    import labeldist.kinds.sentence_relevance as sentence_kind

    monkeypatch.setattr(sentence_kind, "STSB_DIR", tmp_path / "nowhere")
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["precompute", "sentences", "s.txt"])
    assert args.train is None
    assert f"no default: this installation has no {tmp_path / 'nowhere' / 'sts-train.csv'}" in _help(
        capsys, monkeypatch, "precompute", "sentences"
    )
    (tmp_path / "s.txt").write_text("A dog runs.\nA cat sleeps.\n")
    gated = ["--scorer", "coarse_to_fine"]  # the CBoW gate is calibrated on the training file
    for command in (
        ["precompute", "sentences", "s.txt", *gated, "--out", "store"],
        ["sts", "fit", "--out", "model"],
        ["sts", "eval", *gated, "--dev", str(STS_DEV)],
    ):
        capsys.readouterr()
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--train: no STS-B file given" in err and "pass --train FILE" in err, err
        assert not (tmp_path / "store").exists() and not (tmp_path / "model").exists()
    labels, distance, _ = sentence_kind.load(
        build_parser().parse_args(["precompute", "sentences", "s.txt", *gated, "--cbow-threshold", "0.8"])
    )
    assert len(labels) == 2 and distance.cbow_threshold == 0.8, "a given threshold needs no STS-B file"
    labels, distance, _ = sentence_kind.load(build_parser().parse_args(["precompute", "sentences", "s.txt"]))
    assert len(labels) == 2 and distance.scorer == "bert", "nor does the default scorer, BERT alone"
