"""docs/training.md's "Train with your own code" example runs as written (only its store path changed, to a small pose
store built here) and its PML triplet loss goes down."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from tests.client.conftest import DENSE, REPO

MARKER = "<!-- example: train-with-pml -->"
STORE_LINE = re.compile(r'^store = "[^"]*"', re.MULTILINE)


def readme_example() -> str:
    text = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    assert text.count(MARKER) == 1, f"docs/training.md must hold the marker {MARKER} once"
    match = re.search(re.escape(MARKER) + r"\s*```python\n(.*?)```", text, re.DOTALL)
    assert match, f"a ```python block must follow {MARKER} in docs/training.md"
    return match.group(1)


def test_the_readme_example_trains_and_its_loss_goes_down(stores: Path) -> None:
    code = readme_example()
    assert len(STORE_LINE.findall(code)) == 1, 'the example defines its store path once: store = "..."'
    code = STORE_LINE.sub(lambda _: f"store = {str(stores / DENSE)!r}", code)
    namespace: dict = {"__name__": "readme_example"}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine's cores are shared
    try:
        exec(compile(code, "docs/training.md (train-with-pml)", "exec"), namespace)
    finally:
        torch.set_num_threads(threads)
    losses = np.asarray(namespace["losses"])
    assert len(losses) == 300 and np.isfinite(losses).all()  # one epoch: one step per anchor of the 300-item store
    first, last = losses[:50].mean(), losses[-50:].mean()
    assert last < 0.7 * first, (first, last)  # measured: about 0.4
