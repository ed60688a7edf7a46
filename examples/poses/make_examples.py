"""Write the two example pose files of this folder from the first 40 people of the shipped MPII CSV (docs/guide.md,
"Bring your own poses"): the same coordinates in other formats.

- ``person_keypoints.json``: COCO keypoints, COCO's 17 joints. The 12 MPII and COCO share (ankles, knees, hips,
  wrists, elbows, shoulders) are MPII's annotations (v = 2 visible, 1 occluded, 0 not annotated); MPII has no
  face keypoints, so nose, eyes and ears are v = 0. Each person's ``bbox`` is the box of its labelled keypoints.
  As in a real COCO file, a crowd annotation and a person with no labelled keypoint are there too (left out).
- ``poses.csv``: MPII's 16 joints under other column names: ``image, pid, cx, cy, s`` and ``<joint>.x``,
  ``<joint>.y``, ``<joint>.visible``; a joint not annotated has empty cells.

Run from the repository root: ``.venv/bin/python examples/poses/make_examples.py [FOLDER]`` (default: this folder).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from labeldist.labels.poses import COCO_EDGES, COCO_JOINTS, MPII_JOINTS

HERE = Path(__file__).resolve().parent
MPII = HERE.parents[1] / "data" / "mpii" / "mpii_valid_2958.csv"
N = 40
#: COCO's name of each joint MPII has too
COCO_OF = {
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


def joint(row: dict[str, str], name: str) -> tuple[float, float, int] | None:
    """x, y and vis of an MPII joint, None where it is not annotated (MPII's 0, 0, 0)."""
    x, y, vis = float(row[f"{name}_x"]), float(row[f"{name}_y"]), int(row[f"{name}_vis"])
    return None if (x, y, vis) == (0.0, 0.0, 0) else (x, y, vis)


def main(out: Path = HERE) -> None:
    with open(MPII, newline="") as f:
        rows = list(csv.DictReader(f))[:N]
    mpii_of = {c: m for m, c in COCO_OF.items()}
    images = {name: n + 1 for n, name in enumerate(dict.fromkeys(r["imgname"] for r in rows))}
    annotations = []
    for n, row in enumerate(rows, start=1):
        keypoints: list[float] = []
        for name in COCO_JOINTS:
            found = joint(row, mpii_of[name]) if name in mpii_of else None
            keypoints += [0, 0, 0] if found is None else [found[0], found[1], 2 if found[2] else 1]
        xs, ys = keypoints[0::3], keypoints[1::3]
        labelled = [(x, y) for x, y, v in zip(xs, ys, keypoints[2::3]) if v]
        x0, y0 = min(x for x, _ in labelled), min(y for _, y in labelled)
        x1, y1 = max(x for x, _ in labelled), max(y for _, y in labelled)
        annotations.append(
            {
                "id": 1000 + n,
                "image_id": images[row["imgname"]],
                "category_id": 1,
                "iscrowd": 0,
                "num_keypoints": len(labelled),
                "keypoints": keypoints,
                "bbox": [x0, y0, max(x1 - x0, 1.0), max(y1 - y0, 1.0)],
            }
        )
    empty = [0] * (3 * len(COCO_JOINTS))
    annotations.append(
        {
            "id": 2001,
            "image_id": 1,
            "category_id": 1,
            "iscrowd": 1,
            "num_keypoints": 0,
            "keypoints": empty,
            "bbox": [0, 0, 400, 300],
        }
    )
    annotations.append(
        {
            "id": 2002,
            "image_id": 1,
            "category_id": 1,
            "iscrowd": 0,
            "num_keypoints": 0,
            "keypoints": empty,
            "bbox": [10, 10, 20, 40],
        }
    )
    coco = {
        "info": {"description": f"the first {N} people of data/mpii/mpii_valid_2958.csv as COCO keypoints"},
        "images": [{"id": i, "file_name": name} for name, i in images.items()],
        "annotations": annotations,
        "categories": [
            {
                "id": 1,
                "name": "person",
                "supercategory": "person",
                "keypoints": list(COCO_JOINTS),
                "skeleton": [[a + 1, b + 1] for a, b in COCO_EDGES],
            }
        ],  # COCO's own: 1-based
    }
    (out / "person_keypoints.json").write_text(json.dumps(coco, separators=(",", ":")) + "\n")
    with open(out / "poses.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["image", "pid", "cx", "cy", "s"] + [f"{j}.{a}" for j in MPII_JOINTS for a in ("x", "y", "visible")])
        for row in rows:
            cells = [row["imgname"], row["person"], row["center_x"], row["center_y"], row["scale"]]
            for name in MPII_JOINTS:
                found = joint(row, name)
                cells += ["", "", ""] if found is None else [row[f"{name}_x"], row[f"{name}_y"], row[f"{name}_vis"]]
            w.writerow(cells)


if __name__ == "__main__":
    import sys

    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
