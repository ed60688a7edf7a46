"""``search()`` in both clients: ``LabelDistClient.search`` against a real ``labeldist serve``
and ``LocalSource.search`` in this process give the same answers for the same store, equal to a brute-force
ranking by the store's distance: a pose store (labels in the person frame) and a sentence store scored by BERT
(the packaged all-MiniLM-L6-v2); refusals are the same 422."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from labeldist.client import Hits, LabelDistClient, LocalSource, RequestRejected
from labeldist.distances.sts import SentenceRelevance
from labeldist.labels.sentences import read_caption_sentences
from labeldist.store import StoreReader
from labeldist.view.stored import stored_distance, stored_labels
from tests.client.conftest import DENSE, REPO
from tests.conftest import write_store
from tests.processes import Service

K = 6


@pytest.fixture(scope="module")
def root(stores: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The client tests' pose stores, and a sentence store of 100 COCO captions scored by BERT."""
    import shutil

    folder = tmp_path_factory.mktemp("search-stores")
    shutil.copytree(stores / DENSE, folder / DENSE)
    sentences = read_caption_sentences(REPO / "data" / "coco" / "coco_karpathy_test.json", limit=100)
    write_store(
        folder / "sentences", sentences, SentenceRelevance("bert"), dataset="coco", k=5, dense=False, block_rows=50
    )
    return folder


@pytest.fixture(scope="module")
def both(root: Path) -> Iterator[tuple[LabelDistClient, LocalSource]]:
    with Service(root) as service, LabelDistClient(service.url) as http:
        yield http, LocalSource(root)


def brute_force(root: Path, store: str, label) -> np.ndarray:
    """The label's distance to every item by the store's own distance, computed whole (labels from the store)."""
    from labeldist.kinds import read_label

    reader = StoreReader(str(root / store))
    labels, distance = stored_labels(reader), stored_distance(reader)
    return distance.block(read_label(label, labels, distance), labels)[0]


def same(a: Hits, b: Hits, atol: float = 0.0) -> None:
    """The same hits; ``atol``: a transformer's embedding of a sentence differs by about 1e-7 with the batch it
    was computed in (padding changes the shapes of the sums), which differs between two processes' histories."""
    np.testing.assert_allclose(a.distances, b.distances, rtol=0, atol=atol)
    tied = np.isclose(a.distances, a.distances[-1], rtol=0, atol=2 * atol)  # may swap with an item left out
    np.testing.assert_array_equal(a.indices[~tied], b.indices[~tied])
    assert a.computed == b.computed and (a.labels is None) == (b.labels is None)
    if not tied.any():
        assert a.ids == b.ids and a.labels == b.labels


def test_a_pose_search_is_the_same_in_both_clients_and_the_brute_force_top_k(both, root) -> None:
    http, local = both
    label = http.search(DENSE, [[0.0, 0.0]] * 16, k=1, include_labels=True).labels[0]  # a pose of the store
    label = [None if j is None else [j[0] + 0.05, j[1] - 0.02] for j in label]  # moved a little
    a, b = http.search(DENSE, label, k=K, include_labels=True), local.search(DENSE, label, k=K, include_labels=True)
    same(a, b)
    exact = brute_force(root, DENSE, label).astype(np.float32)
    np.testing.assert_array_equal(a.distances, np.sort(exact)[:K])
    np.testing.assert_array_equal(a.distances, exact[a.indices])
    assert len(a) == K and a.ids == StoreReader(str(root / DENSE)).ids[a.indices].tolist()


@pytest.mark.parametrize("sentence", ["A man riding a wave on top of a surfboard.", "Two dogs play in the snow."])
def test_a_sentence_search_is_the_same_in_both_clients_and_the_brute_force_top_k(both, root, sentence) -> None:
    http, local = both
    a, b = http.search("sentences", sentence, k=K), local.search("sentences", sentence, k=K)
    same(a, b, atol=1e-6)
    exact = brute_force(root, "sentences", sentence)
    np.testing.assert_allclose(a.distances, exact[a.indices], atol=1e-6)
    assert np.sort(exact)[K - 1] >= a.distances[-1] - 1e-6 and a.labels is None


def test_refusals_are_the_same_422(both) -> None:
    http, local = both
    for client in (http, local):
        with pytest.raises(RequestRejected) as caught:
            client.search("sentences", ["two", "sentences"])
        assert caught.value.status == 422 and "searched by one sentence" in str(caught.value)
        with pytest.raises(RequestRejected, match="must be a list|joints"):
            client.search(DENSE, "not a pose")
