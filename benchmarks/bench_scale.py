"""COCO-2014's sizes: exact kNN (k = 100) of sentences and caption sets at growing N, end to end through the command.

Each run is ``labeldist precompute {sentences,captions} FILE --knn-only --k 100`` in a subprocess on this machine's
default LocalCluster (one single-threaded worker per core), with a fresh ``LABELDIST_CACHE``. Inputs: the shipped
Karpathy test split (5,000 images, 25,009 captions) and, above it, synthetic COCO-2014-sized sets grown from it
(:mod:`labeldist.labels.synthetic_coco`, seed 0; its realism check is benchmarks/bench_synthetic_coco.py).
Printed per run:
  - wall time, CPU seconds of the whole process tree (``RUSAGE_CHILDREN``), the peak RSS of the command, of each
    Dask worker (the largest printed) and of the tree (sampled every 0.2 s);
  - the stages, from the command's own progress lines: embedding (sentences) and the row blocks;
  - exactness on sampled rows against an independent brute force: for sentences, one float64 product of the
    sampled rows' embeddings with all N (read from the job's embeddings file), stably sorted; for caption sets,
    the distance's whole rows (``CaptionSetWMD.block``, every pair exact, no bound);
  - the baselines measured in the same run: for caption sets, one row block by the path before the cascade
    (the caption-level bound for every pair, ``pruned_block_kernel``) against the cascade on one core, and the
    old path's CPU for the whole store from it; for sentences, the path a kNN-only store took before the blocked
    search, one row block of whole rows (``labeldist.engine.blocks.block_kernel``, the default 256-row block at
    25k) timed on one core, times the blocks the store has; and the growth exponent of each stage between sizes.

    .venv/bin/python benchmarks/bench_scale.py [--sentences 25009 100000] [--captions 5000 20000 40000]
        [--full]   # adds 616,767 sentences and 123,287 caption sets (about an hour each on 2 cores)
"""

from __future__ import annotations

import argparse
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import zarr

from labeldist.view.stored import stored_distance, stored_labels

ROOT = Path(__file__).resolve().parents[1]
COCO = ROOT / "data" / "coco" / "coco_karpathy_test.json"
LABELDIST = str(Path(sys.executable).with_name("labeldist"))
K = 100
SAMPLE_ROWS = 64
FULL_SENTENCES, FULL_IMAGES = 616_767, 123_287


def make_inputs(folder: Path, images: int, swap_borrowed: bool = False) -> tuple[Path, Path]:
    """A Karpathy JSON of ``images`` images and the same captions one a line (the shipped split when 5,000).
    ``swap_borrowed``: the sentences' variant, whose borrowed captions get their words swapped too (without it a
    third of COCO-2014-sized captions repeat another word for word; BENCHMARKS.md, "Synthetic COCO-2014")."""
    tag = "s" if swap_borrowed else ""
    json_file, txt_file = folder / f"coco{images}{tag}.json", folder / f"coco{images}{tag}.txt"
    if not json_file.exists():
        from labeldist.labels.coco import load_json
        from labeldist.labels.synthetic_coco import make_coco_like, write_entries, write_sentences

        source = load_json(COCO)
        if images == len(source):
            entries = source
        else:
            entries = make_coco_like(source, images, seed=0, swap_borrowed=swap_borrowed)
        write_entries(entries, json_file)
        write_sentences(entries, txt_file)
    return json_file, txt_file


class TreeWatch:
    """Peak RSS of a process, of each of its descendants and of the whole tree, sampled every ``every`` s."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        self.root, self.every = psutil.Process(pid), every
        self.peak: dict[int, tuple[int, str]] = {}
        self.tree_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                return
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    name = " ".join(p.cmdline()[:3])
                except psutil.Error:
                    continue
                total += rss
                if rss > self.peak.get(p.pid, (0, ""))[0]:
                    self.peak[p.pid] = (rss, name)
            self.tree_peak = max(self.tree_peak, total)
            self._stop.wait(self.every)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        main = self.peak.get(self.root.pid, (0, ""))[0]
        workers = [rss for pid, (rss, name) in self.peak.items() if pid != self.root.pid and rss > 100 * 2**20]
        return {
            "command_gb": main / 2**30,
            "worker_gb": max(workers, default=0) / 2**30,
            "workers": len(workers),
            "tree_gb": self.tree_peak / 2**30,
        }


def stage_seconds(stderr: str, label: str) -> float | None:
    """Seconds of the last progress line of ``label`` (``... done in 01:02``) in the command's output."""
    found = re.findall(rf"{re.escape(label)}: [^\n]*done in ([0-9:]+)", stderr)
    if not found:
        return None
    parts = [int(p) for p in found[-1].split(":")]
    return float(sum(p * 60**i for i, p in enumerate(reversed(parts))))


def run_command(args: list[str], cache: Path) -> dict[str, float | str]:
    """``labeldist ARGS`` from scratch (its ``--out`` and ``cache`` removed first), measured."""
    store = Path(args[args.index("--out") + 1])
    for folder in (store, cache):
        shutil.rmtree(folder, ignore_errors=True)
    env = dict(os.environ, LABELDIST_CACHE=str(cache), LABELDIST_PROGRESS_EVERY="30")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started, epoch = time.perf_counter(), time.time()
    proc = subprocess.Popen([LABELDIST, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watch = TreeWatch(proc.pid)
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    memory = watch.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"labeldist {' '.join(args)} failed ({proc.returncode}):\n{err[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, **memory, "stderr": err, "started": epoch}


def sentence_exactness(store: Path, txt: Path, cache: Path) -> tuple[int, float]:
    """Rows (of :data:`SAMPLE_ROWS`) whose stored list equals a float64 brute force; the largest distance gap."""
    os.environ["LABELDIST_CACHE"] = str(cache)
    from labeldist.distances.sts import SentenceRelevance
    from labeldist.labels.sentences import read_sentences
    from labeldist.store import StoreReader
    from labeldist.sts.scorers import load_embeddings

    labels = read_sentences(txt, needs_cbow=False)
    texts, inverse = labels.text_ids
    reader = StoreReader(str(store))
    distance = stored_distance(reader)  # the store's backend: its job's embeddings file
    assert isinstance(distance, SentenceRelevance)
    e = np.asarray(load_embeddings(distance._cache_file(distance.model, texts), len(texts)), dtype=np.float64)
    indices, dists = reader.knn()
    rows = np.random.default_rng(0).choice(len(labels), SAMPLE_ROWS, replace=False)
    same, gap = 0, 0.0
    for row in rows:
        d = (1.0 - np.clip(e[inverse] @ e[inverse[row]], 0.0, 1.0)).astype(np.float32)
        d[inverse == inverse[row]] = 0.0
        d[row] = np.inf
        order = np.lexsort((np.arange(len(d)), d))[:K]
        same += int(np.array_equal(order, indices[row]))
        gap = max(gap, float(np.abs(d[order] - dists[row]).max()))
    return same, gap


def caption_exactness(store: Path) -> tuple[int, float]:
    """Rows whose stored list equals the whole rows of every exact caption-set WMD (no bound, no pruning)."""
    from labeldist.core.knn import topk_rows
    from labeldist.store import StoreReader

    reader = StoreReader(str(store))
    labels, distance = stored_labels(reader), stored_distance(reader)
    indices, dists = reader.knn()
    rows = np.sort(np.random.default_rng(0).choice(len(labels), 8, replace=False))
    same, gap = 0, 0.0
    for row in rows:
        whole = distance.block(labels.subset(np.array([row])), labels).astype(np.float32)
        idx, dd = topk_rows(whole, K, exclude=np.array([row]))
        same += int(np.array_equal(idx[0], indices[row]))
        gap = max(gap, float(np.abs(dd[0] - dists[row]).max()))
    return same, gap


def caption_block_s(store: Path) -> tuple[float, float, int, bool]:
    """One core's seconds for one default row block (from the middle of the store) by the path before the
    cascade (``pruned_block_kernel``: the caption-level bound for every pair, then exact values) and by the
    cascade (``CaptionSetWMD.knn_block``), the store's blocks, and whether both give the same lists."""
    from threadpoolctl import threadpool_limits

    from labeldist.engine.blocks import default_block_rows, pruned_block_kernel
    from labeldist.store import StoreReader

    reader = StoreReader(str(store))
    labels, distance = stored_labels(reader), stored_distance(reader)
    rows = default_block_rows(len(labels))
    start = (len(labels) // 2) // rows * rows
    stop = min(start + rows, len(labels))
    with threadpool_limits(1):
        distance.knn_block(labels, 0, 2, K)  # compiled, preprocessed: as a worker's first block leaves it
        pruned_block_kernel(labels, distance, 0, 2, K)
        started = time.process_time()
        old = pruned_block_kernel(labels, distance, start, stop, K)
        old_s = time.process_time() - started
        started = time.process_time()
        new = distance.knn_block(labels, start, stop, K)
        new_s = time.process_time() - started
    assert old is not None and new is not None
    same = np.array_equal(old[0], new[0]) and np.array_equal(old[1], new[1])
    return old_s, new_s, math.ceil(len(labels) / rows), same


def caption_stages(store: Path, started: float, wall: float, workers: int = 2) -> dict[str, float]:
    """The run's serial and parallel parts, read off the store: ``created`` in its manifest ends the reading of the
    labels, and each row block's progress chunk is written when the block is done (its file's time). Returns the
    seconds reading, the block stage (layout to the last block), the rest (closing), the worker-seconds of the
    blocks (``workers`` busy through the block stage) and the longest gap between blocks done."""
    from datetime import datetime

    attrs = zarr.open_group(str(store), mode="r").attrs.asdict()["labeldist"]
    created = datetime.fromisoformat(attrs["created"]).timestamp()
    done = sorted(p.stat().st_mtime for p in (store / "progress" / "blocks" / "c").iterdir())
    blocks = done[-1] - created
    return {
        "reading": created - started,
        "blocks": blocks,
        "rest": started + wall - done[-1],
        "worker_s": workers * blocks,
        "block_s": workers * blocks / len(done),
    }


def projected_wall(stages: dict[str, float], workers: int) -> float:
    """wall(W) = serial + worker-seconds / W + one block (the last wave's tail), one core a worker: the serial
    parts (reading, closing) as measured, the blocks shared out."""
    return stages["reading"] + stages["rest"] + stages["worker_s"] / workers + stages["block_s"]


def old_sentence_block_s(txt: Path, cache: Path) -> tuple[float, int]:
    """One core's seconds for one default row block of whole rows (the path before the blocked search), and the
    store's blocks at that size."""
    os.environ["LABELDIST_CACHE"] = str(cache)
    from threadpoolctl import threadpool_limits

    from labeldist.distances.sts import SentenceRelevance
    from labeldist.engine.blocks import block_kernel, default_block_rows
    from labeldist.labels.sentences import read_sentences

    labels = read_sentences(txt, needs_cbow=False)
    distance = SentenceRelevance("bert")
    rows = default_block_rows(len(labels))
    with threadpool_limits(1):
        block_kernel(labels, distance, 0, rows, K)  # the embeddings loaded, as a worker's first block does
        started = time.process_time()
        block_kernel(labels, distance, rows, 2 * rows, K)
        took = time.process_time() - started
    return took, math.ceil(len(labels) / rows)


def growth(rows: list[dict], key: str) -> str:
    """The exponent b of t ~ N^b between successive sizes."""
    parts = []
    for a, b in zip(rows, rows[1:]):
        if a.get(key) and b.get(key):
            parts.append(f"{math.log(b[key] / a[key]) / math.log(b['n'] / a['n']):.2f}")
    return ", ".join(parts) or "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, nargs="*", default=[25_009, 100_000])
    parser.add_argument("--captions", type=int, nargs="*", default=[5_000, 20_000, 40_000])
    parser.add_argument("--full", action="store_true", help="add COCO-2014's full sizes")
    parser.add_argument("--workdir", type=Path, default=None, help="where inputs and stores go (default: a temp dir)")
    args = parser.parse_args()
    sentences = sorted(set(args.sentences + ([FULL_SENTENCES] if args.full else [])))
    captions = sorted(set(args.captions + ([FULL_IMAGES] if args.full else [])))
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores, work in {work}", flush=True)

    rows: list[dict] = []
    for n in sentences:
        images = 5_000 if n == 25_009 else math.ceil(n / 5) + 1
        _, txt = make_inputs(work, images, swap_borrowed=True)
        with open(txt) as f:
            lines = [line for _, line in zip(range(n), f)]
        sized = work / f"sentences{n}.txt"
        sized.write_text("".join(lines))
        cache, store = work / f"cache{n}", work / f"sentences{n}"
        run = run_command(
            ["precompute", "sentences", str(sized), "--knn-only", "--k", str(K), "--out", str(store)], cache
        )
        embed, blocks = stage_seconds(run["stderr"], "embedding"), stage_seconds(run["stderr"], "sentence_relevance")
        same, gap = sentence_exactness(store, sized, cache)
        old_block, old_blocks = old_sentence_block_s(sized, cache)
        row = {
            "n": n,
            "wall": run["wall_s"],
            "embed": embed,
            "blocks": blocks,
            "old_blocks_cpu": old_block * old_blocks,
        }
        rows.append(row)
        print(
            f"sentences N={n:,}: wall {run['wall_s']:.0f} s, CPU {run['cpu_s']:.0f} s, embedding {embed} s, "
            f"blocks {blocks} s; peak RSS: command {run['command_gb']:.2f} GB, largest worker "
            f"{run['worker_gb']:.2f} GB ({run['workers']} workers), tree {run['tree_gb']:.2f} GB; exact: "
            f"{same}/{SAMPLE_ROWS} sampled rows identical to a float64 brute force, largest distance gap {gap:.1e}; "
            f"baseline (whole rows, the path before): one {old_block:.2f} CPU-s block x {old_blocks} blocks = "
            f"{old_block * old_blocks:.0f} CPU-s for the block stage",
            flush=True,
        )
    if len(rows) > 1:
        print(
            f"sentences growth N^b: wall {growth(rows, 'wall')}; embedding {growth(rows, 'embed')}; "
            f"blocks {growth(rows, 'blocks')}; baseline blocks {growth(rows, 'old_blocks_cpu')}",
            flush=True,
        )

    rows = []
    for n in captions:
        json_file, _ = make_inputs(work, n)
        cache, store = work / f"ccache{n}", work / f"captions{n}"
        run = run_command(
            ["precompute", "captions", str(json_file), "--knn-only", "--k", str(K), "--out", str(store)], cache
        )
        same, gap = caption_exactness(store)
        old_s, new_s, blocks, agree = caption_block_s(store)
        stages = caption_stages(store, float(run["started"]), float(run["wall_s"]))
        exact_pairs = float(np.asarray(zarr.open_array(str(store / "progress" / "exact_pairs"))[:]).sum())
        pruned = 1 - exact_pairs / (n * (n - 1))
        rows.append({"n": n, "wall": run["wall_s"], "cpu": run["cpu_s"], "old_cpu": old_s * blocks})
        print(
            f"captions N={n:,}: wall {run['wall_s']:.0f} s, CPU {run['cpu_s']:.0f} s; peak RSS: command "
            f"{run['command_gb']:.2f} GB, largest worker {run['worker_gb']:.2f} GB ({run['workers']} workers), tree "
            f"{run['tree_gb']:.2f} GB; exact: {same}/8 sampled rows identical to whole rows of exact WMD, largest "
            f"gap {gap:.1e}; pruned {100 * pruned:.1f} % of pairs, {exact_pairs / n:.0f} exact pairs an item; "
            f"baseline, one block on one core: before the cascade {old_s:.1f} s, the cascade {new_s:.1f} s "
            f"({old_s / new_s:.2f}x; same lists: {agree}), so {old_s * blocks:.0f} CPU-s for the old path's "
            f"{blocks} blocks; stages: reading {stages['reading']:.0f} s, blocks {stages['blocks']:.0f} s "
            f"({stages['worker_s']:.0f} worker-s, {stages['block_s']:.1f} s a block), closing {stages['rest']:.0f} s; "
            f"projected wall on 16 / 64 workers: {projected_wall(stages, 16):.0f} / {projected_wall(stages, 64):.0f} s",
            flush=True,
        )
    if len(rows) > 1:
        print(
            f"captions growth N^b: wall {growth(rows, 'wall')}; CPU {growth(rows, 'cpu')}; "
            f"baseline CPU {growth(rows, 'old_cpu')}",
            flush=True,
        )


if __name__ == "__main__":
    main()
