"""The neighbour browser (GET /ui) in headless Chromium against the live server.

Skipped, saying so, where no Chromium is installed (Debian: ``apt-get install chromium``). The screenshot is
saved as ``test-artifacts/ui-neighbours.png``.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.api.api_helpers import ARTIFACTS, DENSE, INCOMPLETE, KNN, TINY_STORE

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium): the page is not tested in a browser"
)
CARD = re.compile(r'<li class="card neighbor" data-index="(\d+)" data-id="([^"]*)" data-distance="([^"]*)"')


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--window-size=1200,900",
        "--virtual-time-budget=5000",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)


def dump_dom(tmp_path: Path, url: str) -> str:
    result = chromium(tmp_path, "--dump-dom", url)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_page_and_assets_are_served(client: TestClient) -> None:
    page = client.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script src="/ui/app.js">' in page.text and "http" not in page.text.replace("http://www.w3", "")
    assert client.get("/ui/app.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/ui/style.css").headers["content-type"].startswith("text/css")
    assert client.get("/ui/secret.py").status_code == 404
    assert "fetch(" in client.get("/ui/app.js").text


@needs_chromium
def test_page_lists_the_stores_and_shows_the_neighbours(live_server: str, store_arrays: dict, tmp_path: Path) -> None:
    dom = dump_dom(tmp_path, f"{live_server}/ui?store={DENSE}&item=7&k=8")
    assert 'data-ready="true"' in dom, "the page's script ran to the end"
    options = re.findall(r'<option value="([^"]+)"', dom)
    assert sorted(options) == sorted([DENSE, KNN, TINY_STORE, INCOMPLETE])
    assert f"{INCOMPLETE} (unavailable)" in dom
    arrays = store_arrays[DENSE]
    cards = CARD.findall(dom)
    assert [int(i) for i, _, _ in cards] == arrays["indices"][7, :8].tolist()
    assert [html.unescape(i) for _, i, _ in cards] == arrays["ids"][arrays["indices"][7, :8]].tolist()
    assert np.array_equal(np.array([float(d) for _, _, d in cards], np.float32), arrays["distances"][7, :8])
    assert f'data-index="7" data-id="{arrays["ids"][7]}"' in dom  # the item itself
    assert dom.count('<svg class="pose"') == 9, "the item's pose and each neighbour's, drawn"
    assert dom.count('class="bone ') >= 9 * 5


@needs_chromium
def test_the_store_card_says_what_the_store_is_in_words(live_server: str, stores_dir: Path, tmp_path: Path) -> None:
    """The kind, size, k, dense or not and what the distance means, in words (the distance's own ``meaning`` of
    the store's parameters); the raw parameters behind a closed "details" toggle. Screenshot:
    test-artifacts/ui-store-card.png."""
    from labeldist.distances.pose import PoseDistance
    from labeldist.store import StoreReader

    dom = dump_dom(tmp_path, f"{live_server}/ui?store={DENSE}&item=0&k=4")
    card = html.unescape(re.search(r'<div id="store-info"[^>]*>(.*?)</div>\s*<div id="legend"', dom, re.S).group(1))
    manifest = StoreReader(str(stores_dir / DENSE)).manifest
    summary = re.sub(r"<[^>]+>", "", re.search(r'<div class="summary">(.*?)</div>', card, re.S).group(1))
    n = manifest["n_items"]
    assert summary == (
        f"{manifest['dataset']} · human poses · {n:,} items · k = {manifest['k']} · every pair stored (dense matrix "
        "+ kNN lists)"
    )
    meaning = re.search(r'<div class="meaning">(.*?)</div>', card, re.S).group(1)
    assert meaning == f"distance: {PoseDistance.meaning(manifest['params'])}"
    assert "<details><summary>details</summary>" in card  # closed: no "open" attribute
    for key in manifest["params"]:
        assert f"<li>{key} = " in card
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "ui-store-card.png"
    shot.unlink(missing_ok=True)
    assert chromium(tmp_path, f"--screenshot={shot}", f"{live_server}/ui?store={DENSE}&item=0&k=4").returncode == 0
    assert shot.stat().st_size > 0


@needs_chromium
def test_page_says_when_a_store_is_not_available(live_server: str, tmp_path: Path) -> None:
    dom = dump_dom(tmp_path, f"{live_server}/ui?store={INCOMPLETE}&item=0")
    assert f"store {INCOMPLETE} is not available (not complete yet); choose another" in dom
    assert 'data-ready="true"' in dom and "card neighbor" not in dom
    dom = dump_dom(tmp_path, f"{live_server}/ui?store={KNN}&item=5000")
    assert f"404: store '{KNN}' has no item 5000" in html.unescape(dom)


@needs_chromium
def test_page_screenshot(live_server: str, tmp_path: Path) -> None:
    from PIL import Image

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "ui-neighbours.png"
    shot.unlink(missing_ok=True)
    result = chromium(tmp_path, f"--screenshot={shot}", f"{live_server}/ui?store={KNN}&item=12&k=12")
    assert result.returncode == 0, result.stderr[-2000:]
    image = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert image.shape == (900, 1200, 3)
    red = (image[..., 0] > 180) & (image[..., 1] < 90) & (image[..., 2] < 90)  # right limbs
    blue = (image[..., 2] > 180) & (image[..., 0] < 60) & (image[..., 1] < 150)  # left limbs (and buttons)
    assert red.sum() > 500, "skeletons drawn"
    assert blue.sum() > 500


@needs_chromium
def test_page_caps_k_at_the_stores_k(live_server: str, store_arrays: dict, tmp_path: Path) -> None:
    dom = dump_dom(tmp_path, f"{live_server}/ui?store={KNN}&item=3&k=500")
    cards = CARD.findall(dom)
    assert [int(i) for i, _, _ in cards] == store_arrays[KNN]["indices"][3].tolist()  # all k = 20, no error
    assert '<p id="error" role="alert" hidden="">' in dom
