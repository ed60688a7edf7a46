"""``trainer render``: images drawn from the labels of real stores, deterministic by seed.

The stores are tiny but real: 20 MPII poses (in image pixels, and normalised by centre and scale) and 10
generated LSUN layouts, laid out, computed and published by the engine's own functions, read back by the renderer
through StoreReader only. Images are 32-128 px.

Poses are drawn in their label's own frame: a joint's pixel is ``size / 2 + (xy - centre) * size /
(2 half)``, computed here from that formula, never by the renderer's own mapping.
"""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from labeldist.labels.poses import MPII_JOINTS
from labeldist.trainer.cli import main
from labeldist.trainer.kinds import TRAINER_KINDS
from labeldist.trainer.render import base as render
from labeldist.trainer.render import layout as render_layout
from labeldist.trainer.render import pose as render_pose
from labeldist.trainer.render.base import RenderError, item_rng, render_store, safe_names
from labeldist.view.stored import stored_labels

REPO = Path(__file__).resolve().parents[2]
MPII = REPO / "data" / "mpii" / "mpii_valid_2958.csv"
SIZE = 32


def _build(url: Path, labels, distance, dataset: str, kind: str) -> Path:
    from labeldist.engine.blocks import compute_block
    from labeldist.store import build_manifest, create_store, publish

    manifest = build_manifest(
        dataset=dataset, kind=kind, params=distance.params(), labels=labels, k=5, dense=True, block_rows=64
    )
    create_store(str(url), manifest, labels)
    compute_block(0, labels=labels, distance=distance, url=str(url), k=5, block_rows=64, dense=True)
    publish(str(url))
    return url


@pytest.fixture(scope="module")
def pose_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 real MPII poses (raw pixels, some with missing joints), dense."""
    from labeldist.distances.pose import PoseDistance
    from labeldist.labels.pose_files import read_mpii_csv

    labels = read_mpii_csv(MPII).subset(slice(0, 20))
    return _build(tmp_path_factory.mktemp("render") / "mpii20-pose", labels, PoseDistance(), "mpii20", "pose")


@pytest.fixture(scope="module")
def centred_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same 20 poses normalised ``center_scale``, as RESULTS.md's stores: drawn in the default frame."""
    from labeldist.distances.pose import PoseDistance
    from labeldist.labels.pose_files import read_mpii_csv

    every = read_mpii_csv(MPII, normalization="center_scale")
    labels = every.subset(slice(0, 20))
    labels.provenance = dict(every.provenance)  # (subset drops it) the manifest's params.labels.normalization
    url = tmp_path_factory.mktemp("render") / "mpii20c-pose"
    return _build(url, labels, PoseDistance(), "mpii20c", "pose")


@pytest.fixture(scope="module")
def layout_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10 generated LSUN type-5 layouts of 32 x 32."""
    from labeldist.distances.layout import LayoutMIoU
    from labeldist.labels.lsun_rooms import generate_layouts

    labels = generate_layouts(10, height=SIZE, width=SIZE, seed=0)
    url = tmp_path_factory.mktemp("render") / "lsun10-layout_miou"
    return _build(url, labels, LayoutMIoU(), "lsun10", "layout_miou")


def _files(out: Path) -> dict[str, bytes]:
    """Every file of a render folder but render.json (which names the store path), by name."""
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != "render.json"}


def _index(out: Path) -> list[dict[str, str]]:
    with open(out / "index.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _images(out: Path) -> dict[str, np.ndarray]:
    return {row["id"]: np.asarray(Image.open(out / row["path"]).convert("RGB")) for row in _index(out)}


# --------------------------------------------------------------------------------------------------------------
# Determinism: by seed, not by worker count


@pytest.mark.parametrize("store", ["pose_store", "centred_store", "layout_store"])
def test_same_seed_gives_byte_identical_files_and_another_seed_other_images(store, request, tmp_path) -> None:
    url = request.getfixturevalue(store)
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        render_store(url, tmp_path / name, size=SIZE, seed=seed, workers=1)
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    images_a, images_c = _images(tmp_path / "a"), _images(tmp_path / "c")
    assert images_a.keys() == images_c.keys()
    assert all(not np.array_equal(images_a[i], images_c[i]) for i in images_a)


@pytest.mark.parametrize("store", ["pose_store", "layout_store"])
def test_images_do_not_depend_on_the_worker_count(store, request, tmp_path, monkeypatch) -> None:
    url = request.getfixturevalue(store)
    monkeypatch.setattr(render, "CHUNK", 3)  # several tasks for two processes, finishing in any order
    render_store(url, tmp_path / "one", size=SIZE, seed=3, workers=1)
    render_store(url, tmp_path / "two", size=SIZE, seed=3, workers=2)
    assert _files(tmp_path / "one") == _files(tmp_path / "two")


def test_items_renders_a_prefix_with_the_same_pixels(pose_store, tmp_path) -> None:
    render_store(pose_store, tmp_path / "all", size=SIZE, seed=0, workers=1)
    meta = render_store(pose_store, tmp_path / "five", size=SIZE, seed=0, workers=1, items=5)
    assert meta["count"] == 5
    five, every = _files(tmp_path / "five"), _files(tmp_path / "all")
    assert {n: d for n, d in five.items() if n != "index.csv"}.items() <= every.items()


def test_jpeg_renders_are_deterministic_too(layout_store, tmp_path) -> None:
    for name in ("a", "b"):
        render_store(layout_store, tmp_path / name, size=SIZE, seed=0, fmt="jpg", workers=1, items=4)
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    assert all(row["path"].endswith(".jpg") for row in _index(tmp_path / "a"))


# --------------------------------------------------------------------------------------------------------------
# Output: index.csv, render.json, safe names


def test_index_and_render_json_describe_the_render(pose_store, tmp_path) -> None:
    from labeldist.store import StoreReader

    out = tmp_path / "r"
    render_store(pose_store, out, size=SIZE, seed=7, workers=1)
    reader = StoreReader(str(pose_store))
    rows = _index(out)
    assert [r["id"] for r in rows] == reader.ids.tolist()  # MPII ids hold '#': "005808361.jpg#0"
    for row in rows:
        assert "/" not in row["path"] and "#" not in row["path"]
        image = Image.open(out / row["path"])
        assert image.size == (SIZE, SIZE) and image.mode == "RGB"
    meta = json.loads((out / "render.json").read_text())
    assert meta["complete"] is True
    assert (meta["kind"], meta["seed"], meta["size"], meta["count"], meta["format"]) == ("pose", 7, SIZE, 20, "png")
    assert meta["store"] == reader.url


def test_safe_names_are_unique_plain_file_names() -> None:
    ids = ["a.jpg#0", "a.jpg#1", "x/y", "x_y", "..", ".hidden", "", "Plain", "plain", "lsun5-000001", "a b"]
    names = safe_names(ids, "png")
    assert len({n.lower() for n in names}) == len(ids)
    assert names[ids.index("lsun5-000001")] == "lsun5-000001.png"  # a plain id keeps its name
    for name in names:
        assert "/" not in name and "#" not in name and " " not in name
        assert not name.startswith(".") and name.endswith(".png")
    assert safe_names(ids, "png") == names


# --------------------------------------------------------------------------------------------------------------
# Poses: the figure is the pose


def _pose_style(seed: int, size: int) -> render_pose.FigureStyle:
    """The style render_pose.render draws for the generator of ``seed`` (its second spawned stream)."""
    return render_pose.figure_style(np.random.default_rng(seed).spawn(3)[1], size)


def _pixels(xy: np.ndarray, frame, size: int) -> np.ndarray:
    """The label frame's map, written out here: ``size / 2 + (xy - centre) * size / (2 half)``."""
    cx, cy, half = frame
    return np.stack(
        [size / 2 + (xy[..., 0] - cx) * size / (2 * half), size / 2 + (xy[..., 1] - cy) * size / (2 * half)], axis=-1
    )


def _centroid(mask: np.ndarray) -> np.ndarray:
    """(x, y) of the centre of the pixels of ``mask``, pixel (r, c) covering [c, c + 1) x [r, r + 1)."""
    rows, cols = np.nonzero(mask)
    return np.array([cols.mean() + 0.5, rows.mean() + 0.5])


def _centred_poses():
    from labeldist.labels.pose_files import read_mpii_csv

    return read_mpii_csv(MPII, normalization="center_scale")


def _figure_box(xy, present, size: int, seed: int) -> tuple[slice, slice]:
    style = _pose_style(seed, size)
    joints = _pixels(xy, render_pose.CENTER_SCALE_FRAME, size)[present]
    pad = max(style.limb_width / 2, style.joint_radius) + style.outline + 4  # + the resampling kernel
    lo = np.floor(joints.min(axis=0) - pad).astype(int).clip(0, size)
    hi = np.ceil(joints.max(axis=0) + pad).astype(int).clip(0, size)
    return slice(lo[1], hi[1]), slice(lo[0], hi[0])


def test_a_pose_image_depends_on_the_pose_and_only_in_the_figure(centred_store) -> None:
    from labeldist.store import StoreReader

    poses = stored_labels(StoreReader(str(centred_store)))
    size, seed = 64, 5
    a, b = render_pose.item(poses, 0), render_pose.item(poses, 1)
    image_a = render_pose.render(a, size, np.random.default_rng(seed))
    image_b = render_pose.render(b, size, np.random.default_rng(seed))
    assert np.array_equal(image_a, render_pose.render(a, size, np.random.default_rng(seed)))
    differ = (image_a != image_b).any(axis=2)
    assert differ.sum() > 0.01 * size * size
    # same generator: same background, style and noise; what differs lies where one of the two figures is
    inside = np.zeros_like(differ)
    for xy, present, _ in (a, b):
        inside[_figure_box(xy, present, size, seed)] = True
    assert not differ[~inside].any()


@pytest.mark.parametrize("size", [32, 128])
def test_each_joint_is_drawn_where_the_label_frame_puts_it(size) -> None:
    """Joint j alone (a disc with its outline) against no joint at all, same generator: the pixels that differ are
    the disc, and their centre is the joint's pixel by the frame's formula, to a fraction of a pixel."""
    poses = _centred_poses()
    for index in (0, 7):
        xy, present, frame = render_pose.item(poses, index)
        expected = _pixels(xy, render_pose.CENTER_SCALE_FRAME, size)
        blank = render_pose.render((xy, np.zeros(16, dtype=bool), frame), size, np.random.default_rng(index))
        for j in np.flatnonzero(present):
            one = np.zeros(16, dtype=bool)
            one[j] = True
            image = render_pose.render((xy, one, frame), size, np.random.default_rng(index))
            disc = (image != blank).any(axis=2)
            style = _pose_style(index, size)
            box = 2 * (style.joint_radius + style.outline) + 5  # the disc and outline, + the resampling kernel
            assert 3 <= disc.sum() <= box * box, "one joint is a small disc"
            np.testing.assert_allclose(_centroid(disc), expected[j], atol=0.75, err_msg=f"item {index}, joint {j}")


def test_a_frame_maps_label_units_to_pixels_the_same_for_every_pose() -> None:
    """Another frame (centre, half-side) moves and scales the figure as the formula says; a pose's size in pixels
    is its label size times size / (2 half), whatever the pose."""
    poses = _centred_poses()
    xy, present, _ = render_pose.item(poses, 3)
    frame = render_pose.Frame(0.1, -0.2, 0.8)
    j = int(np.flatnonzero(present)[0])
    one = np.zeros(16, dtype=bool)
    one[j] = True
    size = 96
    image = render_pose.render((xy, one, frame), size, np.random.default_rng(0))
    blank = render_pose.render((xy, np.zeros(16, dtype=bool), frame), size, np.random.default_rng(0))
    np.testing.assert_allclose(_centroid((image != blank).any(axis=2)), _pixels(xy[j], frame, size), atol=0.75)
    for index in range(0, 2958, 500):
        xy, present = poses.xy[index][poses.present[index]], None
        d_label = np.linalg.norm(xy[:, None] - xy[None], axis=-1)
        px = render_pose.place_pose(xy, np.ones(len(xy), dtype=bool), size, frame)
        np.testing.assert_allclose(np.linalg.norm(px[:, None] - px[None], axis=-1), d_label * size / (2 * 0.8))


def _largest_style(size: int) -> render_pose.FigureStyle:
    """The style of the widest limbs and largest joints figure_style draws (every uniform at its top)."""

    class Top:
        def uniform(self, size=None):
            return np.ones(size)

    return render_pose.figure_style(Top(), size)


def test_every_shipped_pose_fits_the_default_frame_with_room_for_the_jitter() -> None:
    """All 2,958 poses of the shipped file, center_scale, at the default frame: every joint disc, limb end and
    head disc with its outline, in the largest style, stays inside the picture even after the largest training
    jitter (scale 1.05 about the centre, shift 3 % of the side on both axes)."""
    poses = _centred_poses()
    size = 128
    style = _largest_style(size)
    assert style.limb_width > 1.0 and style.outline > 0.6  # proportional to the frame, no floor at this size
    reach = max(style.limb_width / 2, style.joint_radius) + style.outline
    px = _pixels(poses.xy, render_pose.CENTER_SCALE_FRAME, size)
    far = np.where(poses.present[..., None], np.abs(px - size / 2), 0.0).max(axis=(1, 2)) + reach
    head = poses.present[:, render_pose.NECK] & poses.present[:, render_pose.HEAD_TOP]
    neck, top = px[head, render_pose.NECK], px[head, render_pose.HEAD_TOP]
    head_far = np.abs((neck + top) / 2 - size / 2).max(axis=1) + np.linalg.norm(top - neck, axis=1) / 2 + style.outline
    far[head] = np.maximum(far[head], head_far)
    worst = far * 1.05 + 0.03 * size
    assert worst.max() <= size / 2, f"pose {poses.ids[int(worst.argmax())]} leaves the picture"
    # ... and 1.0, the frame of two person heights, would not hold the two annotation slips (docs/internals.md,
    # "Rendering poses")
    assert (far * 1.1 * 1.05 + 0.03 * size > size / 2).sum() == 2
    assert render_pose.round_up(render_pose.needed_half(poses.xy, poses.present, (0, 0)), 2) == 1.1


def test_the_farthest_shipped_poses_are_drawn_whole() -> None:
    """The pixels of the three poses that reach farthest: none on the picture's border, none in the room the
    shift jitter needs."""
    poses = _centred_poses()
    far = np.where(poses.present[..., None], np.abs(poses.xy), 0.0).max(axis=(1, 2))
    size = 128
    room = int(np.ceil(0.03 * size))
    for index in np.argsort(far)[-3:]:
        xy, present, frame = render_pose.item(poses, int(index))
        image = render_pose.render((xy, present, frame), size, np.random.default_rng(1))
        blank = render_pose.render((xy, np.zeros(16, dtype=bool), frame), size, np.random.default_rng(1))
        figure = (image != blank).any(axis=2)
        assert figure.sum() > 50
        inner = np.zeros_like(figure)
        inner[room:-room, room:-room] = True
        assert not figure[~inner].any(), f"pose {poses.ids[index]} reaches the border"


def _stick_figure() -> np.ndarray:
    """(16, 2) joints of a figure (label units, within ±0.4 of the centre) whose left arm lies inside the box of
    the other joints, in MPII order."""
    joints = {
        "r_ankle": (-7, 10),
        "r_knee": (-3, 5),
        "r_hip": (-1, 0),
        "l_hip": (1, 0),
        "l_knee": (3, 5),
        "l_ankle": (7, 10),
        "pelvis": (0, 0),
        "thorax": (0, -7),
        "upper_neck": (0, -8),
        "head_top": (0, -10),
        "r_wrist": (-7, -7),
        "r_elbow": (-4, -7),
        "r_shoulder": (-1.5, -7),
        "l_shoulder": (1.5, -7),
        "l_elbow": (4.5, -5),
        "l_wrist": (5.5, -1.5),
    }
    from labeldist.labels.poses import MPII_JOINTS

    return np.array([joints[name] for name in MPII_JOINTS], dtype=np.float64) / 25


def test_limbs_of_missing_joints_are_not_drawn() -> None:
    from labeldist.labels.poses import MPII_JOINTS

    size, seed = 96, 11
    xy = _stick_figure()
    full = np.ones(16, dtype=bool)
    missing = full.copy()
    elbow, wrist, shoulder = (MPII_JOINTS.index(j) for j in ("l_elbow", "l_wrist", "l_shoulder"))
    missing[[elbow, wrist]] = False  # as read from a CSV row of "0, 0, 0"
    xy_missing = xy.copy()
    xy_missing[[elbow, wrist]] = 0.0

    frame = render_pose.Frame(0.0, 0.0, 0.5)  # the figure large in the picture

    def draw(points, present):
        return render_pose.render((points, present, frame), size, np.random.default_rng(seed)).astype(int)

    with_arm, without_arm = draw(xy, full), draw(xy_missing, missing)
    nothing = draw(xy, np.zeros(16, dtype=bool))  # the background, style and noise alone
    joints = _pixels(xy, frame, size)
    # a joint's pixel depends on its label alone, not on which other joints are there
    np.testing.assert_allclose(render_pose.place_pose(xy_missing, missing, size, frame)[missing], joints[missing])
    assert np.isnan(render_pose.place_pose(xy_missing, missing, size, frame)[~missing]).all()
    for a, b in ((shoulder, elbow), (elbow, wrist)):
        for t in (0.5, 0.7):
            x, y = (joints[a] + t * (joints[b] - joints[a])).astype(int)
            assert np.abs(with_arm[y, x] - nothing[y, x]).sum() > 30, "the limb is drawn when its joints are there"
            assert np.array_equal(without_arm[y, x], nothing[y, x]), "no trace of a limb whose joint is missing"
    assert (without_arm != nothing).any(axis=2).sum() > 0.01 * size * size  # the rest of the figure is drawn


def test_a_joint_outside_the_frame_is_refused_naming_the_item(pose_store, centred_store, tmp_path) -> None:
    from labeldist.store import StoreReader

    # image pixels drawn in the center_scale frame: every joint lies outside
    with pytest.raises(RenderError) as e:
        render_store(pose_store, tmp_path / "r", size=SIZE, workers=1, frame=render_pose.CENTER_SCALE_FRAME)
    message = str(e.value)
    first = str(StoreReader(str(pose_store)).ids[0])
    assert "\n" not in message and repr(first) in message and "outside the frame" in message
    assert "(0, 0, 1.1)" in message and "20 of 20 poses" in message
    assert "a frame that holds every pose here" in message and "same frame" in message
    assert not (tmp_path / "r").exists()
    # a frame that misses one joint of one pose: that pose and joint are named
    poses = stored_labels(StoreReader(str(centred_store)))
    far = np.where(poses.present[..., None], np.abs(poses.xy), 0).max(axis=2)
    i, j = np.unravel_index(int(far.argmax()), far.shape)
    half = float(np.sort(far.ravel())[-2] + far.max()) / 2  # between the farthest joint and the next
    with pytest.raises(RenderError, match="outside the frame") as e:
        render_store(centred_store, tmp_path / "r", size=SIZE, workers=1, frame=(0, 0, half))
    assert repr(str(poses.ids[i])) in str(e.value) and f"joint {j} ({MPII_JOINTS[j]})" in str(e.value)
    assert "1 of 20 poses" in str(e.value)
    with pytest.raises(RenderError, match="outside the frame"):  # render itself refuses too
        render_pose.render(render_pose.item(poses, int(i), (0, 0, half)), SIZE, np.random.default_rng(0))
    for bad in ((0, 0, 0), (0, 0, -1), (0, float("nan"), 1), (1, 2)):
        with pytest.raises(RenderError, match="a frame is"):
            render_store(centred_store, tmp_path / "r", size=SIZE, workers=1, frame=bad)


def test_cli_refuses_a_joint_outside_the_frame_in_one_line(centred_store, tmp_path, capsys, monkeypatch) -> None:
    from labeldist.store import StoreReader

    poses = stored_labels(StoreReader(str(centred_store)))
    monkeypatch.setattr(render_pose, "CENTER_SCALE_FRAME", render_pose.Frame(0.0, 0.0, 0.2))
    off = (np.abs(poses.xy) > 0.2).any(axis=2) & poses.present
    first = int(np.flatnonzero(off.any(axis=1))[0])
    assert main(["render", str(centred_store), "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "outside the frame" in err and repr(str(poses.ids[first])) in err
    assert "Traceback" not in err and not (tmp_path / "r").exists()


def test_render_json_records_the_frame_and_another_frame_is_another_render(pose_store, centred_store, tmp_path):
    from labeldist.store import StoreReader

    meta = render_store(centred_store, tmp_path / "c", size=SIZE, seed=0, workers=1)
    assert meta["frame"] == [0.0, 0.0, 1.1] and meta["frame_source"] == "center_scale default"
    assert json.loads((tmp_path / "c" / "render.json").read_text())["frame"] == [0.0, 0.0, 1.1]
    assert render.read_frame(tmp_path / "c") == (0.0, 0.0, 1.1)
    # another frame into the same folder: a different render, refused without --overwrite
    with pytest.raises(RenderError, match=r"different render \(frame differ\)"):
        render_store(centred_store, tmp_path / "c", size=SIZE, seed=0, workers=1, frame=(0, 0, 1.2))
    meta = render_store(centred_store, tmp_path / "c", size=SIZE, seed=0, workers=1, frame=(0, 0, 1.1))
    assert meta["frame_source"] == "given"  # the same frame given: the same render, rerun
    # a store in image pixels: its frame is its own extent, recorded, and said to be needed by its test store
    poses = stored_labels(StoreReader(str(pose_store)))
    meta = render_store(pose_store, tmp_path / "p", size=SIZE, seed=0, workers=1)
    cx, cy, half = meta["frame"]
    assert not render_pose.outside(poses.xy, poses.present, (cx, cy, half)).any()
    assert "same frame" in meta["frame_source"] and "'none'" in meta["frame_source"]
    # the train render's frame, given to another render, draws the same pixels
    render_store(pose_store, tmp_path / "q", size=SIZE, seed=0, workers=1, frame=render.read_frame(tmp_path / "p"))
    assert _files(tmp_path / "p") == _files(tmp_path / "q")
    other = render_store(pose_store, tmp_path / "o", size=SIZE, seed=0, workers=1, frame=(cx + 50, cy, half * 1.5))
    assert _images(tmp_path / "o").keys() == _images(tmp_path / "p").keys() and other["frame"] != meta["frame"]
    assert all(
        not np.array_equal(a, b) for a, b in zip(_images(tmp_path / "o").values(), _images(tmp_path / "p").values())
    )


def test_the_frame_of_a_store_is_the_centre_of_its_box_rounded() -> None:
    xy = np.zeros((1, 16, 2))
    present = np.zeros((1, 16), dtype=bool)
    xy[0, :2], present[0, :2] = [[100.0, 40.0], [300.0, 80.0]], True  # and 14 joints missing at (0, 0)
    frame = render_pose.frame_from_extent(xy, present)
    assert (frame.cx, frame.cy) == (200.0, 60.0)
    need = 100 * 1.05 / (1 - 2 * render_pose.REACH * 1.05 - 0.06)
    assert need <= frame.half < need * 1.1 and frame.half == float(f"{frame.half:.2g}")
    assert [render_pose.round_up(v) for v in (1.085, 1.1, 234.1, 0.00123)] == [1.1, 1.1, 240.0, 0.0013]


def test_the_bones_are_the_services() -> None:
    # the renderer and the label view draw the bones the pose kind declares, by the store's joint names
    from labeldist.api.answers.labelview import render_label
    from labeldist.labels.poses import COCO_EDGES, COCO_JOINTS, MPII_EDGES

    for names, edges in ((MPII_JOINTS, MPII_EDGES), (COCO_JOINTS, COCO_EDGES)):
        arrays = {"xy": np.zeros((1, len(names), 2)), "present": np.ones((1, len(names)), np.uint8)}
        if names != MPII_JOINTS:
            arrays["joint_names"] = np.array(names)
        view = render_label("pose", arrays, 1, 0, "a").pose
        assert render_pose.figure_parts(names).edges == edges
        assert view.joints == list(names) and [tuple(e) for e in view.edges] == list(edges)
    assert render_pose.figure_parts(MPII_JOINTS) == (
        MPII_EDGES,
        render_pose.RIGHT,
        render_pose.LEFT,
        (render_pose.NECK, render_pose.HEAD_TOP),
    )


# --------------------------------------------------------------------------------------------------------------
# Layouts: each surface in its own colour


def test_each_surface_of_a_room_has_its_own_colour(layout_store) -> None:
    from scipy.ndimage import binary_erosion

    from labeldist.store import StoreReader

    layouts = stored_labels(StoreReader(str(layout_store)))
    for index in range(len(layouts)):
        for seed in (0, 1):
            label_map = render_layout.item(layouts, index)
            image = render_layout.render(label_map, SIZE, item_rng(seed, index)).astype(np.float64)
            # away from the boundaries, where shadows and resampling mix surfaces
            regions = {s: binary_erosion(label_map == s) for s in np.unique(label_map) if s}
            regions = {s: m for s, m in regions.items() if m.sum() >= 8}
            assert len(regions) >= 3
            medians = np.stack([np.median(image[m], axis=0) for m in regions.values()])
            gaps = np.linalg.norm(medians[:, None] - medians[None], axis=-1)[np.triu_indices(len(regions), 1)]
            assert gaps.min() > 15, f"two surfaces of item {index} share a colour"
            for k, mask in enumerate(regions.values()):
                nearest = np.linalg.norm(image[mask][:, None] - medians[None], axis=-1).argmin(axis=1)
                assert (nearest == k).mean() >= 0.5, "most pixels of a surface have its colour"


def test_a_layout_image_follows_its_map() -> None:
    """The same map and generator give the same image; moving the corner moves the boundary in the image."""
    label_map = np.full((SIZE, SIZE), render_layout.MIDDLE_WALL, dtype=np.uint8)
    label_map[:, 20:] = render_layout.RIGHT_WALL
    label_map[26:, :] = render_layout.FLOOR
    moved = label_map.copy()
    moved[:26, 10:20] = render_layout.RIGHT_WALL
    a = render_layout.render(label_map, SIZE, item_rng(0, 0))
    assert np.array_equal(a, render_layout.render(label_map, SIZE, item_rng(0, 0)))
    b = render_layout.render(moved, SIZE, item_rng(0, 0)).astype(int)
    # (a surface's light gradient is centred on the surface, so a changed wall is lit a little differently)
    differ = np.abs(a.astype(int) - b).sum(axis=2) > 60
    assert differ[2:24, 11:19].mean() > 0.8  # the part of the wall that changed surface
    assert not differ[:, :8].any() and not differ[28:, :].any()  # far from the change: the same surfaces


def test_a_layout_is_painted_in_its_maps_own_frame(layout_store, tmp_path) -> None:
    """A 64 x 64 map split at column 40 and row 48 draws at 32 px with its boundaries at x = 20 and y = 24: the
    whole map, scaled, no crop or shift; render.json has no frame for layouts, and a frame is refused."""
    label_map = np.full((64, 64), render_layout.MIDDLE_WALL, dtype=np.uint8)
    label_map[:, 40:] = render_layout.RIGHT_WALL
    label_map[48:, :] = render_layout.FLOOR
    for seed in range(3):
        image = render_layout.render(label_map, SIZE, item_rng(seed, 0)).astype(float)
        wall = np.abs(np.diff(image[:20].mean(axis=0), axis=0)).sum(axis=1)  # across columns, above the floor
        floor = np.abs(np.diff(image[:, :16].mean(axis=1), axis=0)).sum(axis=1)  # across rows, left of the corner
        # the strongest change between neighbouring columns (rows) within a pixel of the boundary (edge shadows
        # and resampling blur it over a pixel or two; a random crop or shift would move it further)
        assert abs(int(wall.argmax()) + 1 - 20) <= 1 and abs(int(floor.argmax()) + 1 - 24) <= 1
    meta = render_store(layout_store, tmp_path / "l", size=SIZE, workers=1, items=2)
    assert meta["frame"] is None and render.read_frame(tmp_path / "l") is None
    with pytest.raises(RenderError, match="takes no frame"):
        render_store(layout_store, tmp_path / "m", size=SIZE, workers=1, frame=(0, 0, 1))


# --------------------------------------------------------------------------------------------------------------
# The command


def test_cli_renders_and_reruns_the_same_render(pose_store, tmp_path, capsys) -> None:
    out = tmp_path / "r"
    args = ["render", str(pose_store), "--out", str(out), "--size", str(SIZE), "--workers", "1", "--no-progress"]
    assert main(args) == 0
    first = _files(out)
    assert main(args) == 0  # the same render again: allowed, same bytes
    assert _files(out) == first
    assert "20 pose images" in capsys.readouterr().out


def test_cli_refuses_a_different_render_without_overwrite(pose_store, tmp_path, capsys) -> None:
    out = tmp_path / "r"
    base = ["render", str(pose_store), "--out", str(out), "--size", str(SIZE), "--workers", "1", "--no-progress"]
    assert main(base) == 0
    before = _files(out)
    assert main([*base, "--seed", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different render" in err and "seed" in err and "Traceback" not in err
    assert _files(out) == before  # left as it was
    assert main([*base, "--seed", "1", "--items", "4", "--overwrite"]) == 0
    assert len(_index(out)) == 4
    assert len(list(out.glob("*.png"))) == 4  # the old render's other images are gone


def test_cli_refuses_an_out_that_is_a_file_or_a_folder_of_other_files(pose_store, tmp_path, capsys) -> None:
    target = tmp_path / "file.png"
    target.write_bytes(b"x")
    assert main(["render", str(pose_store), "--out", str(target), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a file" in err
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine\n")
    assert main(["render", str(pose_store), "--out", str(other), "--no-progress"]) == 2
    assert "not a render" in capsys.readouterr().err
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]


def test_cli_names_the_kinds_that_have_a_renderer(pose_store, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(TRAINER_KINDS, "pose", replace(TRAINER_KINDS["pose"], renderer=None))  # as captions are
    assert main(["render", str(pose_store), "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'pose' has no renderer" in err and "layout_miou" in err
    assert not (tmp_path / "r").exists()


def test_cli_reports_a_missing_store_in_one_line(tmp_path, capsys) -> None:
    assert main(["render", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no store there" in err


def test_bad_arguments_are_refused(pose_store, tmp_path) -> None:
    with pytest.raises(RenderError, match="--size"):
        render_store(pose_store, tmp_path / "r", size=4)
    with pytest.raises(RenderError, match="--seed"):
        render_store(pose_store, tmp_path / "r", seed=-1)
    with pytest.raises(RenderError, match="format"):
        render_store(pose_store, tmp_path / "r", fmt="gif")


def _coco_figure() -> np.ndarray:
    """The stick figure of :func:`_stick_figure` as COCO's 17 keypoints (its 12 limb joints, and a face), in a
    box frame (within 0.5 of the centre)."""
    from labeldist.labels.poses import COCO_JOINTS, MPII_JOINTS

    mpii = dict(zip(MPII_JOINTS, _stick_figure()))
    side = {"left": "l", "right": "r"}
    face = {
        "nose": (0, -0.36),
        "left_eye": (0.02, -0.38),
        "right_eye": (-0.02, -0.38),
        "left_ear": (0.04, -0.37),
        "right_ear": (-0.04, -0.37),
    }
    return np.array(
        [face[j] if j in face else mpii[f"{side[j.split('_')[0]]}_{j.split('_')[1]}"] for j in COCO_JOINTS],
        dtype=np.float64,
    )


def test_a_coco_pose_is_drawn_with_cocos_bones(tmp_path) -> None:
    # the renderer draws the skeleton of the store's joint names: COCO's 19 bones for its 17 keypoints, sides by name
    from labeldist.distances.pose import PoseDistance
    from labeldist.labels.poses import COCO_EDGES, COCO_JOINTS, Poses
    from labeldist.store import StoreReader

    xy = _coco_figure()
    assert np.abs(xy).max() < 0.45
    size, seed, frame = 96, 5, render_pose.BOX_FRAME
    present = np.ones(17, dtype=bool)
    parts = render_pose.figure_parts(COCO_JOINTS)
    assert parts.edges == COCO_EDGES and parts.head is None
    assert {COCO_JOINTS[j] for j in parts.left} == {j for j in COCO_JOINTS if j.startswith("left_")}

    def draw(item):
        return render_pose.render(item, size, np.random.default_rng(seed)).astype(int)

    coco = draw((xy, present, frame, COCO_JOINTS))
    unnamed = draw((xy, present, frame))  # 17 joints named by default (joint_0, ...): no skeleton known, no bones
    nothing = draw((xy, np.zeros(17, dtype=bool), frame))
    joints = _pixels(xy, frame, size)
    long_bones = [(a, b) for a, b in COCO_EDGES if np.linalg.norm(joints[a] - joints[b]) > 8]
    assert len(long_bones) >= 8
    for a, b in long_bones:
        x, y = ((joints[a] + joints[b]) / 2).astype(int)
        assert np.abs(coco[y, x] - nothing[y, x]).sum() > 30, (COCO_JOINTS[a], COCO_JOINTS[b])
        # without the names no bone: at most the halo of a joint disc nearby, after the supersampled image is reduced
        assert np.abs(unnamed[y, x] - nothing[y, x]).sum() <= 10, "no bone without the names"
    # a store of such poses (box-normalised): rendered in the box frame, its items carrying the names
    poses = Poses(
        np.array(["a", "b"]), np.stack([xy, xy * 0.8]), np.ones((2, 17), bool), np.ones((2, 17), bool), COCO_JOINTS
    )
    poses.provenance = {"format": "coco_keypoints", "normalization": "box", "min_joints": 1, "missing_joint": "v = 0"}
    store = _build(tmp_path / "coco", poses, PoseDistance(), "coco", "pose")
    out = tmp_path / "r"
    render_store(store, out, size=size, seed=seed, workers=1)
    meta = json.loads((out / "render.json").read_text())
    assert meta["frame"] == list(render_pose.BOX_FRAME) and meta["frame_source"] == "box default"
    labels = stored_labels(StoreReader(str(store)))
    assert render_pose.item(labels, 0, frame)[3] == COCO_JOINTS
    first = np.asarray(Image.open(out / _index(out)[0]["path"])).astype(int)
    assert np.array_equal(first, draw(render_pose.item(labels, 0, frame))), "the store's render is the drawing above"
    # a joint outside the frame is named by its name
    far = xy.copy()
    far[COCO_JOINTS.index("left_wrist")] = (0.7, 0.0)
    with pytest.raises(RenderError, match=r"joint 9 \(left_wrist\) at \(0\.7, 0\) lies outside the frame"):
        draw((far, present, frame, COCO_JOINTS))


def test_a_rerun_never_writes_through_a_link_planted_beside_an_image(pose_store, tmp_path) -> None:
    """The fifth adversarial run: ``IMG.png.tmp``, planted as a link, had its target replaced by a PNG."""
    out = tmp_path / "r"
    render_store(pose_store, out, size=SIZE, seed=0, workers=1, items=3)
    name = _index(out)[0]["path"]
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (out / name).unlink()
    for planted in (f"{name}.tmp", "index.csv.tmp", "render.json.tmp"):
        (out / planted).symlink_to(victim)
    render_store(pose_store, out, size=SIZE, seed=0, workers=1, items=3)
    assert victim.read_text() == "precious\n"
    assert (out / name).is_file() and not (out / name).is_symlink()
    assert Image.open(out / name).size == (SIZE, SIZE)
