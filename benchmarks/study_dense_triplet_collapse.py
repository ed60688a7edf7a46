"""Why does the dense triplet loss collapse for a new user? One change at a time, at small scale.

The report: ResNet-18 on 64 px renders of MPII poses, CPU, Adam lr 1e-3, minibatches of 150 (the anchor, its 5
label-nearest neighbours, random others), ``dense_triplet`` with its defaults (L2-normalised embeddings, squared
Euclidean distance, margin 0.03, mean over every dense triplet): from about step 10 the loss sat at the margin
(0.030 +- 0.001) and the test embeddings ended with a mean pairwise cosine of 0.9987 (0.965 untrained).

Here, the same at a scale this CPU runs in minutes: the 2958 poses of ``data/mpii/mpii_valid_2958.csv``
(centre/scale normalised, :class:`labeldist.distances.pose.PoseDistance`), each drawn once by
:func:`labeldist.trainer.render.pose.render` at ``--px`` (32) pixels; the first 2458 train, the last 500 test.
A step takes one minibatch of ``--size`` (48) items: an anchor drawn from the training poses, its 5 nearest
training poses, random others, as the service draws them. Every configuration starts from the same untrained
ResNet-18 (128-d head) and sees the same minibatches; each changes one thing from the new user's run (``base``):

==============  ===============================================================================================
base            dense_triplet, margin 0.03, L2-normalised, all triplets, Adam lr 1e-3 (the report)
margin=0.1      ... margin 0.1
margin=0.2      ... margin 0.2 (binary_triplet's default)
no-l2           ... embeddings not normalised
gap>=10%        ... only triplets whose label distances differ by 10 % or more (no near-ties)
adam-1e-4       ... Adam lr 1e-4
sgd-paper       ... SGD lr 0.01, momentum 0.9, weight decay 5e-4 (Kim et al.'s recipe, their code's settings)
sgd+m0.2        ... SGD recipe and margin 0.2
log_ratio       the log-ratio loss, Adam lr 1e-3 (a healthy reference)
==============  ===============================================================================================

Columns: ``loss`` the mean training loss over the last 50 steps and ``sd/mean`` its relative spread; ``act`` the
share of triplets whose hinge is active then; ``cos train`` the mean pairwise cosine of the step's embeddings
(train mode, :func:`labeldist.trainer.training.monitor.embedding_spread`) over the last 50 steps; ``cos test`` and
``var test`` those of the 500 test embeddings (eval mode); ``top5`` the mean label distance from each test pose
to its 5 nearest test poses by embedding cosine, divided by the mean label distance to every other test pose
(1 = chance, lower is better; the first line gives it for the untrained network and
for the 5 label-nearest poses); ``warn`` the step and kind of the first
:class:`labeldist.trainer.training.monitor.TrainingWatch` warning.

    nice -n 10 .venv/bin/python benchmarks/study_dense_triplet_collapse.py            # every configuration
    nice -n 10 .venv/bin/python benchmarks/study_dense_triplet_collapse.py base sgd-paper --steps 300 --trace 25
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from labeldist.distances.pose import PoseDistance
from labeldist.labels.pose_files import read_mpii_csv
from labeldist.trainer.losses import DenseTripletLoss, make_loss
from labeldist.trainer.render.pose import item, render
from labeldist.trainer.training.models import ResNetEmbedding
from labeldist.trainer.training.monitor import TrainingWatch, embedding_spread

REPO = Path(__file__).resolve().parents[1]
CSV = REPO / "data" / "mpii" / "mpii_valid_2958.csv"
N_TEST, NEIGHBOURS = 500, 5


@dataclass(frozen=True)
class Config:
    name: str
    changed: str
    loss: str = "dense_triplet"
    margin: float = 0.03
    normalize: bool = True
    min_gap: float = 0.0
    optimizer: str = "adam"
    lr: float = 1e-3


CONFIGS = [
    Config("base", "the new user's run"),
    Config("margin=0.1", "margin 0.1", margin=0.1),
    Config("margin=0.2", "margin 0.2", margin=0.2),
    Config("no-l2", "not normalised", normalize=False),
    Config("gap>=10%", "no near-tie triplets", min_gap=0.1),
    Config("adam-1e-4", "Adam lr 1e-4", lr=1e-4),
    Config("sgd-paper", "SGD 0.01 m0.9 wd5e-4", optimizer="sgd", lr=0.01),
    Config("sgd+m0.2", "SGD recipe, margin 0.2", optimizer="sgd", lr=0.01, margin=0.2),
    Config("log_ratio", "log_ratio, Adam 1e-3", loss="log_ratio"),
]


class StudyDenseTriplet(DenseTripletLoss):
    """:class:`DenseTripletLoss` with the two things the study varies that it does not expose: normalisation, and
    a minimum relative gap between the two label distances of a triplet (near-ties left out)."""

    def __init__(self, margin: float, normalize: bool, min_gap: float) -> None:
        super().__init__(margin)
        self.normalize, self.min_gap = normalize, min_gap

    def compute(self, embeddings: torch.Tensor, distances: torch.Tensor, pairwise: torch.Tensor | None) -> torch.Tensor:
        f = F.normalize(embeddings, dim=-1) if self.normalize else embeddings
        d_f = (f[:, 1:] - f[:, :1]).pow(2).sum(-1)
        near, far = distances[:, :, None], distances[:, None, :]
        nearer = (near < far) & (far - near >= self.min_gap * far)
        nearer = nearer.to(f)
        hinge = F.relu(d_f[:, :, None] - d_f[:, None, :] + self.margin)
        self.active = float(((hinge > 0).to(f) * nearer).sum() / nearer.sum().clamp_min(1))
        return (hinge * nearer).sum((1, 2)) / nearer.sum((1, 2)).clamp_min(1)


def load(px: int) -> tuple[torch.Tensor, np.ndarray]:
    """Every pose drawn once (uint8 ``(N, 3, px, px)``) and the pose distances between them."""
    poses = read_mpii_csv(CSV, normalization="center_scale")
    images = np.stack([render(item(poses, i), px, np.random.default_rng([7, i])) for i in range(len(poses))])
    return torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(), PoseDistance().block(poses, poses)


def minibatches(dist: np.ndarray, n_train: int, size: int, steps: int, seed: int) -> list[np.ndarray]:
    """``steps`` minibatches of training indices: anchor, its 5 label-nearest training poses, random others."""
    rng = np.random.default_rng(seed)
    train = dist[:n_train, :n_train]
    out = []
    for _ in range(steps):
        a = int(rng.integers(n_train))
        order = np.argsort(train[a], kind="stable")
        near = [int(i) for i in order if i != a][:NEIGHBOURS]
        rest = np.setdiff1d(np.arange(n_train), [a, *near])
        out.append(np.array([a, *near, *rng.choice(rest, size - 1 - NEIGHBOURS, replace=False)]))
    return out


@torch.no_grad()
def evaluate(model: torch.nn.Module, images: torch.Tensor, dist: np.ndarray) -> dict[str, float]:
    """Spread of the test embeddings and the top-5 label-distance ratio (see the module's docstring)."""
    model.eval()
    emb = torch.cat([model(images[i : i + 100]) for i in range(0, len(images), 100)])
    model.train()
    spread = embedding_spread(emb)
    f = F.normalize(emb, dim=-1)
    sim = f @ f.T
    sim.fill_diagonal_(-2.0)
    top = sim.topk(5, dim=1).indices.numpy()
    d = dist.copy()
    np.fill_diagonal(d, np.nan)
    ratio = float(np.mean(np.take_along_axis(d, top, 1)) / np.nanmean(d))
    return {"cos": spread["mean_cosine"], "var": spread["variance"], "top5": ratio}


def run(
    cfg: Config, images: torch.Tensor, dist: np.ndarray, batches: list[np.ndarray], n_train: int, seed: int, trace: int
) -> dict[str, object]:
    torch.manual_seed(seed)
    model = ResNetEmbedding("resnet18", 128)
    if cfg.loss == "dense_triplet":
        loss_fn = StudyDenseTriplet(cfg.margin, cfg.normalize, cfg.min_gap)
    else:
        loss_fn = make_loss(cfg.loss)
    if cfg.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9, weight_decay=5e-4)
    watch = TrainingWatch(cfg.loss)
    losses, cosines, active = [], [], []
    t0 = time.process_time()
    for step, idx in enumerate(batches, start=1):
        x = images[idx]
        y = torch.from_numpy(dist[idx[0], idx[1:]]).float()
        emb = model(x)
        loss = loss_fn(emb, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        spread = embedding_spread(emb)
        value = float(loss.detach())
        watch.update(step, value, spread, chance=loss_fn.chance_level(y))
        losses.append(value)
        cosines.append(spread["mean_cosine"])
        active.append(getattr(loss_fn, "active", float("nan")))
        if trace and step % trace == 0:
            print(
                f"  {cfg.name} step {step}: loss {np.mean(losses[-trace:]):.4f} cos {np.mean(cosines[-trace:]):.4f}"
                f" active {np.mean(active[-trace:]):.2f} norm {spread['norm']:.3g}",
                flush=True,
            )
    last = np.array(losses[-50:])
    warn = watch.warnings[0] if watch.warnings else None
    return {
        "loss": float(last.mean()),
        "sd": float(last.std() / abs(last.mean())),
        "act": float(np.mean(active[-50:])),
        "cos_train": float(np.mean(cosines[-50:])),
        **{f"{k}_test": v for k, v in evaluate(model, images[n_train:], dist[n_train:, n_train:]).items()},
        "warn": f"{warn['step']} {'+'.join(w['kind'] for w in watch.warnings if w['step'] == warn['step'])}"
        if warn
        else "-",
        "cpu_s": time.process_time() - t0,
        "losses": losses,
        "cosines": cosines,
    }


CHANCE_SPREADS = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0]


def chance_losses(
    spreads: list[float], margin: float = 0.03, n: int = 48, dim: int = 128, draws: int = 200, seed: int = 0
) -> list[tuple[float, float, float]]:
    """Why the collapse: the dense triplet loss of embeddings that know nothing of the labels yet, by spread.

    Embeddings ``e_k = u + s z_k`` (``u`` one unit direction, ``z_k`` standard normal / sqrt(dim)) and label
    distances drawn independently of them, as for a network that cannot yet order its minibatch. Returns, per
    spread ``s``, ``(mean pairwise cosine, loss, d loss / d s)`` averaged over ``draws`` minibatches. At ``s = 0``
    every hinge is exactly the margin; any spread adds as much loss on wrongly ordered triplets as it removes
    on rightly ordered ones, plus the hinge's floor, so the loss grows with ``s``: descent pulls the
    embeddings together until the network orders its triplets better than chance."""
    gen = torch.Generator().manual_seed(seed)
    loss_fn = DenseTripletLoss(margin=margin)
    rows = []
    for spread in spreads:
        s = torch.tensor(float(spread), requires_grad=True)
        u = F.normalize(torch.randn(dim, generator=gen), dim=0)
        z = torch.randn(draws, n, dim, generator=gen) / dim**0.5
        e = u + s * z
        y = torch.rand(draws, n - 1, generator=gen) + 0.1
        loss = loss_fn(e, y)
        (grad,) = torch.autograd.grad(loss, s)
        rows.append((embedding_spread(e.detach())["mean_cosine"], float(loss.detach()), float(grad)))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chance", action="store_true", help="only the loss of label-blind embeddings by spread")
    names = ", ".join(c.name for c in CONFIGS).replace("%", "%%")  # argparse formats help with %
    p.add_argument("configs", nargs="*", help=f"which (default: all): {names}")
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--size", type=int, default=48, help="minibatch size with the anchor")
    p.add_argument("--px", type=int, default=32, help="image side")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--trace", type=int, default=0, help="print the loss and cosine every this many steps")
    p.add_argument("--save", help="write each configuration's row and per-step losses and cosines to this JSON")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.chance:
        print("label-blind embeddings (u + s z): mean pairwise cosine, dense triplet loss (margin 0.03), d loss/d s")
        for s, (cos, loss, grad) in zip(CHANCE_SPREADS, chance_losses(CHANCE_SPREADS)):
            print(f"s {s:5.2f}  cos {cos:.4f}  loss {loss:.4f}  dL/ds {grad:+.4f}")
        return
    chosen = [c for c in CONFIGS if not args.configs or c.name in args.configs]
    if args.configs and len(chosen) != len(args.configs):
        raise SystemExit(f"unknown configuration; known: {', '.join(c.name for c in CONFIGS)}")
    images, dist = load(args.px)
    n_train = len(images) - N_TEST
    batches = minibatches(dist, n_train, args.size, args.steps, args.seed)
    test_images, test_dist = images[n_train:], dist[n_train:, n_train:]
    torch.manual_seed(args.seed)
    untrained = evaluate(ResNetEmbedding("resnet18", 128), test_images, test_dist)
    d = test_dist + np.diag(np.full(N_TEST, np.nan))
    oracle = float(np.mean(np.sort(np.nan_to_num(d, nan=np.inf), 1)[:, :5]) / np.nanmean(d))
    print(
        f"ResNet-18, {args.px} px, minibatches of {args.size} (anchor, {NEIGHBOURS} nearest, random others), "
        f"{args.steps} steps, seed {args.seed}; untrained: cos test {untrained['cos']:.4f}, var test "
        f"{untrained['var']:.2e}, top5 {untrained['top5']:.3f} (the 5 label-nearest: {oracle:.3f})"
    )
    head = f"{'config':<11} {'changed':<24} {'loss':>7} {'sd/mean':>7} {'act':>5} {'cos train':>9} {'cos test':>8} "
    head += f"{'var test':>8} {'top5':>5} {'warn':>12} {'cpu s':>6}"
    print(head, flush=True)
    rows = {}
    for cfg in chosen:
        r = rows[cfg.name] = run(cfg, images, dist, batches, n_train, args.seed, args.trace)
        print(
            f"{cfg.name:<11} {cfg.changed:<24} {r['loss']:7.4f} {r['sd']:7.3f} {r['act']:5.2f} {r['cos_train']:9.4f} "
            f"{r['cos_test']:8.4f} {r['var_test']:8.2e} {r['top5_test']:5.3f} {r['warn']:>12} {r['cpu_s']:6.0f}",
            flush=True,
        )
    if args.save:
        Path(args.save).write_text(json.dumps({"args": vars(args), "untrained": untrained, "rows": rows}))


if __name__ == "__main__":
    main()
