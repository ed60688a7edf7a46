import numpy as np
import pytest

from labeldist.labels.base import LabelError
from labeldist.labels.poses import MPII_JOINTS, read_mpii_csv
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
    with pytest.raises(LabelError, match="header does not list joints"):
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
    with pytest.raises(LabelError, match="latin.csv: not UTF-8"):
        read_mpii_csv(latin)


def test_unknown_normalisation():
    with pytest.raises(ValueError, match="unknown normalization 'pixels'"):
        read_mpii_csv(CSV, normalization="pixels")
