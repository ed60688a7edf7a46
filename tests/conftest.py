"""Shared fixtures: the repository's data, the store checker of the contract, a real Dask cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
# The sentence model's ONNX export (labeldist.sts.onnx_backend) depends on the model alone: one folder for the whole
# run, both xdist processes and every test's own LABELDIST_CACHE, so the model is exported once, not once a cache.
# A test of the export itself points LABELDIST_ONNX_CACHE elsewhere.
os.environ.setdefault("LABELDIST_ONNX_CACHE", os.path.join(tempfile.gettempdir(), f"labeldist-test-onnx-{os.getuid()}"))
# The contract's own checker lives in ../shared; the repo keeps an identical copy for a clone without it.
_SHARED_CHECKER = ROOT.parent / "shared" / "tools" / "check_store.py"
CHECK_STORE = _SHARED_CHECKER if _SHARED_CHECKER.exists() else ROOT / "tools" / "check_store.py"


def check_store(path: str | Path) -> str:
    """Run the contract checker on a store; return its output, failing the test if the store fails."""
    proc = subprocess.run([sys.executable, str(CHECK_STORE), str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def run_main(main, capsys, *args) -> tuple[int, str]:
    """Exit status and stderr of a command's ``main`` (``labeldist``'s, ``trainer``'s) run with ``args`` in this
    process, as pytest's ``capsys`` captured them."""
    try:
        rc = main([str(a) for a in args])
    except SystemExit as e:
        rc = e.code
    return rc, capsys.readouterr().err


def write_store(url: str | Path, labels, distance, *, dataset: str, k: int, dense: bool, block_rows: int) -> Path:
    """A complete store written in this process, block by block, by the engine's own task function (no Dask, and
    no check of k against N: a store with padded lists can be made on purpose)."""
    from labeldist.engine.blocks import compute_block
    from labeldist.store import build_manifest, create_store, n_blocks, publish

    manifest = build_manifest(
        dataset=dataset,
        kind=distance.kind,
        params=distance.params(),
        labels=labels,
        k=k,
        dense=dense,
        block_rows=block_rows,
    )
    create_store(str(url), manifest, labels)
    for block in range(n_blocks(len(labels), block_rows)):
        compute_block(block, labels=labels, distance=distance, url=str(url), k=k, block_rows=block_rows, dense=dense)
    publish(str(url))
    return Path(url)


def flip_bit(chunk: Path, at: float = 0.5) -> None:
    """Damage a chunk file of a store as a disk would: one bit flipped, at fraction ``at`` of its bytes."""
    data = bytearray(chunk.read_bytes())
    data[int(len(data) * at)] ^= 0x10
    chunk.write_bytes(bytes(data))


def vlen_utf8_chunk(items: list[bytes]) -> bytes:
    """A string chunk as a store writes one (numcodecs' vlen-utf8 layout: a count, then each item's length and
    bytes; Zstd; a CRC32C of it appended), with whatever bytes are given, valid UTF-8 or not."""
    import struct

    import google_crc32c
    import numcodecs

    plain = struct.pack("<I", len(items)) + b"".join(struct.pack("<I", len(b)) + b for b in items)
    body = numcodecs.Zstd(level=1).encode(plain)
    return body + google_crc32c.value(body).to_bytes(4, "little")


@pytest.fixture(scope="session")
def mpii_poses():
    from labeldist.labels.pose_files import read_mpii_csv

    return read_mpii_csv(DATA / "mpii" / "mpii_valid_2958.csv")


@pytest.fixture(scope="session")
def dask_client():
    """A real distributed LocalCluster with two single-threaded worker processes, shared by the session."""
    from labeldist.engine import dask_client as make_client

    with make_client(n_workers=2) as client:
        yield client
