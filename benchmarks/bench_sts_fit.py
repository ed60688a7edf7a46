r"""``sts fit``'s training step: the padded batch (the baseline) against length groups, in one run.

The same STS-B training batches (16 pairs, seed 0) through the same MiniLM, each way timed over ``--steps`` steps
after ``--warmup``: forward, backward, gradient clipping and the optimiser step, as
:func:`labeldist.sts.fit.fit` runs them. Each way trains its own copy of the model, the ways taking turns step by
step. Ways:

- ``padded``: one padded batch a side, AdamW's per-parameter loop (the step before length groups);
- ``padded-fused``: the same with fused AdamW;
- ``groups-P``: both sides' texts in length groups (:func:`labeldist.sts.fit.length_groups`) with a pass costing
  ``P`` token positions, fused AdamW (``P`` = ``PASS_TOKENS`` is what ``sts fit`` runs).

Also prints how many token positions each way computes against the texts' own, and the largest difference of the
embeddings (eval mode, so no dropout) between the padded batch and its groups.

    .venv/bin/python benchmarks/bench_sts_fit.py --steps 40
"""

from __future__ import annotations

import argparse
import time
from copy import deepcopy
from pathlib import Path

import numpy as np

from labeldist.sts import fit as sts_fit
from labeldist.sts.stsb import read_sts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="timed steps a way (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (default: %(default)s)")
    parser.add_argument("--pass-tokens", type=int, nargs="+", default=[24, 64, sts_fit.PASS_TOKENS])
    args = parser.parse_args()

    import torch
    from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss

    train = read_sts(Path(sts_fit.__file__).parent / "data" / "sts-train.csv")
    config = sts_fit.FitConfig(architecture="bi", loss="cosine", epochs=1)
    order = np.random.default_rng(0).permutation(len(train))
    batches = [order[s * 16 : (s + 1) * 16] for s in range(args.warmup + args.steps)]

    sts_fit.seed_everything(0)
    model = sts_fit._load_base(config)

    def texts(batch: np.ndarray) -> list[str]:
        return [train.first[i] for i in batch] + [train.second[i] for i in batch]

    # the same embeddings, padded or grouped (eval mode: no dropout)
    model.eval()
    with torch.no_grad():
        features = model.preprocess(texts(batches[0]))
        padded = model(dict(features))["sentence_embedding"]
        grouped = sts_fit.forward_in_groups(model, features, "sentence_embedding")
    print(f"embeddings, padded batch vs its groups: largest difference {float((padded - grouped).abs().max()):.2e}")
    lengths = [model.preprocess(texts(b))["attention_mask"].sum(dim=1).numpy() for b in batches]
    print(f"token positions a step: the texts' own {sum(int(x.sum()) for x in lengths) / len(batches):.0f}")

    # each way trains its own copy of the model; the ways take turns, step by step, so that a machine's drift
    # weighs on all of them alike
    ways = ["padded", "padded-fused"] + [f"groups-{p}" for p in args.pass_tokens]
    runs = {}
    for way in ways:
        copy = deepcopy(model).train()
        optimizer = torch.optim.AdamW(copy.parameters(), lr=2e-5, fused=way != "padded")
        runs[way] = (copy, CosineSimilarityLoss(copy), optimizer, [])
    for s, batch in enumerate(batches):
        y = torch.tensor(train.relevance[batch], dtype=torch.float32)
        for way in ways:
            copy, loss, optimizer, seconds = runs[way]
            started = time.perf_counter()
            features = copy.preprocess(texts(batch))
            if way.startswith("groups-"):
                both = sts_fit.forward_in_groups(copy, features, "sentence_embedding", int(way.split("-")[1]))
            else:
                both = copy(features)["sentence_embedding"]
            value = loss.compute_loss_from_embeddings([both[:16], both[16:]], y)
            optimizer.zero_grad()
            value.backward()
            torch.nn.utils.clip_grad_norm_(copy.parameters(), 1.0)
            optimizer.step()
            if s >= args.warmup:
                seconds.append(time.perf_counter() - started)

    def positions_and_passes(way: str) -> tuple[float, float]:
        if not way.startswith("groups-"):
            return sum(len(x) * int(x.max()) for x in lengths) / len(batches), 1.0
        groups = [sts_fit.length_groups(x, int(way.split("-")[1])) for x in lengths]
        positions = sum(sum(len(g) * int(x[g].max()) for g in gs) for x, gs in zip(lengths, groups))
        return positions / len(batches), float(np.mean([len(gs) for gs in groups]))

    base = float(np.median(runs["padded"][3]))
    print(f"{'way':<14} {'s/step':>7} {'vs padded':>9} {'positions':>9} {'passes':>6}")
    for way in ways:
        step = float(np.median(runs[way][3]))
        positions, passes = positions_and_passes(way)
        print(f"{way:<14} {step:7.3f} {step / base:8.2f}x {positions:9.0f} {passes:6.1f}")
    print(f"torch threads: {torch.get_num_threads()}; an epoch is {int(np.ceil(len(train) / 16))} steps")


if __name__ == "__main__":
    main()
