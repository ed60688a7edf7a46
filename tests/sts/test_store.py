"""Sentence-relevance stores through the Dask engine and the command: the store contract, verify, bad input."""

import numpy as np
import pytest
import zarr

from labeldist.cli import main
from labeldist.distances.sts import SentenceRelevance
from labeldist.engine import precompute
from labeldist.engine.verify import verify_store
from labeldist.store import StoreReader
from labeldist.view.stored import stored_labels
from tests.conftest import check_store
from tests.sts.conftest import COCO


@pytest.fixture(scope="module")
def sentences():
    from labeldist.labels.sentences import read_caption_sentences

    return read_caption_sentences(COCO, limit=40)


@pytest.fixture(scope="module")
def bert_store(sentences, dask_client, tmp_path_factory):
    distance = SentenceRelevance("coarse_to_fine", cbow_threshold=0.8)
    out = tmp_path_factory.mktemp("stores") / "coco40-sentence_relevance"
    precompute(sentences, distance, out, dataset="coco40", k=5, block_rows=16, client=dask_client, progress=False)
    return out, distance


def test_store_follows_the_contract(bert_store):
    check_store(bert_store[0])


def test_store_equals_the_in_memory_distance(bert_store, sentences):
    out, distance = bert_store
    reader = StoreReader(str(out))
    expected = distance.block(sentences, sentences).astype(np.float32)
    np.testing.assert_allclose(reader.dense_rows(0, len(sentences)), expected, atol=1e-6)
    assert reader.ids[:6].tolist() == [f"391895#{n}" for n in range(5)] + ["60623#0"]  # COCO_val2014_000000060623
    assert reader.manifest["kind"] == "sentence_relevance" and reader.manifest["labels_type"] == "sentences"
    assert reader.manifest["params"]["cbow_threshold"] == 0.8
    assert stored_labels(reader).texts == sentences.texts, "the store holds what is needed to recompute"


def test_verify_recomputes_entries_with_the_reference(bert_store):
    report = verify_store(str(bert_store[0]), sample=30)
    assert report["ok"], report["problems"]
    assert report["entries_checked"] == 60 and report["max_abs_error"] < 1e-5


def test_command_builds_a_calibrated_knn_store(dask_client, tmp_path):
    out = tmp_path / "cli-store"
    code = main(
        [
            "precompute",
            "sentences",
            str(COCO),
            "--limit",
            "25",
            "--scorer",
            "coarse_to_fine",
            "--below",
            "zero",
            "--pass-share",
            "0.3",
            "--knn-only",
            "--k",
            "4",
            "--scheduler",
            dask_client.scheduler.address,
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    check_store(out)
    group = zarr.open_group(str(out), mode="r")
    params = group.attrs["labeldist"]["params"]
    calibration = params["calibration"]["cbow"]
    assert calibration["method"] == "sts_quantile" and calibration["pass_share"] == 0.3
    assert 0.8 < params["cbow_threshold"] < 1.0 and params["below"] == "zero"
    assert "dense" not in group


def test_cascade_command_calibrates_candidates_on_the_corpus(dask_client, tiny_cross, tmp_path):
    out = tmp_path / "cascade"
    code = main(
        [
            "precompute",
            "sentences",
            str(COCO),
            "--limit",
            "20",
            "--scorer",
            "cascade",
            "--cross-model",
            str(tiny_cross),
            "--candidates",
            "2",
            "--k",
            "3",
            "--scheduler",
            dask_client.scheduler.address,
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    check_store(out)
    params = StoreReader(str(out)).manifest["params"]
    assert params["calibration"]["bert"] == {"method": "corpus_candidates", "candidates": 2.0, "sample": 20, "seed": 0}
    assert params["cross_model"] == str(tiny_cross) and params["bert_threshold"] is not None


def test_dense_matrix_of_the_whole_corpus_is_refused(capsys):
    assert main(["precompute", "sentences", str(COCO), "--scorer", "cbow", "--out", "/nonexistent/x"]) == 2
    err = capsys.readouterr().err  # the engine's one dense limit, refused before anything is written
    assert "a dense matrix of 25,009 sentences" in err and "2.33 GiB" in err and "over the dense limit" in err
    assert "--knn-only" in err


def test_bad_caption_file_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "caps.json"
    bad.write_text('[{"image": "val2014/COCO_val2014_000000000007.jpg", "caption": ["A dog.", ""]}]')
    assert main(["precompute", "sentences", str(bad), "--scorer", "cbow", "--out", str(tmp_path / "s")]) == 2
    assert "caps.json: sentence '7#1' is empty" in capsys.readouterr().err


def test_a_store_records_its_fine_tuned_model_and_refuses_a_retrained_one(dask_client, tmp_path, capsys):
    """What the main job relies on: `--model <sts fit folder>` with the default scorer (coarse-to-fine) makes a
    store that records the model's weights; a rerun after the model was retrained in place is refused."""
    import shutil

    from labeldist.sts.fit import FitConfig, fit
    from labeldist.sts.models import files_sha256, fit_info, load_bi_encoder
    from labeldist.sts.scorers import bi_encoder_scorer
    from labeldist.sts.stsb import read_sts
    from tests.sts.conftest import STS_DEV, STS_TRAIN

    def tiny_bi(seed, out):
        config = FitConfig(architecture="bi", loss="cosine", epochs=1, batch_size=8, max_length=32, seed=seed)
        fit(read_sts(STS_TRAIN).head(8), read_sts(STS_DEV).head(4), config, out, progress=False)

    model, out = tmp_path / "sts-bi-cosine", tmp_path / "store"
    tiny_bi(0, model)
    # the main job's command (tools/main_job.sh): coarse-to-fine, the paper's scorer, named since it is no longer the
    # default
    command = [
        "precompute",
        "sentences",
        str(COCO),
        "--limit",
        "20",
        "--scorer",
        "coarse_to_fine",
        "--model",
        str(model),
        "--knn-only",
        "--k",
        "3",
        "--scheduler",
        dask_client.scheduler.address,
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(command) == 0
    check_store(out)
    params = StoreReader(str(out)).manifest["params"]
    assert params["scorer"] == "coarse_to_fine" and params["model"] == str(model.resolve())
    assert params["model_sha256"] == files_sha256(model.resolve())
    assert main(command) == 0, "the same model: the finished store is reused"

    tiny_bi(1, tmp_path / "retrained")  # another seed: other weights, written over the first model's folder
    shutil.copytree(tmp_path / "retrained", model, dirs_exist_ok=True)
    assert fit_info(model)["seed"] == 1
    for cache in (files_sha256, load_bi_encoder, bi_encoder_scorer):  # this process loaded the old weights
        cache.cache_clear()
    capsys.readouterr()
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "a store made with other parameters is already there" in err
    assert params["model_sha256"] in err and files_sha256(model.resolve()) in err
    assert StoreReader(str(out)).manifest["params"] == params, "the store is left as it was"
