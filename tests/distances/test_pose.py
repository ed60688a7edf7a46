import numpy as np
import pytest

from labeldist.distances.pose import PoseDistance
from labeldist.labels.poses import Poses
from labeldist.testing import DistanceSuite


@pytest.fixture
def labels(mpii_poses):
    # Real MPII poses, including ones with missing joints (the first rows with a (0, 0, 0) joint).
    missing_rows = np.flatnonzero(~mpii_poses.present.all(axis=1))[:10]
    return mpii_poses.subset(np.unique(np.concatenate([np.arange(15), missing_rows])))


class TestPoseEuclidean(DistanceSuite):
    @pytest.fixture
    def distance(self):
        return PoseDistance()


class TestPoseSquaredSkip(DistanceSuite):
    @pytest.fixture
    def distance(self):
        return PoseDistance(metric="sqeuclidean", missing="skip")


def _two_poses(xy_b, present_b):
    xy = np.array([[[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]], xy_b], dtype=float)
    present = np.array([[True, True, True], present_b])
    return Poses(np.array(["a", "b"]), xy, present, present)


def test_hand_computed_sum_of_joint_distances():
    p = _two_poses([[3.0, 4.0], [0.0, 1.0], [6.0, 8.0]], [True, True, True])
    assert PoseDistance().block(p, p)[0, 1] == pytest.approx(5 + 1 + 10)
    assert PoseDistance(metric="sqeuclidean").block(p, p)[0, 1] == pytest.approx(25 + 1 + 100)


def test_missing_joint_rules():
    # Joint 2 is missing in pose b: only joints 0 and 1 are compared.
    p = _two_poses([[3.0, 4.0], [0.0, 1.0], [0.0, 0.0]], [True, True, False])
    assert PoseDistance(missing="skip").block(p, p)[0, 1] == pytest.approx(6.0)
    assert PoseDistance(missing="rescale").block(p, p)[0, 1] == pytest.approx(6.0 * 3 / 2)


def test_no_shared_joint_is_infinitely_far_under_rescale():
    xy = np.zeros((2, 2, 2))
    present = np.array([[True, False], [False, True]])
    p = Poses(np.array(["a", "b"]), xy, present, present)
    assert np.isinf(PoseDistance().block(p, p)[0, 1])
    assert PoseDistance().reference(p, 0, p, 1) == float("inf")
    assert PoseDistance(missing="skip").block(p, p)[0, 1] == 0.0


def test_unknown_choices_fail_loudly():
    with pytest.raises(ValueError, match="unknown metric 'manhattan'; known: euclidean, sqeuclidean"):
        PoseDistance(metric="manhattan")
    with pytest.raises(ValueError, match="unknown missing-joint rule"):
        PoseDistance(missing="zero")


def test_different_joint_counts_are_refused(mpii_poses):
    other = Poses(np.array(["x"]), np.zeros((1, 14, 2)), np.ones((1, 14), bool), np.ones((1, 14), bool))
    with pytest.raises(ValueError, match="16 and 14 joints"):
        PoseDistance().block(mpii_poses.subset(slice(0, 2)), other)
