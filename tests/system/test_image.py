"""The Docker image can be built; this machine has no Docker engine, so each step a build takes
is checked here on its own.

Found: the Dockerfile did not copy ``client/``, which pyproject.toml maps to ``labeldist.client``, so its
``pip install -e .`` failed; docker-compose.gpu.yml pinned ``torch==2.13.0`` beside the Dockerfile's default
``torchvision==0.29.1``, which needs torch 2.14: no install could resolve them; and with no .dockerignore a build
sent the whole checkout (a 6.9 GB .venv, stores, models, runs) to the engine.

- every path pyproject maps into the package is copied before the install;
- the build context (the checkout less .dockerignore) keeps out the virtualenv, stores, caches, ...;
- exactly the files the Dockerfile has copied when it reaches ``pip install -e .`` install that way;
- the torch and torchvision pins of every compose file, as they combine with the Dockerfile's defaults, are a pair
  pip can install together.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- reading the Dockerfile and .dockerignore
def instructions(dockerfile: Path = REPO / "Dockerfile") -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    joined, out = "", []
    for line in dockerfile.read_text().splitlines():
        if not joined and line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            joined += line.rstrip()[:-1] + " "
            continue
        text = (joined + line).strip()
        joined = ""
        if text:
            word, _, rest = text.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def copy_args(rest: str) -> tuple[list[str], str]:
    """Sources and destination of a COPY (shell or JSON form; --chown and the like dropped)."""
    parts = json.loads(rest) if rest.startswith("[") else [p for p in shlex.split(rest) if not p.startswith("--")]
    return parts[:-1], parts[-1]


def copies_before_install() -> list[tuple[list[str], str]]:
    """The COPYs the image has made when it runs ``pip install -e .``: all it can install from."""
    out = []
    for word, rest in instructions():
        if word == "RUN" and re.search(r"\bpip install\b.*\s-e\s+[\"']?\.", rest):
            return out
        if word == "COPY":
            out.append(copy_args(rest))
    raise AssertionError("the Dockerfile has no `pip install -e .`")


def build_args() -> dict[str, str]:
    """The Dockerfile's ARG defaults."""
    args = {}
    for word, rest in instructions():
        if word == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args[name.strip()] = value.strip().strip('"')
    return args


def _pattern(glob: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match, plus ``**`` for any number of folders) as a regex."""
    out, i = "", 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif glob.startswith("**", i):
            out, i = out + ".*", i + 2
        elif glob[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif glob[i] == "?":
            out, i = out + "[^/]", i + 1
        elif glob[i] == "[":
            end = glob.index("]", i)
            out, i = out + "[" + glob[i + 1 : end].replace("^", "\\^", 1).replace("!", "^", 1) + "]", end + 1
        else:
            out, i = out + re.escape(glob[i]), i + 1
    return re.compile(out)


def dockerignore(path: Path = REPO / ".dockerignore") -> list[tuple[bool, re.Pattern[str]]]:
    """(exclude?, pattern) per line, in order: the last one that matches decides, as in Docker."""
    rules = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        glob = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        rules.append((not keep, _pattern(glob)))
    return rules


def excluded(relpath: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether the context leaves out ``relpath``: a pattern matching it or one of its parent folders."""
    parts = relpath.split("/")
    verdict = False
    for exclude, pattern in rules:
        if any(pattern.fullmatch("/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            verdict = exclude
    return verdict


def build_context(rules: list[tuple[bool, re.Pattern[str]]]) -> set[str]:
    """The files (relative, with /) a ``docker build .`` of the checkout sends to the engine."""
    files = set()
    for root, dirs, names in os.walk(REPO):
        rel = os.path.relpath(root, REPO)
        prefix = "" if rel == "." else rel + "/"
        dirs[:] = [d for d in dirs if not excluded(prefix + d, rules)]
        files.update(prefix + n for n in names if not excluded(prefix + n, rules))
    return files


# ---------------------------------------------------------------- what pyproject maps
def mapped_paths() -> set[str]:
    """Every path of the checkout that pyproject.toml puts into the package: each package's folder (through
    package-dir), each package-data glob, the readme, pyproject itself."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    setup = project["tool"]["setuptools"]
    package_dir = setup.get("package-dir", {})

    def folder(package: str) -> str:
        parts = package.split(".")
        for n in range(len(parts), 0, -1):  # the longest mapped prefix wins, as in setuptools
            base = ".".join(parts[:n])
            if base in package_dir:
                return "/".join([package_dir[base].rstrip("/"), *parts[n:]])
        return "/".join([package_dir.get("", "").strip("/"), *parts]).lstrip("/")

    paths = {"pyproject.toml", project["project"]["readme"]}
    paths.update(folder(p) for p in setup["packages"])
    for package, globs in setup.get("package-data", {}).items():
        paths.update(f"{folder(package)}/{g}" for g in globs)
    return paths


def copied(relpath: str, copies: list[tuple[list[str], str]]) -> bool:
    """Whether ``relpath`` (a file, a folder or a glob of the checkout) is under a COPY source."""
    sources = [s.rstrip("/") for srcs, _ in copies for s in srcs]
    return any(s in (".", relpath) or relpath.startswith(s + "/") or fnmatch.fnmatch(relpath, s) for s in sources)


def test_every_path_pyproject_maps_is_copied_before_the_install() -> None:
    copies = copies_before_install()
    missing = sorted(p for p in mapped_paths() if not copied(p, copies))
    assert not missing, f"pyproject.toml maps these, the Dockerfile does not copy them before `pip install`: {missing}"
    for srcs, dest in copies:  # each into the same place in /app, where pyproject expects it
        assert dest in ("./", ".") or srcs == [dest], (srcs, dest)


def test_the_build_context_leaves_out_the_virtualenv_stores_and_caches() -> None:
    rules = dockerignore()
    for path in (
        ".venv",
        ".git",
        "stores",
        "models",
        "runs",
        "test-artifacts",
        "build",
        "dist",
        "labeldist.egg-info",
        "labeldist/__pycache__",
        "api/routers/__pycache__/x.pyc",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        "examples/labeldist-angles/labeldist_angles.egg-info",
        "stores/.cache",
    ):
        assert excluded(path, rules), f"{path} is sent to the Docker engine"
    context = build_context(rules)
    for word, rest in instructions():  # and everything the Dockerfile copies is there
        if word == "COPY":
            for src in copy_args(rest)[0]:
                assert src in context or any(f.startswith(src.rstrip("/") + "/") for f in context), src
    assert not any(f.endswith(".pyc") for f in context)


def test_exactly_the_copied_files_install_as_the_dockerfile_installs_them(tmp_path: Path) -> None:
    """The files the image holds at ``pip install -e .`` (the build context's, where the COPYs put them), installed
    with that command into a fresh virtual environment. ``--no-deps --no-build-isolation``: the third-party
    packages, setuptools included, come from this test run's environment (no network needed)."""
    rules = dockerignore()
    context = build_context(rules)
    app = tmp_path / "app"
    app.mkdir()
    for srcs, dest in copies_before_install():
        for src in srcs:
            src = src.rstrip("/")
            if src in context:  # a file
                target = app / dest / Path(src).name if dest.endswith("/") or len(srcs) > 1 else app / dest
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / src, target)
            else:  # a folder: its files that are in the context
                inside = [f for f in context if f.startswith(src + "/")]
                assert inside, f"COPY {src}: not in the build context"
                for f in inside:
                    target = app / dest / f[len(src) + 1 :]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(REPO / f, target)
    env_dir = tmp_path / "image-env"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-e",
            ".",
        ],
        cwd=app,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    work = tmp_path / "elsewhere"
    work.mkdir()
    code = (
        "import labeldist.api, labeldist.client.prefetch, labeldist.trainer.cli, labeldist.store as s; "
        "print(s.__file__, labeldist.client.prefetch.__file__)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = subprocess.run([python, "-c", code], cwd=work, env=env, capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    assert all(Path(p).is_relative_to(app) for p in found.stdout.split()), found.stdout  # the copied files'


# ---------------------------------------------------------------- torch and torchvision pins
def compose_builds() -> list[tuple[str, str, dict[str, str]]]:
    """(compose file, service, its build args merged over the Dockerfile's ARG defaults) for every service built."""
    defaults, out = build_args(), []
    for path in sorted(REPO.glob("docker-compose*.yml")):
        for name, service in (yaml.safe_load(path.read_text()).get("services") or {}).items():
            build = service.get("build")
            if build is None:
                continue
            args = build.get("args", {}) if isinstance(build, dict) else {}
            if isinstance(args, list):  # the ["NAME=value"] form
                args = dict(a.split("=", 1) for a in args)
            out.append((path.name, name, {**defaults, **{k: str(v) for k, v in args.items()}}))
    return out


def test_every_compose_build_has_torch_pins() -> None:
    builds = compose_builds()
    assert {f for f, _, _ in builds} == {"docker-compose.yml", "docker-compose.gpu.yml", "docker-compose.cluster.yml"}
    for _, _, args in builds:
        assert args["TORCH"].startswith("torch==") and args["TORCHVISION"].startswith("torchvision==")
        assert args["TORCHCODEC"].startswith("torchcodec==")


@pytest.mark.parametrize("pins", sorted({(a["TORCH"], a["TORCHVISION"]) for _, _, a in compose_builds()}), ids="+".join)
def test_the_torch_and_torchvision_pins_install_together(pins: tuple[str, str], tmp_path: Path) -> None:
    """What pip sees of the pinned pair: both versions exist, and torchvision's own requirement on torch accepts the
    pinned torch (torchvision releases each need one torch release).

    Resolved against this machine's configured indexes, not the build's TORCH_INDEX: a CUDA index
    (download.pytorch.org/whl/cu126, named by docker-compose.gpu.yml) cannot be reached here, and it serves the same
    versions with a local tag (2.13.0+cu126), which the same == pin matches. ``--no-deps``: torch's own
    dependencies (CUDA libraries, ...) are not the question, and need not be fetched.
    """
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--no-deps",
            "--quiet",
            "--report",
            str(report),
            "--timeout",
            "30",
            "--retries",
            "1",
            *pins,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("WARNING: Location"))
    assert proc.returncode == 0, f"pip cannot find {pins}: {errors}"
    found = {i["metadata"]["name"].lower(): i["metadata"] for i in json.loads(report.read_text())["install"]}
    torch = Version(found["torch"]["version"])
    needs = [Requirement(r) for r in found["torchvision"].get("requires_dist", [])]
    (on_torch,) = [r for r in needs if r.name == "torch" and (r.marker is None or r.marker.evaluate({"extra": ""}))]
    # torch 2.13.0+cpu (or +cu126) satisfies "torch==2.13.0": compare the public version, as pip does
    assert on_torch.specifier.contains(Version(torch.public), prereleases=True), (
        f"{pins[1]} needs {on_torch}, and {pins[0]} is pinned beside it: no install can resolve both"
    )
