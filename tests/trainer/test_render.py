"""``trainer render`` (issue 11, item 3): images drawn from the labels of real stores, deterministic by seed.

The stores are tiny but real: 20 MPII poses and 10 generated LSUN layouts, laid out, computed and published by
the engine's own functions, read back by the renderer through StoreReader only. Images are 32-64 px.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from labeldist.trainer import render, render_layout, render_pose
from labeldist.trainer.cli import main
from labeldist.trainer.render import RenderError, item_rng, render_store, safe_names
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
SIZE = 32


def _build(url: Path, labels, distance, dataset: str, kind: str) -> Path:
    from labeldist.engine import compute_block
    from labeldist.store import build_manifest, create_store, publish

    manifest = build_manifest(dataset=dataset, kind=kind, params=distance.params(), labels=labels, k=5, dense=True,
                              block_rows=64)  # fmt: skip
    create_store(str(url), manifest, labels)
    compute_block(0, labels=labels, distance=distance, url=str(url), k=5, block_rows=64, dense=True)
    publish(str(url))
    return url


@pytest.fixture(scope="module")
def pose_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 real MPII poses (raw pixels, some with missing joints), dense."""
    from labeldist.distances.pose import PoseDistance
    from labeldist.labels.poses import read_mpii_csv

    labels = read_mpii_csv(REPO / "data" / "mpii" / "mpii_valid_2958.csv").subset(slice(0, 20))
    return _build(tmp_path_factory.mktemp("render") / "mpii20-pose", labels, PoseDistance(), "mpii20", "pose")


@pytest.fixture(scope="module")
def layout_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10 generated LSUN type-5 layouts of 32 x 32."""
    from labeldist.distances.layout import LayoutMIoU
    from labeldist.labels.layouts import generate_layouts

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


@pytest.mark.parametrize("store", ["pose_store", "layout_store"])
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


def _figure_box(xy, present, size: int, seed: int) -> tuple[slice, slice]:
    style = _pose_style(seed, size)
    joints = render_pose.place_pose(xy, present, size, style)[present]
    pad = max(style.limb_width / 2, style.joint_radius) + style.outline + 4  # + the resampling kernel
    lo = np.floor(joints.min(axis=0) - pad).astype(int).clip(0, size)
    hi = np.ceil(joints.max(axis=0) + pad).astype(int).clip(0, size)
    top = joints[render_pose.HEAD_TOP, 1] if present[render_pose.HEAD_TOP] else joints[:, 1].min()
    lo[1] = max(0, min(lo[1], int(top - 2 * pad - size * 0.15)))  # the head disc may reach above the joints
    return slice(lo[1], hi[1]), slice(lo[0], hi[0])


def test_a_pose_image_depends_on_the_pose_and_only_in_the_figure(pose_store) -> None:
    from labeldist.store import StoreReader

    poses = StoreReader(str(pose_store)).labels()
    size, seed = 64, 5
    a, b = render_pose.item(poses, 0), render_pose.item(poses, 1)
    image_a = render_pose.render(a, size, np.random.default_rng(seed))
    image_b = render_pose.render(b, size, np.random.default_rng(seed))
    assert np.array_equal(image_a, render_pose.render(a, size, np.random.default_rng(seed)))
    differ = (image_a != image_b).any(axis=2)
    assert differ.sum() > 0.02 * size * size
    # same generator: same background, style and noise; what differs lies where one of the two figures is
    inside = np.zeros_like(differ)
    for xy, present in (a, b):
        inside[_figure_box(xy, present, size, seed)] = True
    assert not differ[~inside].any()


def _stick_figure() -> np.ndarray:
    """(16, 2) joints of a figure whose left arm lies inside the box of the other joints (rotated by up to 6°
    too), in MPII order."""
    joints = {
        "r_ankle": (-7, 10), "r_knee": (-3, 5), "r_hip": (-1, 0), "l_hip": (1, 0), "l_knee": (3, 5),
        "l_ankle": (7, 10), "pelvis": (0, 0), "thorax": (0, -7), "upper_neck": (0, -8), "head_top": (0, -10),
        "r_wrist": (-7, -7), "r_elbow": (-4, -7), "r_shoulder": (-1.5, -7), "l_shoulder": (1.5, -7),
        "l_elbow": (4.5, -5), "l_wrist": (5.5, -1.5),
    }  # fmt: skip
    from labeldist.labels.poses import MPII_JOINTS

    return np.array([joints[name] for name in MPII_JOINTS], dtype=np.float64)


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

    def draw(points, present):
        return render_pose.render((points, present), size, np.random.default_rng(seed)).astype(int)

    with_arm, without_arm = draw(xy, full), draw(xy_missing, missing)
    nothing = draw(xy, np.zeros(16, dtype=bool))  # the background, style and noise alone
    joints = render_pose.place_pose(xy, full, size, _pose_style(seed, size))
    # the box is the same without the arm (it lies inside), so both figures sit in the same place
    np.testing.assert_allclose(render_pose.place_pose(xy_missing, missing, size, _pose_style(seed, size))[missing],
                               joints[missing])  # fmt: skip
    for a, b in ((shoulder, elbow), (elbow, wrist)):
        for t in (0.6, 0.8):
            x, y = (joints[a] + t * (joints[b] - joints[a])).astype(int)
            assert np.abs(with_arm[y, x] - nothing[y, x]).sum() > 30, "the limb is drawn when its joints are there"
            assert np.array_equal(without_arm[y, x], nothing[y, x]), "no trace of a limb whose joint is missing"
    assert (without_arm != nothing).any(axis=2).sum() > 0.02 * size * size  # the rest of the figure is drawn


def test_the_figure_stays_inside_the_frame() -> None:
    xy = _stick_figure()
    present = np.ones(16, dtype=bool)
    for seed in range(50):
        style = _pose_style(seed, 32)
        joints = render_pose.place_pose(xy, present, 32, style)
        reach = max(style.limb_width / 2, style.joint_radius) + style.outline
        centre, radius = render_pose.head_disc(joints)
        assert (joints - reach >= 0).all() and (joints + reach <= 32).all()
        assert (centre - radius - style.outline >= 0).all() and (centre + radius + style.outline <= 32).all()
        # a similarity transform: distances between joints keep their ratios
        d = np.linalg.norm(joints[:, None] - joints[None], axis=-1)
        d0 = np.linalg.norm(xy[:, None] - xy[None], axis=-1)
        np.testing.assert_allclose(d[d0 > 0] / d0[d0 > 0], d[0, 5] / d0[0, 5], rtol=1e-9)
        assert abs(style.angle) <= math.radians(6)


def test_the_bones_are_the_services() -> None:
    from labeldist.api.labelview import MPII_EDGES

    assert render_pose.MPII_EDGES == MPII_EDGES


# --------------------------------------------------------------------------------------------------------------
# Layouts: each surface in its own colour


def test_each_surface_of_a_room_has_its_own_colour(layout_store) -> None:
    from scipy.ndimage import binary_erosion

    from labeldist.store import StoreReader

    layouts = StoreReader(str(layout_store)).labels()
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
    monkeypatch.delitem(render.RENDERERS, "pose")  # as a caption or sentence store would be
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
