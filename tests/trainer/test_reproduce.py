"""The image reproduction (``python -m labeldist.trainer.experiments.reproduce --images --stores``) end to end at toy
size:
a real ResNet-18 trained a few steps on real renders of a real pose store, read in-process. The table has the
ceiling row, the untrained network ranked both ways and a trained row naming its ranking, steps and epochs; the
nDCG@10-against-steps curve is evaluated at each segment; a second call reuses the finished runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from labeldist.trainer.experiments.ceiling import store_ceiling
from labeldist.trainer.experiments.reproduce import reproduce
from labeldist.trainer.inputs.augment import kind_augmentation
from tests.trainer.conftest import N_ITEMS, STORE


@pytest.fixture(scope="module")
def runs(pose_store: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``stores/mpii-{train,test}-pose`` (both the 300-item store: the test here is the plumbing, not the split),
    their renders under ``runs/images`` and a split of the test store under ``runs/mpii/split.json``."""
    from labeldist.trainer.render.base import render_store

    root = tmp_path_factory.mktemp("reproduce")
    stores, runs = root / "stores", root / "runs"
    stores.mkdir()
    for name in ("mpii-train-pose", "mpii-test-pose"):
        (stores / name).symlink_to(pose_store / STORE, target_is_directory=True)
    render_store(
        str(pose_store / STORE),
        str(runs / "images" / "mpii-train-pose"),
        size=32,
        seed=0,
        fmt="png",
        workers=1,
        progress=False,
    )
    (runs / "images" / "mpii-test-pose").symlink_to(runs / "images" / "mpii-train-pose", target_is_directory=True)
    positions = np.random.default_rng(0).permutation(N_ITEMS)
    (runs / "mpii").mkdir()
    split = {"queries": sorted(positions[:40].tolist()), "gallery": sorted(positions[40:].tolist())}
    (runs / "mpii" / "split.json").write_text(json.dumps(split))
    return stores, runs


def cells(table: str, starts: str) -> list[str]:
    (line,) = [row for row in table.splitlines() if row.startswith(f"| {starts}")]
    return [c.strip() for c in line.strip("|").split("|")]


def test_the_image_table_has_its_ceiling_untrained_both_ways_and_a_curve(runs) -> None:
    stores, root = runs
    kw = dict(
        epochs=None,
        seeds=[0],
        dims=[8],
        small_dim_seeds=[],
        lr=None,
        k_max=50,
        methods=["log_ratio"],
        images=True,
        input_size=32,
        loader_workers=0,
        max_steps=4,
        recipe="kim2019-pose",
        stores=stores,
        size=20,
        curve_every=2,
    )
    table = reproduce("", "mpii", root, **kw)
    # the ceiling: a perfect model of the test pictures under the pose augmentation's own jitter, nDCG@10 in the
    # table's eleventh cell (name, five MLD@k, then nDCG@1, @5, @10)
    aug = kind_augmentation("pose").augmentation
    split = json.loads((root / "mpii" / "split.json").read_text())
    want = store_ceiling(str(stores / "mpii-test-pose"), split, k_max=50, scale=aug.scale, shift=aug.shift)
    ceiling = cells(table, "ceiling")
    assert f"shift ± {aug.shift:g}" in ceiling[0]
    assert ceiling[8] == f"{want['summary']['ndcg@10']:.3f}"
    euclid, cosine = (
        cells(table, "untrained resnet18 (random weights), ranked by Euclidean"),
        cells(table, "untrained resnet18 (random weights), ranked by cosine"),
    )
    assert euclid[1:] != cosine[1:]  # two rankings of one network
    (trained,) = [line for line in table.splitlines() if "8-d" in line]
    assert "ranked by Euclidean" in trained and "4 steps" in trained  # the recipe's log-ratio: no normalisation
    # trained in two segments (the curve), the minutes count both: the steps' times in the log
    rows = [json.loads(line) for line in (root / "mpii" / "log_ratio-d8-s0" / "log.jsonl").read_text().splitlines()]
    seconds = sum(r["step_s"] + r["data_wait_s"] for r in rows if r["event"] == "step")
    saved = json.loads((root / "mpii" / "log_ratio-d8-s0" / "eval.json").read_text())
    assert saved["train_seconds"] == pytest.approx(seconds) and f"{seconds / 60:.1f} min/run" in trained
    ends = [i for i, r in enumerate(rows) if r["event"] == "end"]
    assert len(ends) >= 2 and rows[ends[-1]]["steps"] == 4
    # the final resume (curve done) trained nothing: no step between the last two segments' ends
    assert not [r for r in rows[ends[-2] + 1 : ends[-1]] if r["event"] == "step"]
    epochs = 4 / (N_ITEMS // 1)  # an epoch: every training item an anchor once, one anchor a step
    assert f"= {epochs:.2f} epochs" in trained
    curve = json.loads((root / "mpii" / "log_ratio-d8-s0" / "curve.json").read_text())
    assert curve["steps"] == [2, 4] and all(0 < v <= 1 for v in curve["ndcg@10"])
    assert (root / "mpii" / "curve.png").stat().st_size > 0
    # the finished run is reused: the same eval, no new training
    log = (root / "mpii" / "log_ratio-d8-s0" / "log.jsonl").read_text()
    assert reproduce("", "mpii", root, **kw) == table
    assert (root / "mpii" / "log_ratio-d8-s0" / "log.jsonl").read_text().count('"event": "step"') == log.count(
        '"event": "step"'
    )
