"""README's "Your own data in 20 lines" runs as printed: its bash block in an empty folder,
with this environment's ``labeldist`` on the PATH, then its Python block in a fresh interpreter in the same folder.
It must make the store and the table it says, and the training it shows must learn: the embedding's 5 nearest
hold most of each item's 5 nearest labels (against 0.5 % by chance), as the README says it prints. And README
stays a page a newcomer reads: at most about 150 lines."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def block(text: str, marker: str, language: str) -> str:
    assert text.count(marker) == 1, f"README.md must hold the marker {marker} once"
    match = re.search(re.escape(marker) + rf"\s*```{language}\n(.*?)```", text, re.DOTALL)
    assert match, f"a ```{language} block must follow {marker} in README.md"
    return match.group(1)


def test_your_own_data_runs_as_printed_and_learns(tmp_path: Path) -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    shell, python = (
        block(text, "<!-- example: own-data -->", "bash"),
        block(text, "<!-- example: own-data-python -->", "python"),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LABELDIST_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # this environment's labeldist
    made = subprocess.run(
        ["bash", "-e", "-c", shell], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert made.returncode == 0, made.stdout + made.stderr
    assert (tmp_path / "stores" / "mine" / "zarr.json").is_file() and (tmp_path / "neighbours.csv").is_file()
    (tmp_path / "own.py").write_text(python)
    ran = subprocess.run([sys.executable, "own.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr
    losses = [float(x) for x in re.findall(r"^step \d+: loss ([\d.]+)$", ran.stdout, re.M)]
    assert len(losses) == 4 and losses[-1] < losses[0] / 10, ran.stdout
    recall = float(re.search(r"^recall@5 of the label neighbours: ([\d.]+)$", ran.stdout, re.M).group(1))
    assert recall >= 0.6, ran.stdout
    said = re.search(r"`recall@5 of the label neighbours: ([\d.]+)`", text)
    assert said and abs(float(said.group(1)) - recall) <= 0.05, "README quotes what the example prints"


def test_the_readme_is_a_page_a_newcomer_reads() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, len(lines)
    for target in re.findall(r"\]\(([^)#]+)\)", "\n".join(lines)):
        if not target.startswith("http"):
            assert (REPO / target).exists(), target


def test_what_the_python_block_imports_comes_with_the_install_it_names() -> None:
    """Before: after ``pip install 'dist/labeldist-...whl[all]'`` the block stopped at ``import pandas`` (pandas was
    only in [dev]). Every module the block imports must be installed by the base package or [all] (pyproject's own
    requirements, read here; the distribution of each module from the installed metadata)."""
    import ast
    import importlib.metadata as md

    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]

    def names(requirements: list[str]) -> set[str]:
        out = set()
        for line in requirements:
            req = Requirement(line)
            if req.name == "labeldist":  # [all] = labeldist[serve,train,sts]
                for extra in req.extras:
                    out |= names(extras[extra])
            else:
                out.add(req.name.lower().replace("_", "-"))
        return out

    installed = names(project["dependencies"]) | names(extras["all"])
    text = (REPO / "README.md").read_text(encoding="utf-8")
    tree = ast.parse(block(text, "<!-- example: own-data-python -->", "python"))
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    owners = md.packages_distributions()
    for module in sorted(modules - {"labeldist"} - set(sys.stdlib_module_names)):
        dists = {d.lower().replace("_", "-") for d in owners.get(module, [module])}
        assert dists & installed, f"README's Python block imports {module} ({dists}), which [all] does not install"
