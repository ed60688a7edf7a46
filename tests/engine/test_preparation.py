"""A distance's Preparation run as tasks on the workers (labeldist.engine.runner.run_preparation)."""

import functools
import os

from labeldist.distances.base import Preparation
from labeldist.engine.runner import run_preparation


def square(x: int, *, plus: int) -> int:
    return x * x + plus


def test_results_come_back_in_order_and_blind_workers_are_named(dask_client, capsys, tmp_path):
    got = []
    preparation = Preparation(
        what="toy: squaring",
        function=square,
        items=list(range(20)),
        kwargs={"plus": 1},
        sizes=[1] * 20,
        unit="number",
        finish=got.extend,
        visible=functools.partial(os.path.exists, str(tmp_path / "not-there")),
        unseen="cannot see the file: it will square by itself",
    )
    run_preparation(dask_client, preparation, progress=None)
    assert got == [x * x + 1 for x in range(20)]
    err = capsys.readouterr().err
    assert "2 of 2 workers" in err and "cannot see the file: it will square by itself" in err
    assert "toy: squaring" in err, "the preparation shows its progress"


def test_workers_that_see_the_file_are_not_named_and_none_is_nothing(dask_client, capsys, tmp_path):
    (tmp_path / "there").write_text("x")
    got = []
    preparation = Preparation(
        what="toy",
        function=square,
        items=[3],
        kwargs={"plus": 0},
        finish=got.extend,
        visible=functools.partial(os.path.exists, str(tmp_path / "there")),
        unseen="NAMED",
    )
    run_preparation(dask_client, preparation, progress=False)
    run_preparation(dask_client, None, progress=None)
    assert got == [9] and "NAMED" not in capsys.readouterr().err
