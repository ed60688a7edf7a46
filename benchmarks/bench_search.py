"""Latency of ``POST /v1/stores/{store}/search`` with a caption set on a caption store, against brute force.

Query labels are new caption sets: the first ``--captions`` captions of random images of the store (an image
has 5 to 7, so no query equals an item's label), the way a user types one or two captions. Prints, measured in
the same run on the same labels:

  - the first search of a freshly started app (labels read from the store, word vectors loaded, kernels warmed);
  - the search through the app (FastAPI's in-process TestClient: validation, the compute guard, the worker
    thread, JSON), median and 90th percentile over the queries, and how many exact distances each computed;
  - the baseline: the query's brute-force full row, ``distance.block(query, all items)`` with no bound and no
    pruning, then its top k (what a search costs without the pruning of the store's kNN lists);
  - the ratio baseline / search (> 1: the search is faster), and whether every answer equals the brute force.

The machine's load average is printed: on a shared machine wall times stretch with it. Build the store first:

    .venv/bin/labeldist precompute captions data/coco/coco_karpathy_test.json --knn-only --k 100 \\
        --out /tmp/search-bench/coco
    .venv/bin/python benchmarks/bench_search.py --store /tmp/search-bench/coco [--queries 30] [--k 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient

from labeldist.api.main import create_app
from labeldist.api.settings import Settings
from labeldist.core.knn import topk_rows
from labeldist.view.stored import stored_labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="/tmp/search-bench/coco", help="a caption store (kind caption_wmd)")
    parser.add_argument("--queries", type=int, default=30, help="query caption sets (default: %(default)s)")
    parser.add_argument("--captions", type=int, default=2, help="captions in each query (default: %(default)s)")
    parser.add_argument("--k", type=int, default=10, help="nearest items asked (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    store = Path(args.store).resolve()
    with tempfile.TemporaryDirectory() as folder:  # the service serves a folder of stores: link this one in it
        os.symlink(store, Path(folder) / store.name)
        settings = Settings(stores=Path(folder), access_log=False)
        with TestClient(create_app(settings)) as client:
            served = client.app.state.registry.get(store.name)
            kind = served.manifest["kind"]
            if kind != "caption_wmd":
                raise SystemExit(f"{store}: kind {kind!r}, not a caption store")
            reader_labels = stored_labels(served.reader)
            rng = np.random.default_rng(args.seed)
            images = rng.choice(len(reader_labels), size=args.queries + 1, replace=False)
            queries = [reader_labels.captions(int(i))[: args.captions] for i in images]
            url = f"/v1/stores/{store.name}/search"

            t0 = time.perf_counter()
            r = client.post(url, json={"label": queries[-1], "k": args.k})
            first = time.perf_counter() - t0
            assert r.status_code == 200, r.text

            labels, distance = served.labels_and_distance()
            search_s, brute_s, computed, equal = [], [], [], 0
            for label in queries[:-1]:
                t0 = time.perf_counter()
                r = client.post(url, json={"label": label, "k": args.k})
                search_s.append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text
                answer = r.json()
                computed.append(answer["computed"])

                query = type(labels).from_json(label, like=labels)  # as the service reads it (not timed)
                t0 = time.perf_counter()
                row = distance.block(query, labels).astype(np.float32)
                indices, dists = topk_rows(row, args.k)
                brute_s.append(time.perf_counter() - t0)
                equal += answer["indices"] == indices[0].tolist() and np.array_equal(
                    np.float32(answer["distances"]), dists[0]
                )

    n = served.n_items
    med_search, med_brute = statistics.median(search_s), statistics.median(brute_s)
    p90 = float(np.percentile(search_s, 90))
    print(
        f"store {store} ({n} images, kind {kind}); {len(search_s)} queries of {args.captions} caption(s), "
        f"k = {args.k}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    print(f"first search of a fresh app (labels, word vectors, kernels loaded): {first:.2f} s")
    print(
        f"search through the app:     median {med_search * 1e3:7.1f} ms   p90 {p90 * 1e3:7.1f} ms   "
        f"exact distances computed: median {statistics.median(computed):.0f} of {n} "
        f"({statistics.median(computed) / n:.1%})"
    )
    print(
        f"baseline, brute-force row:  median {med_brute * 1e3:7.1f} ms   (block of the query against all {n} "
        "images, no bound, no pruning, then top k)"
    )
    print(f"ratio baseline / search:    {med_brute / med_search:.2f}x")
    print(f"answers equal to the brute force (indices and float32 distances): {equal} of {len(search_s)}")


if __name__ == "__main__":
    main()
