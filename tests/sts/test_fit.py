"""`labeldist sts fit` on a tiny subset: saved model, its record, reproducibility, bad input."""

import contextlib
import io
import json

import pytest

from labeldist.cli import main
from labeldist.core.progress import EVERY_ENV
from labeldist.sts.fit import FitConfig, linear_schedule
from labeldist.sts.models import FIT_INFO, architecture, weights_sha256
from tests.sts.conftest import STS_DEV, STS_TRAIN

TINY = [
    "--limit",
    "8",
    "--dev-limit",
    "6",
    "--epochs",
    "1",
    "--batch-size",
    "4",
    "--max-length",
    "24",
    "--train",
    str(STS_TRAIN),
    "--dev",
    str(STS_DEV),
]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """Two runs with the same seed: "a" with --no-progress, "b" with its progress shown on a stream that is not a
    terminal (stderr.log, at every step: LABELDIST_PROGRESS_EVERY=0)."""
    root = tmp_path_factory.mktemp("fit")
    argv = ["sts", "fit", "--architecture", "bi", "--loss", "cosent", "--seed", "3", *TINY]
    assert main([*argv, "--no-progress", "--out", str(root / "a")]) == 0
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        mp.setenv(EVERY_ENV, "0")
        assert main([*argv, "--out", str(root / "b")]) == 0
    (root / "stderr.log").write_text(err.getvalue())
    return root


def test_fit_saves_a_loadable_model_with_its_record(fitted):
    record = json.loads((fitted / "a" / FIT_INFO).read_text())
    assert record["architecture"] == "bi" and record["seed"] == 3
    assert record["config"]["loss"] == "cosent" and record["config"]["epochs"] == 1
    assert record["train"]["pairs"] == 8 and record["dev"]["pairs"] == 6
    assert -1.0 <= record["dev"]["pearson"] <= 1.0 and len(record["history"]) == 1
    assert architecture(fitted / "a") == "bi"


def test_fit_is_reproducible_with_a_seed(fitted):
    assert weights_sha256(fitted / "a") == weights_sha256(fitted / "b")
    a, b = (json.loads((fitted / n / FIT_INFO).read_text())["dev"] for n in "ab")
    assert a["pearson"] == b["pearson"]


def test_fit_progress_off_a_terminal_is_plain_lines(fitted):
    text = (fitted / "stderr.log").read_text()
    assert "\r" not in text
    lines = [line for line in text.splitlines() if line.startswith("sts fit bi: ")]
    # 8 pairs in batches of 4: two steps; the first line, one a step, the last
    done = [line.split(": ")[1].split(" (")[0] for line in lines]
    assert done == ["0/2 steps", "1/2 steps", "2/2 steps", "2/2 steps"], text
    assert all("epoch=1" in line and "loss=" in line for line in lines[1:]), text
    assert ", done in " in lines[-1], text


def test_fit_changes_the_weights(fitted):
    from labeldist.sts.models import PACKAGED, resolve_model

    assert weights_sha256(fitted / "a") != weights_sha256(resolve_model(PACKAGED))


def test_cross_encoder_fit_gives_a_cross_encoder(tiny_cross):
    assert architecture(tiny_cross) == "cross"
    assert json.loads((tiny_cross / FIT_INFO).read_text())["config"]["loss"] == "bce"


def test_fit_never_replaces_a_model_unless_overwrite(tmp_path, capsys):
    """The fifth adversarial run: ``sts fit --out DIR`` replaced an existing model folder (its default is the
    shipped models/sts-bi-cosine), and every store built on the old one then answered 503."""
    argv = ["sts", "fit", "--architecture", "bi", "--loss", "cosent", "--seed", "3", *TINY, "--no-progress"]
    out = tmp_path / "m"
    assert main([*argv, "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main([*argv, "--out", str(out), "--seed", "4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out}: holds a model (" in err and "give --overwrite to replace it" in err, err
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert main([*argv, "--out", str(out), "--seed", "4", "--overwrite"]) == 0
    assert json.loads((out / FIT_INFO).read_text())["seed"] == 4 and architecture(out) == "bi"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no staging folder left beside it
    link = tmp_path / "link"
    link.symlink_to(out)
    assert main([*argv, "--out", str(link), "--overwrite"]) == 2
    assert "a symbolic link, not a model folder" in capsys.readouterr().err


def test_malformed_sts_file_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("genre\tfile\t2012\t1\tfive\ta\tb\n")
    assert main(["sts", "fit", "--train", str(bad), "--out", str(tmp_path / "m")]) == 2
    assert "bad.csv:1: score 'five' is not a number" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"architecture": "tri"}, "unknown architecture 'tri'"),
        ({"architecture": "bi", "loss": "bce"}, "unknown loss 'bce' for a bi-encoder; known: cosent, cosine"),
        ({"architecture": "bi", "swap": True}, "swap"),
        ({"warmup": 1.5}, "warmup must lie in"),
    ],
)
def test_bad_fit_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FitConfig(**kwargs)


def test_schedule_warms_up_then_decays():
    factors = [linear_schedule(s, 100, 10) for s in range(101)]
    assert factors[0] == 0.0 and factors[10] == 1.0 and factors[100] == 0.0
    assert factors[:11] == sorted(factors[:11]) and factors[10:] == sorted(factors[10:], reverse=True)


def test_sts_eval_reports_the_correlations_of_the_scorer(capsys):
    from labeldist.labels.text import Tokenizer, default_word_vectors
    from labeldist.sts.cascade import cbow_pair_relevance
    from labeldist.sts.fit import correlations
    from labeldist.sts.stsb import read_sts

    assert main(["sts", "eval", "--scorer", "cbow", "--dev", str(STS_DEV), "--dev-limit", "200"]) == 0
    report = json.loads(capsys.readouterr().out)
    dev = read_sts(STS_DEV).head(200)
    expected = correlations(
        cbow_pair_relevance(dev.first, dev.second, Tokenizer(), default_word_vectors()), dev.relevance
    )
    assert report["pairs"] == 200 and report["transformer_calls"] == {"bi": 0, "cross": 0}
    assert report["pearson"] == pytest.approx(expected["pearson"], abs=1e-4)
