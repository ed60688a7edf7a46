"""One store folder under the service and LocalSource (:class:`labeldist.view.folder.StoreFolder`): for the same folder
of stores, complete, incomplete, damaged, not a store at all, hidden, the service's registry and the in-process
client list the same stores with the same reasons, both open a rebuilt store again, and both refuse what cannot be
read, each in its own words (a 503 naming the reason; the store layer's error)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from labeldist.api.errors import Unavailable
from labeldist.api.serving.registry import StoreRegistry
from labeldist.client import LocalSource
from labeldist.distances.vectors import VectorDistance
from labeldist.labels.vectors import Vectors
from labeldist.store import StoreCorruptError, StoreIncompleteError, build_manifest, create_store
from labeldist.view.folder import StoreFolder
from tests.api.api_helpers import make_settings
from tests.conftest import write_store


def vectors(n: int, seed: int) -> Vectors:
    return Vectors([f"v{i}" for i in range(n)], np.random.default_rng(seed).normal(size=(n, 4)))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """``complete`` (40 vectors), ``incomplete`` (created, never computed), ``damaged`` (its root metadata is not
    JSON), ``empty`` (a folder without a store), ``.hidden`` (a complete store in a hidden folder) and a file."""
    root = tmp_path / "stores"
    write_store(root / "complete", vectors(40, 0), VectorDistance(), dataset="v", k=5, dense=True, block_rows=20)
    write_store(root / ".hidden", vectors(30, 1), VectorDistance(), dataset="h", k=5, dense=True, block_rows=20)
    labels = vectors(30, 2)
    manifest = build_manifest(
        dataset="i", kind="vectors", params=VectorDistance().params(), labels=labels, k=5, dense=False, block_rows=10
    )
    create_store(str(root / "incomplete"), manifest, labels)
    write_store(root / "damaged", vectors(30, 3), VectorDistance(), dataset="d", k=5, dense=True, block_rows=20)
    (root / "damaged" / "zarr.json").write_text("{ not json")
    (root / "empty").mkdir()
    (root / "notes.txt").write_text("not a store")
    return root


def test_the_service_and_local_source_keep_one_kind_of_store_folder(folder: Path) -> None:
    registry, local = StoreRegistry(make_settings(stores=folder)), LocalSource(folder)
    assert isinstance(registry, StoreFolder) and isinstance(local.folder, StoreFolder)


def test_both_list_the_same_stores_with_the_same_reasons(folder: Path) -> None:
    registry, local = StoreRegistry(make_settings(stores=folder)), LocalSource(folder)
    served = {e.name: (e.available, getattr(e, "reason", None)) for e in registry.refresh_all()}
    listed = {e["name"]: (e["available"], e.get("detail")) for e in local.stores()}
    assert set(served) == set(listed) == {"complete", "incomplete", "damaged"}
    assert served == listed
    assert served["complete"] == (True, None)
    assert "is not complete" in served["incomplete"][1]
    assert served["damaged"][1].startswith("store 'damaged' is damaged on disk and is refused until it is rebuilt")
    assert str(folder) not in served["damaged"][1]  # clients know a store by name, not by the server's path


def test_both_refuse_what_cannot_be_read_each_in_its_own_words(folder: Path) -> None:
    registry, local = StoreRegistry(make_settings(stores=folder)), LocalSource(folder)
    for name, error in (("incomplete", StoreIncompleteError), ("damaged", StoreCorruptError)):
        with pytest.raises(Unavailable) as answered:
            registry.get(name)
        reason = registry.current(name).reason
        assert answered.value.detail == reason
        with pytest.raises(error):
            local.neighbors(name, 0)


def test_both_open_a_rebuilt_store_again(folder: Path) -> None:
    registry, local = StoreRegistry(make_settings(stores=folder)), LocalSource(folder)
    before = registry.get("complete").digest
    assert local.store("complete")["digest"] == before
    rebuilt = folder.parent / "rebuilt"
    write_store(rebuilt, vectors(50, 9), VectorDistance(), dataset="v2", k=5, dense=True, block_rows=25)
    old = folder / "complete"
    old.rename(folder.parent / "old")
    rebuilt.rename(old)
    after = registry.get("complete")
    assert after.digest != before and after.n_items == 50
    assert local.store("complete")["digest"] == after.digest
    assert local.neighbors("complete", 49).indices.size == 5
