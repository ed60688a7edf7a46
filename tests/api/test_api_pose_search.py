"""``POST /v1/stores/{store}/search`` by a pose in image pixels on a normalised store.

A store normalised ``center_scale``, ``head`` or ``box`` takes a raw pose with what its normalisation needs of the
person (``{"joints": ..., "center": [x, y], "scale": s}``, ``"head": h``, ``"box": [x, y, w, h]``) and normalises it
as its poses were: the answer is that of the pose normalised beforehand, and an item's own raw pose finds it at
distance 0. Raw pixels sent as a plain list, which used to be compared as they were (the nearest item at
d = 11,657 where distances are about 0.3), are answered 422 saying what is needed.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient

from labeldist.api.main import create_app
from labeldist.distances.pose import PoseDistance
from labeldist.labels.pose_files import read_coco_keypoints, read_mpii_csv
from labeldist.labels.poses import COCO_JOINTS, MPII_JOINTS, Poses
from tests.api.api_helpers import MPII_CSV, make_settings
from tests.conftest import write_store
from tests.labels.test_pose_formats import SHARED, mpii_rows, write_coco

N, K = 150, 5


def first(poses: Poses) -> Poses:
    """The first N poses, with the reader's provenance (the normalisation the store records)."""
    out = poses.subset(slice(0, N))
    out.provenance = poses.provenance
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("pose-search")
    coco = write_coco(root / "coco.json", mpii_rows(N), COCO_JOINTS, {c: m for m, c in SHARED.items()})
    made = {
        "px": first(read_mpii_csv(MPII_CSV)),
        "cs": first(read_mpii_csv(MPII_CSV, "center_scale")),
        "head": first(read_mpii_csv(MPII_CSV, "head")),
        "box": read_coco_keypoints(coco, "box"),
    }
    for name, labels in made.items():
        write_store(root / "stores" / name, labels, PoseDistance(), dataset=name, k=K, dense=False, block_rows=64)
    return {**made, "root": root}


@pytest.fixture(scope="module")
def client(stores: dict) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(stores=stores["root"] / "stores"))) as c:
        yield c


def raw(i: int) -> tuple[list, dict[str, float]]:
    """Row ``i`` of the MPII file: its 16 joints in image pixels (null where not annotated) and its person."""
    with open(MPII_CSV, newline="") as f:
        row = list(csv.DictReader(f))[i]
    joints = [
        None
        if (row[f"{j}_x"], row[f"{j}_y"], row[f"{j}_vis"]) == ("0", "0", "0")
        else [float(row[f"{j}_x"]), float(row[f"{j}_y"])]
        for j in MPII_JOINTS
    ]
    return joints, {k: float(row[k]) for k in ("center_x", "center_y", "scale", "normalize")}


def search(client: TestClient, store: str, label: object, k: int = K):
    return client.post(f"/v1/stores/{store}/search", json={"label": label, "k": k})


def detail(response) -> str:
    assert response.status_code == 422, response.text
    body = response.json()["detail"]
    assert body[0]["loc"] == ["body", "label"], body
    return body[0]["msg"]


def as_list(poses: Poses, i: int) -> list:
    return poses.to_json(i)


@pytest.mark.parametrize("i", [0, 7, 42])
def test_a_raw_pose_with_its_centre_and_scale_is_normalised_as_the_store_did(client, stores, i) -> None:
    joints, p = raw(i)
    for store, person in (
        ("cs", {"center": [p["center_x"], p["center_y"]], "scale": p["scale"]}),
        ("head", {"center": [p["center_x"], p["center_y"]], "head": p["normalize"]}),
    ):
        answer = search(client, store, {"joints": joints, **person})
        assert answer.status_code == 200, answer.text
        assert answer.json() == search(client, store, as_list(stores[store], i)).json(), "as if normalised first"
        assert answer.json()["indices"][0] == i and answer.json()["distances"][0] == 0.0, "its own pose, first"
        # {"joints": ...} alone: the joints in the store's frame, as a list's
        assert search(client, store, {"joints": as_list(stores[store], i)}).json() == answer.json()


def test_a_raw_pose_with_its_box_on_a_box_store(client, stores) -> None:
    import json

    data = json.loads((stores["root"] / "coco.json").read_text())
    ann = data["annotations"][11]
    kp = np.array(ann["keypoints"], dtype=float).reshape(-1, 3)
    joints = [[x, y] if v > 0 else None for x, y, v in kp]
    answer = search(client, "box", {"joints": joints, "box": ann["bbox"]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["indices"][0] == 11 and answer.json()["distances"][0] == 0.0
    assert answer.json() == search(client, "box", as_list(stores["box"], 11)).json()
    # joints by name: those left out are not annotated
    named = {name: xy for name, xy in zip(COCO_JOINTS, joints) if xy is not None}
    assert search(client, "box", {"joints": named, "box": ann["bbox"]}).json() == answer.json()


def test_raw_pixels_on_a_normalised_store_are_refused_saying_what_is_needed(client) -> None:
    joints, _ = raw(0)
    msg = detail(search(client, "cs", joints))
    assert "far outside the store's poses, normalised 'center_scale' ((p - center) / (200 scale)" in msg
    assert 'image pixels? Send {"joints": [[x, y] or null, ...], "center": [x, y], "scale": s}' in msg
    assert '"head": h' in detail(search(client, "head", joints))
    assert '"box": [x, y, w, h]' in detail(search(client, "box", [None] * 5 + [[620.0, 394.0]] + [None] * 11))
    # the same pixels on a store of pixels are a pose like any other
    assert search(client, "px", joints).json()["distances"][0] == 0.0


def test_the_person_fields_must_be_those_the_normalisation_takes(client) -> None:
    joints, p = raw(3)
    centre = [p["center_x"], p["center_y"]]
    want = 'a pose in image pixels comes with {"joints": ..., "center": [x, y], "scale": s}; it lacks \'scale\''
    assert want in detail(search(client, "cs", {"joints": joints, "center": centre}))
    assert "it does not take 'head'" in detail(
        search(client, "cs", {"joints": joints, "center": centre, "scale": 2, "head": 40})
    )
    assert "the pose has the field 'centre'" in detail(search(client, "cs", {"joints": joints, "centre": centre}))
    assert "image pixels (normalization 'none'): give the joints as they are, without 'center', 'scale'" in detail(
        search(client, "px", {"joints": joints, "center": centre, "scale": 2})
    )
    assert "'scale' must be positive, got 0" in detail(
        search(client, "cs", {"joints": joints, "center": centre, "scale": 0})
    )
    assert "'center' must be [x, y], got 3" in detail(search(client, "cs", {"joints": joints, "center": 3, "scale": 1}))
    assert "the pose has no 'joints': a pose in image pixels is {\"joints\"" in detail(
        search(client, "cs", {"center": centre, "scale": 2})
    )
    # a pose normalised with a scale in the wrong unit (pixels, not MPII's 200-pixel units) lies far out too
    assert "check the person's fields and their units" in detail(
        search(client, "cs", {"joints": joints, "center": centre, "scale": p["scale"] / 400})
    )
