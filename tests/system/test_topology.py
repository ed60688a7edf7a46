"""The docker-compose topology as processes on 127.0.0.1: a real ``dask scheduler`` and two ``dask worker``
processes, a precompute job against them, ``labeldist serve`` over the store it wrote, and the trainer driven for
a few steps through the service."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import numpy as np
import pytest

from labeldist.store import StoreReader
from tests.conftest import check_store
from tests.processes import REPO, Service, labeldist
from tests.system.conftest import JOB, K, assert_same_store

STEPS = 20


@pytest.mark.slow
def test_precompute_on_a_dask_cluster_then_serve_then_train(cluster, reference_store, tmp_path):
    stores = tmp_path / "stores"
    out = stores / "mpii-pose"
    done = labeldist(*JOB, "--out", str(out), "--scheduler", cluster.address)
    assert done.returncode == 0, done.stderr
    assert "185 of 185 blocks computed" in done.stdout
    assert_same_store(out, reference_store)  # the cluster changed nothing: same numbers as one process
    check_store(out)
    # both workers took part (the store records nothing per worker; each worker's task-state log does)
    from distributed import Client

    with Client(cluster.address) as client:
        by_worker = client.run(lambda dask_worker: len(dask_worker.data) + len(dask_worker.state.log))
    assert len(by_worker) == 2 and all(n > 0 for n in by_worker.values()), by_worker

    reader = StoreReader(str(out))
    indices, distances = reader.knn()
    with Service(stores) as service:
        for item in (0, 1, 1477, 2957):
            r = httpx.get(f"{service.url}/v1/stores/mpii-pose/items/{item}/neighbors", params={"k": K}, timeout=30)
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["indices"] == indices[item].tolist()
            assert np.array_equal(np.float32(body["distances"]), distances[item])

        features, run = tmp_path / "inputs.npy", tmp_path / "run"
        trainer = [sys.executable, "-m", "labeldist.trainer.cli"]
        made = subprocess.run(
            [*trainer, "demo-inputs", str(out), "--out", str(features)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert made.returncode == 0, made.stderr
        fit = subprocess.run(
            [
                *trainer,
                "fit",
                "--url",
                service.url,
                "--store",
                "mpii-pose",
                "--features",
                str(features),
                "--out",
                str(run),
                "--loss",
                "log_ratio",
                "--size",
                "40",
                "--max-steps",
                str(STEPS),
                "--no-progress",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert fit.returncode == 0, fit.stderr
    steps = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    losses = [s["loss"] for s in steps if s["event"] == "step"]
    assert len(losses) == STEPS and np.all(np.isfinite(losses))
    assert (run / "checkpoint.pt").is_file()
