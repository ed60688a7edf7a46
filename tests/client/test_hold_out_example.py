"""docs/training.md's "Hold out a test split" example runs as written (only its store path changed, to a small pose
store built here): one epoch over the train items' anchors draws no test item, as anchor, neighbour or other."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from tests.client.conftest import DENSE, REPO

MARKER = "<!-- example: hold-out-pool -->"
STORE_LINE = re.compile(r'^store, source = "[^"]*", LocalSource\(\)', re.MULTILINE)


def test_the_readme_example_draws_no_test_item(stores: Path, capsys) -> None:
    text = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    assert text.count(MARKER) == 1, f"docs/training.md must hold the marker {MARKER} once"
    match = re.search(re.escape(MARKER) + r"\s*```python\n(.*?)```", text, re.DOTALL)
    assert match, f"a ```python block must follow {MARKER} in docs/training.md"
    code = match.group(1)
    assert len(STORE_LINE.findall(code)) == 1, "the example defines its store path once"
    code = STORE_LINE.sub(lambda _: f"store, source = {str(stores / DENSE)!r}, LocalSource()", code)
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(code, "docs/training.md (hold-out-pool)", "exec"), namespace)
    train, test, members = namespace["train"], namespace["test"], namespace["members"]
    assert len(train) == 240 and len(test) == 60 and not np.isin(train, test).any()
    assert members.size == 240 * 150  # one epoch: every train item an anchor, each minibatch 150 members
    assert not np.isin(members, test).any()
    assert capsys.readouterr().out == "36,000 members, 0 of them test items\n"
