"""Kinds as plugins: the example plugin of ``examples/labeldist-angles``, installed, works wherever a
built-in kind does: ``precompute``, ``info``, ``verify``, a live ``labeldist serve`` (stored and on-demand
distances, minibatches, search by a new label) and ``stored_labels(StoreReader(...))``. A kind whose distance raises or
returns the wrong shape is refused with one clear line before anything is written.

The plugin is installed with pip into a folder of its own that the commands find on ``PYTHONPATH``: the same
entry-point discovery as an install into the venv, without changing the environment the other tests run in. The
plugin's own tests (labeldist.testing's suite on its distance) pass against that install.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import numpy as np
import pytest

from labeldist.testing import DistanceSuite
from tests.processes import EXAMPLE_PLUGIN, REPO, Service, install_example_plugin

ANGLES = [350.0, 10.0, 90.0, 180.0, 185.0, 271.0, 5.0, 359.0]


def circle(a: float, b: float) -> float:
    gap = abs(a - b) % 360
    return min(gap, 360 - gap)


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_example_plugin(tmp_path_factory.mktemp("plugin-site"))


def run(plugin_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(plugin_path)}
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_an_installed_plugin_kind_goes_through_the_whole_chain(plugin_path: Path, tmp_path: Path) -> None:
    (tmp_path / "angles.txt").write_text("\n".join(str(a) for a in ANGLES) + "\n")
    stores = tmp_path / "stores"
    listed = run(plugin_path, "labeldist.cli", "precompute", "--help")
    assert "angles" in listed.stdout and "labeldist-angles" in listed.stdout  # the plugin's command, named
    for name, dense in (("angles", "--dense"), ("angles-knn", "--knn-only")):
        made = run(
            plugin_path,
            "labeldist.cli",
            "precompute",
            "angles",
            str(tmp_path / "angles.txt"),
            "--k",
            "3",
            dense,
            "--out",
            str(stores / name),
            "--workers",
            "1",
            "--no-progress",
        )
        assert made.returncode == 0, made.stderr
        verified = run(plugin_path, "labeldist.cli", "verify", str(stores / name))
        assert verified.returncode == 0 and '"ok": true' in verified.stdout, verified.stdout + verified.stderr
    info = run(plugin_path, "labeldist.cli", "info", str(stores / "angles"), "--json")
    assert info.returncode == 0 and json.loads(info.stdout)["manifest"]["kind"] == "angles"

    code = (
        "from labeldist.store import StoreReader; from labeldist.view.stored import stored_labels; import sys; "
        "labels = stored_labels(StoreReader(sys.argv[1])); "
        "print(type(labels).__name__, labels.degrees.tolist())"
    )
    env = {**os.environ, "PYTHONPATH": str(plugin_path)}
    read = subprocess.run(
        [sys.executable, "-c", code, str(stores / "angles")], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert read.stdout.split(" ", 1)[0] == "Angles" and json.loads(read.stdout.split(" ", 1)[1]) == ANGLES

    with Service(stores, PYTHONPATH=str(plugin_path)) as service:
        for name in ("angles", "angles-knn"):  # stored, then computed on demand by the plugin's own distance
            got = httpx.post(f"{service.url}/v1/stores/{name}/distances", json={"anchor": 0, "items": [1, 2, 3, 7]})
            assert got.status_code == 200, got.text
            expected = [circle(ANGLES[0], ANGLES[j]) for j in (1, 2, 3, 7)]
            np.testing.assert_allclose(got.json()["distances"], expected)
            body = {"anchors": [0], "size": 5, "neighbors": 2, "pairwise": True, "seed": 1}
            batch = httpx.post(f"{service.url}/v1/stores/{name}/batches", json=body)
            assert batch.status_code == 200, batch.text
            b = batch.json()["batches"][0]
            members = [b["anchor"], *b["items"]]
            expected = [[circle(ANGLES[i], ANGLES[j]) for j in members] for i in members]
            np.testing.assert_allclose(b["pairwise"], expected, rtol=1e-6)
            assert {ANGLES[i] for i in b["items"][:2]} == {359.0, 5.0}  # 350°: 9° and 15° away on the circle
        label = httpx.get(f"{service.url}/v1/stores/angles/items/2/label").json()
        assert label["kind"] == "angles"
        for name in ("angles", "angles-knn"):  # a new label: 3 degrees, its nearest on the circle
            found = httpx.post(f"{service.url}/v1/stores/{name}/search", json={"label": 3.0, "k": 3})
            assert found.status_code == 200, found.text
            brute = sorted(range(len(ANGLES)), key=lambda j: (circle(3.0, ANGLES[j]), j))[:3]
            assert found.json()["indices"] == brute
            np.testing.assert_allclose(found.json()["distances"], [circle(3.0, ANGLES[j]) for j in brute])
        bad = httpx.post(f"{service.url}/v1/stores/angles/search", json={"label": "north", "k": 3})
        assert bad.status_code == 422 and "finite number of degrees" in bad.text


def test_the_plugins_own_tests_run_labeldists_distance_suite_and_pass(plugin_path: Path, tmp_path: Path) -> None:
    """``pytest`` on the plugin's folder, as its author runs it (its pyproject's testpaths), the plugin imported
    from the install: every check of labeldist.testing.DistanceSuite runs on CircularDistance and passes."""
    report = tmp_path / "report.xml"
    done = run(plugin_path, "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", str(EXAMPLE_PLUGIN))
    assert done.returncode == 0, done.stdout + done.stderr
    cases = ET.parse(report).getroot().iter("testcase")
    outcome = {(c.get("classname", "").rpartition(".")[2], c.get("name")): [e.tag for e in c] for c in cases}
    suite = sorted(name for name in dir(DistanceSuite) if name.startswith("test_"))
    assert len(suite) >= 9
    ran = sorted(name for (cls, name) in outcome if cls == "TestCircularDistance")
    assert ran == suite, done.stdout
    assert not [case for case, events in outcome.items() if {"failure", "error", "skipped"} & set(events)], outcome


def test_a_kind_whose_distance_misbehaves_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    from labeldist.engine import precompute
    from labeldist.kinds import KindError

    sys.path.insert(0, str(EXAMPLE_PLUGIN))
    try:
        from labeldist_angles import CircularDistance, read_angles
    finally:
        sys.path.remove(str(EXAMPLE_PLUGIN))
    (tmp_path / "a.txt").write_text("1\n2\n3\n4\n")
    labels = read_angles(tmp_path / "a.txt")

    class WrongShape(CircularDistance):
        def block(self, rows, cols):
            return super().block(rows, cols)[:, :1]

    class Raises(CircularDistance):
        def block(self, rows, cols):
            raise RuntimeError("the plugin's bug")

    for distance, message in (
        (WrongShape(), r"must return a float array of shape \(2, 3\), got ndarray \(2, 1\)"),
        (Raises(), "block\\(\\) raised RuntimeError: the plugin's bug"),
    ):
        out = tmp_path / type(distance).__name__
        with pytest.raises(KindError, match=message):
            precompute(labels, distance, out, dataset="a", k=2)
        assert not out.exists()
