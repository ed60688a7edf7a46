"""docs/guide.md's "Bring your own poses": each ``labeldist precompute pose`` command of its example,
parsed by the real parser and read by the kind's loader, reads what the guide says; the example files shipped
in ``examples/poses/`` are those their script writes. (The commands were also run as written, stores and all.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labeldist.labels.pose_files import read_mpii_csv
from labeldist.labels.poses import COCO_JOINTS
from tests.labels.test_pose_formats import CSV, SHARED


def test_the_readmes_pose_commands_read_what_it_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``labeldist precompute pose`` of docs/guide.md's "Bring your own poses", parsed by the real parser and read
    by the kind's loader (run from the repository root, as written; the store itself is not computed here), and the
    example files are those ``examples/poses/make_examples.py`` writes."""
    import shlex
    import subprocess
    import sys

    from labeldist.cli import build_parser

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "guide.md").read_text()
    section = text[text.index("## Bring your own poses") : text.index("## How a store is made")]
    block = section[section.index("```bash\n") + 8 :]
    block = block[: block.index("```")].replace("\\\n", " ")
    lines = [line for line in block.splitlines() if line.strip()]
    printf = next(line for line in lines if line.startswith("printf"))
    fmt, target = re.match(r"printf '(.*)' > (\S+)$", printf).groups()  # type: ignore[union-attr]
    (tmp_path / target).write_text(fmt.encode().decode("unicode_escape"))
    made = tmp_path / "made"  # the shipped examples are what their script writes
    made.mkdir()
    subprocess.run([sys.executable, str(root / "examples/poses/make_examples.py"), str(made)], check=True)
    for name in ("person_keypoints.json", "poses.csv"):
        assert (made / name).read_bytes() == (root / "examples" / "poses" / name).read_bytes(), name
    monkeypatch.chdir(root)
    read = {}
    for line in lines:
        if not line.startswith(".venv/bin/labeldist precompute pose"):
            continue
        argv = shlex.split(line)[1:]
        argv = [str(tmp_path / a) if a == target else a for a in argv]
        args = build_parser().parse_args(argv)
        labels, _, _ = args.loader(args)
        read[args.out] = labels
    assert set(read) == {
        "stores/example-coco-pose",
        "stores/example-coco12-pose",
        "stores/example-csv-pose",
        "stores/example-hands-pose",
    }
    assert read["stores/example-coco-pose"].joint_names == COCO_JOINTS and len(read["stores/example-coco-pose"]) == 40
    assert read["stores/example-coco12-pose"].joint_names == tuple(SHARED)
    csv_store = read["stores/example-csv-pose"]
    assert csv_store.sha256() == read_mpii_csv(CSV, "center_scale").subset(slice(0, 40)).sha256()
    assert read["stores/example-hands-pose"].joint_names == ("thumb", "index", "wrist")
