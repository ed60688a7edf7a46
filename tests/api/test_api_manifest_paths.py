"""A manifest is input: every path it names is checked before use (RELIABILITY.md, "The fourth adversarial run").

Before: a caption store whose word-vector source named a FIFO made a search hang on opening it, holding one of
the service's computation slots, and with both slots held every other on-demand request waited until someone
wrote to the FIFO. Now a path a manifest names must be a regular file (``check_regular_file``): the FIFO is
refused, the search is answered from the store's own vocabulary (as when the file is missing), and the slots stay
free. A real ``labeldist serve``; the requests carry a generous timeout only so that the old behaviour fails
instead of hanging the suite."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import httpx
import pytest

from labeldist.core.options import check_regular_file, check_regular_tree
from labeldist.distances.caption_sets import CaptionSetWMD
from labeldist.labels.captions import read_karpathy_captions
from labeldist.labels.text import load_word_vectors
from labeldist.store import StoreReader
from tests.api.api_helpers import REPO, start_server, stop_server
from tests.conftest import write_store
from tests.processes import free_port, wait_healthy

#: a generous deadline: the answer comes in well under a second; a hang is the failure looked for
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def caption_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A caption store of 20 COCO caption sets whose word vectors came from a word2vec text file, which is then
    replaced by a FIFO at the same path (the manifest still names it)."""
    root = tmp_path_factory.mktemp("manifest-paths")
    data = json.loads((REPO / "data" / "coco" / "coco_karpathy_test.json").read_text())[:20]
    (root / "coco.json").write_text(json.dumps(data))
    plain = read_karpathy_captions(root / "coco.json")
    words = [str(w) for w in plain.vocab]  # every word the captions use, with its GloVe vector
    vectors_file = root / "vectors.txt"
    rows = plain.vectors
    lines = [f"{len(words)} {rows.shape[1]}"]
    lines += [f"{w} " + " ".join(f"{v:.6f}" for v in row) for w, row in zip(words, rows)]
    vectors_file.write_text("\n".join(lines) + "\n")
    labels = read_karpathy_captions(root / "coco.json", vectors=load_word_vectors(vectors_file))
    store = root / "stores" / "captions"
    write_store(store, labels, CaptionSetWMD(), dataset="coco20", k=5, dense=False, block_rows=10)
    assert str(vectors_file) in json.dumps(StoreReader(str(store)).manifest)  # the manifest names the file
    vectors_file.unlink()
    os.mkfifo(vectors_file)
    return store, vectors_file


def test_a_search_of_a_store_whose_word_vectors_are_a_fifo_is_answered(caption_store) -> None:
    store, fifo = caption_store
    port = free_port()
    proc = start_server(store.parent, port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base)
        label = httpx.get(f"{base}/v1/stores/captions/items/4/neighbors?k=1&include_labels=true").json()["label"]
        for _ in range(3):  # more searches than the two computation slots: none is held
            answer = httpx.post(f"{base}/v1/stores/captions/search", json={"label": label, "k": 3}, timeout=TIMEOUT_S)
            assert answer.status_code == 200, answer.text
            assert 4 in answer.json()["indices"] and answer.json()["distances"][0] == 0.0
    finally:
        stop_server(proc)
    assert os.path.exists(fifo)  # never replaced, never written


def test_every_path_a_manifest_names_must_be_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="a FIFO \\(named pipe\\), not a regular file: a word-vector file must be"):
        load_word_vectors(fifo)
    with pytest.raises(OSError, match="a FIFO"):
        load_word_vectors(fifo, format="word2vec")
    model = tmp_path / "model"
    (model / "1_Pooling").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    os.mkfifo(model / "1_Pooling" / "config.json")
    with pytest.raises(OSError, match="a FIFO") as caught:
        check_regular_tree(model, "file of a sentence model")
    assert caught.value.filename == str(model / "1_Pooling" / "config.json")
    from labeldist.sts.models import resolve_model

    with pytest.raises(OSError, match="a file of a sentence model must be a regular file"):
        resolve_model(model)
    from labeldist.sts.models import PACKAGED
    from labeldist.sts.scorers import BiEncoderScorer

    scorer = BiEncoderScorer(resolve_model(PACKAGED))
    with pytest.warns(UserWarning, match="a cached embeddings file must be a regular file.*embedding the 1 texts"):
        assert scorer.load(["a"], fifo) is False  # never read: the text is embedded instead, the FIFO left alone
    assert scorer.has(["a"]) and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    link = tmp_path / "link"
    link.symlink_to(fifo)
    with pytest.raises(OSError, match="a FIFO"):
        check_regular_file(link)  # links are followed to what they name
    regular = tmp_path / "fine.txt"
    regular.write_text("x")
    check_regular_file(regular)
