"""Fixtures of the sentence-relevance tests: tiny real subsets, the packaged model, a tiny fine-tuned model."""

from __future__ import annotations

import os
import tempfile

import pytest

from labeldist.kinds.sentence_relevance import STSB_DIR
from tests.conftest import DATA

COCO = DATA / "coco" / "coco_karpathy_test.json"
STS_TRAIN = STSB_DIR / "sts-train.csv"
STS_DEV = STSB_DIR / "sts-dev.csv"

# Embeddings left for Dask workers go to a fresh folder, set before any worker process starts (they inherit it).
os.environ["LABELDIST_CACHE"] = tempfile.mkdtemp(prefix="labeldist-test-cache-")


@pytest.fixture(scope="session")
def coco_sentences():
    """The first 30 real Karpathy-test captions (6 images) as sentences."""
    from labeldist.labels.sentences import read_caption_sentences

    return read_caption_sentences(COCO, limit=30)


@pytest.fixture(scope="session")
def packaged_path():
    from labeldist.sts.models import PACKAGED, resolve_model

    return resolve_model(PACKAGED)


@pytest.fixture(scope="session")
def tiny_cross(tmp_path_factory):
    """A cross-encoder fine-tuned for one step on 8 STS-B pairs (seconds): real weights, no quality."""
    from labeldist.sts.fit import FitConfig, fit
    from labeldist.sts.stsb import read_sts

    out = tmp_path_factory.mktemp("models") / "tiny-cross"
    config = FitConfig(architecture="cross", epochs=1, batch_size=8, max_length=32, seed=0)
    fit(read_sts(STS_TRAIN).head(8), read_sts(STS_DEV).head(4), config, out, progress=False)
    return out
