"""Every reader answers from the generation it opened: a store rebuilt (``precompute --overwrite``) or appended to
while ``export``, ``verify``, ``info``, :class:`LocalSource` or a trainer's reader reads it is never mixed into one
answer (RELIABILITY.md, "The fourth adversarial run").

The swap is the engine's own (:func:`labeldist.engine.replace_with_staged`: the old store renamed aside, the staged
one renamed into place, the old one removed), of a complete store built beside it as ``--overwrite`` and ``append``
build theirs. To make it happen at one exact instant of a read, and not at a time chosen by a race, the store's
two low-level readers (:meth:`ChunkFiles._chunk` for kNN chunk files, ``read_rows`` for every array read through
Zarr) are wrapped to run the swap just before their ``n``-th read: every read itself is real.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from labeldist.client import LocalSource
from labeldist.distances.pose import PoseDistance
from labeldist.engine.staging import replace_with_staged
from labeldist.store import StoreChangedError, StoreReader, sibling
from labeldist.store import reading as store_reading
from labeldist.view.stored import stored_labels
from tests.conftest import write_store

OLD, REBUILT, GROWN = (0, 300), (300, 600), (0, 340)


def _pose_store(url: Path, poses, span: tuple[int, int]) -> Path:
    labels = poses.subset(slice(*span))
    return write_store(url, labels, PoseDistance(), dataset=f"mpii{span}", k=10, dense=True, block_rows=100)


@pytest.fixture
def store(tmp_path: Path, mpii_poses) -> Path:
    """A dense pose store of 300 MPII poses, in its own stores folder."""
    return _pose_store(tmp_path / "stores" / "poses", mpii_poses, OLD)


@pytest.fixture(params=["overwrite", "append"])
def staged(request, store: Path, mpii_poses) -> tuple[str, Path]:
    """The next store, complete beside ``store`` where its job builds it: a rebuild from 300 other poses
    (``--overwrite``), or the same 300 and 40 more (``append``); with a copy of it to compare answers with."""
    how = request.param
    span = REBUILT if how == "overwrite" else GROWN
    _pose_store(Path(sibling(str(store), how)), mpii_poses, span)
    reference = _pose_store(store.parent.parent / "reference" / "poses", mpii_poses, span)
    return how, reference


def swap_before_read(monkeypatch: pytest.MonkeyPatch, store: Path, how: str, n: int) -> Callable[[], int]:
    """Swap the staged store into ``store`` just before the ``n``-th chunk read from now (counting both readers);
    returns a function telling how many reads were made."""
    reads = 0
    chunk, read_rows = store_reading.ChunkFiles._chunk, store_reading.read_rows

    def before_read() -> None:
        nonlocal reads
        reads += 1
        if reads == n:
            replace_with_staged(str(store), how)

    def counted_chunk(self, *args, **kwargs):
        before_read()
        return chunk(self, *args, **kwargs)

    def counted_rows(*args, **kwargs):
        before_read()
        return read_rows(*args, **kwargs)

    monkeypatch.setattr(store_reading.ChunkFiles, "_chunk", counted_chunk)
    monkeypatch.setattr(store_reading, "read_rows", counted_rows)
    return lambda: reads


def test_a_reader_refuses_every_read_after_the_swap(monkeypatch, store, staged) -> None:
    how, _ = staged
    reader = StoreReader(str(store))
    before = reader.knn_rows(0, 100)
    swap_before_read(monkeypatch, store, how, 1)
    with pytest.raises(StoreChangedError, match="changed on disk"):
        reader.knn_rows(0, 100)
    for read in (lambda: stored_labels(reader), lambda: reader.dense_rows(0, 10), reader.knn, reader.damaged):
        with pytest.raises(StoreChangedError):
            read()
    # a reader opened now reads the new generation
    fresh = StoreReader(str(store))
    assert fresh.n_items == StoreReader(str(staged[1])).n_items
    assert not np.array_equal(fresh.knn_rows(0, 100)[1], before[1]) or how == "append"


def test_export_refuses_rather_than_mixing(monkeypatch, store, staged, tmp_path, capsys) -> None:
    """Before: 2,560 items of the old store and 398 of the new were exported with exit 0, or an IndexError
    traceback during an append. Now: one line, exit 2, and no file."""
    from labeldist.cli import main

    how, _ = staged
    out = tmp_path / "neighbours.csv"
    swap_before_read(monkeypatch, store, how, 2)
    status = main(["export", str(store), "--out", str(out), "--format", "csv", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1 and "changed on disk" in err and f"{out} was not written" in err, err
    assert not out.exists() and not any(p.name.startswith(".") for p in tmp_path.iterdir())


def test_export_without_a_swap_is_whole(monkeypatch, store, tmp_path) -> None:
    from labeldist.engine.export import export_neighbors

    reads = swap_before_read(monkeypatch, store, "overwrite", 10**9)
    result = export_neighbors(str(store), str(tmp_path / "n.csv"), "csv", progress=False, items_per_block=50)
    assert result.rows == 300 * 10 and reads() >= 6


def test_verify_refuses_rather_than_reporting_damage(monkeypatch, store, staged) -> None:
    """Before: the swap in the middle of the chunk scan was reported as damage (or the store passed, half new)."""
    from labeldist.engine.verify import verify_store

    how, _ = staged
    swap_before_read(monkeypatch, store, how, 3)
    with pytest.raises(StoreChangedError):
        verify_store(str(store), sample=20)


def test_info_is_of_one_generation(monkeypatch, store, staged) -> None:
    from labeldist.commands.stores import store_summary

    how, reference = staged
    swap_before_read(monkeypatch, store, how, 2)
    with pytest.raises(StoreChangedError):
        store_summary(str(store))
    # asked again, it describes the new store alone
    summary = store_summary(str(store))
    want = StoreReader(str(reference)).manifest
    keys = ("n_items", "labels_sha256")
    assert [summary["manifest"][key] for key in keys] == [want[key] for key in keys]


def test_local_source_answers_from_one_generation(monkeypatch, store, staged) -> None:
    """A store swapped while ``batches`` reads it is opened again and the call asked again: the answer is wholly
    the new store's (before: anchor 0's neighbours from the old store and its distances from the new)."""
    how, reference = staged
    source = LocalSource(store.parent)
    old = source.batches("poses", anchors=[0, 250], size=20, neighbors=5, pairwise=True, seed=3)
    source.close()
    asked = {"anchors": [0, 250], "size": 20, "neighbors": 5, "pairwise": True, "seed": 3}
    new = LocalSource(reference.parent).batches("poses", **asked)
    reads = swap_before_read(monkeypatch, store, how, 2)
    got = source.batches("poses", **asked)
    assert reads() > 2  # the swap came in the middle of the call
    for field in ("items", "distances", "pairwise"):
        np.testing.assert_array_equal(getattr(got, field), getattr(new, field))
    assert not np.array_equal(old.distances, new.distances)


def test_local_source_sees_a_swap_between_calls(store, staged) -> None:
    how, reference = staged
    source = LocalSource(store.parent)
    source.neighbors("poses", 5)
    replace_with_staged(str(store), how)
    expected = LocalSource(reference.parent)
    for got, want in zip(source.neighbors("poses", 5), expected.neighbors("poses", 5)):
        np.testing.assert_array_equal(got, want)
    assert len(source.ids("poses")) == len(expected.ids("poses"))


def test_local_source_gives_up_on_a_store_that_keeps_changing(monkeypatch, store, mpii_poses) -> None:
    """Swapped again at every try (on the first chunk each opening reads): each call tries REOPEN_TRIES times, each
    try opens the store up to OPEN_TRIES times, then the StoreChangedError is raised, naming the store."""
    from labeldist.view.folder import OPEN_TRIES, REOPEN_TRIES

    source = LocalSource(store.parent)
    swaps: list[str] = []
    chunk, open_reader = store_reading.ChunkFiles._chunk, store_reading.StoreReader._open

    def opening(self, *args, **kwargs):  # a new try: its first chunk read swaps the store once more
        swaps.append("due")
        return open_reader(self, *args, **kwargs)

    def swapping_chunk(self, *args, **kwargs):
        if swaps and swaps[-1] == "due":
            swaps[-1] = "done"
            span = REBUILT if len(swaps) % 2 else OLD
            _pose_store(Path(sibling(str(store), "overwrite")), mpii_poses, span)
            replace_with_staged(str(store), "overwrite")
        return chunk(self, *args, **kwargs)

    monkeypatch.setattr(store_reading.StoreReader, "_open", opening)
    monkeypatch.setattr(store_reading.ChunkFiles, "_chunk", swapping_chunk)
    with pytest.raises(StoreChangedError, match=os.fspath(store)):
        source.neighbors("poses", 7)
    assert swaps == ["done"] * (REOPEN_TRIES * OPEN_TRIES)  # one swap an opening, each met by that opening
