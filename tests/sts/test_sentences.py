import json

import numpy as np
import pytest

from labeldist.labels.base import LabelError
from labeldist.labels.sentences import Sentences, read_caption_sentences, sentences_from_texts
from tests.sts.conftest import COCO


def _karpathy(tmp_path, captions):
    path = tmp_path / "caps.json"
    items = [{"image": f"val2014/COCO_val2014_{n:012d}.jpg", "caption": caps} for n, caps in captions.items()]
    path.write_text(json.dumps(items))
    return path


def test_real_captions_get_image_and_caption_number_ids(coco_sentences):
    data = json.loads(COCO.read_text())
    assert len(coco_sentences) == 30
    assert coco_sentences.ids[0] == "391895#0" and coco_sentences.ids[6] == f"{int(data[1]['image'][-16:-4])}#1"
    assert coco_sentences.texts[6] == data[1]["caption"][1]
    assert coco_sentences.words(0) == ["man", "red", "helmet", "small", "moped", "dirt", "road"]


def test_arrays_round_trip_and_subsets_equal_direct_reads(coco_sentences):
    again = Sentences.from_arrays(coco_sentences.ids, coco_sentences.to_arrays())
    assert again.sha256() == coco_sentences.sha256() and again.texts == coco_sentences.texts
    assert "caption_offsets" not in coco_sentences.to_arrays()
    sub = coco_sentences.subset(np.array([3, 7, 8]))
    direct = sentences_from_texts(sub.ids.tolist(), [coco_sentences.texts[i] for i in (3, 7, 8)])
    assert sub.sha256() == direct.sha256()


def test_empty_sentence_is_an_error_naming_file_and_item(tmp_path):
    path = _karpathy(tmp_path, {42: ["A dog runs.", "   "]})
    with pytest.raises(LabelError, match=r"caps.json: sentence '42#1' is empty"):
        read_caption_sentences(path)


def test_sentence_without_vectors_errors_or_is_dropped_keeping_ids(tmp_path):
    path = _karpathy(tmp_path, {7: ["A dog runs.", "It is what it is.", "A cat sleeps."]})
    with pytest.raises(LabelError, match=r"sentence '7#1' 'It is what it is.' has no word with a vector"):
        read_caption_sentences(path)
    kept = read_caption_sentences(path, empty="drop")
    assert kept.ids.tolist() == ["7#0", "7#2"]


def test_bad_json_and_bad_options(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(LabelError, match="bad.json: malformed JSON"):
        read_caption_sentences(bad)
    with pytest.raises(ValueError, match="unknown caption format 'csv'"):
        read_caption_sentences(bad, format="csv")
    with pytest.raises(LabelError, match="one sentence per item"):
        Sentences(
            np.array(["a"]),
            caption_offsets=np.array([0, 2]),
            **{k: v for k, v in sentences_from_texts(["a"], ["A dog."]).to_arrays().items()},
        )
