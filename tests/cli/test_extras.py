"""The extras: labeldist.core.extras lists what pyproject.toml's extras install, finds what is missing
without importing it, and every command names, in one line, the extra it lacks.

Here everything is installed, so a package is hidden from this process (its entry in ``sys.modules`` set to None,
or ``find_spec`` not finding it); tests/project/test_base_install.py runs the commands where it truly is not installed.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import pickle
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from labeldist.cli import main
from labeldist.core import extras
from labeldist.core.extras import install_command
from labeldist.entrypoints import trainer_main
from tests.conftest import DATA

INSTALL_SERVE, INSTALL_TRAIN, INSTALL_STS = (install_command(e) for e in ("serve", "train", "sts"))

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def hide(monkeypatch: pytest.MonkeyPatch):
    """hide(*modules): ``find_spec`` finds none of them (as where they are not installed), and importing one (or a
    submodule of it) raises ModuleNotFoundError naming it."""

    def hide(*modules: str) -> None:
        real = importlib.util.find_spec

        def find_spec(name: str, *args: object) -> object:
            return None if name.partition(".")[0] in modules else real(name, *args)

        monkeypatch.setattr(importlib.util, "find_spec", find_spec)
        for name in list(sys.modules):
            if name.partition(".")[0] in modules:
                monkeypatch.setitem(sys.modules, name, None)
        for name in modules:
            monkeypatch.setitem(sys.modules, name, None)

    return hide


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_the_extras_list_the_modules_of_pyprojects_extras_and_all_is_the_four() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    assert optional["all"] == ["labeldist[serve,train,sts,io]"]
    assert set(extras.EXTRAS) == {"serve", "train", "sts", "io"}
    modules_of: dict[str, set[str]] = {}  # distribution (normalised) -> its top-level import names
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(re.sub(r"[-_.]+", "-", dist).lower(), set()).add(module)
    base = {re.sub(r"[-_.]+", "-", Requirement(r).name).lower() for r in project["dependencies"]}
    for extra, modules in extras.EXTRAS.items():
        dists = {re.sub(r"[-_.]+", "-", Requirement(r).name).lower() for r in optional[extra]}
        provided = set().union(*(modules_of[d] for d in dists))
        assert set(modules) <= provided, (extra, set(modules) - provided)
        for dist in dists:  # each distribution of the extra is checked through one of its modules
            assert modules_of[dist] & set(modules), (extra, dist)
        assert not dists & base, f"[{extra}] repeats a base dependency: {dists & base}"
    # the heavy packages are in no base dependency
    assert not base & {"torch", "torchvision", "fastapi", "uvicorn", "sentence-transformers", "transformers", "gensim"}


def test_with_everything_installed_no_extra_is_missing() -> None:
    """This environment is [all,dev] (the Makefile's): nothing changes for it."""
    for extra in extras.EXTRAS:
        assert extras.missing_modules(extras.EXTRAS[extra]) == [], extra
        extras.require("labeldist test", extra)
    for kind in ("caption_wmd", "sentence_relevance", "pose", "vectors", "layout_miou"):
        extras.require_kind(kind, "labeldist test")


def test_the_message_is_one_line_naming_the_extra_and_its_install() -> None:
    assert extras.message("labeldist serve", "serve") == ("labeldist serve needs the [serve] extra: " + INSTALL_SERVE)
    assert extras.message("trainer", "train", ["torch", "httpx"]) == (
        "trainer needs the [train] extra: " + INSTALL_TRAIN + " (not installed: torch, httpx)"
    )


def test_missing_extra_is_a_module_not_found_error_that_survives_pickling() -> None:
    """Raised on a Dask worker, it comes back to the client whole."""
    error = extras.MissingExtra("caption WMD", "sts", ["ot"])
    assert isinstance(error, ModuleNotFoundError) and error.name == "ot"
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is extras.MissingExtra and str(back) == str(error) and back.extra == "sts"
    assert back.missing == ("ot",) and extras.extra_of(back) == "sts"


def test_a_lazy_import_of_an_extras_package_names_the_extra(hide) -> None:
    from labeldist.distances.transport import emd_pot
    from labeldist.labels.text import _stopword_set

    hide("gensim", "ot")
    with pytest.raises(
        extras.MissingExtra,
        match=re.escape(
            "a text kind (captions, sentences) needs the [sts] extra: " + INSTALL_STS + " (not installed: gensim)"
        ),
    ):
        _stopword_set("gensim")
    with pytest.raises(ImportError, match=r"caption WMD needs the \[sts\] extra"):  # still an ImportError
        emd_pot(*[None] * 3)
    # a module of no extra is not dressed up as one
    with pytest.raises(ModuleNotFoundError) as raised, extras.needed("sts", "x"):
        import labeldist_no_such_module  # noqa: F401
    assert type(raised.value) is ModuleNotFoundError


def test_serve_without_the_serve_extra_says_so_in_one_line(hide, capsys, tmp_path) -> None:
    hide("fastapi", "uvicorn")
    assert main(["serve", "--stores", str(tmp_path)]) == 2
    assert one_line(capsys.readouterr().err) == (
        "labeldist: error: labeldist serve needs the [serve] extra: " + INSTALL_SERVE + " "
        "(not installed: fastapi, uvicorn)"
    )


def test_text_kinds_and_sts_without_the_sts_extra_say_so_before_reading_anything(hide, capsys, tmp_path) -> None:
    hide("gensim", "sentence_transformers")
    missing = tmp_path / "no-such-input.json"  # the extra is named first, not the missing file
    for argv, command, names in [
        (["precompute", "captions", str(missing)], "labeldist precompute captions", "gensim"),
        (["precompute", "sentences", str(missing)], "labeldist precompute sentences", "sentence_transformers, gensim"),
        (["sts", "fit", "--out", str(tmp_path / "m")], "labeldist sts fit", "sentence_transformers, gensim"),
    ]:
        assert main(argv) == 2, argv
        assert one_line(capsys.readouterr().err) == (
            f"labeldist: error: {command} needs the [sts] extra: {INSTALL_STS} (not installed: {names})"
        )
    assert not list(tmp_path.iterdir())


def test_a_missing_package_met_while_working_names_the_extra_too(hide, monkeypatch, capsys, tmp_path) -> None:
    """Past the up-front check (left out here), the lazy import itself: the command still ends in one line."""
    monkeypatch.setattr(extras, "KIND_EXTRAS", {})
    vectors = tmp_path / "tiny.glove.txt"
    vectors.write_text("a 0.1 0.2\ncat 0.3 0.4\n")
    hide("gensim")
    argv = [
        "precompute",
        "captions",
        str(DATA / "coco" / "coco_karpathy_test.json"),
        "--vectors",
        str(vectors),
        "--vectors-format",
        "glove",
        "--out",
        str(tmp_path / "store"),
    ]
    assert main(argv) == 2
    assert one_line(capsys.readouterr().err) == (
        "labeldist: error: labeldist precompute captions needs the [sts] extra: " + INSTALL_STS + " "
        "(not installed: gensim)"
    )
    assert not (tmp_path / "store").exists()


def test_the_trainer_command_without_torch_says_so_in_one_line(hide, capsys) -> None:
    hide("torch", "pytorch_metric_learning")
    assert trainer_main(["fit", "--help"]) == 2
    assert one_line(capsys.readouterr().err) == (
        "trainer: error: trainer needs the [train] extra: " + INSTALL_TRAIN + " "
        "(not installed: torch, pytorch_metric_learning)"
    )


def test_the_trainer_command_with_torch_is_the_trainer(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        trainer_main(["--help"])
    assert done.value.code == 0 and "usage: " in capsys.readouterr().out


def test_the_trainer_script_is_the_entry_point_in_front_of_the_trainer_and_extras_imports_no_part() -> None:
    """pyproject's ``trainer`` script is labeldist.entrypoints' guard; labeldist.core.extras, a bottom-layer module that
    the engine's modules use, imports no other module of labeldist (the trainer's least of all) but the error root,
    which imports none."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["trainer"] == "labeldist.entrypoints:trainer_main"

    def imported(module: str) -> list[str]:
        return [
            n.module if isinstance(n, ast.ImportFrom) else a.name
            for n in ast.walk(ast.parse((ROOT / "labeldist" / "core" / module).read_text()))
            if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names
        ]

    extras = imported("extras.py")
    assert [m for m in extras if m and m.startswith("labeldist")] == ["labeldist.errors"], extras
    errors = ast.parse((ROOT / "labeldist" / "errors.py").read_text())
    assert not [n for n in ast.walk(errors) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.module != "__future__"]
