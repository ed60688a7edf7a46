"""Poses in the formats people have: COCO keypoints JSON and any CSV, read into the same poses
and the same stores as the MPII CSV where the data overlap.

The other formats are written here from the shipped MPII rows themselves (same coordinates, joints mapped): a CSV
with every column renamed and another naming rule for the joints' columns, a COCO file whose category has MPII's
16 keypoints, and a COCO file of COCO's own 17 keypoints holding the 12 joints COCO and MPII share. Each is read
and made into a store; the stores' distances are compared with those of the MPII CSV's store.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from labeldist.distances.pose import PoseDistance
from labeldist.labels.base import LabelError
from labeldist.labels.pose_columns import parse_columns
from labeldist.labels.pose_files import read_coco_keypoints, read_mpii_csv, read_pose_csv, read_poses
from labeldist.labels.poses import COCO_JOINTS, MPII_JOINTS, Poses
from labeldist.store import StoreReader
from labeldist.view.stored import stored_labels
from tests.conftest import DATA, write_store

CSV = DATA / "mpii" / "mpii_valid_2958.csv"
N = 240  # rows of the MPII file made into stores
#: MPII's joints that COCO has too, by their COCO name
SHARED = {
    "r_ankle": "right_ankle",
    "r_knee": "right_knee",
    "r_hip": "right_hip",
    "l_hip": "left_hip",
    "l_knee": "left_knee",
    "l_ankle": "left_ankle",
    "r_wrist": "right_wrist",
    "r_elbow": "right_elbow",
    "r_shoulder": "right_shoulder",
    "l_shoulder": "left_shoulder",
    "l_elbow": "left_elbow",
    "l_wrist": "left_wrist",
}
#: MPII's joints as another file names them (RightAnkle, UpperNeck, ...)
CAMEL = {
    j: "".join(w.capitalize() for w in j.replace("r_", "right_").replace("l_", "left_").split("_")) for j in MPII_JOINTS
}
#: the renamed CSV's other columns, by the names the reader knows them by
RENAMED = {"imgname": "image", "person": "pid", "center_x": "cx", "center_y": "cy", "scale": "s", "normalize": "head"}


def mpii_rows(n: int | None = None) -> list[dict[str, str]]:
    with open(CSV, newline="") as f:
        rows = list(csv.DictReader(f))
    return rows[:n] if n else rows


def write_mpii(path: Path, rows: list[dict[str, str]], drop: tuple[str, ...] = ()) -> Path:
    columns = [c for c in rows[0] if not c.startswith(drop) or not drop]
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(columns)
    w.writerows([[r[c] for c in columns] for r in rows])
    path.write_text(out.getvalue())
    return path


def write_renamed_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    """The MPII rows with every column renamed: the person's columns by RENAMED, each joint's as
    ``<CamelName>.X``, ``.Y``, ``.V``, the joints in reverse order and the person's columns last."""
    joints = [(f"{CAMEL[j]}.{a[0].upper()}", f"{j}_{a}") for j in reversed(MPII_JOINTS) for a in ("x", "y", "vis")]
    person = [(RENAMED.get(c, c), c) for c in rows[0] if not c.endswith(("_x", "_y", "_vis")) or c.startswith("center")]
    columns = joints + person
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([new for new, _ in columns])
    w.writerows([[r[old] for _, old in columns] for r in rows])
    path.write_text(out.getvalue())
    return path


RENAMED_OPTIONS = {
    "joints": ",".join(f"{j}={CAMEL[j]}" for j in MPII_JOINTS),
    "columns": ",".join(f"{k}={v}" for k, v in RENAMED.items()),
    "joint_columns": "{joint}.X,{joint}.Y,{joint}.V",
}


def coco_keypoints(row: dict[str, str], joints: tuple[str, ...], source: dict[str, str]) -> list[float]:
    """x, y, v for each of ``joints`` from an MPII row (``source``: joint -> MPII joint); v = 2 visible, 1 annotated
    but occluded, 0 not annotated (MPII's 0, 0, 0) or not an MPII joint."""
    out: list[float] = []
    for j in joints:
        m = source.get(j)
        if m is None:
            out += [0, 0, 0]
            continue
        x, y, vis = float(row[f"{m}_x"]), float(row[f"{m}_y"]), int(row[f"{m}_vis"])
        v = 2 if vis == 1 else 0 if (x == 0 and y == 0) else 1
        out += [x, y, v] if v else [0, 0, 0]
    return out


def write_coco(
    path: Path, rows: list[dict[str, str]], joints: tuple[str, ...], source: dict[str, str], extras: bool = False
) -> Path:
    """A COCO keypoints file of the MPII rows: one image per file name, one person annotation per row (ids 1, 2,
    ... in row order) with the box ``center ± 100 scale`` (so that ``box`` is MPII's ``center_scale``); with
    ``extras``, what a real COCO file also holds and a reader leaves out: a crowd, a person with no keypoint
    labelled, an annotation of another category."""
    names = list(dict.fromkeys(r["imgname"] for r in rows))
    images = [{"id": 100 + n, "file_name": name, "width": 1280, "height": 720} for n, name in enumerate(names)]
    image_id = {name: 100 + n for n, name in enumerate(names)}
    annotations = []
    for n, r in enumerate(rows, start=1):
        cx, cy, s = float(r["center_x"]), float(r["center_y"]), float(r["scale"])
        kp = coco_keypoints(r, joints, source)
        annotations.append(
            {
                "id": n,
                "image_id": image_id[r["imgname"]],
                "category_id": 1,
                "iscrowd": 0,
                "keypoints": kp,
                "num_keypoints": sum(v > 0 for v in kp[2::3]),
                "bbox": [cx - 100 * s, cy - 100 * s, 200 * s, 200 * s],
            }
        )
    categories = [{"id": 1, "name": "person", "supercategory": "person", "keypoints": list(joints), "skeleton": []}]
    if extras:
        empty = [0] * (3 * len(joints))
        annotations += [
            {"id": 9001, "image_id": 100, "category_id": 1, "iscrowd": 1, "keypoints": empty, "bbox": [0, 0, 9, 9]},
            {"id": 9002, "image_id": 100, "category_id": 1, "iscrowd": 0, "keypoints": empty, "bbox": [0, 0, 9, 9]},
            {"id": 9003, "image_id": 100, "category_id": 2, "iscrowd": 0, "bbox": [0, 0, 9, 9]},
        ]
        categories.append({"id": 2, "name": "dog", "supercategory": "animal"})
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


def same_poses(a: Poses, b: Poses, *, ids: bool = True) -> None:
    assert a.joint_names == b.joint_names
    if ids:
        assert a.ids.tolist() == b.ids.tolist()
    np.testing.assert_array_equal(a.xy, b.xy)
    np.testing.assert_array_equal(a.present, b.present)
    np.testing.assert_array_equal(a.visible, b.visible)


# ---------------------------------------------------------------- CSV: any column names, any joints
@pytest.mark.parametrize("how", ["none", "head", "center_scale"])
def test_a_renamed_column_csv_reads_as_the_mpii_csv(tmp_path: Path, how: str) -> None:
    path = write_renamed_csv(tmp_path / "renamed.csv", mpii_rows())
    want = read_mpii_csv(CSV, how)
    got = read_pose_csv(path, how, **RENAMED_OPTIONS)
    same_poses(got, want)
    assert got.sha256() == want.sha256(), "the same labels: a store of either is the same store"
    assert got.provenance["format"] == "csv" and got.provenance["normalization"] == how


def test_the_mpii_csv_read_as_any_csv_is_the_mpii_csv(mpii_poses: Poses) -> None:
    got = read_poses(CSV)  # format auto: a CSV; its joints are MPII's, so in MPII's order, recorded as before
    same_poses(got, mpii_poses)
    assert (
        got.provenance
        == mpii_poses.provenance
        == {"format": "mpii_csv", "normalization": "none", "min_joints": 1, "missing_joint": "x = y = 0 and vis = 0"}
    )
    assert "joint_names" not in got.to_arrays(), "MPII's names are the default: the arrays of every MPII store"


@pytest.mark.parametrize("how", ["none", "center_scale"])
def test_normalize_is_needed_only_by_the_head_normalisation(tmp_path: Path, how: str) -> None:
    rows = mpii_rows(50)
    path = write_mpii(tmp_path / "no_head.csv", [{k: v for k, v in r.items() if k != "normalize"} for r in rows])
    same_poses(read_mpii_csv(path, how), read_mpii_csv(write_mpii(tmp_path / "all.csv", rows), how))
    with pytest.raises(
        LabelError,
        match=r"no_head\.csv: header lacks the columns normalize \(the head size, for "
        r"normalization 'head'\)",
    ):
        read_mpii_csv(path, "head")


def test_every_missing_column_is_named_in_one_error(tmp_path: Path) -> None:
    rows = [
        {k: v for k, v in r.items() if not k.startswith(("r_ankle_", "l_wrist_vis", "imgname", "scale"))}
        for r in mpii_rows(5)
    ]
    path = write_mpii(tmp_path / "poses.csv", rows)
    with pytest.raises(LabelError) as e:
        read_mpii_csv(path, "center_scale")
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"{path}: header lacks the columns ")
    for column in ("r_ankle_x", "r_ankle_y", "r_ankle_vis", "l_wrist_vis", "imgname", "scale"):
        assert re.search(rf"\b{column}\b", message), (column, message)
    assert "joints r_ankle, l_wrist" in message and "the person's scale" in message
    # the same file read as any CSV: its joints are most of MPII's, so it is refused naming what it lacks
    with pytest.raises(LabelError) as e:
        read_poses(path, normalization="center_scale")
    assert re.search(
        r"header lacks the columns r_ankle_x, r_ankle_y, r_ankle_vis, l_wrist_vis \(joints r_ankle, "
        r"l_wrist, of the MPII skeleton's 16 joints, .*\), imgname .*, scale ",
        str(e.value),
    ), e.value


def test_any_joint_set_by_the_naming_rule(tmp_path: Path) -> None:
    path = tmp_path / "hands.csv"
    path.write_text("id,thumb_x,thumb_y,index_x,index_y,wrist_x,wrist_y\na,1,2,3,4,5,6\nb,,,7,8,0,0\n")
    poses = read_poses(path)
    assert poses.joint_names == ("thumb", "index", "wrist") and poses.ids.tolist() == ["a", "b"]
    np.testing.assert_array_equal(poses.present, [[True, True, True], [False, True, True]])
    np.testing.assert_array_equal(poses.visible, poses.present)  # no vis columns: every joint given is visible
    np.testing.assert_array_equal(poses.xy[1], [[0, 0], [7, 8], [0, 0]])
    assert poses.to_arrays()["joint_names"].tolist() == ["thumb", "index", "wrist"]
    assert PoseDistance().block(poses, poses)[0, 1] == pytest.approx(3 / 2 * (np.hypot(4, 4) + np.hypot(5, 6)))
    # fewer joints, renamed, by name; a joint the file lacks is named
    fewer = read_poses(path, joints="wrist,pointer=index")
    assert fewer.joint_names == ("wrist", "pointer")
    np.testing.assert_array_equal(fewer.xy, poses.xy[:, [2, 1]])
    with pytest.raises(LabelError, match=r"hands\.csv: header lacks the columns pinky_x, pinky_y \(joint pinky\)"):
        read_poses(path, joints="wrist,pinky")
    with pytest.raises(LabelError, match=r"hands\.csv, line 3: column 'thumb_x' is empty and 'thumb_y' is not"):
        path.write_text("id,thumb_x,thumb_y\na,1,2\nb,,3\n")
        read_poses(path)


def test_a_csv_of_fewer_mpii_joints_reads_when_they_are_named(tmp_path: Path) -> None:
    rows = [{k: v for k, v in r.items() if not k.startswith(("head_top_", "upper_neck_"))} for r in mpii_rows(30)]
    path = write_mpii(tmp_path / "no_head.csv", rows)
    with pytest.raises(LabelError, match=r"head_top_x.*upper_neck_vis|upper_neck_x.*head_top_vis"):
        read_poses(path)
    names = [j for j in MPII_JOINTS if j not in ("head_top", "upper_neck")]
    got = read_poses(path, joints=",".join(names))
    want = read_mpii_csv(CSV).subset(slice(0, 30))
    keep = [MPII_JOINTS.index(j) for j in names]
    assert got.joint_names == tuple(names)
    np.testing.assert_array_equal(got.xy, want.xy[:, keep])
    np.testing.assert_array_equal(got.present, want.present[:, keep])


def test_column_options_are_checked(tmp_path: Path) -> None:
    path = write_renamed_csv(tmp_path / "renamed.csv", mpii_rows(5))
    with pytest.raises(
        LabelError,
        match=r"header lacks the columns imagename \(the image, the item id with person, "
        r"as columns names it\)",
    ):
        read_pose_csv(
            path, **{**RENAMED_OPTIONS, "columns": RENAMED_OPTIONS["columns"].replace("=image", "=imagename")}
        )
    with pytest.raises(LabelError, match=r"columns: 'centre_x': no column the reader knows"):
        read_pose_csv(path, **{**RENAMED_OPTIONS, "columns": "centre_x=cx"})
    with pytest.raises(LabelError, match=r"joint columns: .* is not X,Y or X,Y,VIS"):
        read_pose_csv(path, **{**RENAMED_OPTIONS, "joint_columns": "{joint}.X"})
    with pytest.raises(LabelError, match=r"joints: the file's joint RightAnkle read more than once"):
        read_pose_csv(path, **{**RENAMED_OPTIONS, "joints": "a=RightAnkle,b=RightAnkle"})


# ---------------------------------------------------------------- COCO keypoints JSON
def test_coco_keypoints_of_mpii_joints_read_as_the_mpii_csv(tmp_path: Path) -> None:
    rows = mpii_rows()
    path = write_coco(tmp_path / "mpii_as_coco.json", rows, MPII_JOINTS, {j: j for j in MPII_JOINTS})
    got, want = read_coco_keypoints(path), read_mpii_csv(CSV)
    same_poses(got, want, ids=False)
    assert got.ids.tolist() == [f"{r['imgname']}#{n}" for n, r in enumerate(rows, start=1)]
    assert got.to_arrays().keys() == want.to_arrays().keys()
    # box normalisation: the box is center ± 100 scale, so (p - box centre) / max(w, h) is MPII's center_scale
    box, cs = read_coco_keypoints(path, "box"), read_mpii_csv(CSV, "center_scale")
    np.testing.assert_allclose(box.xy[box.present], cs.xy[cs.present], rtol=1e-12, atol=1e-12)
    assert box.provenance == {
        "format": "coco_keypoints",
        "normalization": "box",
        "min_joints": 1,
        "missing_joint": "v = 0",
    }


def test_coco_17_keypoints_hold_the_joints_coco_and_mpii_share(tmp_path: Path) -> None:
    rows = mpii_rows()
    path = write_coco(
        tmp_path / "person_keypoints.json", rows, COCO_JOINTS, {c: m for m, c in SHARED.items()}, extras=True
    )
    coco = read_coco_keypoints(path)
    assert coco.joint_names == COCO_JOINTS and len(coco) == len(rows), "the crowd, the empty and the dog left out"
    assert not coco.present[:, :5].any(), "no face keypoint: MPII has none"
    # the shared joints, read by their MPII names, are the MPII CSV's same joints
    joints = ",".join(f"{m}={c}" for m, c in SHARED.items())
    shared = read_coco_keypoints(path, joints=joints)
    same_poses(shared, read_pose_csv(CSV, joints=",".join(SHARED)), ids=False)


def test_coco_errors_name_the_file_and_the_annotation(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_coco(tmp_path / "bad.json", mpii_rows(4), COCO_JOINTS, {c: m for m, c in SHARED.items()})
    data = json.loads(path.read_text())

    def refused(pattern: str, **kw: object) -> None:
        path.write_text(json.dumps(data))
        with pytest.raises(LabelError, match=pattern):
            read_coco_keypoints(path, **kw)

    data["annotations"][2]["keypoints"][-1] = 3
    refused(r"bad\.json, annotations\[2\] \(id 3\): keypoint right_ankle has v = 3: v is 0")
    data["annotations"][2]["keypoints"] = data["annotations"][2]["keypoints"][:-3]
    refused(r"annotations\[2\] \(id 3\): 'keypoints' must be 51 numbers .* got 48 numbers")
    data["annotations"][2]["keypoints"] += [1, 1, 2]
    del data["annotations"][1]["bbox"]
    refused(r"annotations\[1\] \(id 2\): 'bbox' must be \[x, y, w, h\] for normalization 'box'", normalization="box")
    refused(
        r"bad\.json: COCO keypoints have no person scale for normalization 'center_scale': use 'box'",
        normalization="center_scale",
    )
    refused(r"the keypoints \(17 joints: nose, .*\) lack neck", joints="neck")
    for bad_id in (None, True, 2.5, [3], ""):  # each would have made an item id such as "img#None"
        data["annotations"][1]["id"] = bad_id
        refused(r"annotations\[1\] .*: the annotation 'id' must be an integer or a non-empty string")
    data["annotations"][1]["id"] = 2
    for bad_id in ([3], {"a": 1}, None, 2.5):  # the fifth adversarial run: a list was "unhashable type: 'list'"
        data["images"][0]["id"] = bad_id
        refused(r"bad\.json, images\[0\]: the image 'id' must be an integer or a non-empty string")
    data = json.loads(write_coco(path, mpii_rows(4), COCO_JOINTS, {c: m for m, c in SHARED.items()}).read_text())
    data["annotations"][1]["image_id"] = [3]
    refused(r"annotations\[1\] .*: 'image_id' must be an integer or a non-empty string")
    data = json.loads(write_coco(path, mpii_rows(4), COCO_JOINTS, {c: m for m, c in SHARED.items()}).read_text())
    path.write_text('{"annotations": [}')
    with pytest.raises(LabelError, match=r"bad\.json: malformed JSON: .* line 1, column 18"):
        read_coco_keypoints(path)
    data["annotations"][0]["keypoints"] = [0] * 51
    path.write_text(json.dumps(data))
    with caplog.at_level("WARNING"):
        assert len(read_coco_keypoints(path)) == 3
    assert "1 of 4 annotations left out: 0 crowd, 1 with fewer than 1 of the 17 joints read labelled" in caplog.text


def test_columns_map_each_name_once_and_each_file_column_to_one_name() -> None:
    assert parse_columns("center_x=cx, center_y=cy") == {"center_x": "cx", "center_y": "cy"}
    with pytest.raises(LabelError, match="columns: 'center_x' mapped twice"):
        parse_columns("center_x=cx,center_x=cy")
    # two names read from one column would silently make the centre's y its x
    with pytest.raises(LabelError, match="columns: 'center_x' and 'center_y' both read the file's column 'cx'"):
        parse_columns("center_x=cx,center_y=cx")
    with pytest.raises(LabelError, match="both read the file's column 'cx'"):
        parse_columns({"center_x": "cx", "center_y": "cx"})


# ---------------------------------------------------------------- stores: equal where the data overlap
def _store(url: Path, labels: Poses, distance: PoseDistance | None = None) -> StoreReader:
    write_store(url, labels, distance or PoseDistance(), dataset=url.name, k=10, dense=True, block_rows=64)
    return StoreReader(str(url))


def _same_store(a: StoreReader, b: StoreReader) -> None:
    np.testing.assert_array_equal(a.dense_rows(0, a.n_items), b.dense_rows(0, b.n_items))
    for x, y in zip(a.knn(), b.knn()):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("how", ["none", "center_scale"])
def test_stores_of_the_three_formats_are_the_mpii_csvs(tmp_path: Path, how: str) -> None:
    rows = mpii_rows(N)
    mpii = read_mpii_csv(write_mpii(tmp_path / "mpii.csv", rows), how)
    renamed = read_pose_csv(write_renamed_csv(tmp_path / "renamed.csv", rows), how, **RENAMED_OPTIONS)
    coco_file = write_coco(tmp_path / "coco.json", rows, MPII_JOINTS, {j: j for j in MPII_JOINTS}, extras=True)
    coco = read_coco_keypoints(coco_file, "box" if how == "center_scale" else "none")
    a, b, c = (_store(tmp_path / name, labels) for name, labels in (("mpii", mpii), ("csv", renamed), ("coco", coco)))
    _same_store(a, b)
    assert a.manifest["labels_sha256"] == b.manifest["labels_sha256"]
    assert b.ids.tolist() == a.ids.tolist()
    if how == "none":
        _same_store(a, c)  # pixels, bit for bit
    else:  # box = center_scale up to the rounding of center ± 100 scale
        np.testing.assert_allclose(c.dense_rows(0, N), a.dense_rows(0, N), rtol=1e-6, atol=1e-7)
    assert "joint_names" not in c.label_arrays() and stored_labels(c).joint_names == MPII_JOINTS  # MPII's: the default


def test_a_coco_17_store_is_the_mpii_store_of_their_shared_joints(tmp_path: Path) -> None:
    rows = mpii_rows(N)
    coco_file = write_coco(tmp_path / "coco.json", rows, COCO_JOINTS, {c: m for m, c in SHARED.items()})
    mpii12 = read_pose_csv(write_mpii(tmp_path / "mpii.csv", rows), joints=",".join(SHARED))
    shared = read_coco_keypoints(coco_file, joints=",".join(f"{m}={c}" for m, c in SHARED.items()))
    coco17 = read_coco_keypoints(coco_file)
    base = _store(tmp_path / "mpii12", mpii12)
    _same_store(base, _store(tmp_path / "shared", shared))
    # all 17 COCO joints: the 5 face joints are missing everywhere, so the sum over shared joints is the same...
    skip = PoseDistance(missing="skip")
    _same_store(_store(tmp_path / "mpii12-skip", mpii12, skip), _store(tmp_path / "coco17-skip", coco17, skip))
    # ... and the rescaled distance J/|S| sum is 17/12 of the 12-joint one
    full = _store(tmp_path / "coco17", coco17)
    np.testing.assert_allclose(full.dense_rows(0, N), base.dense_rows(0, N) * 17 / 12, rtol=1e-6)
    # the store keeps COCO's joint names, read back as they were
    arrays = full.label_arrays()
    assert arrays["joint_names"].tolist() == list(COCO_JOINTS)
    assert stored_labels(full).joint_names == COCO_JOINTS
    assert base.label_arrays()["joint_names"].tolist() == list(SHARED) and stored_labels(base).joint_names == tuple(
        SHARED
    )


def test_poses_of_other_joints_cannot_be_joined(tmp_path: Path) -> None:
    rows = mpii_rows(20)
    mpii = read_mpii_csv(write_mpii(tmp_path / "mpii.csv", rows))
    coco = read_coco_keypoints(write_coco(tmp_path / "c.json", rows, COCO_JOINTS, {c: m for m, c in SHARED.items()}))
    with pytest.raises(
        LabelError,
        match=r"the new poses' joints \(17 joints: nose, .*\) are not the store's \(16 "
        r"joints: r_ankle, ",
    ):
        mpii.subset(slice(0, 10)).concat(coco.subset(slice(10, 20)))
    joined = mpii.subset(slice(0, 10)).concat(read_pose_csv(tmp_path / "mpii.csv").subset(slice(10, 20)))
    assert joined.sha256() == mpii.sha256()


# ---------------------------------------------------------------- labeldist append across formats
def test_coco_keypoints_are_appended_to_a_csv_store_of_the_same_joints(tmp_path: Path, dask_client) -> None:
    # the format and how a file marks a missing joint are the file's (FILE_PROVENANCE); the joints must be the same
    from labeldist.engine import precompute
    from labeldist.engine.grow import append

    rows = mpii_rows(60)
    old = read_mpii_csv(write_mpii(tmp_path / "old.csv", rows[:40]))
    url = tmp_path / "pose"
    precompute(old, PoseDistance(), url, dataset="t", k=8, block_rows=16, client=dask_client, progress=False)
    coco17 = read_coco_keypoints(
        write_coco(tmp_path / "c17.json", rows[40:], COCO_JOINTS, {c: m for m, c in SHARED.items()})
    )
    with pytest.raises(LabelError, match=r"the new poses' joints \(17 joints: nose, "):
        append(url, coco17, client=dask_client, progress=False)
    new = read_coco_keypoints(write_coco(tmp_path / "more.json", rows[40:], MPII_JOINTS, {j: j for j in MPII_JOINTS}))
    assert new.provenance["format"] != old.provenance["format"]
    result = append(url, new, client=dask_client, progress=False)
    assert result.generation == 2 and result.n_new == 20
    grown = StoreReader(str(url))
    every = read_mpii_csv(write_mpii(tmp_path / "all.csv", rows))
    np.testing.assert_array_equal(grown.dense_rows(0, 60), PoseDistance().block(every, every).astype(np.float32))
    assert stored_labels(grown).joint_names == MPII_JOINTS and "joint_names" not in grown.label_arrays()
