import json
import re

import numpy as np
import pytest
from gensim.parsing.preprocessing import STOPWORDS

from labeldist.labels.base import LabelError
from labeldist.labels.captions import (
    CaptionSets,
    caption_sets_from_texts,
    read_captions,
    read_coco_captions,
    read_karpathy_captions,
)
from labeldist.labels.text import Tokenizer, default_word_vectors
from tests.conftest import DATA

KARPATHY = DATA / "coco" / "coco_karpathy_test.json"


@pytest.fixture(scope="module")
def raw():
    return json.loads(KARPATHY.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def coco(raw):
    return read_captions(KARPATHY)


def _coco_id(image_name):
    # independent of the reader's regex: the last underscore-separated field of the file name
    return str(int(image_name.rsplit("_", 1)[1].split(".")[0]))


def _write_json(tmp_path, data, name="captions.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_reads_every_image_and_caption_of_the_karpathy_split(coco, raw):
    assert len(coco) == len(raw)
    assert coco.n_captions == sum(len(item["caption"]) for item in raw)
    assert coco.ids.tolist() == [_coco_id(item["image"]) for item in raw]
    assert coco.provenance["format"] == "karpathy"
    assert coco.provenance["tokenizer"] == Tokenizer().params()


def test_images_with_more_than_five_captions_keep_them_all(coco, raw):
    six = [i for i, item in enumerate(raw) if len(item["caption"]) > 5]
    assert six, "the split has images with 6 captions"
    for i in six:
        assert coco.captions(i) == raw[i]["caption"]


def test_tokens_follow_the_documented_defaults(coco, raw):
    glove = default_word_vectors()
    rng = np.random.default_rng(0)
    for i in rng.choice(len(raw), size=50, replace=False):
        for k, text in enumerate(raw[i]["caption"]):
            expected = [w for w in re.findall("[a-z]+", text.lower()) if w not in STOPWORDS and w in glove]
            assert coco.caption_words(coco.caption_offsets[i] + k) == expected


def test_vocabulary_is_sorted_used_and_carries_the_glove_vectors(coco):
    glove = default_word_vectors()
    assert (coco.vocab[:-1] < coco.vocab[1:]).all()
    assert np.array_equal(np.unique(coco.tokens), np.arange(len(coco.vocab)))
    np.testing.assert_array_equal(coco.vectors, glove.lookup(coco.vocab.tolist()))
    assert coco.vectors.dtype == np.float32


@pytest.mark.parametrize("index", [slice(10, 30), np.array([4999, 3, 17, 3000]), slice(None, None, 97)])
def test_subset_keeps_captions_words_and_compacts_the_vocabulary(coco, index):
    sub = coco.subset(index)
    picked = np.arange(len(coco))[index]
    assert sub.ids.tolist() == coco.ids[picked].tolist()
    for s, i in enumerate(picked):
        assert sub.captions(s) == coco.captions(i)
        ours = range(sub.caption_offsets[s], sub.caption_offsets[s + 1])
        theirs = range(coco.caption_offsets[i], coco.caption_offsets[i + 1])
        assert [sub.caption_words(k) for k in ours] == [coco.caption_words(k) for k in theirs]
    assert np.array_equal(np.unique(sub.tokens), np.arange(len(sub.vocab)))
    np.testing.assert_array_equal(sub.vectors, default_word_vectors().lookup(sub.vocab.tolist()))


def test_subset_equals_a_set_read_from_the_same_images(coco, raw):
    picked = [7, 2, 4000]
    direct = caption_sets_from_texts([_coco_id(raw[i]["image"]) for i in picked], [raw[i]["caption"] for i in picked])
    assert direct.sha256() == coco.subset(np.array(picked)).sha256()


def test_arrays_round_trip(coco):
    sub = coco.subset(slice(0, 200))
    arrays = sub.to_arrays()
    assert all(isinstance(a, np.ndarray) for a in arrays.values())
    again = CaptionSets.from_arrays(sub.ids, arrays)
    assert again.sha256() == sub.sha256()
    for name, arr in arrays.items():
        np.testing.assert_array_equal(again.to_arrays()[name], arr)
    assert again.captions(5) == sub.captions(5)


def test_sha256_changes_with_the_labels(coco):
    a = coco.subset(slice(0, 10))
    arrays = a.to_arrays()
    arrays["vectors"] = arrays["vectors"] * 2
    assert CaptionSets.from_arrays(a.ids, arrays).sha256() != a.sha256()


def test_coco_format_gives_the_same_caption_sets(tmp_path, raw, coco):
    picked = [0, 1, 2, 3]
    anns = [
        {"id": 100 * n + k, "image_id": int(_coco_id(raw[i]["image"])), "caption": c}
        for n, i in enumerate(picked)
        for k, c in enumerate(raw[i]["caption"])
    ]
    # annotations come in any order in the official files: interleave them
    anns = anns[::2] + anns[1::2]
    images = [{"id": int(_coco_id(raw[i]["image"]))} for i in reversed(picked)]
    path = _write_json(tmp_path, {"images": images, "annotations": anns})
    sets = read_coco_captions(path)
    assert sets.ids.tolist() == [_coco_id(raw[i]["image"]) for i in reversed(picked)]
    for s, i in enumerate(reversed(picked)):
        assert sorted(sets.captions(s)) == sorted(raw[i]["caption"])
    assert read_captions(path).sha256() == sets.sha256()  # auto-detected
    # without an images list, items follow their first annotation
    no_images = read_captions(_write_json(tmp_path, {"annotations": anns}, "b.json"))
    assert set(no_images.ids.tolist()) == set(sets.ids.tolist())
    assert read_karpathy_captions(KARPATHY).sha256() == coco.sha256()


# --------------------------------------------------------------------------------------- bad input


def test_non_utf8_file_names_the_file(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes('[{"image": "COCO_val2014_000000000001.jpg", "caption": ["café"]}]'.encode("latin-1"))
    with pytest.raises(LabelError, match=r"latin1\.json, line 1: not UTF-8 \(byte 0xe9 at offset 60\)"):
        read_captions(path)


def test_malformed_json_names_the_file_and_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[{"image": "x_1.jpg",\n "caption": ["a dog"]', encoding="utf-8")
    with pytest.raises(LabelError, match=r"broken\.json: malformed JSON: .* line 2"):
        read_captions(path)


def test_missing_file_is_a_label_error(tmp_path):
    with pytest.raises(LabelError, match="nothing.json: cannot read"):
        read_captions(tmp_path / "nothing.json")


@pytest.mark.parametrize(
    ("data", "fmt", "message"),
    [
        ({"images": []}, "auto", "expected an object with an 'annotations' list"),
        ([{"image": "COCO_1.jpg"}], "karpathy", "item 0 needs 'image' and 'caption'"),
        ([{"image": "no-number.jpg", "caption": ["a dog"]}], "karpathy", "item 0: no image id in file name"),
        ([{"image": "COCO_1.jpg", "caption": 7}], "karpathy", "'caption' must be a list of strings"),
        ([{"image": "COCO_1.jpg", "caption": ["a dog", 3]}], "karpathy", "image '1': caption 1 is int"),
        ({"annotations": [{"image_id": 1}]}, "coco", r"annotations\[0\] needs 'image_id' and 'caption'"),
        ({"annotations": [{"image_id": [1], "caption": "a dog"}]}, "coco", "image id must be an integer"),
        ([1, 2], "coco", "expected an object"),
        ({"annotations": []}, "karpathy", "expected a JSON list"),
    ],
)
def test_malformed_structure_names_the_item(tmp_path, data, fmt, message):
    path = _write_json(tmp_path, data)
    with pytest.raises(LabelError, match=message) as err:
        read_captions(path, format=fmt)
    assert str(path) in str(err.value)


def test_image_without_captions(tmp_path):
    path = _write_json(tmp_path, [{"image": "COCO_val2014_000000000042.jpg", "caption": []}])
    with pytest.raises(LabelError, match="image '42' has no captions"):
        read_captions(path)
    coco = {"images": [{"id": 42}, {"id": 43}], "annotations": [{"image_id": 42, "caption": "a dog"}]}
    with pytest.raises(LabelError, match="image '43' has no captions"):
        read_captions(_write_json(tmp_path, coco, "coco.json"))


def test_duplicate_image_ids(tmp_path):
    item = {"image": "val2014/COCO_val2014_000000391895.jpg", "caption": ["a dog"]}
    with pytest.raises(LabelError, match="duplicate image id '391895'"):
        read_captions(_write_json(tmp_path, [item, item]))
    coco = {"images": [{"id": 5}, {"id": 5}], "annotations": [{"image_id": 5, "caption": "a dog"}]}
    with pytest.raises(LabelError, match="duplicate image id '5'"):
        read_captions(_write_json(tmp_path, coco, "coco.json"))


def test_annotation_for_an_unknown_image(tmp_path):
    coco = {"images": [{"id": 5}], "annotations": [{"image_id": 6, "caption": "a dog"}]}
    with pytest.raises(LabelError, match="refers to image '6', which is not in 'images'"):
        read_captions(_write_json(tmp_path, coco))


def test_caption_without_a_word_with_a_vector(tmp_path):
    caps = ["a dog on a bike", "It is the one!", "a cat"]
    path = _write_json(tmp_path, [{"image": "COCO_val2014_000000000042.jpg", "caption": caps}])
    with pytest.raises(LabelError, match=r"image '42': caption 1 'It is the one!' has no word with a vector"):
        read_captions(path)
    dropped = read_captions(path, empty="drop")
    assert dropped.captions(0) == [caps[0], caps[2]]
    assert dropped.provenance["empty"] == "drop"


def test_image_left_without_captions_after_dropping(tmp_path):
    data = [
        {"image": "COCO_val2014_000000000001.jpg", "caption": ["a dog"]},
        {"image": "COCO_val2014_000000000042.jpg", "caption": ["the", "qwxzv!"]},
    ]
    with pytest.raises(LabelError, match="image '42': every caption was dropped"):
        read_captions(_write_json(tmp_path, data), empty="drop")


def test_unknown_options_fail_loudly(tmp_path):
    path = _write_json(tmp_path, [])
    with pytest.raises(ValueError, match="unknown empty-caption policy 'skip'; known: error, drop"):
        read_captions(path, empty="skip")
    with pytest.raises(ValueError, match="unknown caption format 'flickr'; known: auto, coco, karpathy"):
        read_captions(path, format="flickr")


def test_inconsistent_arrays_are_refused(coco):
    arrays = coco.subset(slice(0, 5)).to_arrays()
    ids = coco.ids[:5]
    bad = dict(arrays, tokens=arrays["tokens"] + len(arrays["vocab"]))
    with pytest.raises(LabelError, match="token ids must lie in"):
        CaptionSets.from_arrays(ids, bad)
    bad = dict(arrays, caption_offsets=arrays["caption_offsets"][:-1])
    with pytest.raises(LabelError, match="caption_offsets must have shape"):
        CaptionSets.from_arrays(ids, bad)
    empty_caption = arrays["token_offsets"].copy()
    empty_caption[1] = empty_caption[0]
    with pytest.raises(LabelError, match="token_offsets: segment 0 is empty"):
        CaptionSets.from_arrays(ids, dict(arrays, token_offsets=empty_caption))
    with pytest.raises(LabelError, match=r"arrays missing: \['vectors'\]"):
        CaptionSets.from_arrays(ids, {k: v for k, v in arrays.items() if k != "vectors"})
    nan = arrays["vectors"].copy()
    nan[0, 0] = np.nan
    with pytest.raises(LabelError, match="NaN"):
        CaptionSets.from_arrays(ids, dict(arrays, vectors=nan))
