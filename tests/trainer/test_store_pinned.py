"""A training run stays on one store: ``fit --stores`` pins the generation it opened (a store rebuilt or appended
to during the run stops it, checkpointed, in one line), and ``--resume`` refuses a checkpoint trained on other data.

Each change is made as labeldist makes it: a whole new store folder renamed into place (``--overwrite``'s swap and
an append's both do), so the root ``zarr.json`` is another file.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from labeldist.client import LocalSource, StoreMovedOn
from tests.conftest import write_store
from tests.trainer.conftest import N_ITEMS, REPO, STORE


def swap_in(source: Path, target: Path) -> None:
    """Replace the store at ``target`` by a copy of the store at ``source``, renamed into place."""
    staged = target.with_name(f".{target.name}.staged")
    shutil.copytree(source, staged)
    aside = target.with_name(f".{target.name}.aside")
    os.rename(target, aside)
    os.rename(staged, target)
    shutil.rmtree(aside)


def pose_store_of(n: int, root: Path, first: int = 0) -> Path:
    """A dense pose store of ``n`` MPII validation poses from the ``first``-th at ``root / STORE``, written in this
    process (:func:`tests.conftest.write_store`)."""
    from labeldist.distances.pose import PoseDistance
    from labeldist.labels.pose_files import read_mpii_csv

    labels = read_mpii_csv(REPO / "data" / "mpii" / "mpii_valid_2958.csv", normalization="center_scale")
    labels = labels.subset(slice(first, first + n))
    return write_store(root / STORE, labels, PoseDistance(), dataset=f"mpii{n}", k=20, dense=True, block_rows=100)


@pytest.fixture
def stores(pose_store: Path, tmp_path: Path) -> Path:
    """A copy of the trainer tests' stores folder that a test may change."""
    root = tmp_path / "stores"
    shutil.copytree(pose_store, root)
    return root


def test_a_pinned_source_refuses_a_store_replaced_after_it_opened_it(stores: Path, tmp_path: Path) -> None:
    pinned, following = LocalSource(stores, pinned=True), LocalSource(stores)
    before = pinned.batches(STORE, anchors=[3], size=10, seed=1)
    following.batches(STORE, anchors=[3], size=10, seed=1)
    other = pose_store_of(200, tmp_path / "other")
    swap_in(other, stores / STORE)
    with pytest.raises(StoreMovedOn, match=rf"store '{STORE}' .* changed on disk .* after this run opened it"):
        pinned.batches(STORE, anchors=[3], size=10, seed=1)
    # a loader's worker process opens the store afresh: it keeps the pin, and so does a pickled source
    for copy in (pinned.fresh(), pickle.loads(pickle.dumps(pinned))):
        with pytest.raises(StoreMovedOn):
            copy.neighbors(STORE, 3)
    # a source that is not pinned (the service's rule) reads the store now there
    assert following.store(STORE)["n_items"] == 200
    assert LocalSource(stores, pinned=True).store(STORE)["n_items"] == 200  # a new pinned source opens the new one
    assert before.items.shape == (1, 9)


def test_the_same_store_swapped_in_is_another_generation_too(stores: Path, tmp_path: Path) -> None:
    # the identity is the file's, not its content: a copy renamed into place is refused mid-run (a resume then
    # compares what the checkpoint recorded, below)
    pinned = LocalSource(stores, pinned=True)
    pinned.neighbors(STORE, 0)
    shutil.copytree(stores / STORE, tmp_path / "same")
    swap_in(tmp_path / "same", stores / STORE)
    with pytest.raises(StoreMovedOn):
        pinned.neighbors(STORE, 0)


class ChangeAfter:
    """A training stream that calls ``change()`` once its ``after``-th step has been taken from it."""

    def __init__(self, stream: Any, after: int, change: Callable[[], None]) -> None:
        self.stream, self.after, self.change = stream, after, change
        self.steps_per_epoch = stream.steps_per_epoch

    def __iter__(self) -> Iterator[Any]:
        steps = iter(self.stream)
        try:
            for taken, step in enumerate(steps, start=1):
                if taken == self.after:
                    self.change()
                yield step
        finally:
            steps.close()


def config(stores: Path, features: Path, out: Path, **options: Any) -> Any:
    from labeldist.trainer.training.config import FitConfig

    return FitConfig(
        url="",
        stores=str(stores),
        store=STORE,
        features=str(features),
        out=str(out),
        loss="log_ratio",
        size=40,
        seed=0,
        epochs=20,
        max_steps=300,
        progress=False,
        checkpoint_every=10_000,
        **options,
    )


def log_rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


def run_with_change(stores: Path, features: Path, out: Path, change: Callable[[], None]) -> StoreMovedOn:
    from labeldist.trainer.training.fit import build, make_stream, train

    run = build(config(stores, features, out))
    with pytest.raises(StoreMovedOn) as stopped:
        train(run, ChangeAfter(make_stream(run), 5, change))
    return stopped.value


def test_a_run_stops_checkpointed_when_its_store_is_rebuilt_and_resumes_only_on_the_same_data(
    stores: Path, features: Path, tmp_path: Path
) -> None:
    from labeldist.trainer.training.checkpoints import CheckpointError, read_checkpoint
    from labeldist.trainer.training.fit import fit

    copy, out = tmp_path / "copy", tmp_path / "run"
    shutil.copytree(stores / STORE, copy)
    other = pose_store_of(N_ITEMS, tmp_path / "other", first=N_ITEMS)  # as many items, other poses
    error = run_with_change(stores, features, out, lambda: swap_in(other, stores / STORE))
    message = str(error)
    assert "\n" not in message and "changed on disk" in message and "checkpoint saved" in message
    assert "--resume" in message and "--overwrite" in message
    rows = log_rows(out)
    stopped = [r for r in rows if r["event"] == "stopped"]
    assert len(stopped) == 1
    at = stopped[0]["step"]
    assert 5 <= at < 300 and f"at step {at} of 300" in message
    assert [r["step"] for r in rows if r["event"] == "step"] == list(range(1, at + 1))
    state = read_checkpoint(out / "checkpoint.pt")
    assert state["step"] == at and state["store"]["n_items"] == N_ITEMS
    # the store there now holds other items: resuming would train on other data
    sha = r"'[0-9a-f]{12}\.\.\.'"
    with pytest.raises(CheckpointError, match=rf"another store .*labels_sha256 {sha} -> {sha}.*--overwrite"):
        fit(config(stores, features, out, resume=True))
    # the store it was trained on, back (a copy: another file, the same labels and parameters): the run continues
    swap_in(copy, stores / STORE)
    summary = fit(config(stores, features, out, resume=True))
    assert summary["steps"] == 300
    assert [r["step"] for r in log_rows(out) if r["event"] == "start"] == [0, at]


def test_an_append_during_a_run_stops_it_in_one_line_not_an_index_error(
    stores: Path, features: Path, tmp_path: Path
) -> None:
    # the store grows to 330 items: before, the run read minibatches holding items 300.. and indexed its 300
    # feature rows with them
    grown = pose_store_of(N_ITEMS + 30, tmp_path / "grown")
    error = run_with_change(stores, features, tmp_path / "run", lambda: swap_in(grown, stores / STORE))
    assert isinstance(error, StoreMovedOn) and "changed on disk" in str(error)
    assert np.load(features).shape[0] == N_ITEMS
