"""Every training loop the docs show sets torch's threads first, as the README advises (``torch.set_num_threads(1)``
for a small model on a CPU: on a busy 2-core machine torch's default threads made a researcher's epoch take 110 s
instead of 0.5 s). A loop is a Python block that calls ``.backward()``; the call must come before its loop."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "docs/training.md", "docs/guide.md")
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def training_loops(page: str) -> list[str]:
    """The Python blocks of ``page`` that train (call ``.backward()``)."""
    text = (REPO / page).read_text(encoding="utf-8")
    return [block for block in BLOCK.findall(text) if ".backward()" in block]


def test_the_readme_advises_one_thread_for_small_models() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert re.search(r"keep `torch\.set_num_threads\(1\)` for small models", readme)


@pytest.mark.parametrize("page", PAGES)
def test_every_training_loop_sets_torchs_threads_before_it(page: str) -> None:
    for block in training_loops(page):
        lines = block.splitlines()
        loop = next(i for i, line in enumerate(lines) if re.match(r"\s*for .+:", line))
        threads = [i for i, line in enumerate(lines) if re.match(r"\s*torch\.set_num_threads\(\d+\)", line)]
        assert threads and threads[0] < loop, f"{page}: a training loop without torch.set_num_threads first:\n{block}"


def test_the_docs_show_training_loops() -> None:
    assert sum(len(training_loops(page)) for page in PAGES) >= 2  # README's own-data block, training.md's PML one
