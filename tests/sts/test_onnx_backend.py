"""The bi-encoder through ONNX Runtime against sentence-transformers' own torch encode (the oracle), its export
cache, and the backend as a parameter of the sentence distance and its stores."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from labeldist.distances.sts import SentenceRelevance
from labeldist.labels.sentences import read_caption_sentences
from labeldist.sts.models import PACKAGED, load_bi_encoder, resolve_model
from labeldist.sts.onnx_backend import (
    BACKENDS,
    OnnxEncoder,
    check_backend,
    default_backend,
    onnx_model_file,
    record_file,
    start_session,
)
from labeldist.sts.scorers import encode_texts, unit_rows
from tests.sts.conftest import COCO

#: texts a tokenizer treats differently: spaces around, capitals, accents, punctuation, digits, one word, emoji
ODD = [
    "  A man rides a horse on the beach.  ",
    "TWO DOGS PLAY IN THE SNOW",
    "Crème brûlée on a café table, naïvely photographed.",
    "3 zebras, 2 giraffes & 1 elephant!!!",
    "dog",
    "A cat 🐱 sleeping on a keyboard",
    "",
]


def torch_units(texts: list[str], max_length: int = 256) -> np.ndarray:
    """sentence-transformers' own torch encode of ``texts``, each alone (no batch), as unit rows."""
    model = load_bi_encoder(resolve_model(PACKAGED), max_length)
    return unit_rows(np.concatenate([model.encode([t], convert_to_numpy=True) for t in texts]))


def test_onnx_embeddings_equal_torch_encode(packaged_path):
    """Real captions and odd texts, in batches of mixed lengths: each unit embedding equals torch's of the text
    alone to 1e-5 a component (other kernels round otherwise; a wrong input, pooling or truncation differs by
    far more), and so each relevance to 2e-5."""
    texts = read_caption_sentences(COCO, limit=200).texts + ODD
    ours = encode_texts(packaged_path, 256, texts, backend="onnx")
    theirs = torch_units(texts)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)
    np.testing.assert_allclose(ours.astype(np.float64) @ ours.T, theirs @ theirs.T, rtol=0, atol=2e-5)


def test_onnx_truncates_as_torch_does_and_warns(packaged_path):
    long = "a dog runs across the field " * 40  # 240 words: truncated at 32 word pieces
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = encode_texts(packaged_path, 32, [long, "a dog"], backend="onnx")
    assert any("longer than max_length=32" in str(w.message) for w in caught), [str(w.message) for w in caught]
    np.testing.assert_allclose(ours, torch_units([long, "a dog"], 32), rtol=0, atol=1e-5)


def test_export_is_cached_recorded_and_remade_when_damaged(packaged_path, tmp_path, monkeypatch):
    monkeypatch.setenv("LABELDIST_ONNX_CACHE", str(tmp_path / "onnx"))
    file = onnx_model_file(packaged_path)
    record = json.loads(record_file(file).read_text())
    assert record["max_difference"] <= 1e-4 and len(record["sha256"]) == 64
    made = file.stat().st_mtime_ns
    assert onnx_model_file(packaged_path) == file and file.stat().st_mtime_ns == made, "exported again"

    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0x10  # a weight changed on disk
    file.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="another digest"):
        again = onnx_model_file(packaged_path)
    assert json.loads(record_file(again).read_text())["sha256"] == record["sha256"]
    encoder = OnnxEncoder(packaged_path, 256, start_session(again, 1))
    np.testing.assert_allclose(unit_rows(encoder.encode(ODD[:3])), torch_units(ODD[:3]), rtol=0, atol=1e-5)


def test_a_link_in_the_export_cache_is_refused(packaged_path, tmp_path, monkeypatch):
    """A link planted where the export goes is neither read nor written through nor replaced: refused."""
    monkeypatch.setenv("LABELDIST_ONNX_CACHE", str(tmp_path / "onnx"))
    file = onnx_model_file(packaged_path)
    target = tmp_path / "elsewhere.onnx"
    target.write_bytes(b"not a model")
    file.unlink()
    file.symlink_to(target)
    with pytest.warns(UserWarning, match="a link, not a file an export wrote"):
        with pytest.raises(OSError, match="a symbolic link: only a regular file is replaced"):
            onnx_model_file(packaged_path)
    assert target.read_bytes() == b"not a model" and file.is_symlink(), "written through or over the link"


def test_backend_is_a_parameter_of_the_distance():
    assert default_backend() == "onnx"  # no CUDA on the machines the tests run on
    assert set(BACKENDS) == {"onnx", "torch"}
    with pytest.raises(ValueError, match="unknown sentence model backend 'tensorrt'"):
        check_backend("tensorrt")
    onnx = SentenceRelevance("bert")
    assert onnx.backend == "onnx" and onnx.params()["backend"] == "onnx"
    torch = SentenceRelevance("bert", backend="torch")
    assert "backend" not in torch.params(), "a torch store records what every store before backends did"
    assert SentenceRelevance.from_params(torch.params()).backend == "torch"
    assert SentenceRelevance.from_params(onnx.params()).backend == "onnx"
    assert SentenceRelevance("cbow").backend is None and "backend" not in SentenceRelevance("cbow").params()


def test_onnx_and_torch_blocks_agree_with_the_oracle(coco_sentences):
    """One block under each backend against the slow oracle (torch, each sentence alone): equal to 2e-5."""
    s = coco_sentences
    onnx = SentenceRelevance("bert").block(s, s)
    torch = SentenceRelevance("bert", backend="torch").block(s, s)
    oracle = SentenceRelevance("bert", backend="torch")
    pairs = [(0, 1), (2, 17), (5, 5), (29, 3)]
    for i, j in pairs:
        expected = oracle.reference(s, i, s, j)
        assert abs(onnx[i, j] - expected) < 2e-5 and abs(torch[i, j] - expected) < 2e-5, (i, j)
    np.testing.assert_allclose(onnx, torch, rtol=0, atol=2e-5)


def test_precompute_records_the_backend_and_a_torch_store_resumes_as_before(tmp_path):
    """The CLI's default store records backend onnx; --backend torch records none, as a store of an earlier
    release did, so such a store is reused (not refused as another fingerprint)."""
    from labeldist.cli import main
    from labeldist.store import StoreReader
    from labeldist.view.stored import stored_distance

    texts = tmp_path / "s.txt"
    texts.write_text("\n".join(read_caption_sentences(COCO, limit=40).texts) + "\n")
    common = ["precompute", "sentences", str(texts), "--scorer", "bert", "--knn-only", "--k", "5", "--workers", "1"]
    assert main([*common, "--out", str(tmp_path / "onnx"), "--no-progress"]) == 0
    assert StoreReader(str(tmp_path / "onnx")).manifest["params"]["backend"] == "onnx"
    assert main([*common, "--backend", "torch", "--out", str(tmp_path / "torch"), "--no-progress"]) == 0
    manifest = StoreReader(str(tmp_path / "torch")).manifest
    assert "backend" not in manifest["params"]
    assert stored_distance(StoreReader(str(tmp_path / "torch"))).backend == "torch"
    a, b = StoreReader(str(tmp_path / "onnx")).knn(), StoreReader(str(tmp_path / "torch")).knn()
    np.testing.assert_allclose(a[1], b[1], rtol=0, atol=2e-5)  # the same lists but for ties, ordered either way
    # the torch store asked for again is reused as it stands (a store whose params differed would be refused)
    before = (tmp_path / "torch" / "zarr.json").stat().st_mtime_ns
    assert main([*common, "--backend", "torch", "--out", str(tmp_path / "torch"), "--no-progress"]) == 0
    assert (tmp_path / "torch" / "zarr.json").stat().st_mtime_ns == before


def test_the_job_exports_the_model_before_its_workers_embed(coco_sentences, packaged_path, tmp_path, monkeypatch):
    """The preparation (run in the job's own process before any task) leaves the export in the cache: the workers
    only load it, instead of each exporting it at once."""
    monkeypatch.setenv("LABELDIST_ONNX_CACHE", str(tmp_path / "onnx"))
    monkeypatch.setenv("LABELDIST_CACHE", str(tmp_path / "cache"))
    assert not (tmp_path / "onnx").exists()
    preparation = SentenceRelevance("bert").preparation(coco_sentences)
    assert preparation is not None and preparation.kwargs["backend"] == "onnx"
    exports = list((tmp_path / "onnx").glob("*/model.onnx"))
    assert len(exports) == 1 and record_file(exports[0]).is_file()
    assert SentenceRelevance("bert", backend="torch").preparation(coco_sentences) is not None
    assert list((tmp_path / "onnx").glob("*/model.onnx")) == exports  # torch exports nothing
