"""Each heavy stage of labeldist beside its floor, as a ratio, measured in one run on the machine at hand.

Absolute times differ threefold between machines; a ratio to a floor measured in the same minutes says whether the
code is at its floor on any of them. Stages (``--stages``, all by default):

- ``sentences``: N synthetic COCO sentences (``--sentences``; bench_scale's inputs, seed 0). The floors:
  sentence-transformers' own torch ``encode`` of the distinct texts (this process, every core, batch 64), and the
  backend alone (``labeldist.sts.scorers.encode_texts`` with ONNX Runtime, this process, every core) followed by
  FAISS ``IndexFlatIP`` over the same embeddings (k + 1, every core): the job's floor. Then the job itself,
  ``labeldist precompute sentences FILE --knn-only --k K`` (its LocalCluster, its workers' model loads, its
  store), its embedding stage from its own progress line. Printed: backend / torch encode speed (goal >= 1.8x),
  the job's embedding / the backend's, the job's wall / its floor (goal <= 1.15x), and its lists against lists
  from torch's embeddings, float64: equal, or equal but for ties within 1e-5.
- ``vectors``: ``precompute vectors`` (N x 64 normal float32, k = 100) against FAISS ``IndexFlatL2``, one search
  of k + 1 in this process.
- ``wmd``: the caption-pair WMD kernel (``wmd_pairs``, one batched call) against gensim's ``wmdistance`` per pair,
  on real COCO captions.
- ``captions``: the exact caption-set kNN (``precompute captions --knn-only --k 100``) on the first N images of
  the Karpathy test split: exact caption-set WMDs per item (the store's ``progress/exact_pairs`` / N) against k,
  the least any exact kNN can compute.
- ``api``: benchmarks/bench_api.py's neighbour route and minibatches against ``/healthz`` (wrk when installed).

    .venv/bin/python benchmarks/floors.py [--stages sentences,vectors,wmd,captions,api] [--sentences 20000]

The machine (CPU model, cores, AVX-512 or not) and the load average are printed first.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import make_inputs, stage_seconds  # noqa: E402  (sibling scripts)
from timing import timed  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LABELDIST = str(Path(sys.executable).with_name("labeldist"))
K = 100
#: rows whose lists are compared with lists from torch's embeddings
SAMPLE_ROWS = 200
#: distances closer than this are ties: two backends may order them either way
TIE = 1e-5

ROWS: list[tuple[str, str, str, str, str]] = []


def machine() -> str:
    """The CPU model, its cores and whether it has AVX-512, from /proc/cpuinfo."""
    model, flags = platform.processor() or "unknown CPU", ""
    try:
        info = Path("/proc/cpuinfo").read_text()
        model = re.search(r"model name\s*:\s*(.+)", info).group(1).strip()
        flags = re.search(r"flags\s*:\s*(.+)", info).group(1)
    except (OSError, AttributeError):
        pass
    simd = "AVX-512" if "avx512f" in flags.split() else "AVX2" if "avx2" in flags.split() else "no AVX2"
    return f"{model}, {os.cpu_count()} cores, {simd}"


def row(stage: str, measured: str, floor: str, ratio: str, goal: str) -> None:
    """One line of the final table, printed now too."""
    ROWS.append((stage, measured, floor, ratio, goal))
    print(f"  {stage}: {measured} | floor {floor} | {ratio} (goal {goal})", flush=True)


def run_labeldist(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    """``labeldist ARGS`` in a subprocess: its wall seconds and standard error (stopped on failure)."""
    started = time.perf_counter()
    proc = subprocess.run([LABELDIST, *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode:
        raise SystemExit(f"labeldist {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = Path(args[args.index("--out") + 1])
    out.with_name(out.name + ".log").write_text(proc.stderr)  # the command's progress, for a closer look
    return wall, proc.stderr


# ---------------------------------------------------------------------------------------------------- sentences
def sentence_file(work: Path, n: int) -> Path:
    """The first ``n`` synthetic COCO sentences, one a line (bench_scale's inputs: the same sets)."""
    images = 5_000 if n <= 25_009 else -(-n // 5) + 1
    _, txt = make_inputs(work, images, swap_borrowed=True)
    sized = work / f"sentences{n}.txt"
    with open(txt) as f:
        sized.write_text("".join(line for _, line in zip(range(n), f)))
    return sized


def lists_against(store: Path, reference: np.ndarray, inverse: np.ndarray, k: int) -> tuple[int, int, float]:
    """Sampled rows of the store's lists against the float64 lists of ``reference`` embeddings (one per distinct
    text; ``inverse`` maps items to them): rows identical, rows equal but for ties within :data:`TIE`, and the
    largest difference of a stored distance from the reference's for the same pair."""
    from labeldist.store import StoreReader

    indices, distances = StoreReader(str(store)).knn()
    e = reference.astype(np.float64)
    rows = np.random.default_rng(0).choice(len(inverse), min(SAMPLE_ROWS, len(inverse)), replace=False)
    same = tied = 0
    gap = 0.0
    for r in rows:
        d = 1.0 - np.clip(e[inverse] @ e[inverse[r]], 0.0, 1.0)
        d[inverse == inverse[r]] = 0.0
        d[r] = np.inf
        order = np.lexsort((np.arange(len(d)), d))[:k]
        got = np.asarray(indices[r][:k], dtype=np.int64)
        gap = max(gap, float(np.abs(d[got] - distances[r][:k]).max()))
        if np.array_equal(order, got):
            same += 1
            continue
        kth = d[order[-1]]
        # every stored neighbour within a tie of the reference's k-th, every one left out at least as far
        left_out = np.setdiff1d(order, got)
        if (d[got] <= kth + TIE).all() and (d[left_out] >= d[got].max() - TIE).all():
            tied += 1
    return same, tied, gap


def sentences_stage(work: Path, n: int, k: int) -> None:
    from labeldist.labels.sentences import read_sentences
    from labeldist.sts.models import PACKAGED, load_bi_encoder, resolve_model
    from labeldist.sts.onnx_backend import load_onnx_encoder, onnx_model_file, onnx_threads
    from labeldist.sts.scorers import MAX_LENGTH, encode_texts

    cache = work / "cache-sentences"
    os.environ["LABELDIST_CACHE"] = str(cache)
    path = resolve_model(PACKAGED)
    export_s, _ = timed(lambda: onnx_model_file(path), 1)  # once per model and machine: not part of a job
    txt = sentence_file(work, n)
    labels = read_sentences(txt, needs_cbow=False)
    texts, inverse = labels.text_ids
    print(f"sentences: {len(labels):,} ({len(texts):,} distinct); ONNX export {export_s:.1f} s", flush=True)

    model = load_bi_encoder(path, MAX_LENGTH)
    load_onnx_encoder(path, MAX_LENGTH, onnx_threads())
    torch_s, torch_emb = timed(lambda: model.encode(texts, batch_size=64, convert_to_numpy=True), 1)
    onnx_s, onnx_emb = timed(lambda: encode_texts(path, MAX_LENGTH, texts, backend="onnx"), 1)
    engine_torch_s, _ = timed(lambda: encode_texts(path, MAX_LENGTH, texts[: min(len(texts), 5120)]), 1)
    torch_unit = torch_emb / np.linalg.norm(torch_emb, axis=1, keepdims=True)
    tokens = np.array([len(e.ids) for e in load_onnx_encoder(path, MAX_LENGTH, onnx_threads()).tokenizer.encode(texts)])
    flops = model_flops_per_token(onnx_model_file(path), float(tokens.mean())) * tokens.sum()
    peak = gemm_gflops()
    component = float(np.abs(torch_unit - onnx_emb).max())

    import faiss

    def search() -> Any:
        index = faiss.IndexFlatIP(onnx_emb.shape[1])
        index.add(onnx_emb[inverse])
        return index.search(onnx_emb[inverse], k + 1)

    faiss_s, _ = timed(search, 1)
    floor = onnx_s + faiss_s

    shutil.rmtree(cache / "embeddings", ignore_errors=True)
    store = work / f"sentences{n}-store"
    shutil.rmtree(store, ignore_errors=True)
    env = dict(os.environ, LABELDIST_CACHE=str(cache), LABELDIST_PROGRESS_EVERY="30")
    job_s, err = run_labeldist(
        ["precompute", "sentences", str(txt), "--knn-only", "--k", str(k), "--out", str(store)], env
    )
    job_embed = stage_seconds(err, "embedding")
    same, tied, gap = lists_against(store, torch_unit, inverse, k)
    sample = min(SAMPLE_ROWS, len(labels))

    rate = len(texts) / torch_s
    row(
        f"sentence embedding, ONNX Runtime ({len(texts):,} texts)",
        f"{len(texts) / onnx_s:,.0f} sentences/s",
        f"torch encode {rate:,.0f}/s",
        f"{torch_s / onnx_s:.2f}x",
        ">= 1.8x",
    )
    row(
        "sentence embedding arithmetic (ONNX / torch encode)",
        f"{flops / onnx_s / 1e9:.0f} / {flops / torch_s / 1e9:.0f} GFLOP/s ({tokens.mean():.1f} word pieces a text)",
        f"float32 GEMM {peak:.0f} GFLOP/s",
        f"{flops / onnx_s / 1e9 / peak:.0%} / {flops / torch_s / 1e9 / peak:.0%} of it",
        "the most any float32 backend can do: 100%",
    )
    small = min(len(texts), 5120)
    row(
        "sentence embedding, torch through labeldist (encode_texts)",
        f"{small / engine_torch_s:,.0f} sentences/s",
        f"torch encode {rate:,.0f}/s",
        f"{(small / engine_torch_s) / rate:.2f}x",
        "1.0x",
    )
    if job_embed:
        row(
            "the job's embedding (workers, ONNX)",
            f"{len(texts) / job_embed:,.0f} sentences/s ({job_embed:.0f} s)",
            f"backend {len(texts) / onnx_s:,.0f}/s",
            f"{job_embed / onnx_s:.2f}x the time",
            "<= 1.0x",
        )
    row(
        f"sentence job, kNN k={k} (precompute --knn-only, {n:,})",
        f"{job_s:.1f} s",
        f"{floor:.1f} s (backend {onnx_s:.1f} + FAISS IP {faiss_s:.1f})",
        f"{job_s / floor:.2f}x",
        "<= 1.15x",
    )
    row(
        "sentence lists vs torch's embeddings (float64)",
        f"{same}/{sample} identical, {tied} equal but for ties <= {TIE:g}",
        f"a component {component:.1e}, a distance {gap:.1e}",
        f"{same + tied}/{sample}",
        f"{sample}/{sample}",
    )


def gemm_gflops(seconds: float = 3.0) -> float:
    """This machine's float32 matrix-product speed, GFLOP/s: NumPy's BLAS on (1024 x 384) @ (384 x 1536), the shape
    of a transformer's feed-forward layer over a batch of short sentences, every core, best of repeated calls."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((1024, 384), dtype=np.float32), rng.standard_normal((384, 1536), dtype=np.float32)
    best, until = np.inf, time.perf_counter() + seconds
    while time.perf_counter() < until:
        started = time.perf_counter()
        for _ in range(10):
            a @ b
        best = min(best, (time.perf_counter() - started) / 10)
    return 2 * 1024 * 384 * 1536 / best / 1e9


def model_flops_per_token(file: Path, length: float) -> float:
    """Floating-point operations of one token through the exported model: 2 x every weight matrix's size (the
    embedding tables are looked up, not multiplied) plus attention's two products over ``length`` tokens (2 x 2 x
    hidden x length a layer)."""
    import onnx

    model = onnx.load(str(file), load_external_data=False)
    matrices = [i for i in model.graph.initializer if len(i.dims) == 2 and "embeddings" not in i.name]
    macs = sum(int(np.prod(i.dims)) for i in matrices)
    hidden = min(min(i.dims) for i in matrices)
    layers = max(1, sum(1 for i in matrices if max(i.dims) > 2 * hidden) // 2)  # a feed-forward's two matrices
    return 2.0 * macs + layers * 4.0 * hidden * length


# ---------------------------------------------------------------------------------------------------- vectors
def vectors_stage(work: Path, n: int, k: int) -> None:
    import faiss

    x = np.random.default_rng(0).standard_normal((n, 64)).astype(np.float32)
    file = work / f"vectors{n}.npy"
    np.save(file, x)

    def search() -> Any:
        index = faiss.IndexFlatL2(x.shape[1])
        index.add(x)
        return index.search(x, k + 1)

    faiss_s, _ = timed(search, 1)
    store = work / f"vectors{n}-store"
    shutil.rmtree(store, ignore_errors=True)
    job_s, _ = run_labeldist(
        ["precompute", "vectors", str(file), "--knn-only", "--k", str(k), "--out", str(store)], dict(os.environ)
    )
    row(
        f"vectors kNN k={k} ({n:,} x 64, precompute --knn-only)",
        f"{job_s:.1f} s",
        f"FAISS flat L2 {faiss_s:.1f} s",
        f"{job_s / faiss_s:.2f}x",
        "as close to 1 as the store's writing allows",
    )


# ---------------------------------------------------------------------------------------------------- WMD kernel
def wmd_stage(pairs: int) -> None:
    """benchmarks/bench_wmd_kernel.py (its random COCO caption pairs, gensim on the same tokens), its figures."""
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_wmd_kernel.py"),
            "--pairs",
            str(pairs),
            "--repeats",
            "3",
            "--rows",
            "10",
            "--cols",
            "200",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT / "benchmarks",
    )
    if proc.returncode:
        raise SystemExit(f"bench_wmd_kernel.py failed:\n{proc.stderr[-2000:]}")
    ours = float(re.search(r"batched\s+wmd_pairs : +([0-9.]+) us/pair", proc.stdout).group(1))
    gensim = float(re.search(r"wmdistance: +([0-9.]+) us/pair", proc.stdout).group(1))
    row(
        f"caption-pair WMD kernel ({pairs:,} COCO caption pairs)",
        f"{ours:.1f} us a pair",
        f"gensim wmdistance {gensim:,.0f} us",
        f"{gensim / ours:.0f}x faster",
        ">= 50x",
    )


# ---------------------------------------------------------------------------------------------------- captions
def captions_stage(work: Path, n: int, k: int) -> None:
    from labeldist.labels.coco import load_json
    from labeldist.labels.synthetic_coco import write_entries
    from labeldist.store import exact_pairs_total

    if n <= 5_000:
        entries = load_json(ROOT / "data" / "coco" / "coco_karpathy_test.json")[:n]
        file = work / f"captions{n}.json"
        write_entries(entries, file)
    else:
        file, _ = make_inputs(work, n)
    store = work / f"captions{n}-store"
    shutil.rmtree(store, ignore_errors=True)
    job_s, _ = run_labeldist(
        ["precompute", "captions", str(file), "--knn-only", "--k", str(k), "--out", str(store)], dict(os.environ)
    )
    per_item = exact_pairs_total(str(store)) / n
    row(
        f"caption-set kNN k={k} ({n:,} images, {job_s:.0f} s)",
        f"{per_item:.0f} exact caption-set WMDs an item",
        f"k = {k}",
        f"{per_item / k:.2f}x",
        "<= 1.5x (150 an item)",
    )


# ---------------------------------------------------------------------------------------------------- API
def api_stage(work: Path) -> None:
    store = work / "api-stores" / "mpii-pose"
    if not store.exists():
        run_labeldist(
            ["precompute", "pose", str(ROOT / "data" / "mpii" / "mpii_valid_2958.csv"), "--out", str(store)],
            dict(os.environ),
        )
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_api.py"),
            "--stores",
            str(store.parent),
            "--store",
            "mpii-pose",
            "--workers",
            "2",
            "--clients",
            "16",
            "--scenarios",
            "neighbors,batches",
            "--duration",
            "3",
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        print(proc.stdout[-2000:], proc.stderr[-2000:])
        raise SystemExit("bench_api.py failed")
    print(proc.stdout[-3000:])
    rates = {}
    for line in proc.stdout.splitlines():  # scenario, store, clients, req/s, ...
        cells = line.split()
        if len(cells) > 3 and cells[0] in ("healthz", "neighbors", "batches") and cells[2] == "16":
            rates.setdefault(cells[0], float(cells[3].replace(",", "")))
    if {"healthz", "neighbors", "batches"} <= rates.keys():
        for name, goal in (("neighbors", ">= 1.5x"), ("batches", ">= 0.5x")):
            row(
                f"API {name} route, 16 clients",
                f"{rates[name]:,.0f} req/s",
                f"/healthz {rates['healthz']:,.0f} req/s",
                f"{rates[name] / rates['healthz']:.2f}x",
                goal,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stages", default="sentences,vectors,wmd,captions,api")
    parser.add_argument("--sentences", type=int, default=20_000, help="synthetic COCO sentences (default: %(default)s)")
    parser.add_argument("--vectors", type=int, default=100_000, help="vectors (default: %(default)s)")
    parser.add_argument("--captions", type=int, default=2_000, help="caption sets (default: %(default)s)")
    parser.add_argument("--pairs", type=int, default=2_000, help="caption pairs of the WMD kernel")
    parser.add_argument("--k", type=int, default=K)
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="floors-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"{machine()}; load average {os.getloadavg()[0]:.1f}; work in {work}", flush=True)
    stages = args.stages.split(",")
    if "sentences" in stages:
        sentences_stage(work, args.sentences, args.k)
    if "vectors" in stages:
        vectors_stage(work, args.vectors, args.k)
    if "wmd" in stages:
        wmd_stage(args.pairs)
    if "captions" in stages:
        captions_stage(work, args.captions, args.k)
    if "api" in stages:
        api_stage(work)
    print(f"\n{machine()}\n")
    print("| stage | measured | floor, same run | ratio | goal |\n|---|---|---|---|---|")
    for cells in ROWS:
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
