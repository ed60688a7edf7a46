"""The ceiling of a rendered test set: the nDCG and MLD of a perfect model of the picture.

Real MPII poses (normalised by centre and scale, as RESULTS.md's stores), the real pose distance, and checks
written out here: the oracle's nDCG and MLD by loops over queries and ranks, the jittered pose distance by a loop
over joints.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from labeldist.trainer.experiments import ceiling as ceil

REPO = Path(__file__).resolve().parents[2]
MPII = REPO / "data" / "mpii" / "mpii_valid_2958.csv"
FRAME = (0.0, 0.0, 1.1)


@pytest.fixture(scope="module")
def poses():
    """200 shipped poses, center_scale: 40 queries (every fifth) and 160 gallery."""
    from labeldist.labels.pose_files import read_mpii_csv

    return read_mpii_csv(MPII, normalization="center_scale").subset(slice(0, 200))


QUERIES = np.arange(0, 200, 5)
GALLERY = np.setdiff1d(np.arange(200), QUERIES)


def _distance():
    from labeldist.distances.pose import PoseDistance

    return PoseDistance()


def _slow_pose_distance(p: np.ndarray, pp: np.ndarray, q: np.ndarray, qp: np.ndarray) -> float:
    """Thin-slicing's pose distance, rescaled to J / |S| over the shared joints, one joint at a time."""
    total, shared = 0.0, 0
    for j in range(len(p)):
        if pp[j] and qp[j]:
            total += math.hypot(p[j][0] - q[j][0], p[j][1] - q[j][1])
            shared += 1
    return total * len(p) / shared if shared else math.inf


def _slow_scores(true: np.ndarray, ranking_by: np.ndarray, k_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Kim et al.'s nDCG@K (gain 1 / (1 + D), discount 1 / log2(i + 1), normalised by the sorted gallery's) and
    MLD@K of the ranking by ``ranking_by`` (ties by position), written out with loops."""
    ndcg, mld = np.zeros(k_max), np.zeros(k_max)
    for q in range(true.shape[0]):
        order = sorted(range(true.shape[1]), key=lambda g: (ranking_by[q, g], g))
        best = sorted(true[q])
        for k in range(1, k_max + 1):
            dcg = sum(1 / (1 + true[q, order[i]]) / math.log2(i + 2) for i in range(k))
            ideal = sum(1 / (1 + best[i]) / math.log2(i + 2) for i in range(k))
            ndcg[k - 1] += dcg / ideal / true.shape[0]
            mld[k - 1] += sum(true[q, order[i]] for i in range(k)) / k / true.shape[0]
    return ndcg, mld


def test_with_no_jitter_the_ceiling_is_the_oracle(poses) -> None:
    result = ceil.ceiling(poses, _distance(), QUERIES, GALLERY, k_max=20)
    true = _distance().block(poses.subset(QUERIES), poses.subset(GALLERY))
    ndcg, mld = _slow_scores(true, true, 20)
    np.testing.assert_allclose(ndcg, 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(result["ndcg"], ndcg, rtol=0, atol=1e-12)
    np.testing.assert_allclose(result["mean_label_distance"], mld, rtol=1e-12)
    np.testing.assert_allclose(result["oracle_mean_label_distance"], mld, rtol=1e-12)
    assert result["params"]["draws"] == 1 and "oracle" in result["note"]
    assert result["summary"]["ndcg@10"] == 1.0 and list(result["k"]) == list(range(1, 21))
    # a frame, a seed or draws change nothing without a jitter
    again = ceil.ceiling(poses, _distance(), QUERIES, GALLERY, k_max=20, frame=FRAME, draws=3, seed=9)
    np.testing.assert_array_equal(again["ndcg"], result["ndcg"])


def test_the_jittered_labels_and_their_distance_match_a_loop_over_joints(poses) -> None:
    scale, shift, seed = 0.05, 0.03, 4
    jittered = ceil.jitter_poses(poses.xy, scale=scale, shift=shift, frame=FRAME, rng=np.random.default_rng(seed))
    rng = np.random.default_rng(seed)  # the draws, in jitter_poses' documented order: N scales, then N x 2 shifts
    s = rng.uniform(1 - scale, 1 + scale, size=len(poses))
    t = rng.uniform(-shift, shift, size=(len(poses), 2)) * 2 * FRAME[2]
    assert (np.abs(s - 1) <= scale).all() and (np.abs(t) <= shift * 2.2).all() and np.ptp(s) > scale
    block = _distance().block(
        type(poses)(poses.ids, jittered, poses.present, poses.visible).subset(np.arange(5)),
        type(poses)(poses.ids, jittered, poses.present, poses.visible).subset(np.arange(100, 110)),
    )
    for a in range(5):
        for b in range(10):
            g = 100 + b
            pa = [
                (FRAME[0] + s[a] * (x - FRAME[0]) + t[a, 0], FRAME[1] + s[a] * (y - FRAME[1]) + t[a, 1])
                for x, y in poses.xy[a]
            ]
            pb = [
                (FRAME[0] + s[g] * (x - FRAME[0]) + t[g, 0], FRAME[1] + s[g] * (y - FRAME[1]) + t[g, 1])
                for x, y in poses.xy[g]
            ]
            np.testing.assert_allclose(jittered[a], pa, rtol=1e-12, atol=1e-12)
            expected = _slow_pose_distance(pa, poses.present[a], pb, poses.present[g])
            assert block[a, b] == pytest.approx(expected, rel=1e-12)


def test_one_draw_ranks_by_the_jittered_distance_and_scores_by_the_true_one(poses) -> None:
    """ceiling with one draw of seed (s, 0) = the loops' nDCG and MLD of the ranking by the loop distances."""
    from labeldist.labels.poses import Poses

    q, g = QUERIES[:6], GALLERY[:30]
    seed = 3
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0]))
    jittered = ceil.jitter_poses(poses.xy, scale=0.05, shift=0.03, frame=FRAME, rng=rng)
    view = Poses(poses.ids, jittered, poses.present, poses.visible)
    slow = np.array(
        [[_slow_pose_distance(view.xy[a], view.present[a], view.xy[b], view.present[b]) for b in g] for a in q]
    )
    true = np.array(
        [[_slow_pose_distance(poses.xy[a], poses.present[a], poses.xy[b], poses.present[b]) for b in g] for a in q]
    )
    ndcg, mld = _slow_scores(true, slow, 10)
    result = ceil.ceiling(poses, _distance(), q, g, scale=0.05, shift=0.03, frame=FRAME, draws=1, seed=seed, k_max=10)
    np.testing.assert_allclose(result["ndcg"], ndcg, rtol=1e-9)
    np.testing.assert_allclose(result["mean_label_distance"], mld, rtol=1e-9)
    assert (result["ndcg_std"] == 0).all()


def test_a_mirror_blind_model_ranks_by_the_nearer_of_a_pose_and_its_mirror(poses) -> None:
    """The old augmentation's per-image flip: the loops rank each gallery pose by the smaller of its distance and
    its mirror image's (x -> 2 cx - x, joints keeping their names), scored by the true distance."""
    q, g = QUERIES[:6], GALLERY[:30]
    mirrored = poses.xy.copy()
    mirrored[..., 0] = 2 * FRAME[0] - mirrored[..., 0]
    true = np.array(
        [[_slow_pose_distance(poses.xy[a], poses.present[a], poses.xy[b], poses.present[b]) for b in g] for a in q]
    )
    blind = np.array(
        [
            [
                min(true[i, j], _slow_pose_distance(poses.xy[a], poses.present[a], mirrored[b], poses.present[b]))
                for j, b in enumerate(g)
            ]
            for i, a in enumerate(q)
        ]
    )
    assert (blind < true).any()  # some poses are nearer someone's mirror image: the flip changes the ranking
    ndcg, mld = _slow_scores(true, blind, 10)
    result = ceil.ceiling(poses, _distance(), q, g, frame=FRAME, mirror=True, k_max=10)
    np.testing.assert_allclose(result["ndcg"], ndcg, rtol=1e-9)
    np.testing.assert_allclose(result["mean_label_distance"], mld, rtol=1e-9)
    assert result["ndcg"][9] < 1.0 and "per-image flip" in result["note"]


def test_with_jitter_the_ceiling_is_below_one_and_falls_as_the_jitter_grows(poses) -> None:
    results = [
        ceil.ceiling(poses, _distance(), QUERIES, GALLERY, scale=scale, shift=shift, frame=FRAME, k_max=20)
        for scale, shift in ((0.02, 0.01), (0.05, 0.03), (0.1, 0.06), (0.2, 0.12))
    ]
    ndcg10 = [r["summary"]["ndcg@10"] for r in results]
    mld10 = [r["summary"]["mean_label_distance@10"] for r in results]
    assert all(x < 1 for x in ndcg10) and ndcg10 == sorted(ndcg10, reverse=True), ndcg10
    assert mld10 == sorted(mld10) and mld10[0] > results[0]["oracle_mean_label_distance"][9]
    assert all((r["ndcg"] < 1).all() for r in results)
    assert results[1]["params"] == {
        "scale": 0.05,
        "shift": 0.03,
        "view": "label",
        "mirror": False,
        "draws": 5,
        "seed": 0,
        "frame": list(FRAME),
        "queries": 40,
        "gallery": 160,
    }
    # the draws differ, and their mean is what is reported
    assert (results[1]["ndcg_std"] > 0).any()
    # a jitter needs the frame: its centre and side
    with pytest.raises(ValueError, match="frame"):
        ceil.ceiling(poses, _distance(), QUERIES, GALLERY, scale=0.05, shift=0.03)


def test_the_bounding_box_view_loses_position_and_size(poses) -> None:
    xy = poses.xy[:10]
    present = poses.present[:10]
    moved = 3.0 * xy + np.array([5.0, -2.0])
    np.testing.assert_allclose(ceil.bbox_normalise(moved, present)[present], ceil.bbox_normalise(xy, present)[present])
    box = ceil.bbox_normalise(xy, present)
    lo = np.where(present[..., None], box, np.inf).min(axis=1)
    hi = np.where(present[..., None], box, -np.inf).max(axis=1)
    np.testing.assert_allclose((hi - lo).max(axis=1), 1.0)
    np.testing.assert_allclose(lo + hi, 0.0, atol=1e-12)
    result = ceil.ceiling(poses, _distance(), QUERIES, GALLERY, view="bbox", k_max=20)
    assert result["summary"]["ndcg@10"] < 0.95 and "bounding box" in result["note"]
    with pytest.raises(ValueError, match="no jitter"):
        ceil.ceiling(poses, _distance(), QUERIES, GALLERY, view="bbox", scale=0.05, frame=FRAME)


def test_a_layout_ceiling_is_one_by_construction() -> None:
    from labeldist.distances.layout import LayoutMIoU
    from labeldist.labels.lsun_rooms import generate_layouts

    layouts = generate_layouts(30, height=16, width=16, seed=0)
    result = ceil.ceiling(layouts, LayoutMIoU(), np.arange(6), np.arange(6, 30), k_max=10)
    np.testing.assert_allclose(result["ndcg"], 1.0, atol=1e-12)
    assert "1 by construction" in result["note"]
    with pytest.raises(ValueError, match="no jitter"):
        ceil.ceiling(layouts, LayoutMIoU(), np.arange(6), np.arange(6, 30), scale=0.05, frame=(0, 0, 1))
    with pytest.raises(ValueError, match="pose ceiling"):
        ceil.ceiling(layouts, LayoutMIoU(), np.arange(6), np.arange(6, 30), mirror=True)


def test_a_store_ceiling_is_the_ceiling_of_its_labels(pose_store) -> None:
    """The 300-pose store of the trainer tests: its own labels, distance and frame, a split dict or split.json."""
    from labeldist.labels.pose_files import read_mpii_csv
    from labeldist.store import StoreReader
    from labeldist.view.stored import stored_distance

    store = pose_store / "mpii300-pose"
    split = {"queries": list(range(0, 300, 6)), "gallery": [i for i in range(300) if i % 6]}
    got = ceil.store_ceiling(store, split, scale=0.05, shift=0.03, frame=FRAME, draws=2, k_max=10)
    labels = read_mpii_csv(MPII, normalization="center_scale").subset(slice(0, 300))
    want = ceil.ceiling(
        labels,
        stored_distance(StoreReader(str(store))),
        split["queries"],
        split["gallery"],
        scale=0.05,
        shift=0.03,
        frame=FRAME,
        draws=2,
        k_max=10,
    )
    np.testing.assert_allclose(got["ndcg"], want["ndcg"], rtol=1e-6)
    assert got["summary"] == pytest.approx(want["summary"])


def test_the_command_prints_the_three_ceilings(tmp_path, capsys) -> None:
    lines = MPII.read_text(encoding="utf-8").splitlines()[:301]
    small = tmp_path / "mpii300.csv"
    small.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert ceil.main(["--labels", str(small), "--draws", "2", "--k", "1", "10", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out) == 5
    jitter, oracle, box, box_flip, jitter_flip = out.values()
    assert oracle["ndcg@10"] == 1.0 and jitter["ndcg@10"] < 1.0 and box["ndcg@10"] < 1.0
    assert box_flip["params"]["mirror"] and jitter_flip["params"]["mirror"] and not jitter["params"]["mirror"]
    assert jitter["params"]["frame"] == list(FRAME) and jitter["params"]["draws"] == 2
    assert (jitter["params"]["queries"], jitter["params"]["gallery"]) == (12, 48)  # 300 -> 60 test -> 12 queries
    assert ceil.main(["--labels", str(small), "--draws", "1", "--k", "10"]) == 0
    table = capsys.readouterr().out
    assert "| label frame, no jitter (oracle) | 1.000 |" in table and "nDCG@10" in table


def test_the_command_takes_a_store_and_its_renders_frame(pose_store, tmp_path, capsys) -> None:
    """A store without center_scale in its manifest (this one's labels were subset, which drops the provenance):
    its render's frame is its own extent, and --frame-from hands that frame to the ceiling."""
    from labeldist.trainer.render.base import read_frame, render_store

    store = pose_store / "mpii300-pose"
    render_store(store, tmp_path / "r", size=32, items=1, workers=1)
    frame = read_frame(tmp_path / "r")
    assert frame != FRAME
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"queries": list(range(0, 60, 6)), "gallery": [i for i in range(60) if i % 6]}))
    args = ["--store", str(store), "--split", str(split), "--draws", "1", "--k", "5", "--json"]
    assert ceil.main([*args, "--frame-from", str(tmp_path / "r")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["params"]["frame"] for r in out.values()] == [list(frame)] * 5
    assert list(out.values())[1]["ndcg@5"] == 1.0
