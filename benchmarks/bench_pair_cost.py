"""The unit costs of on-demand distances, per kind: what the service's compute budget (api/serving/compute.py) estimates
a request with, measured against what each kind declares.

    .venv/bin/python benchmarks/bench_pair_cost.py [--repeats 3]

For each kind, on its real labels, times the service's own code (:func:`labeldist.view.pairs.compute_planned`) on two
shapes of request: a minibatch's pairwise matrix (one ``block`` call over a rectangle) and scattered pairs (one
call per distinct row). From the two it solves for the cost of a call and of a pair, and prints each next to the
kind's declared ``cost_per_call_s`` / ``cost_per_pair_s`` (and ``cost_per_item_s``), and the estimate of each
request next to its first (cold) run as a ratio: above 1 the budget over-estimates, i.e. refuses early; below 1 a
request may run longer than its budget. Medians of ``--repeats`` are shown too (the sentence kind caches its
embeddings, so only its first run computes).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from labeldist.view.pairs import compute_planned, plan_pairs  # noqa: E402


def kinds(models: Path | None) -> list[tuple[str, object, object, int]]:
    """(name, labels, distance, pairs a request shape should hold) of every built-in kind, on shipped data."""
    from labeldist.distances.caption_sets import CaptionSetWMD
    from labeldist.distances.layout import LayoutMIoU
    from labeldist.distances.pose import PoseDistance
    from labeldist.labels.captions import read_captions
    from labeldist.labels.lsun_rooms import generate_layouts
    from labeldist.labels.pose_files import read_mpii_csv

    out = [
        ("pose", read_mpii_csv(ROOT / "data/mpii/mpii_valid_2958.csv"), PoseDistance(), 100_000),
        ("layout_miou", generate_layouts(600, layout_type=5, height=128, width=128, seed=0), LayoutMIoU(), 4000),
        ("caption_wmd", read_captions(ROOT / "data/coco/coco_karpathy_test.json"), CaptionSetWMD(), 2000),
    ]
    try:
        from labeldist.distances.sts import SentenceRelevance
        from labeldist.labels.sentences import read_caption_sentences

        sentences = read_caption_sentences(ROOT / "data/coco/coco_karpathy_test.json", empty="drop")
        # BERT alone: the part of every sentence scorer that costs (coarse-to-fine only skips some pairs)
        kind = SentenceRelevance(scorer="bert", model=str(models)) if models else SentenceRelevance(scorer="bert")
        out.append(("sentence_relevance", sentences, kind, 2000))
    except Exception as e:  # the sentence kind needs its model; say so rather than stop
        print(f"sentence_relevance: not measured ({type(e).__name__}: {e})")
    return out


def shapes(n: int, pairs: int, rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    m = int(np.sqrt(2 * pairs))
    members = rng.choice(n, m, replace=False)
    iu, ju = np.triu_indices(m, 1)
    scattered = rng.choice(n, size=(pairs, 2))
    return {"pairwise": (members[iu], members[ju]), "scattered": (scattered[:, 0], scattered[:, 1])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", type=Path, help="sentence model folder (default: the packaged MiniLM)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(
        f"{'kind':20s} {'shape':10s} {'pairs':>8s} {'calls':>6s} {'items':>6s} {'first s':>8s} {'median s':>9s} "
        f"{'estimated s':>11s} {'est/first':>9s}"
    )
    for name, labels, distance, pairs in kinds(args.models):
        distance.block(labels.subset(np.array([0, 1])), labels.subset(np.array([2, 3])))  # compile, load models
        cls = type(distance)
        timed = {}
        for shape, (a, b) in shapes(len(labels), pairs, rng).items():
            plan = plan_pairs(a, b)
            seconds = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                compute_planned(labels, distance, plan)
                seconds.append(time.perf_counter() - t)
                # the sentence distance caches embeddings: only the first run pays for them
            med = statistics.median(seconds)
            est = plan.cost_s(cls)
            timed[shape] = (plan, max(seconds))
            print(
                f"{name:20s} {shape:10s} {plan.kernel_pairs:8d} {plan.calls:6d} {plan.items:6d} {seconds[0]:8.3f} "
                f"{med:9.3f} {est:11.3f} {est / seconds[0]:9.2f}"
            )
        # seconds = calls * c + pairs * p + items * i, solved on the slowest (first, cold) runs: for a kind that
        # prepares items (cost_per_item_s > 0, the sentence kind) the call and pair terms are taken as declared
        (p1, s1), (p2, s2) = timed["pairwise"], timed["scattered"]
        if cls.cost_per_item_s > 0:
            rest = [s - p.calls * cls.cost_per_call_s - p.kernel_pairs * cls.cost_per_pair_s for p, s in timed.values()]
            item_s = max(r / p.items for r, (p, _) in zip(rest, timed.values()))
            print(f"{name:20s} measured: {item_s * 1e3:8.2f} ms an item; declared: {cls.cost_per_item_s * 1e3:8.2f} ms")
            continue
        coeffs = np.linalg.solve(
            np.array([[p1.calls, p1.kernel_pairs], [p2.calls, p2.kernel_pairs]], float), np.array([s1, s2])
        )
        call_s, pair_s = (max(float(c), 0.0) for c in coeffs)
        print(
            f"{name:20s} measured: {call_s * 1e6:8.1f} us a call, {pair_s * 1e6:8.2f} us a pair; declared: "
            f"{cls.cost_per_call_s * 1e6:8.1f} us, {cls.cost_per_pair_s * 1e6:8.2f} us"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
