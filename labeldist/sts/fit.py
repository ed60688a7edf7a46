r"""``labeldist sts fit``: fine-tune a relevance model on STS-B, evaluate it on dev, save it with its record.

Two architectures, both from the packaged all-MiniLM-L6-v2, fitted to the gold relevance :math:`y = \text{score}/5`:

- ``cross``: a cross-encoder (one logit :math:`g` of ``[CLS] s [SEP] t [SEP]``), by the binary cross-entropy of
  :math:`\sigma(g(s,t))` (``loss="bce"``) or the squared error (``"mse"``); ``swap=True`` adds both orders;
- ``bi``: the bi-encoder, so that :math:`\cos(f(s), f(t))` follows :math:`y`: CoSENT (``"cosent"``, Huang et al.
  2024, :math:`\log(1 + \sum_{y_i > y_j} e^{\lambda(\cos_j - \cos_i)})`, :math:`\lambda = 20`) or
  :math:`(\cos - y)^2` (``"cosine"``).

AdamW, linear warm-up over the first ``warmup`` share of the steps then linear decay to 0, gradients clipped at
norm 1; the seed fixes the head's initialisation, dropout and the batch order. After each epoch the model is scored
on dev (Pearson and Spearman); the record goes to ``labeldist_sts.json`` beside the saved model.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import pearsonr, spearmanr

from labeldist.core.files import written_whole
from labeldist.core.progress import progress_bar
from labeldist.errors import UsageError
from labeldist.sts.models import ARCHITECTURES, FIT_INFO, PACKAGED, model_spec, offline, resolve_model
from labeldist.sts.stsb import StsPairs

#: losses each architecture accepts (the first is the default)
LOSSES = {"cross": ("bce", "mse"), "bi": ("cosent", "cosine")}
#: a pass through the model costs about as much as this many more token positions (MiniLM-L6 on 2 CPU cores,
#: benchmarks/bench_sts_fit.py: a step 0.61x the padded batch's at 96, 0.70x at 24, 0.65x at 64); the groups
#: weigh padding against passes with it (:func:`length_groups`)
PASS_TOKENS = 96


@dataclass(frozen=True)
class FitConfig:
    """Every setting of a fine-tuning run (recorded in ``labeldist_sts.json``)."""

    architecture: str = "bi"
    loss: str | None = None
    base_model: str = PACKAGED
    epochs: int = 4
    batch_size: int = 16
    lr: float = 2e-5
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_length: int = 128
    swap: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise UsageError(f"unknown architecture {self.architecture!r}; known: {', '.join(ARCHITECTURES)}")
        losses = LOSSES[self.architecture]
        if self.loss is None:
            object.__setattr__(self, "loss", losses[0])
        elif self.loss not in losses:
            raise UsageError(
                f"unknown loss {self.loss!r} for a {self.architecture}-encoder; known: {', '.join(losses)}"
            )
        if self.swap and self.architecture != "cross":
            raise UsageError("swap (both pair orders) only applies to a cross-encoder")
        for name in ("epochs", "batch_size", "max_length"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 0.0 <= self.warmup < 1.0:
            raise UsageError(f"warmup must lie in [0, 1), got {self.warmup}")


@dataclass
class FitResult:
    path: Path
    dev_pearson: float
    dev_spearman: float
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0


def correlations(predicted: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """Pearson and Spearman correlation of predicted relevance with gold relevance."""
    return {"pearson": float(pearsonr(predicted, gold)[0]), "spearman": float(spearmanr(predicted, gold)[0])}


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - libraries may draw from NumPy's legacy global generator
    torch.manual_seed(seed)


def linear_schedule(step: int, total: int, warmup_steps: int) -> float:
    """Learning-rate factor: linear warm-up to 1 over ``warmup_steps``, then linear decay to 0 at ``total``.

    >>> [round(linear_schedule(s, 10, 2), 3) for s in (0, 1, 2, 6, 10)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
    """
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (total - step) / max(1, total - warmup_steps))


def _load_base(config: FitConfig) -> Any:
    offline()
    path = str(resolve_model(config.base_model))
    if config.architecture == "cross":
        from sentence_transformers import CrossEncoder

        return CrossEncoder(path, num_labels=1, device="cpu", max_length=config.max_length, local_files_only=True)
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(path, device="cpu", local_files_only=True)
    model.max_seq_length = config.max_length
    return model


def length_groups(lengths: np.ndarray, pass_tokens: int) -> list[np.ndarray]:
    r"""Indices of the texts in groups run through the model one group at a time, each padded to its own longest.

    A padded batch computes ``n * max(lengths)`` token positions; sorted by length and cut into groups it computes
    :math:`\sum_g n_g \max_{i \in g} \ell_i`, and each group pays a pass's fixed cost, ``pass_tokens`` positions'
    worth (each pass's own dense gradient of the embedding table, smaller matrix products). The cuts that minimise
    positions plus passes are found by dynamic programming over the sorted lengths (a group is a run of them: any
    other grouping pads more). Padding is masked out of attention and of the mean pooling, so the groups' outputs
    are the padded batch's, to float rounding.

    >>> [g.tolist() for g in length_groups(np.array([30, 5, 6, 29, 5]), pass_tokens=8)]
    [[1, 4, 2], [3, 0]]
    >>> [g.tolist() for g in length_groups(np.array([30, 5, 6, 29, 5]), pass_tokens=1000)]
    [[1, 4, 2, 3, 0]]
    """
    order = np.argsort(lengths, kind="stable")
    sorted_lengths = np.asarray(lengths)[order]
    n = len(order)
    cost = np.zeros(n + 1)
    cut = np.zeros(n + 1, dtype=np.int64)
    for stop in range(1, n + 1):
        starts = np.arange(stop)
        totals = cost[:stop] + (stop - starts) * sorted_lengths[stop - 1] + pass_tokens
        cut[stop] = int(np.argmin(totals))
        cost[stop] = totals[cut[stop]]
    groups, stop = [], n
    while stop > 0:
        groups.append(order[cut[stop] : stop])
        stop = cut[stop]
    return groups[::-1]


def forward_in_groups(model: Any, features: dict[str, Any], output: str, pass_tokens: int = PASS_TOKENS) -> Any:
    """``model(features)[output]`` for a padded batch of tokenized texts (``model.preprocess``), computed by length
    groups (:func:`length_groups`), in the batch's order. STS-B's sentences are 14 word pieces on average, a
    batch's longest about 32: a padded batch computes 2.2 times the positions it needs."""
    import torch

    lengths = features["attention_mask"].sum(dim=1).numpy()
    n, width = features["attention_mask"].shape
    parts, order = [], []
    for group in length_groups(lengths, pass_tokens):
        rows, longest = torch.as_tensor(group), int(lengths[group].max())
        sub = {
            key: value[rows][:, :longest] if torch.is_tensor(value) and value.shape[:2] == (n, width) else value
            for key, value in features.items()
        }
        parts.append(model(sub)[output])
        order.append(group)
    inverse = torch.empty(n, dtype=torch.long)
    inverse[torch.as_tensor(np.concatenate(order))] = torch.arange(n)
    return torch.cat(parts)[inverse]


def _loss_fn(model: Any, config: FitConfig) -> Any:
    """``loss(first, second, relevance)`` of one batch of pairs, the model run by length groups
    (:func:`forward_in_groups`): both sides of a bi-encoder's pairs in one set of groups."""
    import torch

    if config.architecture == "bi":
        from sentence_transformers.sentence_transformer.losses import CoSENTLoss, CosineSimilarityLoss

        loss = CoSENTLoss(model) if config.loss == "cosent" else CosineSimilarityLoss(model)

        def bi_loss(a: list[str], b: list[str], y: Any) -> Any:
            both = forward_in_groups(model, model.preprocess(a + b), "sentence_embedding")
            return loss.compute_loss_from_embeddings([both[: len(a)], both[len(a) :]], y)

        return bi_loss
    criterion = torch.nn.BCEWithLogitsLoss() if config.loss == "bce" else torch.nn.MSELoss()

    def cross_loss(a: list[str], b: list[str], y: Any) -> Any:
        logits = forward_in_groups(model, model.preprocess(list(zip(a, b))), "scores").view(-1)
        return criterion(logits if config.loss == "bce" else torch.sigmoid(logits), y)

    return cross_loss


def predict_relevance(model: Any, config: FitConfig, first: list[str], second: list[str]) -> np.ndarray:
    """Relevance of each dev pair as a store would compute it (both orders averaged for a cross-encoder)."""
    from labeldist.sts.scorers import unit_rows

    model.eval()
    if config.architecture == "bi":
        a = unit_rows(model.encode(first, batch_size=64, convert_to_numpy=True, show_progress_bar=False))
        b = unit_rows(model.encode(second, batch_size=64, convert_to_numpy=True, show_progress_bar=False))
        return np.clip(np.sum(a * b, axis=1), 0.0, 1.0) if len(a) else np.zeros(0)
    both = model.predict(
        list(zip(first, second)) + list(zip(second, first)),
        batch_size=64,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    both = np.asarray(both, dtype=np.float64)
    return (both[: len(first)] + both[len(first) :]) / 2.0


def check_model_folder(out: str | Path, overwrite: bool) -> None:
    """Refuse (UsageError, one line, before any training) a model folder ``out`` that holds anything, unless
    ``overwrite``, and then only a real folder (never a link's target, never a file): a model replaced under a
    store makes the store answer 503 until it is rebuilt."""
    out = Path(out)
    if not os.path.lexists(out):
        return
    if os.path.islink(out) or not out.is_dir():
        raise UsageError(f"{out}: {'a symbolic link' if os.path.islink(out) else 'a file'}, not a model folder")
    held = sorted(p.name for p in out.iterdir())
    if held and not overwrite:
        shown = ", ".join(held[:4]) + (", ..." if len(held) > 4 else "")
        raise UsageError(
            f"{out}: holds a model ({shown}); every store built on it would answer 503 once it is replaced: give "
            "--overwrite to replace it, or another --out"
        )


def save_model_folder(model: Any, out: Path) -> None:
    """``model.save`` into a new folder beside ``out``, then swapped in for it by renames: a kill leaves the old
    model or the new one whole, never a folder of both."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        model.save(str(staging))
        if os.path.lexists(out):
            aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.rename(out, aside / "model")
            os.rename(staging, out)
            shutil.rmtree(aside)
        else:
            os.rename(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def fit(
    train: StsPairs, dev: StsPairs, config: FitConfig, out: str | Path, *, progress: bool | None = None
) -> FitResult:
    """Fine-tune per ``config`` on ``train``, score on ``dev`` after each epoch, save the final model to ``out``."""
    import torch

    started = time.perf_counter()
    seed_everything(config.seed)
    model = _load_base(config)
    loss_of = _loss_fn(model, config)
    first, second, y = list(train.first), list(train.second), train.relevance
    if config.swap:
        first, second, y = first + list(train.second), second + list(train.first), np.concatenate([y, y])
    n = len(first)
    steps_per_epoch = math.ceil(n / config.batch_size)
    total = steps_per_epoch * config.epochs
    no_decay = ("bias", "LayerNorm.weight", "norm.weight")
    groups = [
        {
            "params": [p for name, p in model.named_parameters() if not any(k in name for k in no_decay)],
            "weight_decay": config.weight_decay,
        },
        {
            "params": [p for name, p in model.named_parameters() if any(k in name for k in no_decay)],
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(groups, lr=config.lr, fused=True)  # one kernel: 6x the loop's speed here
    warmup_steps = int(round(config.warmup * total))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: linear_schedule(s, total, warmup_steps))
    rng = np.random.default_rng(config.seed)
    history: list[dict[str, float]] = []
    # tqdm's bar on a terminal, plain lines every few seconds off one (a redirected log), none with progress=False
    bar = progress_bar(total, f"sts fit {config.architecture}", unit="step", enabled=progress)
    for epoch in range(config.epochs):
        model.train()
        order = rng.permutation(n)
        running = 0.0
        for s in range(steps_per_epoch):
            batch = order[s * config.batch_size : (s + 1) * config.batch_size]
            labels = torch.tensor(y[batch], dtype=torch.float32)
            loss = loss_of([first[i] for i in batch], [second[i] for i in batch], labels)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            running += float(loss.detach())
            bar.set_postfix(epoch=epoch + 1, loss=f"{running / (s + 1):.4f}", refresh=False)  # shown by the update
            bar.update(1)
        scores = correlations(predict_relevance(model, config, list(dev.first), list(dev.second)), dev.relevance)
        history.append(
            {
                "epoch": epoch + 1,
                "train_loss": running / steps_per_epoch,
                **scores,
                "seconds": round(time.perf_counter() - started, 1),
            }
        )
        bar.write(f"epoch {epoch + 1}: dev Pearson {scores['pearson']:.4f}, Spearman {scores['spearman']:.4f}")
    bar.close()
    seconds = time.perf_counter() - started
    out = Path(out)
    save_model_folder(model, out)
    record = {
        "architecture": config.architecture,
        "config": asdict(config) | {"base_model": model_spec(config.base_model)},
        "seed": config.seed,
        "train": {"file": train.source, "sha256": train.sha256, "pairs": len(train)},
        "dev": {"file": dev.source, "sha256": dev.sha256, "pairs": len(dev), **history[-1]},
        "history": history,
        "seconds": round(seconds, 1),
        "torch_threads": torch.get_num_threads(),
        "versions": _versions(),
    }
    with written_whole(out / FIT_INFO) as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n")
    return FitResult(out, history[-1]["pearson"], history[-1]["spearman"], history, seconds)


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "sentence-transformers", "transformers")}
