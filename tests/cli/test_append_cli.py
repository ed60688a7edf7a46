"""``labeldist append`` as a user runs it: the store's kind's options defaulting to the store's values,
the grown store equal to a precompute of every item, one-line refusals that leave the store as it was, and
``verify`` checking every generation's labels."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from labeldist.store import StoreReader, read_manifest
from labeldist.view.stored import stored_labels
from tests.cli.test_cli import run_cli
from tests.conftest import DATA

CSV = DATA / "mpii" / "mpii_valid_2958.csv"
BASE, TOTAL, K = 150, 170, 8


def rows_csv(path: Path, start: int, stop: int) -> Path:
    """The header and poses ``start:stop`` of the shipped MPII file."""
    with open(CSV) as f:
        lines = [next(f) for _ in range(stop + 1)]
    path.write_text(lines[0] + "".join(lines[1 + start : 1 + stop]))
    return path


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """A dense pose store of the first BASE poses in the person frame (center_scale), the file of the next ones,
    and a store of all TOTAL made at once: what the grown store must equal."""
    from labeldist.cli import main

    tmp = tmp_path_factory.mktemp("append-cli")
    paths = {
        "base": rows_csv(tmp / "base.csv", 0, BASE),
        "new": rows_csv(tmp / "new.csv", BASE, TOTAL),
        "all": rows_csv(tmp / "all.csv", 0, TOTAL),
        "store": tmp / "store",
        "full": tmp / "full",
    }
    for csv, out in (("base", "store"), ("all", "full")):
        argv = [
            "precompute",
            "pose",
            str(paths[csv]),
            "--out",
            str(paths[out]),
            "--k",
            str(K),
            "--normalization",
            "center_scale",
            "--block-rows",
            "32",
            "--workers",
            "1",
            "--no-progress",
        ]
        assert main(argv) == 0
    return paths


@pytest.fixture
def store(made, tmp_path) -> Path:
    """A fresh copy of the base store."""
    return Path(shutil.copytree(made["store"], tmp_path / "store"))


def test_the_grown_store_equals_a_precompute_of_every_item(made, store, capsys) -> None:
    rc, out, err = run_cli(capsys, "append", store, made["new"], "--workers", "1", "--no-progress")
    assert rc == 0, err
    n_pairs = (TOTAL - BASE) * TOTAL + BASE * (TOTAL - BASE)  # pose is not symmetric: each new pair both ways
    assert f"generation 2 complete, {BASE} + {TOTAL - BASE} = {TOTAL} items" in out and f"{n_pairs:,} distances" in out
    grown, full = StoreReader(str(store)), StoreReader(str(made["full"]))
    assert grown.ids.tolist() == full.ids.tolist()
    for a, b in zip(grown.knn(), full.knn()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(grown.dense_rows(0, TOTAL), full.dense_rows(0, TOTAL))
    assert grown.manifest["labels_sha256"] == full.manifest["labels_sha256"]
    assert grown.manifest["params"] == full.manifest["params"]  # normalization taken from the store, not "none"
    rc, out, _ = run_cli(capsys, "append", store, made["new"], "--workers", "1")
    assert rc == 0 and "already its generation 2; nothing to do" in out


def test_help_lists_the_kinds_options_with_the_stores_values(store, capsys) -> None:
    rc, out, _ = run_cli(capsys, "append", store, "--help")
    text = " ".join(out.split())
    assert rc == 0 and "--normalization {none,head,center_scale," in text
    assert "box_w, box_h) (default: center_scale)" in text  # the store's, where precompute's default is none
    assert "--dense-limit SIZE largest dense matrix the grown store may have (default: 1GiB)" in text


def snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "extra, says",
    [
        (
            ["--normalization", "head"],
            "read with other settings than the store's labels (normalization: store has "
            "'center_scale', the new items 'head')",
        ),
        (
            ["--metric", "sqeuclidean"],
            "the store's distance has other parameters (metric: store has 'euclidean', asked 'sqeuclidean')",
        ),
        (["--dense-limit", "100KiB"], "grows its dense matrix to 170 x 170 float32"),
    ],
)
def test_a_refused_append_says_why_in_one_line_and_leaves_the_store_as_it_was(made, store, capsys, extra, says):
    before = snapshot(store)
    rc, _, err = run_cli(capsys, "append", store, made["new"], "--workers", "1", *extra)
    assert rc == 2 and err.count("\n") == 1 and says in err, err
    assert snapshot(store) == before
    assert sorted(p.name for p in store.parent.iterdir()) == ["store"]  # nothing built beside it


def test_ids_already_in_the_store_are_refused_naming_them(made, store, capsys) -> None:
    before = snapshot(store)
    rc, _, err = run_cli(capsys, "append", store, made["all"], "--workers", "1")
    first = StoreReader(str(store)).ids[0]
    assert rc == 2 and f"{BASE} of the {TOTAL} new items are already in" in err and repr(str(first)) in err, err
    assert "rebuild the store instead" in err
    assert snapshot(store) == before


def test_append_to_no_store_or_without_a_file_is_refused(made, tmp_path, store, capsys) -> None:
    rc, _, err = run_cli(capsys, "append", tmp_path / "nothing", made["new"])
    assert rc == 2 and "no store there" in err
    rc, _, err = run_cli(capsys, "append", store)
    assert rc == 2 and "the following arguments are required: input" in err


def test_verify_checks_every_generations_labels(made, store, capsys) -> None:
    assert run_cli(capsys, "append", store, made["new"], "--workers", "1", "--no-progress")[0] == 0
    rc, out, _ = run_cli(capsys, "verify", store, "--sample", "20")
    report = json.loads(out)
    assert rc == 0 and report["ok"] and [g["items"] for g in report["generations"]] == [[0, BASE], [BASE, TOTAL]]
    # a manifest whose second generation names other labels: verify says which generation, and fails
    meta = store / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["labeldist"]["generations"][1]["labels_sha256"] = "0" * 64
    meta.write_text(json.dumps(doc))
    rc, out, _ = run_cli(capsys, "verify", store, "--sample", "0")
    report = json.loads(out)
    assert rc == 1 and not report["ok"]
    assert (
        f"generation 2 (items {BASE}:{TOTAL}): its labels are not those its labels_sha256 names" in report["problems"]
    )
    assert read_manifest(str(store))["generation"] == 2


@pytest.mark.parametrize("dense", [True, False])
def test_an_npy_store_grows_by_an_npy_numbered_on_from_n(tmp_path, capsys, dense) -> None:
    """An .npy appended to an .npy store: its rows are items N, N+1, ... and the grown store equals a precompute of
    the two arrays one after the other (ids, lists, matrix, labels digest). Before: refused, "an .npy file has no
    named columns", and its row numbers would have clashed with the store's ids."""
    rng = np.random.default_rng(3)
    first, second = rng.normal(size=(90, 6)), rng.normal(size=(25, 6))
    for name, array in (("first", first), ("second", second), ("both", np.concatenate([first, second]))):
        np.save(tmp_path / f"{name}.npy", array)
    layout = ["--k", "7", "--metric", "cityblock", "--dense" if dense else "--knn-only", "--block-rows", "32"]
    job = ["--workers", "1", "--no-progress"]
    for name, out in (("first", "grown"), ("both", "full")):
        rc, _, err = run_cli(
            capsys, "precompute", "vectors", tmp_path / f"{name}.npy", "--out", tmp_path / out, *layout, *job
        )
        assert rc == 0, err
    rc, out, err = run_cli(capsys, "append", tmp_path / "grown", tmp_path / "second.npy", *job)
    assert rc == 0, err
    assert "generation 2 complete, 90 + 25 = 115 items" in out, out
    grown, full = StoreReader(str(tmp_path / "grown")), StoreReader(str(tmp_path / "full"))
    assert grown.ids.tolist() == full.ids.tolist() == [str(i) for i in range(115)]
    for a, b in zip(grown.knn(), full.knn()):
        np.testing.assert_array_equal(a, b)
    if dense:
        np.testing.assert_array_equal(grown.dense_rows(0, 115), full.dense_rows(0, 115))
    assert grown.manifest["labels_sha256"] == full.manifest["labels_sha256"]
    np.testing.assert_array_equal(stored_labels(grown).values, np.concatenate([first, second]))
    rc, out, _ = run_cli(capsys, "append", tmp_path / "grown", tmp_path / "second.npy", *job)
    assert rc == 0 and "already its generation 2; nothing to do" in out


def test_npy_appends_of_no_rows_or_another_width_are_one_line_naming_the_file(tmp_path, capsys) -> None:
    """The fifth adversarial run: a 0-row .npy was "zero-size array to reduction operation maximum"; a 5-column or
    1-D .npy onto a 4-column store spoke of --columns, which was not given."""
    np.save(tmp_path / "a.npy", np.random.default_rng(0).normal(size=(40, 4)))
    job = ["--workers", "1", "--no-progress"]
    rc, _, err = run_cli(
        capsys, "precompute", "vectors", tmp_path / "a.npy", "--out", tmp_path / "va", "--k", "5", *job
    )
    assert rc == 0, err
    before = snapshot(tmp_path / "va")
    cases = {
        "none": (np.zeros((0, 4)), "none.npy: shape (0, 4): no rows, no items to read"),
        "wide": (np.ones((3, 5)), "wide.npy: 5 columns (shape (3, 5)), where 4 are named (0, 1, 2, 3: the columns of "
                 "the store appended to, or --columns)"),
        "flat": (np.ones(4), "flat.npy: 1 column (shape (4,)), where 4 are named"),
    }  # fmt: skip
    for name, (array, message) in cases.items():
        np.save(tmp_path / f"{name}.npy", array)
        rc, _, err = run_cli(capsys, "append", tmp_path / "va", tmp_path / f"{name}.npy", *job)
        assert rc == 2 and err.count("\n") == 1 and message in err, err
    assert snapshot(tmp_path / "va") == before


def test_out_a_dangling_link_or_a_link_loop_says_which(tmp_path, capsys) -> None:
    np.save(tmp_path / "a.npy", np.ones((10, 2)))
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for out, message in (
        ("dangling", f"dangling: a symbolic link to '{tmp_path / 'nowhere'}', which does not exist: make that folder"),
        ("loop", "loop: a loop of symbolic links: no store can be written there"),
    ):
        rc, _, err = run_cli(capsys, "precompute", "vectors", tmp_path / "a.npy", "--out", tmp_path / out, "--k", "3")
        assert rc == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "nowhere").exists()


def test_a_store_is_never_made_inside_another_nor_replaced_with_one_inside(tmp_path, capsys) -> None:
    """The fifth adversarial run: ``precompute ... --out st/va/inner`` made a store inside another, ``verify st/va``
    said ok, and the next append or ``--overwrite`` of ``st/va`` deleted ``inner`` silently."""
    import shutil

    np.save(tmp_path / "a.npy", np.random.default_rng(0).normal(size=(30, 3)))
    job = ["--k", "4", "--workers", "1", "--no-progress"]
    rc, _, err = run_cli(capsys, "precompute", "vectors", tmp_path / "a.npy", "--out", tmp_path / "va", *job)
    assert rc == 0, err
    before = snapshot(tmp_path / "va")
    rc, _, err = run_cli(capsys, "precompute", "vectors", tmp_path / "a.npy", "--out", tmp_path / "va" / "inner", *job)
    assert rc == 2 and err.count("\n") == 1, err
    assert f"va/inner: inside the labeldist store {tmp_path / 'va'}, which an append or --overwrite" in err
    assert snapshot(tmp_path / "va") == before
    shutil.copytree(tmp_path / "va", tmp_path / "va" / "kept")  # as an older release could have let it be made
    for args in (
        ["append", tmp_path / "va", tmp_path / "a.npy", "--workers", "1", "--no-progress"],
        ["precompute", "vectors", tmp_path / "a.npy", "--out", tmp_path / "va", *job, "--overwrite", "--k", "3"],
    ):
        rc, _, err = run_cli(capsys, *args)
        assert rc == 2 and err.count("\n") == 1, err
        assert f"holds another labeldist store, {tmp_path / 'va' / 'kept'}, which replacing or growing" in err
        assert snapshot(tmp_path / "va" / "kept") == before


@pytest.mark.parametrize("aside", ["previous", "replaced", "discarded"])
def test_a_folder_of_someone_s_files_where_an_old_store_is_set_aside_is_never_deleted(tmp_path, capsys, aside) -> None:
    """The fifth adversarial run: a folder ``.NAME.previous`` holding a user's files was deleted by the next append
    without a word. The names where labeldist sets an old store aside are removed only when they hold a store."""
    np.save(tmp_path / "a.npy", np.random.default_rng(0).normal(size=(30, 3)))
    np.save(tmp_path / "more.npy", np.random.default_rng(1).normal(size=(5, 3)))
    job = ["--workers", "1", "--no-progress"]
    rc, _, err = run_cli(
        capsys, "precompute", "vectors", tmp_path / "a.npy", "--out", tmp_path / "va", "--k", "4", *job
    )
    assert rc == 0, err
    mine = tmp_path / f".va.{aside}"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    before = snapshot(tmp_path / "va")
    for args in (
        ["append", tmp_path / "va", tmp_path / "more.npy", *job],
        ["precompute", "vectors", tmp_path / "a.npy", "--out", tmp_path / "va", "--k", "3", "--overwrite", *job],
    ):
        rc, _, err = run_cli(capsys, *args)
        if aside == "discarded":  # used only when an unfinished store is replaced: these jobs leave it alone
            assert rc == 0, err
        else:
            assert rc == 2 and err.count("\n") == 1, err
            assert f"{mine}: not a labeldist store, at the name where labeldist sets" in err, err
            assert snapshot(tmp_path / "va") == before
        assert (mine / "notes.txt").read_text() == "mine\n"


def test_an_npy_appended_before_is_refused_after_another_append(tmp_path, capsys) -> None:
    """The fifth adversarial run: re-appending an .npy after another append added its rows again as new items;
    only an immediate repeat was recognised (it still is: nothing to do)."""
    rng = np.random.default_rng(4)
    for name, rows in (("a", 40), ("b", 6), ("c", 8)):
        np.save(tmp_path / f"{name}.npy", rng.normal(size=(rows, 3)))
    job = ["--workers", "1", "--no-progress"]
    rc, _, err = run_cli(
        capsys, "precompute", "vectors", tmp_path / "a.npy", "--out", tmp_path / "va", "--k", "4", *job
    )
    assert rc == 0, err
    rc, _, err = run_cli(capsys, "append", tmp_path / "va", tmp_path / "a.npy", *job)  # the precompute's own file
    assert rc == 2 and "these 40 rows are already its items 0..39 (generation 1)" in err, err
    for name in ("b", "c"):
        assert run_cli(capsys, "append", tmp_path / "va", tmp_path / f"{name}.npy", *job)[0] == 0
    rc, out, _ = run_cli(capsys, "append", tmp_path / "va", tmp_path / "c.npy", *job)
    assert rc == 0 and "already its generation 3; nothing to do" in out
    before = snapshot(tmp_path / "va")
    rc, _, err = run_cli(capsys, "append", tmp_path / "va", tmp_path / "b.npy", *job)
    assert rc == 2 and err.count("\n") == 1, err
    assert "these 6 rows are already its items 40..45 (generation 2); appended again they would be new" in err
    assert snapshot(tmp_path / "va") == before and StoreReader(str(tmp_path / "va")).n_items == 54
