"""The neighbour browser's search by a new label, its id lookup and its legends, in headless Chromium against the
live server.

The page takes ``?search=TEXT`` and ``?id=ID`` by typing them into its search box and its id box and submitting
those forms, as a user would; the DOM it ends with is compared with the API's own answers. Skipped, saying so,
where no Chromium is installed. Screenshots are saved under ``test-artifacts/`` (``ui-search-captions.png``,
``ui-search-pose.png``, ``ui-lookup.png``, ``ui-legend-layout.png``, ``ui-search-pose-raw.png``,
``ui-pose-coco.png``).
"""

from __future__ import annotations

import html
import json
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from labeldist.distances.caption_sets import CaptionSetWMD
from labeldist.distances.pose import PoseDistance
from labeldist.distances.sts import SentenceRelevance
from labeldist.distances.vectors import VectorDistance
from labeldist.labels.captions import read_karpathy_captions
from labeldist.labels.pose_files import read_mpii_csv
from labeldist.labels.sentences import read_caption_sentences
from labeldist.labels.vectors import Vectors
from tests.api.api_helpers import ARTIFACTS, MPII_CSV, REPO, start_server, stop_server
from tests.api.test_api_ui import CARD, chromium, dump_dom, needs_chromium
from tests.conftest import write_store
from tests.processes import free_port, wait_healthy

COCO = REPO / "data" / "coco" / "coco_karpathy_test.json"
N_CAP, N_POSE, N_LAYOUT, K = 40, 120, 24, 10
ANCHOR = re.compile(r'<div class="card( found)?" data-index="(\d+)" data-id="([^"]*)"')


def _layouts():
    """Small box-room maps: ceiling above, floor below, two or three walls between (values 0..5)."""
    from labeldist.labels.layouts import LayoutMaps

    rng = np.random.default_rng(3)
    maps = np.zeros((N_LAYOUT, 32, 32), dtype=np.uint8)
    for m in maps:
        top, bottom, left, right = rng.integers(4, 12), rng.integers(20, 28), rng.integers(0, 12), rng.integers(20, 33)
        m[:top] = 5
        m[bottom:] = 1
        m[top:bottom, :left] = 4
        m[top:bottom, left:right] = 2
        m[top:bottom, right:] = 3
        m[0, 0] = 0
    return LayoutMaps(np.array([f"room{i:02d}" for i in range(N_LAYOUT)]), maps)


@pytest.fixture(scope="module")
def ui_stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from labeldist.distances.layout import LayoutMIoU

    root = tmp_path_factory.mktemp("ui-search")
    (root / "coco.json").write_text(json.dumps(json.loads(COCO.read_text())[:N_CAP]))
    stores = root / "stores"
    made = {
        "captions": (read_karpathy_captions(root / "coco.json"), CaptionSetWMD()),
        "pose": (read_mpii_csv(MPII_CSV).subset(slice(0, N_POSE)), PoseDistance()),
        "layout": (_layouts(), LayoutMIoU()),
        # a store normalised center_scale (the normalisation recorded: the search takes raw pixels with the person's
        # centre and scale), and one of COCO's 17 keypoints
        "pose-cs": (_first(read_mpii_csv(MPII_CSV, "center_scale"), N_POSE), PoseDistance()),
        "pose-coco": (_coco_poses(root), PoseDistance()),
        # a sentence store searched by a sentence, and 128-d vectors whose cards must fit
        "sentences": (read_caption_sentences(COCO, limit=N_CAP), SentenceRelevance("bert")),
        "wide": (
            Vectors([f"v{i}" for i in range(40)], np.random.default_rng(5).normal(size=(40, 128))),
            VectorDistance(),
        ),
    }
    for name, (labels, distance) in made.items():
        write_store(stores / name, labels, distance, dataset=name, k=K, dense=False, block_rows=64)
    return stores


def _first(poses, n: int):
    out = poses.subset(slice(0, n))
    out.provenance = poses.provenance
    return out


def _coco_poses(root: Path):
    from labeldist.labels.pose_files import read_coco_keypoints
    from labeldist.labels.poses import COCO_JOINTS
    from tests.labels.test_pose_formats import SHARED, mpii_rows, write_coco

    path = write_coco(root / "person_keypoints.json", mpii_rows(N_POSE), COCO_JOINTS, {c: m for m, c in SHARED.items()})
    return read_coco_keypoints(path)


def post(base: str, path: str, body: object) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{base}{path}", data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def get(base: str, path: str) -> dict:
    with urllib.request.urlopen(f"{base}{path}", timeout=60) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def server(ui_stores: Path) -> Iterator[str]:
    port = free_port()
    proc = start_server(ui_stores, port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base)
        # warm up: the word vectors and the compiled kernels load on the first search, not inside the browser's
        # virtual-time budget
        assert post(base, "/v1/stores/captions/search", {"label": ["a dog"], "k": 1})[0] == 200
        assert post(base, "/v1/stores/pose/search", {"label": [[0, 0]] * 16, "k": 1})[0] == 200
        assert post(base, "/v1/stores/layout/search", {"label": [1, 2], "k": 1})[0] == 422
        assert post(base, "/v1/stores/sentences/search", {"label": "a dog", "k": 1})[0] == 200
        for store in ("captions", "pose", "layout", "pose-cs", "pose-coco", "sentences", "wide"):
            get(base, f"/v1/stores/{store}/items/0/label")
            get(base, f"/v1/stores/{store}/items/0/neighbors")
        yield base
    finally:
        stop_server(proc)


def cards(dom: str) -> tuple[list[int], list[str], np.ndarray]:
    found = CARD.findall(dom)
    return (
        [int(i) for i, _, _ in found],
        [html.unescape(i) for _, i, _ in found],
        np.array([float(d) for _, _, d in found], dtype=np.float32),
    )


def page(base: str, **params: object) -> str:
    return f"{base}/ui?{urllib.parse.urlencode(params)}"


def screenshot(tmp_path: Path, url: str, name: str, height: int = 900) -> np.ndarray:
    from PIL import Image

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / name
    shot.unlink(missing_ok=True)
    result = chromium(tmp_path, f"--screenshot={shot}", f"--window-size=1200,{height}", url)
    assert result.returncode == 0, result.stderr[-2000:]
    image = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert image.shape == (height, 1200, 3)
    return image


CAPTIONS = ["a man riding a wave on top of a surfboard", "a surfer in the ocean"]


@needs_chromium
def test_search_by_captions_shows_the_nearest_images(server: str, tmp_path: Path) -> None:
    url = page(server, store="captions", search="\n".join(CAPTIONS), k=6)
    dom = dump_dom(tmp_path, url)
    assert 'data-ready="true"' in dom, "the page's script ran to the end"
    assert '<p id="error" role="alert" hidden="">' in dom, dom[-3000:]
    status, want = post(server, "/v1/stores/captions/search", {"label": CAPTIONS, "k": 6})
    assert status == 200, want
    indices, ids, distances = cards(dom)
    assert indices == want["indices"] and ids == want["ids"], "the search's answer, in its order"
    np.testing.assert_array_equal(distances, np.float32(want["distances"]))
    assert 'data-mode="search"' in dom and "6 nearest items of the search" in dom
    query = dom[dom.index('class="card query"') : dom.index('aria-label="nearest neighbours"')]
    assert all(f"<li>{c}</li>" in query for c in CAPTIONS), "the captions typed are shown as the query"
    assert f'data-computed="{want["computed"]}"' in query
    assert dom.count('<ul class="texts">') == 7, "the query's captions and each result's"
    assert "one per line" in dom  # the search box says how a caption store reads what is typed
    image = screenshot(tmp_path, url, "ui-search-captions.png")
    assert image.std() > 20, "the page is drawn"


@needs_chromium
def test_search_by_a_pose_draws_it_and_its_nearest_poses_with_the_limb_legend(server: str, tmp_path: Path) -> None:
    other = read_mpii_csv(MPII_CSV).subset(slice(N_POSE, N_POSE + 1))  # a pose the store does not hold
    label = [[float(x), float(y)] if p else None for (x, y), p in zip(other.xy[0], other.present[0])]
    url = page(server, store="pose", search=json.dumps(label), k=8)
    dom = dump_dom(tmp_path, url)
    assert '<p id="error" role="alert" hidden="">' in dom, dom[-3000:]
    status, want = post(server, "/v1/stores/pose/search", {"label": label, "k": 8})
    assert status == 200, want
    indices, ids, distances = cards(dom)
    assert indices == want["indices"] and ids == want["ids"]
    np.testing.assert_array_equal(distances, np.float32(want["distances"]))
    assert dom.count('<svg class="pose"') == 9, "the query's pose and each result's, drawn"
    legend = dom[dom.index('id="legend"') : dom.index("</header>")]
    for limb, name in (("right", "right limbs"), ("left", "left limbs"), ("center", "spine, neck and head")):
        assert f'data-limb="{limb}"' in legend and name in legend
    assert "occluded joint" in legend
    image = screenshot(tmp_path, url, "ui-search-pose.png")
    red = (image[..., 0] > 180) & (image[..., 1] < 90) & (image[..., 2] < 90)  # right limbs
    assert red.sum() > 500, "skeletons drawn"


@needs_chromium
def test_the_id_box_finds_an_item(server: str, tmp_path: Path) -> None:
    ids = get(server, "/v1/stores/captions/ids")["ids"]
    index = 23
    url = page(server, store="captions", id=ids[index], k=5)
    dom = dump_dom(tmp_path, url)
    assert '<p id="error" role="alert" hidden="">' in dom, dom[-3000:]
    anchor = ANCHOR.search(dom)
    assert anchor is not None and anchor.group(1) == " found", "the item found is shown, marked"
    assert (int(anchor.group(2)), html.unescape(anchor.group(3))) == (index, ids[index])
    want = get(server, f"/v1/stores/captions/items/{index}/neighbors?k=5")
    assert cards(dom)[0] == want["indices"], "and its nearest neighbours"
    assert f"5 nearest neighbours of item {index}" in dom
    screenshot(tmp_path, url, "ui-lookup.png")
    # a unique part of an id finds it too; an id that is no item's says so
    part = ids[index][1:] if sum(ids[index][1:] in i for i in ids) == 1 else ids[index]
    anchor = ANCHOR.search(dump_dom(tmp_path, page(server, store="captions", id=part)))
    assert anchor is not None and int(anchor.group(2)) == index
    dom = dump_dom(tmp_path, page(server, store="captions", id="no-such-image"))
    assert 'no item of captions has the id "no-such-image"' in html.unescape(dom)


@needs_chromium
def test_a_bad_search_shows_the_services_422(server: str, tmp_path: Path) -> None:
    dom = html.unescape(dump_dom(tmp_path, page(server, store="captions", search="the of and")))
    assert "search: 422: label: caption 0 'the of and' has no known word: only stop words" in dom
    assert "card neighbor" not in dom
    dom = html.unescape(dump_dom(tmp_path, page(server, store="layout", search="[1, 2]")))
    assert "search: a layout_miou store cannot be searched by a new label" in dom  # said, and the box is off
    assert re.search(r'<textarea id="query"[^>]* disabled', dom) and 'data-searchable="false"' in dom


@needs_chromium
def test_a_layout_store_shows_the_legend_of_its_surfaces(server: str, tmp_path: Path) -> None:
    from labeldist.api.answers.labelview import PALETTE

    url = page(server, store="layout", item=3, k=6)
    dom = dump_dom(tmp_path, url)
    legend = dom[dom.index('id="legend"') : dom.index("</header>")]
    entries = re.findall(r'data-value="(\d+)" data-color="(#[0-9a-f]{6})"><i class="chip"[^>]*></i>([^<]+)<', legend)
    names = ["no surface", "floor", "middle wall", "right wall", "left wall", "ceiling"]
    assert [(int(v), n) for v, _, n in entries] == list(enumerate(names))
    assert [c for _, c, _ in entries] == ["#{:02x}{:02x}{:02x}".format(*PALETTE[v]) for v in range(6)]
    image = screenshot(tmp_path, url, "ui-legend-layout.png")
    for value in range(1, 6):  # each surface's colour is on the page: in the maps and in the legend's chips
        assert (np.abs(image - PALETTE[value].astype(int)).sum(axis=2) < 10).sum() > 100, value


@needs_chromium
def test_search_by_a_raw_pose_on_a_normalised_store(server: str, tmp_path: Path) -> None:
    # the search box of a center_scale store asks for the pose in pixels with its centre and scale, and the page
    # sends it as typed: the service normalises it as the store's poses were
    other = read_mpii_csv(MPII_CSV).subset(slice(N_POSE, N_POSE + 1))  # a pose the store does not hold, in pixels
    fields = MPII_CSV.read_text().splitlines()[N_POSE + 1].split(",")
    label = {"joints": other.to_json(0), "center": [float(fields[4]), float(fields[5])], "scale": float(fields[6])}
    url = page(server, store="pose-cs", search=json.dumps(label), k=8)
    dom = dump_dom(tmp_path, url)
    assert '<p id="error" role="alert" hidden="">' in dom, dom[-3000:]
    status, want = post(server, "/v1/stores/pose-cs/search", {"label": label, "k": 8})
    assert status == 200, want
    indices, ids, distances = cards(dom)
    assert indices == want["indices"] and ids == want["ids"]
    np.testing.assert_array_equal(distances, np.float32(want["distances"]))
    assert max(distances) < 2, "distances of normalised poses, not of pixels"
    assert dom.count('<svg class="pose"') == 9, "the query's pose and each result's, drawn"
    hint = html.unescape(dom[dom.index('id="query-hint"') : dom.index("</label>", dom.index('id="query-hint"'))])
    assert "in image pixels with the person's centre and scale" in hint
    assert '"center": [316, 246], "scale": 2.2}' in html.unescape(dom), "the placeholder shows that form"
    screenshot(tmp_path, url, "ui-search-pose-raw.png")
    # the same pixels as a plain list: refused, saying what is needed
    dom = html.unescape(dump_dom(tmp_path, page(server, store="pose-cs", search=json.dumps(label["joints"]))))
    assert re.search(r"search: 422: label: joint \d+ \(\w+\) is at \([\d.]+, [\d.]+\), far outside", dom), dom[-3000:]
    assert "image pixels? Send" in dom
    assert '"center": [x, y], "scale": s}' in dom and "card neighbor" not in dom


@needs_chromium
def test_a_coco_store_is_drawn_with_cocos_skeleton(server: str, tmp_path: Path) -> None:
    from labeldist.labels.poses import COCO_EDGES, COCO_JOINTS

    label = get(server, "/v1/stores/pose-coco/items/2/label")["pose"]
    assert label["joints"] == list(COCO_JOINTS) and [tuple(e) for e in label["edges"]] == list(COCO_EDGES)
    assert label["sides"][:3] == ["center", "left", "right"]
    url = page(server, store="pose-coco", item=2, k=4)
    dom = dump_dom(tmp_path, url)
    assert '<p id="error" role="alert" hidden="">' in dom, dom[-3000:]
    anchor = dom[dom.index('<section id="anchor"') : dom.index('aria-label="nearest neighbours"')]
    drawn = [(a, b) for a, b in COCO_EDGES if label["xy"][a] and label["xy"][b]]
    assert anchor.count('class="bone ') == len(drawn) > 6, "every bone with both joints, drawn"
    sides = label["sides"]
    colour = [sides[a] if sides[a] != "center" else sides[b] for a, b in drawn]  # a bone takes its first side joint's
    for side in ("left", "right"):
        assert anchor.count(f'class="bone {side}"') == colour.count(side) > 0, side
    image = screenshot(tmp_path, url, "ui-pose-coco.png")
    red = (image[..., 0] > 180) & (image[..., 1] < 90) & (image[..., 2] < 90)  # right limbs
    assert red.sum() > 200, "right limbs drawn in their colour"


@needs_chromium
def test_search_by_a_sentence_shows_the_nearest_sentences(server: str, tmp_path: Path) -> None:
    sentence = "A man riding a wave on top of a surfboard."
    url = page(server, store="sentences", search=sentence, k=5)
    dom = html.unescape(dump_dom(tmp_path, url))
    assert '<p id="error" role="alert" hidden="">' in dom, dom[-3000:]
    status, want = post(server, "/v1/stores/sentences/search", {"label": sentence, "k": 5})
    assert status == 200, want
    indices, ids, _ = cards(dom)
    assert indices == want["indices"] and ids == want["ids"]
    assert "search by a sentence, typed as it is" in dom  # the hint says what to type
    query = dom[dom.index('class="card query"') : dom.index('aria-label="nearest neighbours"')]
    assert f"<li>{sentence}</li>" in query, "the sentence typed is shown as the query"


@needs_chromium
def test_a_wide_vectors_card_fits(server: str, tmp_path: Path) -> None:
    """128 numbers: the card says how many and shows the first six and the last, to 4 digits (before: 400
    characters of raw JSON on one line, past the card's edge)."""
    dom = html.unescape(dump_dom(tmp_path, page(server, store="wide", item=3, k=4)))
    shown = re.findall(r'<pre class="meta values">([^<]*)</pre>', dom)
    assert shown and all(text.startswith("values: 128 values: ") for text in shown), shown[:2]
    assert all(len(text) < 120 for text in shown)
    values = get(server, "/v1/stores/wide/items/3/label")["values"]["values"]
    assert f"{values[0]:.4g}"[:5] in shown[0] or f"{values[0]:.4}"[:5] in shown[0]
