import re

import numpy as np
import pytest

from labeldist.labels.base import LabelError
from labeldist.labels.pose_files import read_mpii_csv
from labeldist.labels.poses import MPII_JOINTS
from tests.conftest import DATA

CSV = DATA / "mpii" / "mpii_valid_2958.csv"


def _rows():
    return CSV.read_text().splitlines()


def _write(tmp_path, lines):
    path = tmp_path / "poses.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_reads_every_shipped_pose(mpii_poses):
    assert len(mpii_poses) == 2958
    assert mpii_poses.xy.shape == (2958, len(MPII_JOINTS), 2)
    assert mpii_poses.ids[0] == "005808361.jpg#0"
    # Ids are unique although an image can hold several people.
    assert len(set(mpii_poses.ids)) == 2958


def test_missing_joint_is_zero_zero_not_visible(mpii_poses):
    # Line 4 of the file (third pose) has r_ankle and l_ankle stored as 0,0,0: missing.
    p = mpii_poses.subset(np.array([2]))
    assert not p.present[0, MPII_JOINTS.index("r_ankle")]
    assert not p.present[0, MPII_JOINTS.index("l_ankle")]
    # ... and l_shoulder is annotated but occluded (vis 0 with coordinates): present, not visible.
    j = MPII_JOINTS.index("r_elbow")
    assert p.present[0, j] and not p.visible[0, j]


def test_head_normalisation_is_centred_and_scaled():
    raw = read_mpii_csv(CSV)
    head = read_mpii_csv(CSV, normalization="head")
    fields = _rows()[1].split(",")
    center = np.array([float(fields[4]), float(fields[5])])
    size = float(fields[7])
    np.testing.assert_allclose(head.xy[0], (raw.xy[0] - center) / size)
    cs = read_mpii_csv(CSV, normalization="center_scale")
    np.testing.assert_allclose(cs.xy[0], (raw.xy[0] - center) / (200 * float(fields[6])))


def test_malformed_row_names_file_and_line(tmp_path):
    lines = _rows()[:4]
    lines[2] = ",".join(lines[2].split(",")[:-1])  # a field short
    with pytest.raises(LabelError, match=r"poses\.csv, line 3: 56 fields, expected 57"):
        read_mpii_csv(_write(tmp_path, lines))


def test_nan_coordinate_is_refused(tmp_path):
    lines = _rows()[:4]
    fields = lines[3].split(",")
    fields[10] = "nan"
    lines[3] = ",".join(fields)
    with pytest.raises(LabelError, match=r"line 4: column 'r_ankle_y' is not finite"):
        read_mpii_csv(_write(tmp_path, lines))


def test_non_numeric_value_is_refused(tmp_path):
    lines = _rows()[:3]
    lines[1] = lines[1].replace(",804,711,1,", ",804,abc,1,", 1)
    with pytest.raises(LabelError, match=r"line 2: column 'r_ankle_y' is not a number: 'abc'"):
        read_mpii_csv(_write(tmp_path, lines))


def test_wrong_number_of_joints_in_header(tmp_path):
    lines = _rows()[:3]
    header = lines[0].split(",")
    lines[0] = ",".join(header[:-1] + ["l_wrist_visible"])
    with pytest.raises(LabelError, match=r"header lacks the columns l_wrist_vis \(joint l_wrist\)"):
        read_mpii_csv(_write(tmp_path, lines))


def test_vis_flag_must_be_binary(tmp_path):
    lines = _rows()[:3]
    fields = lines[1].split(",")
    fields[11] = "2"
    lines[1] = ",".join(fields)
    with pytest.raises(LabelError, match=r"line 2: a \*_vis value is not 0 or 1"):
        read_mpii_csv(_write(tmp_path, lines))


def test_too_few_joints(tmp_path):
    with pytest.raises(LabelError, match="fewer than 15 joints"):
        read_mpii_csv(CSV, min_joints=15)


def test_empty_and_non_utf8_files(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(LabelError, match="empty.csv: empty file"):
        read_mpii_csv(empty)
    latin = tmp_path / "latin.csv"
    latin.write_bytes(_rows()[0].encode() + b"\n\xe9\xff\n")
    with pytest.raises(LabelError, match="latin.csv, line 2: not UTF-8 .byte 0xe9"):
        read_mpii_csv(latin)


def test_unknown_normalisation():
    with pytest.raises(ValueError, match="unknown normalization 'pixels'"):
        read_mpii_csv(CSV, normalization="pixels")


def _drop_columns(lines, prefix):
    """``lines`` of a CSV without the columns whose name starts with ``prefix``."""
    rows = [line.split(",") for line in lines]
    keep = [n for n, name in enumerate(rows[0]) if not name.startswith(prefix)]
    return [",".join(row[n] for n in keep) for row in rows]


def test_missing_joint_columns_are_named(tmp_path):
    # A CSV without r_ankle_* was read as 15-joint poses, without a word.
    with pytest.raises(LabelError, match=r"poses\.csv: .*r_ankle_x, r_ankle_y, r_ankle_vis"):
        read_mpii_csv(_write(tmp_path, _drop_columns(_rows()[:4], "r_ankle_")))
    with pytest.raises(LabelError, match=r"l_wrist_vis"):
        read_mpii_csv(_write(tmp_path, _drop_columns(_rows()[:4], "l_wrist_vis")))


def test_unknown_joint_columns_are_named(tmp_path):
    lines = _rows()[:4]
    lines = [lines[0] + ",nose_x,nose_y,nose_vis"] + [line + ",10,20,1" for line in lines[1:]]
    with pytest.raises(LabelError, match=r"nose_x, nose_y, nose_vis"):
        read_mpii_csv(_write(tmp_path, lines))


def test_joint_columns_are_read_by_name_not_position(tmp_path):
    # the same poses with the r_ankle and l_wrist triples swapped in place: joints keep their MPII order
    lines = _rows()[:6]
    header = lines[0].split(",")
    a, b = header.index("r_ankle_x"), header.index("l_wrist_x")
    swapped = []
    for line in lines:
        f = line.split(",")
        f[a : a + 3], f[b : b + 3] = f[b : b + 3], f[a : a + 3]
        swapped.append(",".join(f))
    want, got = read_mpii_csv(_write(tmp_path, lines)), read_mpii_csv(_write(tmp_path, swapped))
    assert got.n_joints == len(MPII_JOINTS)
    np.testing.assert_array_equal(got.xy, want.xy)
    np.testing.assert_array_equal(got.present, want.present)
    np.testing.assert_array_equal(got.visible, want.visible)


def test_a_folder_or_a_missing_file_is_a_label_error_naming_it(tmp_path):
    with pytest.raises(LabelError, match=rf"^{re.escape(str(tmp_path))}: cannot read: "):
        read_mpii_csv(tmp_path)
    with pytest.raises(LabelError, match=r"nowhere\.csv: cannot read: No such file"):
        read_mpii_csv(tmp_path / "nowhere.csv")
