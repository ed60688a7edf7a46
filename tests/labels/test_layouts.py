import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from labeldist.labels.base import LabelError
from labeldist.labels.layouts import (
    LayoutMaps,
    layout_types_of,
    load_layout_types,
    read_layout_maps,
    write_layout_maps,
)
from labeldist.labels.lsun_rooms import LayoutPrior, generate_layouts

TYPES_JSON = Path(__file__).resolve().parents[2] / "labeldist" / "labels" / "lsun_layout_types.json"


def _expected_visible(layout_type: int) -> list[bool]:
    """Straight from the JSON, independent of the module: a surface is visible when its polygon is non-empty."""
    spec = json.loads(TYPES_JSON.read_text())
    (entry,) = [t for t in spec["types"] if t["id"] == layout_type]
    return [len(region) > 0 for region in entry["regions"]]


# ---------------------------------------------------------------------------------------------------- generator


def test_generator_is_reproducible_for_a_seed():
    a = generate_layouts(12, seed=3, height=40, width=48)
    b = generate_layouts(12, seed=3, height=40, width=48)
    c = generate_layouts(12, seed=4, height=40, width=48)
    np.testing.assert_array_equal(a.maps, b.maps)
    assert a.sha256() == b.sha256()
    assert not np.array_equal(a.maps, c.maps)
    # Candidates are drawn in a fixed order, so a shorter run is a prefix of a longer one.
    np.testing.assert_array_equal(generate_layouts(5, seed=3, height=40, width=48).maps, a.maps[:5])


def test_generated_maps_are_uint8_surface_maps_with_ids():
    maps = generate_layouts(30, height=64, width=96, seed=1)
    assert maps.maps.shape == (30, 64, 96)
    assert maps.maps.dtype == np.uint8
    assert maps.label_type == "layout_map"
    assert maps.ids[0] == "lsun5-000000" and len(set(maps.ids)) == 30
    # A closed box fills every pixel: no unlabelled (0) pixel, and no left wall in type 5.
    assert set(np.unique(maps.maps).tolist()) == {1, 2, 3, 5}
    # Not all alike: the geometry is random.
    assert len({m.tobytes() for m in maps.maps}) == 30


@pytest.mark.parametrize("layout_type", [5, 0, 4, 7, 9])
def test_generated_maps_show_exactly_the_surfaces_of_their_type(layout_type):
    maps = generate_layouts(40, layout_type=layout_type, height=64, width=64, seed=2).maps
    expected = _expected_visible(layout_type)
    shown = np.stack([(maps == s).any(axis=(1, 2)) for s in range(1, 6)], axis=1)
    assert (shown == np.array(expected)).all(axis=1).all()
    assert (layout_types_of(maps) == layout_type).all()


def test_type_5_walls_meet_in_a_corner_with_the_middle_wall_on_the_left():
    # Type 5's keypoints 2 and 5 (middle wall) lie on the left image border, 3 and 6 (right wall) on the right.
    maps = generate_layouts(40, seed=5).maps
    left, right = maps[:, :, 0], maps[:, :, -1]
    assert (left == 2).any(axis=1).all() and (right == 3).any(axis=1).all()
    assert not (left == 3).any() and not (right == 2).any()


def test_generation_of_2000_maps_gives_2000_distinct_maps_of_the_type():
    # The main job's size; its speed is measured in benchmarks/bench_layout.py, not asserted here.
    maps = generate_layouts(2000, height=128, width=128, seed=0)
    assert len(maps) == 2000 and maps.maps.shape == (2000, 128, 128)
    assert len(np.unique(maps.maps.reshape(2000, -1), axis=0)) == 2000
    assert (layout_types_of(maps.maps) == 5).all()


def test_every_layout_type_is_defined_once():
    types = load_layout_types(TYPES_JSON)
    assert sorted(types) == list(range(11))
    assert max(types.values(), key=lambda t: t.freq_train).id == 5


def test_unknown_type_fails_loudly():
    with pytest.raises(ValueError, match=r"unknown layout type 11; known: 0, 1, 2"):
        generate_layouts(3, layout_type=11)


def test_a_prior_that_never_shows_the_type_stops_and_names_the_setting():
    # The generic room prior (wide lenses) never shows three walls without floor and ceiling.
    with pytest.raises(RuntimeError, match="max_candidates"):
        generate_layouts(3, layout_type=7, prior=LayoutPrior(), max_candidates=4096, height=32, width=32)


# ---------------------------------------------------------------------------------------------------- label set


def test_label_set_subset_and_round_trip_through_arrays():
    maps = generate_layouts(6, height=16, width=20, seed=0)
    sub = maps.subset(np.array([4, 1]))
    assert sub.ids.tolist() == [maps.ids[4], maps.ids[1]]
    np.testing.assert_array_equal(sub.maps, maps.maps[[4, 1]])
    again = LayoutMaps.from_arrays(maps.ids, maps.to_arrays())
    assert again.sha256() == maps.sha256()
    assert again.shape == (16, 20)


def test_label_set_keeps_a_configured_label_set():
    m = np.array([[[0, 6], [1, 2]]])
    with pytest.raises(LabelError, match=r"'a'.*unknown label values \[6\]"):
        LayoutMaps(np.array(["a"]), m)
    six = LayoutMaps(np.array(["a"]), m, n_classes=6)
    assert LayoutMaps.from_arrays(six.ids, six.to_arrays()).n_classes == 6


def test_label_set_names_the_item_with_unknown_labels():
    maps = np.ones((3, 4, 4), dtype=np.int64)
    maps[2, 1, 1] = 9
    with pytest.raises(LabelError, match=r"layout map 'c'.*\[9\]"):
        LayoutMaps(np.array(["a", "b", "c"]), maps)
    maps[2, 1, 1] = -1
    with pytest.raises(LabelError, match=r"layout map 'c'.*\[-1\]"):
        LayoutMaps(np.array(["a", "b", "c"]), maps)


def test_label_set_names_the_item_of_another_shape():
    with pytest.raises(LabelError, match=r"layout map 'b': shape \(4, 5\) differs from \(4, 4\) of layout map 'a'"):
        LayoutMaps(np.array(["a", "b"]), [np.ones((4, 4)), np.ones((4, 5))])


def test_label_set_refuses_wrong_ndim_and_non_integers():
    with pytest.raises(LabelError, match=r"shape \(N=2, H, W\), got \(2, 16\)"):
        LayoutMaps(np.array(["a", "b"]), np.ones((2, 16)))
    with pytest.raises(LabelError, match=r"layout map 'b': expected a 2-d"):
        LayoutMaps(np.array(["a", "b"]), [np.ones((4, 4)), np.ones((4, 4, 3))])
    with pytest.raises(LabelError, match=r"layout map 'a'.*non-integer"):
        LayoutMaps(np.array(["a"]), np.full((1, 2, 2), 1.5))


# ---------------------------------------------------------------------------------------------------- reader


@pytest.mark.parametrize("fmt", ["npy", "png"])
def test_reader_round_trip(tmp_path, fmt):
    maps = generate_layouts(5, height=24, width=32, seed=7)
    maps.maps[0, :3, :3] = 0  # unlabelled pixels survive the trip
    write_layout_maps(maps, tmp_path, fmt=fmt)
    (tmp_path / "notes.txt").write_text("not a map")  # other files are skipped
    back = read_layout_maps(tmp_path)
    assert back.ids.tolist() == sorted(maps.ids.tolist())
    np.testing.assert_array_equal(back.maps, maps.maps)
    assert back.sha256() == maps.sha256()


def test_reader_sorts_ids_and_reads_palette_pngs(tmp_path):
    img = Image.fromarray(np.array([[1, 2], [3, 5]], dtype=np.uint8), mode="P")
    img.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 0, 255, 0, 255] + [0] * 750)
    img.save(tmp_path / "b.png")
    np.save(tmp_path / "a.npy", np.array([[0, 0], [4, 4]], dtype=np.int32))
    back = read_layout_maps(tmp_path)
    assert back.ids.tolist() == ["a", "b"]
    np.testing.assert_array_equal(back.maps[1], [[1, 2], [3, 5]])


def _write(path, arr):
    if path.suffix == ".npy":
        np.save(path, arr)
    else:
        Image.fromarray(arr).save(path)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.npy", b"not numpy at all", r"bad\.npy: cannot read as \.npy"),
        ("bad.png", b"\x89PNG broken", r"bad\.png: cannot read as \.png"),
        ("bad.npy", np.ones((2, 3, 3), np.uint8), r"bad\.npy: expected a 2-d"),
        ("bad.npy", np.ones((5, 5), np.uint8), r"bad\.npy: shape \(5, 5\) differs from a\.npy's \(4, 4\)"),
        ("bad.png", np.full((4, 4), 7, np.uint8), r"bad\.png: unknown label values \[7\]"),
        ("bad.png", np.ones((4, 4, 3), np.uint8), r"bad\.png: PNG mode 'RGB'"),
        ("bad.npy", np.full((4, 4), 0.5), r"bad\.npy: .*non-integer"),
        ("a.png", np.ones((4, 4), np.uint8), r"a\.(png|npy): same item id 'a'"),
    ],
)
def test_reader_names_the_bad_file(tmp_path, name, content, message):
    np.save(tmp_path / "a.npy", np.ones((4, 4), np.uint8))
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        _write(path, content)
    with pytest.raises(LabelError, match=message):
        read_layout_maps(tmp_path)


def test_reader_refuses_an_empty_or_missing_folder(tmp_path):
    (tmp_path / "readme.txt").write_text("no maps here")
    with pytest.raises(LabelError, match="no layout maps"):
        read_layout_maps(tmp_path)
    with pytest.raises(LabelError, match="not a folder"):
        read_layout_maps(tmp_path / "missing")


def test_reader_honours_a_configured_label_set(tmp_path):
    np.save(tmp_path / "a.npy", np.array([[6, 1]], dtype=np.uint8))
    with pytest.raises(LabelError, match=r"a\.npy: unknown label values \[6\]"):
        read_layout_maps(tmp_path)
    assert read_layout_maps(tmp_path, n_classes=6).maps.max() == 6
