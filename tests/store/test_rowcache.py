"""Rows read on demand (labeldist/view/rowcache.py, StoreReader.knn_rows): the one row-block cache that the service and
the in-process source share, the kNN lists through it, and the direct chunk reads under it.

Every read is compared with the whole array read at once (``StoreReader.knn()``, or the matrix in memory): random
row sets, rows across block boundaries, the padded lists of a store with fewer items than k, and caches from
nothing kept to everything kept, whose held blocks never exceed their limit.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from labeldist.distances.pose import PoseDistance
from labeldist.store import ChunkFiles, StoreCorruptError, StoreReader
from labeldist.view.knnlookup import knn_lookup
from labeldist.view.rowcache import KnnRows, RowBlockCache
from tests.conftest import flip_bit, write_store

ROWS = 7  # rows per block: 100 items make 14 full blocks and a last one of 2 rows


@pytest.fixture(scope="module")
def knn_store(tmp_path_factory, mpii_poses) -> Path:
    root = tmp_path_factory.mktemp("rowcache")
    return write_store(
        root / "pose", mpii_poses.subset(slice(0, 100)), PoseDistance(), dataset="t", k=10, dense=False, block_rows=ROWS
    )


@pytest.fixture(scope="module")
def padded_store(tmp_path_factory, mpii_poses) -> Path:
    """8 items, k = 10: every list ends in -1 padding (+inf distances)."""
    root = tmp_path_factory.mktemp("rowcache-padded")
    return write_store(
        root / "tiny", mpii_poses.subset(slice(0, 8)), PoseDistance(), dataset="t", k=10, dense=False, block_rows=3
    )


# ---------------------------------------------------------------- the cache itself (was api/serving/caches.py's)
def _matrix(n: int = 50) -> np.ndarray:
    return np.arange(n * n, dtype=np.float32).reshape(n, n)


def test_row_block_cache_answers_the_matrix() -> None:
    m = _matrix()
    cache = RowBlockCache(lambda a, b: m[a:b], 50, 8, max_bytes=1 << 20)
    rng = np.random.default_rng(0)
    i, j = rng.integers(0, 50, 500), rng.integers(0, 50, 500)
    assert np.array_equal(cache.gather(i, j), m[i, j])
    rows, cols = rng.permutation(50)[:17], rng.integers(0, 50, 9)
    assert np.array_equal(cache.submatrix(rows, cols), m[np.ix_(rows, cols)])
    assert cache.reads == 7  # every block read once, then served from memory
    cache.gather(i, j)
    assert cache.reads == 7


def test_row_block_cache_stays_within_its_bytes() -> None:
    m = _matrix()
    block_bytes = 8 * 50 * 4
    cache = RowBlockCache(lambda a, b: m[a:b], 50, 8, max_bytes=2 * block_bytes)
    for b in (0, 1, 2, 0):
        cache.block(b)
        assert cache.nbytes <= 2 * block_bytes
    assert cache.reads == 4  # block 0 was evicted (least recently used) by block 2
    cache.block(2)
    assert cache.reads == 4
    assert not cache.block(1).flags.writeable, "cached blocks are read-only"


def test_row_block_cache_reads_a_block_once_under_concurrency() -> None:
    m = _matrix()
    calls = []

    def slow_read(a: int, b: int) -> np.ndarray:
        calls.append(a)
        threading.Event().wait(0.05)  # widens the window in which the others miss too; the assertion holds anyway
        return m[a:b]

    cache = RowBlockCache(slow_read, 50, 25, max_bytes=1 << 20)
    threads = [threading.Thread(target=cache.block, args=(1,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [25]


def test_row_block_cache_keeps_nothing_at_zero_and_refuses_a_block_past_the_end() -> None:
    m = _matrix()
    cache = RowBlockCache(lambda a, b: m[a:b], 50, 8, max_bytes=0)
    assert np.array_equal(cache.block(6), m[48:50]) and len(cache) == 0 and cache.nbytes == 0
    cache.block(6)
    assert cache.reads == 2
    with pytest.raises(IndexError, match="row block 7 is outside 0..6"):
        cache.block(7)


def test_a_failed_read_is_not_kept_and_is_tried_again() -> None:
    m = _matrix()
    failures = [OSError("disk gone")]

    def read(a: int, b: int) -> np.ndarray:
        if failures:
            raise failures.pop()
        return m[a:b]

    cache = RowBlockCache(read, 50, 8, max_bytes=1 << 20)
    with pytest.raises(OSError, match="disk gone"):
        cache.block(2)
    assert len(cache) == 0 and not cache._loading
    assert np.array_equal(cache.block(2), m[16:24])


# ---------------------------------------------------------------- kNN rows: equal to the whole lists
@pytest.mark.parametrize("limit_blocks", [0, 1, 3, 100])
def test_knn_rows_equal_the_whole_lists_and_stay_within_their_limit(knn_store: Path, limit_blocks: int) -> None:
    reader = StoreReader(str(knn_store))
    whole_i, whole_d = reader.knn()
    assert reader.knn_block_rows == ROWS
    block_bytes = ROWS * reader.k * 8  # int32 indices + float32 distances
    knn = KnnRows(reader.knn_rows, reader.n_items, reader.k, ROWS, limit_blocks * block_bytes)
    rng = np.random.default_rng(limit_blocks)
    sets = [rng.integers(0, 100, size) for size in (1, 5, 40, 300)]
    sets += [np.arange(ROWS - 2, 3 * ROWS + 2), np.array([99, 98, 0, 13, 14, 99]), np.arange(100)[::-1]]
    for rows in sets:
        indices, distances = knn.rows(rows)
        assert indices.dtype == np.int32 and distances.dtype == np.float32
        np.testing.assert_array_equal(indices, whole_i[rows])
        np.testing.assert_array_equal(distances, whole_d[rows])
        assert len(knn.cache) <= limit_blocks and knn.cache.nbytes <= limit_blocks * block_bytes
    for i in rng.integers(0, 100, 30).tolist() + [0, 6, 7, 98, 99]:
        for k in (1, 4, 10, 50):
            got_i, got_d = knn.neighbors(i, k)
            np.testing.assert_array_equal(got_i, whole_i[i, :k])
            np.testing.assert_array_equal(got_d, whole_d[i, :k])
            assert not got_i.flags.writeable
        assert len(knn.cache) <= limit_blocks
    if limit_blocks >= 15:  # everything fits: each block was read once
        assert knn.cache.reads == 15 and knn.holds(np.arange(100))


@pytest.mark.parametrize("limit_blocks", [0, 2, 100])
def test_knn_lookup_equals_the_lookup_over_the_whole_lists(knn_store: Path, limit_blocks: int) -> None:
    reader = StoreReader(str(knn_store))
    whole_i, whole_d = reader.knn()
    knn = KnnRows(reader.knn_rows, reader.n_items, reader.k, ROWS, limit_blocks * ROWS * reader.k * 8)
    rng = np.random.default_rng(1)
    i, j = rng.integers(0, 100, 2000), rng.integers(0, 100, 2000)
    near = rng.integers(0, 100, 300)  # pairs surely held: an item and one of its neighbours, both ways round
    held = whole_i[near, rng.integers(0, 10, 300)]
    i = np.concatenate([i, near, held, [5, 5]])
    j = np.concatenate([j, held, near, [5, 6]])
    want_v, want_f = knn_lookup(whole_i, whole_d, i, j)
    got_v, got_f = knn.lookup(i, j)
    np.testing.assert_array_equal(got_f, want_f)
    np.testing.assert_array_equal(got_v, want_v)  # NaN where not found, in both
    assert want_f[-602:-2].all() and want_f[-2] and got_v[-2] == 0
    assert len(knn.cache) <= limit_blocks


def test_padded_lists_through_the_cache(padded_store: Path) -> None:
    reader = StoreReader(str(padded_store))
    whole_i, whole_d = reader.knn()
    assert (whole_i[:, -3:] == -1).all()
    knn = KnnRows(reader.knn_rows, reader.n_items, reader.k, reader.knn_block_rows, 1 << 20)
    for i in range(8):
        got_i, got_d = knn.neighbors(i, 10)
        assert got_i.size == 7 and np.array_equal(got_i, whole_i[i, :7]) and np.array_equal(got_d, whole_d[i, :7])
    np.testing.assert_array_equal(knn.rows(np.arange(8))[0], whole_i)
    values, found = knn.lookup(np.arange(8), (np.arange(8) + 1) % 8)
    assert found.all()  # 8 items, 7 neighbours each: every pair is held


def test_knn_rows_refuse_a_block_of_the_wrong_shape() -> None:
    ind = np.zeros((10, 4), dtype=np.int32)
    knn = KnnRows(lambda a, b: (ind[a:b, :3], ind[a:b].astype(np.float32)), 10, 4, 5, 1 << 20)
    with pytest.raises(ValueError, match=r"kNN indices rows 5:10 have shape \(5, 3\), expected \(5, 4\)"):
        knn.rows(np.array([7]))


# ---------------------------------------------------------------- the direct chunk reads under the cache
def test_store_reader_reads_knn_rows_straight_from_the_chunk_files(knn_store: Path) -> None:
    reader = StoreReader(str(knn_store))
    assert all(isinstance(f, ChunkFiles) for f in reader._knn_files.values()), "the store's kNN lists qualify"
    whole_i, whole_d = reader.knn()
    for start, stop in ((0, 7), (7, 14), (98, 100), (5, 9), (3, 40), (0, 100), (99, 100), (50, 50)):
        indices, distances = reader.knn_rows(start, stop)
        np.testing.assert_array_equal(indices, whole_i[start:stop])
        np.testing.assert_array_equal(distances, whole_d[start:stop])
    reader.check_knn()
    with pytest.raises(IndexError, match="outside the store's 100 items"):
        reader.knn_rows(90, 101)


def test_through_zarr_where_the_chunks_are_not_read_directly(knn_store: Path, monkeypatch) -> None:
    """An array not laid out as ChunkFiles reads (other codecs, sharded, remote) is read through Zarr: same rows."""
    direct = StoreReader(str(knn_store))
    monkeypatch.setattr(ChunkFiles, "of", classmethod(lambda cls, url, path, array: None))
    reader = StoreReader(str(knn_store))
    assert set(reader._knn_files.values()) == {None}
    for start, stop in ((0, 7), (5, 9), (95, 100)):
        for got, want in zip(reader.knn_rows(start, stop), direct.knn_rows(start, stop)):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("array", ["knn/indices", "knn/distances"])
def test_damage_is_refused_by_every_read_of_its_block(knn_store: Path, tmp_path: Path, array: str) -> None:
    import shutil

    hit = tmp_path / "hit"
    shutil.copytree(knn_store, hit)
    flip_bit(hit / array / "c" / "2" / "0")  # rows 14:21
    (hit / array / "c" / "5" / "0").unlink()  # rows 35:42
    reader = StoreReader(str(hit))
    with pytest.raises(StoreCorruptError, match=rf"{array} rows 14:21 failed its CRC32C checksum"):
        reader.knn_rows(14, 21)
    with pytest.raises(StoreCorruptError, match=rf"{array} rows 35:42: chunk 5/0 is missing"):
        reader.knn_rows(40, 41)
    with pytest.raises(StoreCorruptError, match=rf"{array} rows 14:21"):
        reader.check_knn()
    knn = KnnRows(reader.knn_rows, reader.n_items, reader.k, ROWS, 1 << 20)
    for _ in range(2):  # every time it is asked, never kept
        with pytest.raises(StoreCorruptError, match="checksum"):
            knn.neighbors(15, 3)
    assert knn.neighbors(0, 3)[0].size == 3, "the blocks that are whole are still read"
    assert not knn.holds(15)


def test_a_chunk_that_passes_its_checksum_but_is_no_zstd_frame_is_refused(knn_store: Path, tmp_path: Path) -> None:
    import shutil

    import google_crc32c

    hit = tmp_path / "hit"
    shutil.copytree(knn_store, hit)
    body = b"not a zstd frame at all"
    (hit / "knn" / "indices" / "c" / "1" / "0").write_bytes(body + int(google_crc32c.value(body)).to_bytes(4, "little"))
    with pytest.raises(StoreCorruptError, match="knn/indices rows 7:14 cannot be decoded"):
        StoreReader(str(hit)).knn_rows(7, 14)


def test_direct_reads_under_an_odd_folder_name(knn_store: Path, tmp_path: Path) -> None:
    """The chunk file names are built from the folder's path: braces, spaces and digits in it change nothing."""
    import shutil

    odd = tmp_path / "a {0} store 987654321"
    shutil.copytree(knn_store, odd)
    reader, whole = StoreReader(str(odd)), StoreReader(str(knn_store))
    assert all(isinstance(f, ChunkFiles) for f in reader._knn_files.values())
    for got, want in zip(reader.knn_rows(3, 40), whole.knn_rows(3, 40)):
        np.testing.assert_array_equal(got, want)


def test_knn_chunks_are_cut_from_big_row_blocks(mpii_poses, tmp_path: Path, monkeypatch) -> None:
    """In a store whose lists are big (here: any, the limit lowered), a row block of 64 lists of k = 100 (25.6 kB an
    array) is stored as two chunks of 32 rows: each written by the block's one task, each read and checked on its
    own, the lists the same as the whole arrays'."""
    import zarr

    import labeldist.store.layout
    from labeldist.store import knn_chunk_rows

    assert knn_chunk_rows(64, 100, 200) == 64, "small stores: chunked by row block"
    monkeypatch.setattr(labeldist.store.layout, "KNN_WHOLE_BYTES", 0)  # where knn_chunk_rows reads it
    store = write_store(
        tmp_path / "big-blocks",
        mpii_poses.subset(slice(0, 200)),
        PoseDistance(),
        dataset="t",
        k=100,
        dense=False,
        block_rows=64,
    )
    group = zarr.open_group(str(store), mode="r")
    assert knn_chunk_rows(64, 100, 200) == 32
    assert group["knn/indices"].chunks == group["knn/distances"].chunks == (32, 100)
    reader = StoreReader(str(store))
    assert reader.manifest["block_rows"] == 64 and reader.knn_block_rows == 32
    whole_i, whole_d = reader.knn()
    assert (whole_i >= 0).all() and np.isfinite(whole_d).all(), "every row block written whole"
    knn = KnnRows(reader.knn_rows, reader.n_items, reader.k, reader.knn_block_rows, 3 * 32 * 100 * 8)
    rows = np.random.default_rng(2).integers(0, 200, 120)
    for got, want in zip(knn.rows(rows), (whole_i[rows], whole_d[rows])):
        np.testing.assert_array_equal(got, want)
    assert len(knn.cache) <= 3
    reader.check_knn()
    flip_bit(store / "knn" / "indices" / "c" / "1" / "0")
    with pytest.raises(StoreCorruptError, match="knn/indices rows 32:64 failed its CRC32C"):
        StoreReader(str(store)).check_knn()
