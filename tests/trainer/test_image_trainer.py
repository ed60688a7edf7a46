"""The image trainer end to end: images rendered from a real pose store, a real ResNet-18 (torchvision, random
initialisation: nothing is downloaded) trained through a live ``labeldist serve`` with images decoded in
DataLoader worker processes; its determinism, resume, evaluation, and the one-line errors of bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from labeldist.client import LabelDistClient
from labeldist.trainer.cli import main
from labeldist.trainer.inputs.images import ImageInputError, ImageInputs, image_paths, open_images, read_index
from labeldist.trainer.render.base import render_store
from labeldist.trainer.training.checkpoints import read_checkpoint
from labeldist.trainer.training.config import FitConfig
from labeldist.trainer.training.evaluate import ImageSource, evaluate
from labeldist.trainer.training.fit import fit
from tests.trainer.conftest import N_ITEMS, STORE

torchvision = pytest.importorskip("torchvision")

LOSS = "dense_triplet"  # in 80 steps from random weights it learns where the log-ratio loss barely moves
STEPS = 80
SIZE = 32  # pixels: a ResNet-18 step on 30 such images takes about 0.1 s on one CPU core


@pytest.fixture(scope="module")
def rendered(pose_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("render") / "mpii300"
    render_store(str(pose_store / STORE), str(out), size=SIZE, seed=0, fmt="png", workers=2, progress=False)
    return out


def config(service: str, images: Path, out: Path, **kw) -> FitConfig:
    base = dict(
        url=service,
        store=STORE,
        images=str(images),
        out=str(out),
        backbone="resnet18",
        loss=LOSS,
        size=30,
        neighbors=5,
        max_steps=STEPS,
        seed=0,
        progress=False,
        checkpoint_every=20,
        lr=1e-3,
        crop_scale=(0.8, 1.0),
        loader_workers=2,
        threads=1,
        embedding_dim=16,
    )
    return FitConfig(**{**base, **kw})


def step_losses(run: Path) -> list[float]:
    rows = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["event"] == "step"]


@pytest.fixture(scope="module")
def trained(service: str, rendered: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("cnn") / LOSS
    summary = fit(config(service, rendered, run))
    assert summary["steps"] == STEPS and 0 <= summary["data_wait_share"] <= 1
    return run


def fixed_batch_loss(service: str, rendered: Path, checkpoint: Path) -> float:
    """The loss of a checkpoint's model on 8 fixed minibatches (eval transform, eval mode): one step's
    loss depends on its anchor too much to compare a few steps, the same batches do not."""
    from labeldist.trainer.losses import make_loss
    from labeldist.trainer.training.models import load_checkpoint

    model, _ = load_checkpoint(checkpoint)
    with LabelDistClient(service) as client:
        got = client.batches(STORE, anchors=np.arange(8) * 37, size=30, neighbors=5, seed=123)
        inputs = open_images(rendered, client.ids(STORE), transform="resize")
    with torch.no_grad():
        embeddings = model(inputs(got.members))
        return float(make_loss(LOSS)(embeddings, torch.from_numpy(got.distances), None))


def test_a_small_cnn_trains_on_rendered_images_through_http(service: str, rendered: Path, trained: Path) -> None:
    losses = step_losses(trained)
    assert len(losses) == STEPS and all(np.isfinite(losses))
    assert np.mean(losses[-20:]) < np.mean(losses[:20]), losses
    state = read_checkpoint(trained / "checkpoint.pt")
    assert state["model_config"]["kind"] == "resnet18"
    assert state["inputs"]["kind"] == "images" and state["inputs"]["input_size"] == SIZE
    assert state["inputs"]["eval_transform"] == "resize" and state["inputs"]["augmentation"]["flip"] == "batch"
    untrained = trained.parent / "untrained"
    fit(config(service, rendered, untrained, max_steps=0))  # the same initial weights (same seed), no step
    before = fixed_batch_loss(service, rendered, untrained / "checkpoint.pt")
    after = fixed_batch_loss(service, rendered, trained / "checkpoint.pt")
    assert after < 0.85 * before, (before, after)


def test_every_data_path_gives_the_same_steps_and_a_resumed_run_the_same_jitter(
    service: str, rendered: Path, trained: Path, tmp_path: Path
) -> None:
    """The decoded-once cache (the trained run: 300 small images fit), decoding in 0 (this process) or 3 loader
    processes, and decoding each step's files in batch where the step runs (the CUDA path, nvJPEG there, libjpeg
    here: its CPU fallback) give the same minibatches, pixels and jitter, so the same losses; and a run resumed
    from a checkpoint draws the jitter an uninterrupted one would."""
    assert step_losses(trained)  # the cached run
    single = tmp_path / "single"
    fit(config(service, rendered, single, image_cache="off", loader_workers=0, max_steps=12))
    assert step_losses(single) == pytest.approx(step_losses(trained)[:12], rel=1e-5)
    on_device = tmp_path / "on-device"
    fit(config(service, rendered, on_device, image_cache="off", decode_on_device=True, max_steps=12))
    assert step_losses(on_device) == pytest.approx(step_losses(trained)[:12], rel=1e-5)
    resumed = tmp_path / "resumed"
    fit(config(service, rendered, resumed, image_cache="off", max_steps=20, loader_workers=3))
    fit(config(service, rendered, resumed, max_steps=30, resume=True))
    assert step_losses(resumed) == pytest.approx(step_losses(trained)[:30], rel=1e-5)


def test_evaluation_embeds_the_images_of_a_checkpoint_and_of_an_untrained_backbone(
    service: str, rendered: Path, trained: Path
) -> None:
    queries, gallery = np.arange(0, 60, 3), np.arange(100, 300)
    source = ImageSource(str(rendered), workers=2)
    with LabelDistClient(service) as client:
        after = evaluate(
            client, STORE, None, queries, gallery, images=source, k_max=10, checkpoint=str(trained / "checkpoint.pt")
        )
        before = evaluate(
            client, STORE, None, queries, gallery, images=source, k_max=10, backbone="resnet18", embedding_dim=16
        )
    assert after["loss"] == LOSS and after["steps"] == STEPS and after["embedding_dim"] == 16
    assert before["model"] == "untrained resnet18 (seed 0)" and len(before["ndcg"]) == 10
    for result in (before, after):
        assert all(0 < v <= 1 for v in result["ndcg"])
    with LabelDistClient(service) as client:  # the untrained network is the same every time
        again = evaluate(
            client, STORE, None, queries, gallery, images=source, k_max=10, backbone="resnet18", embedding_dim=16
        )
    assert again["ndcg"] == before["ndcg"]


def test_command_eval_of_images(service: str, rendered: Path, trained: Path, tmp_path: Path, capsys) -> None:
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"queries": list(range(10)), "gallery": list(range(10, 300))}))
    out = tmp_path / "eval.json"
    assert (
        main(
            [
                "eval",
                "--url",
                service,
                "--store",
                STORE,
                "--images",
                str(rendered),
                "--split",
                str(split),
                "--checkpoint",
                str(trained / "checkpoint.pt"),
                "--out",
                str(out),
                "--k-max",
                "5",
                "--loader-workers",
                "1",
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert result["model"]["kind"] == "resnet18" and result["label"] == LOSS and len(result["ndcg"]) == 5
    assert "nDCG" in capsys.readouterr().out


def test_images_are_uint8_crops_and_the_model_normalises_them_as_torchvision_does(rendered: Path) -> None:
    from torchvision.transforms import v2

    ids = [row.split(",")[0] for row in (rendered / "index.csv").read_text().splitlines()[1:]]
    inputs = ImageInputs(read_index(rendered / "index.csv", ids)[:3], 24, "center_crop")
    x = inputs(np.array([[0, 2]]))
    assert x.shape == (1, 2, 3, 24, 24) and x.dtype == torch.uint8
    from labeldist.trainer.training.models import ImageNormalize

    expected = v2.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))(x[0].float() / 255)
    torch.testing.assert_close(ImageNormalize()(x[0]), expected)


def test_weights_from_a_local_file_load_into_the_backbone_and_a_wrong_file_is_refused(tmp_path: Path) -> None:
    from labeldist.trainer.training.models import ResNetEmbedding, WeightsError

    torch.manual_seed(1)
    reference = torchvision.models.resnet18(weights=None)
    torch.save(reference.state_dict(), tmp_path / "r18.pth")
    model = ResNetEmbedding("resnet18", 8, weights=tmp_path / "r18.pth")
    for name, value in reference.state_dict().items():
        if not name.startswith("fc."):
            torch.testing.assert_close(model.backbone.state_dict()[name], value)
    with pytest.raises(WeightsError, match=r"do not fit resnet34: \d+ missing .*"):
        ResNetEmbedding("resnet34", 8, weights=tmp_path / "r18.pth")
    torch.save(torchvision.models.resnet50(weights=None).state_dict(), tmp_path / "r50.pth")
    with pytest.raises(WeightsError, match="of another shape"):
        ResNetEmbedding("resnet18", 8, weights=tmp_path / "r50.pth")
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(WeightsError, match="not a torch state dict"):
        ResNetEmbedding("resnet18", 8, weights=tmp_path / "junk.pth")


def test_image_mapping_by_pattern_and_index(rendered: Path, tmp_path: Path) -> None:
    ids = [row.split(",")[0] for row in (rendered / "index.csv").read_text().splitlines()[1:]]
    assert len(ids) == N_ITEMS
    by_index = image_paths(rendered, ids)  # ROOT/index.csv by default
    flat = tmp_path / "flat"
    flat.mkdir()
    for i, path in zip(ids, by_index, strict=True):
        shutil.copy(path, flat / f"{i}.png")
    assert [p.read_bytes() for p in image_paths(flat, ids, pattern="{id}.png")] == [p.read_bytes() for p in by_index]
    with pytest.raises(ImageInputError, match="must contain"):
        image_paths(flat, ids, pattern="x.png")
    assert open_images(flat, ids, pattern="{id}.png").size == SIZE


def _cli(service: str, images: Path, out: Path, *extra: str) -> list[str]:
    return [
        "fit",
        "--url",
        service,
        "--store",
        STORE,
        "--images",
        str(images),
        "--out",
        str(out),
        "--backbone",
        "resnet18",
        "--size",
        "10",
        "--max-steps",
        "2",
        "--no-progress",
        "--loader-workers",
        "1",
        *extra,
    ]


@pytest.fixture
def copy_of(rendered: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "images"
    shutil.copytree(rendered, copy)
    return copy


def _first_image(images: Path) -> Path:
    return images / (images / "index.csv").read_text().splitlines()[1].split(",")[1]


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_bad_images_get_one_line(service: str, copy_of: Path, tmp_path: Path, capsys) -> None:
    first = _first_image(copy_of)
    data = first.read_bytes()

    first.unlink()  # a missing image
    assert main(_cli(service, copy_of, tmp_path / "r1")) == 2
    assert f"images not found: {first}" in _error_line(capsys)

    first.write_bytes(b"this is no image")  # unreadable: its header
    assert main(_cli(service, copy_of, tmp_path / "r2")) == 2
    assert f"image {first}: unreadable" in _error_line(capsys)

    first.write_bytes(data[:60])  # a valid header, a truncated body: found when a worker decodes it
    # the first item is the anchor of some step; train on every anchor so that its image is decoded
    args = _cli(service, copy_of, tmp_path / "r3")
    args[args.index("--max-steps") + 1] = str(N_ITEMS)
    assert main(args) == 2
    assert f"image {first}: cannot decode" in _error_line(capsys)

    from PIL import Image

    Image.new("RGB", (SIZE + 8, SIZE)).save(first)  # one image of another size
    assert main(_cli(service, copy_of, tmp_path / "r4")) == 2
    line = _error_line(capsys)
    assert "images differ in size" in line and "--input-size" in line
    assert main([*_cli(service, copy_of, tmp_path / "r5"), "--input-size", "24"]) == 0  # resized: accepted
    capsys.readouterr()


def test_an_index_that_does_not_match_the_store_and_weights_that_do_not_fit_get_one_line(
    service: str, copy_of: Path, tmp_path: Path, capsys
) -> None:
    index = copy_of / "index.csv"
    rows = index.read_text().splitlines()
    index.write_text("\n".join([*rows, "no-such-item,x.png"]) + "\n")
    assert main(_cli(service, copy_of, tmp_path / "r1")) == 2
    assert "ids are not items of the store: 'no-such-item'" in _error_line(capsys)
    index.write_text("\n".join(rows[:-1]) + "\n")
    assert main(_cli(service, copy_of, tmp_path / "r2")) == 2
    assert "1 items of the store have no image" in _error_line(capsys)
    index.write_text("\n".join(rows) + "\n")

    torch.save(torchvision.models.resnet50(weights=None).state_dict(), tmp_path / "r50.pth")
    assert main([*_cli(service, copy_of, tmp_path / "r3"), "--weights", str(tmp_path / "r50.pth")]) == 2
    assert "do not fit resnet18" in _error_line(capsys)
    assert main([*_cli(service, copy_of, tmp_path / "r4"), "--weights", str(tmp_path / "none.pth")]) == 2
    assert "no such file" in _error_line(capsys)


def test_a_checkpoint_of_another_backbone_is_refused_naming_both(
    service: str, rendered: Path, tmp_path: Path, capsys
) -> None:
    """Resumed or evaluated as another ResNet: one line saying what the checkpoint was made with and what was
    asked, not torch's list of every key."""
    run = tmp_path / "run"
    assert main(_cli(service, rendered, run)) == 0
    capsys.readouterr()
    ckpt = str(run / "checkpoint.pt")
    args = _cli(service, rendered, run, "--resume")
    args[args.index("resnet18")] = "resnet34"
    assert main(args) == 2
    line = _error_line(capsys)
    assert ckpt in line and "made with resnet18, 128-d" in line and "asks for resnet34, 128-d" in line, line

    split = tmp_path / "split.json"
    split.write_text(json.dumps({"queries": list(range(10)), "gallery": list(range(10, 300))}))
    evaluation = [
        "eval",
        "--url",
        service,
        "--store",
        STORE,
        "--split",
        str(split),
        "--checkpoint",
        ckpt,
        "--out",
        str(tmp_path / "eval.json"),
        "--loader-workers",
        "1",
    ]
    assert main([*evaluation, "--images", str(rendered), "--backbone", "resnet34"]) == 2
    line = _error_line(capsys)
    assert ckpt in line and "resnet18, 128-d" in line and "--backbone resnet34" in line, line
    np.save(tmp_path / "features.npy", np.zeros((N_ITEMS, 4), dtype=np.float32))
    assert main([*evaluation, "--features", str(tmp_path / "features.npy")]) == 2
    line = _error_line(capsys)
    assert ckpt in line and "trained on images" in line and "--images" in line, line


def test_a_per_image_flip_of_poses_is_refused_in_one_line_unless_allowed(
    service: str, rendered: Path, tmp_path: Path, capsys
) -> None:
    assert main(_cli(service, rendered, tmp_path / "flip", "--augment", "imagenet")) == 2
    err = _error_line(capsys)
    assert "--allow-image-flip" in err and "pose" in err
    assert not (tmp_path / "flip" / "checkpoint.pt").exists()
    assert main(_cli(service, rendered, tmp_path / "allowed", "--augment", "imagenet", "--allow-image-flip")) == 0
    start = json.loads((tmp_path / "allowed" / "log.jsonl").read_text().splitlines()[0])
    assert start["augmentation"]["name"] == "imagenet" and start["augmentation"]["flip"] == "image"
    assert read_checkpoint(tmp_path / "allowed" / "checkpoint.pt")["inputs"]["eval_transform"] == "center_crop"
