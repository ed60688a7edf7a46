"""Checkpoints hold tensors and plain data and are read without unpickling objects: a hostile file on every path
that reads one (``fit --resume``, ``eval --checkpoint``, ``--weights``, the proxies of a proxy loss) is refused
in one line naming it and runs nothing; a checkpoint of another model is refused saying what it was made with
and what was asked; and no code of the project loads a pickle any other way."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch

from labeldist.trainer.cli import main
from labeldist.trainer.training.config import FitConfig
from labeldist.trainer.training.fit import fit
from tests.trainer.conftest import REPO, STORE


class Evil:
    """Unpickled, it runs a shell command that creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204 - pickle's protocol
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


@pytest.fixture
def split(tmp_path: Path) -> Path:
    path = tmp_path / "split.json"
    path.write_text(json.dumps({"queries": [0, 1, 2], "gallery": list(range(3, 300))}))
    return path


def config(service: str, features: Path, out: Path, **kw) -> FitConfig:
    base = dict(
        url=service,
        store=STORE,
        features=str(features),
        out=str(out),
        size=40,
        neighbors=5,
        seed=0,
        progress=False,
        checkpoint_every=100,
        embedding_dim=16,
        hidden=(32,),
        max_steps=2,
    )
    return FitConfig(**{**base, **kw})


def fit_args(service: str, features: Path, out: Path, *extra: str) -> list[str]:
    return [
        "fit",
        "--url",
        service,
        "--store",
        STORE,
        "--features",
        str(features),
        "--out",
        str(out),
        "--size",
        "40",
        "--max-steps",
        "2",
        "--embedding-dim",
        "16",
        "--hidden",
        "32",
        "--no-progress",
        *extra,
    ]


def eval_args(service: str, split: Path, out: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "--url",
        service,
        "--store",
        STORE,
        "--split",
        str(split),
        "--out",
        str(out / "eval.json"),
        "--k-max",
        "5",
        *extra,
    ]


def refused(args: list[str], capsys: pytest.CaptureFixture[str], marker: Path | None = None) -> str:
    """The one error line of a command that must fail (exit 2, no traceback), having run nothing of a file."""
    try:
        code = main(args)
    except Exception as e:  # noqa: BLE001 - reported below, after the marker: what matters most
        code = e
    if marker is not None:
        assert not marker.exists(), "the hostile pickle ran its command"
    err = capsys.readouterr().err.strip()
    assert code == 2, (code, err)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_a_hostile_checkpoint_is_not_run_by_fit_resume(
    service: str, features: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, marker = tmp_path / "run", tmp_path / "MARKER"
    run.mkdir()
    torch.save({"model": Evil(marker), "step": 1}, run / "checkpoint.pt")
    err = refused(fit_args(service, features, run, "--resume"), capsys, marker)
    assert str(run / "checkpoint.pt") in err and "posix.system" in err


def test_a_hostile_checkpoint_is_not_run_by_eval(
    service: str, features: Path, split: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker, path = tmp_path / "MARKER", tmp_path / "evil.pt"
    torch.save({"model": Evil(marker)}, path)
    err = refused(
        eval_args(service, split, tmp_path, "--features", str(features), "--checkpoint", str(path)), capsys, marker
    )
    assert str(path) in err


def test_hostile_weights_are_not_run(
    service: str, split: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker, path = tmp_path / "MARKER", tmp_path / "evil.pth"
    torch.save(Evil(marker), path)
    (tmp_path / "images").mkdir()  # the weights are read before any image
    args = eval_args(
        service, split, tmp_path, "--images", str(tmp_path / "images"), "--backbone", "resnet18", "--weights", str(path)
    )
    assert str(path) in refused(args, capsys, marker)


def test_hostile_proxies_are_not_run(
    service: str, features: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The proxies of proxy anchor (and the optimizer's state) come back from the checkpoint too: an object
    hidden there, beside a genuine model, is refused as well."""
    run, marker = tmp_path / "run", tmp_path / "MARKER"
    fit(config(service, features, run, loss="proxy_anchor", loss_options={"positives": 5}))
    genuine = torch.load(run / "checkpoint.pt", weights_only=True)  # today's checkpoints: plain data
    for key in ("loss_state", "optimizer"):
        torch.save({**genuine, key: {"proxy_anchor.proxies": Evil(marker)}}, run / "checkpoint.pt")
        args = fit_args(service, features, run, "--resume", "--loss", "proxy_anchor", "--positives", "5")
        assert str(run / "checkpoint.pt") in refused(args, capsys, marker)


def test_a_checkpoint_of_an_older_trainer_is_refused_saying_what_to_do(
    service: str, features: Path, split: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not a hostile file, but one holding numpy objects (as an older trainer's might): not unpickled either."""
    run = tmp_path / "run"
    fit(config(service, features, run))
    genuine = torch.load(run / "checkpoint.pt", weights_only=True)
    torch.save(
        {**genuine, "numpy_rng": np.random.RandomState(0).get_state(), "extra": np.arange(3)}, run / "checkpoint.pt"
    )
    err = refused(
        eval_args(service, split, tmp_path, "--features", str(features), "--checkpoint", str(run / "checkpoint.pt")),
        capsys,
    )
    assert str(run / "checkpoint.pt") in err and "older trainer" in err and "re-save" in err


def test_save_checkpoint_keeps_plain_data_only(tmp_path: Path) -> None:
    from labeldist.trainer.training.checkpoints import save_checkpoint

    state = {
        "model": {"w": torch.ones(2)},
        "model_config": {"kind": "mlp"},
        "step": np.int64(3),
        "numpy_rng": np.random.RandomState(0).get_state(),
        "thresholds": [np.float32(0.5), 0.25],
        "array": np.arange(4, dtype=np.int32),
        "shape": (2, np.int16(3)),
    }
    save_checkpoint(tmp_path / "c.pt", state)
    back = torch.load(tmp_path / "c.pt", weights_only=True)  # loads with no allowance at all
    assert back["step"] == 3 and type(back["step"]) is int
    assert back["thresholds"] == [0.5, 0.25] and back["shape"] == (2, 3)
    assert torch.equal(back["array"], torch.arange(4, dtype=torch.int32))
    name, keys, pos, has_gauss, cached = back["numpy_rng"]
    restored = np.random.RandomState()
    restored.set_state((name, keys.numpy(), pos, has_gauss, cached))
    assert restored.randint(1 << 30) == np.random.RandomState(0).randint(1 << 30)
    with pytest.raises(TypeError, match=r"checkpoint\['bad'\]: .*Path"):
        save_checkpoint(tmp_path / "d.pt", {"bad": tmp_path})
    assert not (tmp_path / "d.pt").exists()


def test_resume_with_another_model_is_refused_naming_both(
    service: str, features: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert main(fit_args(service, features, run)) == 0
    capsys.readouterr()
    for extra, asked in ((("--embedding-dim", "32"), "32-d"), (("--hidden", "64"), "hidden (64)")):
        args = fit_args(service, features, run, "--resume")
        args[args.index(extra[0]) + 1] = extra[1]
        err = refused(args, capsys)
        assert str(run / "checkpoint.pt") in err and "16-d" in err and "hidden (32)" in err and asked in err, err
    err = refused(fit_args(service, features, run, "--resume", "--loss", "dense_triplet"), capsys)
    assert "log_ratio" in err and "dense_triplet" in err, err


def test_a_new_run_over_a_finished_one_is_refused_unless_overwrite(
    service: str, features: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fifth adversarial run: ``fit --out runs/learn`` onto a finished run, without ``--resume``, replaced its
    checkpoint and appended a second run to its log."""
    run = tmp_path / "run"
    assert main(fit_args(service, features, run, "--max-steps", "3")) == 0
    capsys.readouterr()
    kept = {name: (run / name).read_bytes() for name in ("checkpoint.pt", "log.jsonl")}
    err = refused(fit_args(service, features, run), capsys)
    assert err == (
        f"trainer fit: {run}: holds a run (checkpoint.pt, log.jsonl): continue it with --resume, replace it with "
        "--overwrite, or give another --out"
    )
    assert {name: (run / name).read_bytes() for name in kept} == kept
    assert main(fit_args(service, features, run, "--overwrite")) == 0
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert sum(row.get("event") == "start" for row in log) == 1  # one run in the log: the new one
    assert max(row.get("step", 0) for row in log) == 2


def test_eval_of_a_checkpoint_that_does_not_fit_is_refused_naming_both(
    service: str, features: Path, split: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from labeldist.trainer.training.checkpoints import read_checkpoint, save_checkpoint

    run = tmp_path / "run"
    fit(config(service, features, run))
    ckpt = str(run / "checkpoint.pt")
    narrow = tmp_path / "narrow.npy"
    np.save(narrow, np.load(features)[:, :5])
    err = refused(eval_args(service, split, tmp_path, "--features", str(narrow), "--checkpoint", ckpt), capsys)
    assert ckpt in err and f"{np.load(features).shape[1]} input features" in err and "5" in err, err
    err = refused(
        eval_args(service, split, tmp_path, "--features", str(features), "--checkpoint", ckpt, "--embedding-dim", "32"),
        capsys,
    )
    assert ckpt in err and "16-d" in err and "32" in err, err
    state = read_checkpoint(ckpt)  # a checkpoint whose weights are not those of the model it records
    save_checkpoint(tmp_path / "odd.pt", {**state, "model_config": {**state["model_config"], "out_dim": 8}})
    err = refused(
        eval_args(service, split, tmp_path, "--features", str(features), "--checkpoint", str(tmp_path / "odd.pt")),
        capsys,
    )
    assert str(tmp_path / "odd.pt") in err and "8-d" in err and "Missing key" not in err, err


def test_split_of_a_folder_says_what_split_takes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "some-store"
    store.mkdir()
    err = refused(["split", str(store), "--out", str(tmp_path / "out")], capsys)
    assert str(store) in err and "label file" in err and ".json" in err and ".csv" in err, err
    err = refused(["split", str(tmp_path / "none.csv"), "--out", str(tmp_path / "out")], capsys)
    assert "none.csv" in err, err
    (tmp_path / "bad.json").write_text("{not json")
    err = refused(["split", str(tmp_path / "bad.json"), "--out", str(tmp_path / "out")], capsys)
    assert "bad.json" in err, err


#: what may never appear in the project's code: a pickle loaded without weights_only
UNSAFE = re.compile(r"weights_only\s*=\s*False|pickle\.loads?\(|allow_pickle\s*=\s*True|torch\.load\(")


def test_no_code_loads_a_pickle_but_the_checkpoint_reader() -> None:
    """torch.load only in trainer/training/checkpoints.py (with weights_only=True); no pickle.load, no allow_pickle."""
    found = []
    for folder in ("trainer", "client", "api", "labeldist", "benchmarks", "tools"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                allowed = path == REPO / "trainer" / "training" / "checkpoints.py" and "weights_only=True" in line
                if UNSAFE.search(line) and not allowed:
                    found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)
