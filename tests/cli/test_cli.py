"""The `labeldist` command end to end: precompute, info, verify, and bad input leaving nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import zarr

from tests.conftest import DATA

CSV = DATA / "mpii" / "mpii_valid_2958.csv"


def labeldist(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "labeldist.cli", *map(str, args)], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("csv") / "mpii_small.csv"
    path.write_text("\n".join(CSV.read_text().splitlines()[:121]) + "\n")
    return path


@pytest.fixture(scope="module")
def pose_store(small_csv, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "mpii-small-pose"
    proc = labeldist("precompute", "pose", small_csv, "--k", "10", "--workers", "1", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "complete, 120 items, k=10, dense=True; 1 of 1 blocks computed" in proc.stdout
    return out


def test_info_prints_manifest_and_statistics(pose_store):
    proc = labeldist("info", pose_store, "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["manifest"]["n_items"] == 120 and info["blocks_done"] == "1/1"
    knn = zarr.open_group(str(pose_store), mode="r")["knn/distances"][:]
    assert info["knn"]["nearest"]["median"] == pytest.approx(float(np.median(knn[:, 0])), rel=1e-6)


def test_info_is_a_few_lines_however_wide_the_labels(tmp_path):
    """128 columns: their names summarised in one line (before: 188 lines, one per column name); --json has all."""
    values = np.random.default_rng(0).normal(size=(60, 128))
    np.save(tmp_path / "wide.npy", values)
    out = tmp_path / "wide"
    made = labeldist("precompute", "vectors", tmp_path / "wide.npy", "--out", out, "--k", "5", "--workers", "1")
    assert made.returncode == 0, made.stderr
    proc = labeldist("info", out)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) <= 8, proc.stdout
    assert "60 items, k=5" in lines[1] and "columns=[128 values: 0, 1, 2, ..., 127]" in proc.stdout
    knn = zarr.open_group(str(out), mode="r")["knn/distances"][:]
    assert f"median {float(np.median(knn[:, 0])):.4g}" in proc.stdout
    full = json.loads(labeldist("info", out, "--json").stdout)
    assert full["manifest"]["params"]["labels"]["columns"] == [str(c) for c in range(128)]


def test_verify_passes_on_a_good_store(pose_store):
    proc = labeldist("verify", pose_store, "--sample", "100")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["ok"] and report["entries_checked"] == 200
    assert report["max_rel_error"] < 1e-6


def test_verify_catches_a_wrong_stored_value(pose_store, tmp_path):
    import shutil

    bad = tmp_path / "tampered"
    shutil.copytree(pose_store, bad)
    knn = zarr.open_array(str(bad), path="knn/distances", mode="r+")
    knn[:, :] = knn[:, :] * 1.01  # every stored neighbour distance 1 % off, rows still sorted
    proc = labeldist("verify", bad, "--sample", "50")
    assert proc.returncode == 1
    assert "differ from the reference" in " ".join(json.loads(proc.stdout)["problems"])


@pytest.mark.parametrize(
    ("breach", "says"),
    [
        ("unsorted", "1 knn row is not sorted nearest first (the first: row 7)"),
        ("self", "1 knn row holds its own item (the first: row 7)"),
        ("padding", "1 knn row has -1 padding before a neighbour (the first: row 7)"),
    ],
)
def test_verify_checks_the_store_contract_on_every_row(pose_store, tmp_path, breach: str, says: str) -> None:
    """A row that breaks the contract, written through zarr (its checksums whole): verify names it, as the
    repository's independent contract checker (tools/check_store.py) fails it; the untouched store passes both."""
    import shutil

    from tests.conftest import CHECK_STORE

    bad = tmp_path / breach
    shutil.copytree(pose_store, bad)
    indices = zarr.open_array(str(bad), path="knn/indices", mode="r+")
    distances = zarr.open_array(str(bad), path="knn/distances", mode="r+")
    row_i, row_d = indices[7], distances[7]
    if breach == "unsorted":
        row_i[[0, 1]], row_d[[0, 1]] = row_i[[1, 0]], row_d[[1, 0]]
        row_d[0] = row_d[1] + 1.0  # strictly out of order
    elif breach == "self":
        row_i[2] = 7
    else:
        row_i[1], row_d[1] = -1, np.inf
    indices[7], distances[7] = row_i, row_d
    proc = labeldist("verify", bad, "--sample", "0")
    assert proc.returncode == 1, proc.stdout
    assert says in json.loads(proc.stdout)["problems"]
    oracle = subprocess.run([sys.executable, str(CHECK_STORE), str(bad)], capture_output=True, text=True)
    assert oracle.returncode == 1 and "FAILS" in oracle.stdout
    good = labeldist("verify", pose_store, "--sample", "0")
    assert good.returncode == 0 and json.loads(good.stdout)["problems"] == []


def _assert_error_and_nothing_written(proc, out, message):
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not out.exists()


def test_malformed_csv_row_is_named_and_no_store_is_made(small_csv, tmp_path):
    lines = small_csv.read_text().splitlines()
    lines[5] = lines[5] + ",1"
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    proc = labeldist("precompute", "pose", path, "--out", out)
    _assert_error_and_nothing_written(proc, out, "bad.csv, line 6: 58 fields, expected 57")


def test_nan_coordinates_are_refused(small_csv, tmp_path):
    lines = small_csv.read_text().splitlines()
    fields = lines[9].split(",")
    fields[12] = "NaN"
    lines[9] = ",".join(fields)
    path = tmp_path / "nan.csv"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    proc = labeldist("precompute", "pose", path, "--out", out)
    _assert_error_and_nothing_written(proc, out, "nan.csv, line 10: column 'r_knee_x' is not finite")


def test_other_parameters_at_the_output_path(pose_store):
    before = zarr.open_group(str(pose_store), mode="r").attrs["labeldist"]
    proc = labeldist("precompute", "pose", CSV, "--k", "10", "--out", pose_store)
    assert proc.returncode == 2 and "the labels differ" in proc.stderr and "--overwrite" in proc.stderr
    assert zarr.open_group(str(pose_store), mode="r").attrs["labeldist"] == before


def test_output_path_holding_something_else_is_refused(small_csv, tmp_path):
    out = tmp_path / "occupied"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    proc = labeldist("precompute", "pose", small_csv, "--out", out)
    assert proc.returncode == 2 and "is not a labeldist store; refusing to write over it" in proc.stderr
    assert (out / "notes.txt").read_text() == "mine"


def test_unknown_store_for_info(tmp_path):
    proc = labeldist("info", tmp_path / "nowhere")
    assert proc.returncode == 2 and "no store there" in proc.stderr


# ---------------------------------------------------------------- bad input refused before anything is written
# These run the real parser and commands in this process; the `untouched` fixture makes a
# test fail if a command gets as far as starting a Dask cluster, a server or a training run, so that every refusal
# is checked to come first (and the tests stay fast).


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of ``labeldist ARGS`` run in this process, argparse's exits included."""
    from labeldist.cli import main

    try:
        rc = main([str(a) for a in args])
    except SystemExit as e:
        rc = e.code
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.fixture
def untouched(monkeypatch):
    """Make starting a Dask cluster, the HTTP server, a fine-tuning run or a scorer an error."""
    import labeldist.api.server
    import labeldist.commands.sts
    import labeldist.engine.runner
    import labeldist.kinds.sentence_relevance
    import labeldist.sts.fit

    def reached(what):
        def fail(*args, **kwargs):
            raise AssertionError(f"the command got as far as {what}")

        return fail

    monkeypatch.setattr(labeldist.engine.runner, "cluster_client", reached("starting a Dask cluster"))
    monkeypatch.setattr(labeldist.api.server, "serve", reached("starting the server"))
    monkeypatch.setattr(labeldist.sts.fit, "fit", reached("fine-tuning"))
    monkeypatch.setattr(labeldist.kinds.sentence_relevance, "build_distance", reached("building a sentence scorer"))
    monkeypatch.setattr(labeldist.commands.sts, "build_distance", reached("building a sentence scorer"))


@pytest.fixture
def tiny_csv(tmp_path):
    """The first 20 poses of the shipped MPII CSV."""
    path = tmp_path / "mpii_tiny.csv"
    path.write_text("\n".join(CSV.read_text().splitlines()[:21]) + "\n")
    return path


def _one_line_error(rc: int, err: str, path) -> str:
    """The reason of a ``labeldist: error: PATH: reason`` line, after checking it is all that was printed."""
    assert rc == 2, err
    assert err.endswith("\n") and err.count("\n") == 1, f"not one line: {err!r}"
    prefix = f"labeldist: error: {path}: "
    assert err.startswith(prefix), err
    return err[len(prefix) :].strip()


@pytest.mark.parametrize("kind", ["pose", "captions", "sentences"])
def test_a_folder_given_as_input_file_is_one_line_naming_it(kind, tmp_path, capsys, untouched):
    folder = tmp_path / "some_dir"
    folder.mkdir()
    out = tmp_path / "out"
    rc, _, err = run_cli(capsys, "precompute", kind, folder, "--out", out)
    assert "folder" in _one_line_error(rc, err, folder)
    assert not out.exists()


def test_a_folder_given_as_input_prints_no_traceback(tmp_path):
    out = tmp_path / "out"
    proc = labeldist("precompute", "pose", DATA, "--out", out)
    assert "Traceback" not in proc.stderr
    _one_line_error(proc.returncode, proc.stderr, DATA)
    assert not out.exists()


def test_a_missing_input_file_is_one_line_naming_it(tmp_path, capsys, untouched):
    missing = tmp_path / "nowhere.csv"
    rc, _, err = run_cli(capsys, "precompute", "pose", missing, "--out", tmp_path / "out")
    assert "no such file" in _one_line_error(rc, err, missing).lower()
    assert not (tmp_path / "out").exists()


def test_an_unreadable_input_file_is_one_line_naming_it(tiny_csv, tmp_path, capsys, untouched, monkeypatch):
    import builtins

    # chmod does not stop root (the tests may run as root): refuse the read itself, as the OS would
    real_open = builtins.open

    def guarded(file, *args, **kwargs):
        if str(file) == str(tiny_csv):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded)
    monkeypatch.setattr("os.access", lambda path, mode, **kw: str(path) != str(tiny_csv))
    rc, _, err = run_cli(capsys, "precompute", "pose", tiny_csv, "--out", tmp_path / "out")
    assert "permission denied" in _one_line_error(rc, err, tiny_csv).lower()
    assert not (tmp_path / "out").exists()


def test_a_file_given_as_a_folder_of_layout_maps_is_one_line(tiny_csv, tmp_path, capsys, untouched):
    rc, _, err = run_cli(capsys, "precompute", "layout", tiny_csv, "--out", tmp_path / "out")
    assert "not a folder" in _one_line_error(rc, err, tiny_csv)
    assert not (tmp_path / "out").exists()


def test_a_missing_word_vector_file_is_one_line_naming_it(tmp_path, capsys, untouched):
    captions = tmp_path / "captions.json"
    captions.write_text("[]")
    vectors = tmp_path / "glove.txt"
    rc, _, err = run_cli(capsys, "precompute", "captions", captions, "--vectors", vectors, "--out", tmp_path / "out")
    assert "no such" in _one_line_error(rc, err, vectors)
    assert not (tmp_path / "out").exists()


def test_a_missing_sentence_model_folder_is_one_line_naming_it(tmp_path, capsys):
    model = tmp_path / "models" / "sts-bi"
    rc, _, err = run_cli(capsys, "sts", "eval", "--scorer", "bert", "--model", model, "--dev-limit", "2")
    assert "no such folder" in _one_line_error(rc, err, model)


def test_the_stores_folder_of_serve_must_be_a_folder(tiny_csv, tmp_path, capsys, untouched):
    rc, _, err = run_cli(capsys, "serve", "--stores", tmp_path / "nowhere")
    assert "no such folder" in _one_line_error(rc, err, tmp_path / "nowhere")
    rc, _, err = run_cli(capsys, "serve", "--stores", tiny_csv)
    assert "not a folder" in _one_line_error(rc, err, tiny_csv)


@pytest.mark.parametrize("command", ["info", "verify"])
def test_info_and_verify_on_what_is_no_store_are_one_line(command, tiny_csv, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    for path, reason in (
        (tmp_path / "nowhere", "no store there"),
        (tiny_csv, "not a folder"),
        (empty, "store there"),
        (DATA, "store there"),
    ):
        rc, out, err = run_cli(capsys, command, path)
        assert out == ""
        assert reason in _one_line_error(rc, err, path), (path, err)


def test_layout_needs_either_input_or_generate(tmp_path, capsys, untouched):
    rc, _, err = run_cli(capsys, "precompute", "layout", "--out", tmp_path / "out")
    assert rc == 2 and err.startswith("labeldist: error: ") and "--generate" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--block-rows", "-3"),
        ("--block-rows", "0"),
        ("--workers", "0"),
        ("--workers", "-2"),
        ("--k", "0"),
        ("--k", "1.5"),
    ],
)
def test_precompute_numeric_options_are_refused_before_anything_is_written(
    option, value, tiny_csv, tmp_path, capsys, untouched
):
    out = tmp_path / "out"
    rc, _, err = run_cli(capsys, "precompute", "pose", tiny_csv, option, value, "--out", out)
    assert rc == 2 and f"argument {option}: " in err and value in err
    assert not out.exists()


@pytest.mark.parametrize("k", ["20", "50"])
def test_k_of_at_least_the_number_of_items_is_refused(k, tiny_csv, tmp_path, capsys, untouched):
    out = tmp_path / "out"
    rc, _, err = run_cli(capsys, "precompute", "pose", tiny_csv, "--k", k, "--out", out)
    assert rc == 2 and err.count("\n") == 1 and "--k" in err and "20 items" in err and "19" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"k": 20}, "k=20"),
        ({"k": 0}, "k must be"),
        ({"block_rows": 0}, "block_rows"),
        ({"block_rows": -3}, "block_rows"),
        ({"n_workers": 0}, "n_workers"),
    ],
)
def test_precompute_refuses_bad_arguments_before_writing(args, error, mpii_poses, tmp_path, untouched):
    from labeldist.distances.pose import PoseDistance
    from labeldist.engine import precompute

    out = tmp_path / "out"
    with pytest.raises(ValueError, match=error):
        precompute(mpii_poses.subset(slice(0, 20)), PoseDistance(), out, dataset="tiny", **{"k": 5, **args})
    assert not out.exists()


def test_pose_csv_missing_a_joints_columns_is_refused(tiny_csv, tmp_path, capsys, untouched):
    rows = [line.split(",") for line in tiny_csv.read_text().splitlines()]
    keep = [n for n, name in enumerate(rows[0]) if not name.startswith("r_ankle_")]
    path = tmp_path / "no_ankle.csv"
    path.write_text("\n".join(",".join(row[n] for n in keep) for row in rows) + "\n")
    out = tmp_path / "out"
    rc, _, err = run_cli(capsys, "precompute", "pose", path, "--out", out)
    assert rc == 2 and err.count("\n") == 1 and "no_ankle.csv" in err
    assert all(f"r_ankle_{a}" in err for a in ("x", "y", "vis"))
    assert not out.exists()


def test_min_joints_past_the_files_joints_is_refused_before_anything_is_written(tiny_csv, tmp_path, capsys, untouched):
    # the joints are the file's (any number of them): --min-joints is checked against them once the file is read
    rc, out, err = run_cli(capsys, "precompute", "pose", tiny_csv, "--min-joints", "17", "--out", tmp_path / "out")
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "mpii_tiny.csv: --min-joints 17 is more than its 16 joints (16 joints: r_ankle, " in err
    assert not (tmp_path / "out").exists()


BAD_OPTIONS = [
    ("precompute", "pose", "{csv}", "--min-joints", "-1"),
    ("precompute", "layout", "--generate", "0"),
    ("precompute", "layout", "--generate", "1"),
    ("precompute", "layout", "--generate", "10", "--size", "4"),
    ("precompute", "layout", "--generate", "10", "--layout-type", "11"),
    ("precompute", "layout", "--generate", "10", "--seed", "-1"),
    ("precompute", "captions", "{missing}", "--k", "-5"),
    ("precompute", "sentences", "{missing}", "--limit", "0"),
    ("precompute", "sentences", "{missing}", "--candidates", "0"),
    ("precompute", "sentences", "{missing}", "--pass-share", "1.5"),
    ("precompute", "sentences", "{missing}", "--pass-share", "nan"),
    ("precompute", "sentences", "{missing}", "--bert-pass-share", "0"),
    ("precompute", "sentences", "{missing}", "--max-length", "0"),
    ("precompute", "sentences", "{missing}", "--cbow-threshold", "inf"),
    ("precompute", "sentences", "{missing}", "--bert-threshold", "nan"),
    ("sts", "fit", "--epochs", "0"),
    ("sts", "fit", "--batch-size", "0"),
    ("sts", "fit", "--lr", "0"),
    ("sts", "fit", "--lr", "-0.001"),
    ("sts", "fit", "--warmup", "1"),
    ("sts", "fit", "--weight-decay", "-0.1"),
    ("sts", "fit", "--max-length", "0"),
    ("sts", "fit", "--seed", "-1"),
    ("sts", "fit", "--limit", "0"),
    ("sts", "fit", "--dev-limit", "0"),
    ("sts", "eval", "--dev-limit", "0"),
    ("sts", "eval", "--pass-share", "0"),
    ("verify", "{missing}", "--sample", "-1"),
    ("verify", "{missing}", "--seed", "-1"),
    ("serve", "--port", "0"),
    ("serve", "--port", "65536"),
    ("serve", "--workers", "0"),
]


@pytest.mark.parametrize("argv", BAD_OPTIONS, ids=" ".join)
def test_every_numeric_option_is_checked_when_parsed(argv, tiny_csv, tmp_path, capsys, untouched):
    argv = [a.format(csv=tiny_csv, missing=tmp_path / "missing") for a in argv]
    option, value = argv[-2:]
    rc, out, err = run_cli(capsys, *argv, *(("--out", tmp_path / "out") if argv[0] == "precompute" else ()))
    assert rc == 2 and out == ""
    assert f"argument {option}: " in err and value in err, err
    assert not (tmp_path / "out").exists()


def _options(parser, path=("labeldist",)):
    """(command, action) for every option of ``parser`` and of its subcommands, recursively."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, (*path, name))
        elif action.option_strings and not isinstance(action, argparse._HelpAction):
            yield " ".join(path), action


def test_no_numeric_option_is_a_bare_int_or_float():
    from labeldist.cli import build_parser

    bare = [f"{cmd} {a.option_strings[-1]}" for cmd, a in _options(build_parser()) if a.type in (int, float)]
    assert not bare, f"numeric options without a range check: {bare}"


def test_help_shows_every_default():
    import argparse

    from labeldist.cli import build_parser

    flags = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._StoreConstAction)
    missing = [
        f"{cmd} {a.option_strings[-1]}"
        for cmd, a in _options(build_parser())
        if a.default not in (None, argparse.SUPPRESS)  # --help and --version take no value
        and not isinstance(a, flags)
        and "%(default)s" not in (a.help or "")
    ]
    assert not missing, f"options whose --help hides their default: {missing}"


# ---------------------------------------------------------------- the dense limit
@pytest.mark.parametrize("kind", ["pose", "layout", "captions", "sentences", "vectors"])
def test_precompute_help_states_the_real_dense_default(kind, capsys):
    rc, out, _ = run_cli(capsys, "precompute", kind, "--help")
    assert rc == 0
    text = " ".join(out.split())  # argparse wraps lines
    assert "default: True" not in text  # both --dense and --knn-only said so (one dest, default True)
    assert "--dense also store the full N x N float32 matrix (default: on, up to --dense-limit;" in text
    assert "--knn-only store the kNN lists only, no dense matrix (default: off;" in text
    assert "--dense-limit SIZE largest dense matrix to build" in text and "(default: 1GiB)" in text


def test_vectors_over_the_dense_limit_are_refused_naming_the_size(tmp_path, capsys, untouched):
    values = tmp_path / "v.npy"
    np.save(values, np.random.default_rng(0).normal(size=(16_385, 2)))  # one item past the default 1 GiB
    out = tmp_path / "out"
    rc, _, err = run_cli(capsys, "precompute", "vectors", values, "--out", out)
    assert rc == 2 and err.count("\n") == 1, err
    assert "a dense matrix of 16,385 items (N x N float32) takes 1.00 GiB, over the dense limit of 1.00 GiB" in err
    assert "--knn-only" in err and "--dense-limit 2GiB" in err
    assert not out.exists()
    rc, _, err = run_cli(capsys, "precompute", "vectors", values, "--out", out, "--dense-limit", "1KiB")
    assert rc == 2 and "over the dense limit of 1.00 kiB (16 items at most)" in err and not out.exists()
    rc, _, err = run_cli(capsys, "precompute", "vectors", values, "--out", out, "--dense-limit", "a lot")
    assert rc == 2 and "argument --dense-limit: expected a size such as 1GiB" in err


def test_sentences_use_the_same_dense_limit(tmp_path, capsys, untouched):
    text = tmp_path / "s.txt"
    text.write_text("".join(f"sentence number {i}\n" for i in range(200)))
    out = tmp_path / "out"
    rc, _, err = run_cli(
        capsys, "precompute", "sentences", text, "--scorer", "bert", "--out", out, "--dense-limit", "100KiB"
    )
    assert rc == 2 and "a dense matrix of 200 sentences" in err and "--knn-only" in err, err
    assert not out.exists()


def test_version_is_printed_not_refused(capsys) -> None:
    from labeldist import __version__
    from labeldist.cli import main
    from labeldist.trainer.cli import main as trainer_main

    for command, name in ((main, "labeldist"), (trainer_main, "trainer (labeldist")):
        with pytest.raises(SystemExit) as done:
            command(["--version"])
        assert done.value.code == 0
        assert capsys.readouterr().out.strip() == f"{name} {__version__}" + (")" if "(" in name else "")
