"""Progress for a log file as well as a terminal (labeldist.core.progress): off a terminal, plain newline-ended lines at
a set cadence saying items done, rate and time left; on one, tqdm's bar as before; with ``enabled=False`` nothing.

The unit tests drive the clock themselves (no sleeps, no wall-clock thresholds); a real ``labeldist precompute``
with its stderr redirected to a file shows what a user's log holds."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest
from tqdm.std import tqdm as std_tqdm

from labeldist.core.progress import DEFAULT_EVERY, EVERY_ENV, FirstTasks, PlainProgress, progress_bar, progress_every
from tests.conftest import DATA, ROOT

CSV = DATA / "mpii" / "mpii_valid_2958.csv"


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv(EVERY_ENV, raising=False)


def lines_of(stream: io.StringIO) -> list[str]:
    text = stream.getvalue()
    assert "\r" not in text, repr(text)
    assert text.endswith("\n"), repr(text)
    return text.splitlines()


def test_off_a_terminal_lines_come_at_the_set_cadence_with_count_rate_and_time_left() -> None:
    clock, log = Clock(), io.StringIO()
    bar = progress_bar(5000, "pose", file=log, every=5, clock=clock)
    assert isinstance(bar, PlainProgress)
    assert lines_of(log) == ["pose: 0/5,000 items (0.0 %)"]  # a first line at once
    for _ in range(20):  # 250 items a second, an update a second
        clock.now += 1
        bar.update(250)
    bar.close()
    assert lines_of(log) == [
        "pose: 0/5,000 items (0.0 %)",
        "pose: 1,250/5,000 items (25.0 %) in 00:05, 250 items/s, about 00:15 left",
        "pose: 2,500/5,000 items (50.0 %) in 00:10, 250 items/s, about 00:10 left",
        "pose: 3,750/5,000 items (75.0 %) in 00:15, 250 items/s, about 00:05 left",
        "pose: 5,000/5,000 items (100.0 %) in 00:20, 250 items/s",
        "pose: 5,000/5,000 items (100.0 %), done in 00:20, 250 items/s",
    ]


def test_updates_sooner_than_the_interval_print_nothing_and_the_interval_runs_from_the_last_line() -> None:
    clock, log = Clock(), io.StringIO()
    bar = progress_bar(100, "job", file=log, every=5, clock=clock)
    printed = []
    for dt in (4.75, 0.25, 4.75, 0.25, 0.5, 5.0):  # at 4.75, 5 (a line), 9.75, 10 (a line), 10.5, 15.5 (a line)
        clock.now += dt
        printed.append(bar.update(1))
    assert printed == [False, True, False, True, False, True]
    assert len(lines_of(log)) == 4
    bar.close()
    bar.close()  # once only
    assert len(lines_of(log)) == 5


def test_a_closed_early_job_says_where_it_stopped_and_postfix_rides_along() -> None:
    clock, log = Clock(), io.StringIO()
    bar = progress_bar(600, "fit log_ratio", unit="step", file=log, every=0, clock=clock, initial=200)
    for _ in range(3):
        clock.now += 4  # a slow step: seconds per step, as tqdm shows them
        bar.update()
        bar.set_postfix(loss="0.1234")
    bar.close()
    lines = lines_of(log)
    # a resumed run: its count from 200, its rate its own (3 steps in 12 s), not 203 steps in 12 s
    assert lines[0] == "fit log_ratio: 200/600 steps (33.3 %)"
    assert lines[1] == "fit log_ratio: 201/600 steps (33.5 %) in 00:04, 4.00 s/step, about 26:36 left"
    assert lines[3] == "fit log_ratio: 203/600 steps (33.8 %) in 00:12, 4.00 s/step, about 26:28 left, loss=0.1234"
    assert lines[-1] == "fit log_ratio: 203/600 steps (33.8 %), stopped after 00:12, 4.00 s/step, loss=0.1234"


def test_the_estimate_starts_once_each_workers_first_task_is_done(monkeypatch, capsys) -> None:
    """Two workers whose first tasks compile for a minute: no estimate until both are done, then the rate of the
    tasks after them (200 pairs in 10 s), the time from the start of the job."""
    monkeypatch.setenv(EVERY_ENV, "0")
    clock = Clock()
    bar = FirstTasks(1000, "caption_wmd upper", "pair", first=2, workers=2, enabled=None, clock=clock)
    for dt, n in ((60, 400), (5, 300), (10, 200), (5, 100)):
        clock.now += dt
        bar.update(n)
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("caption_wmd upper: 1,000 pairs on 2 workers; the first task of each also loads what")
    assert lines[1] == (
        "caption_wmd upper: 400/1,000 pairs (40.0 %) in 01:00, 1 of the first 2 tasks done (loading what they need)"
    )
    assert lines[2] == "caption_wmd upper: 700/1,000 pairs (70.0 %) in 01:05"  # no estimate from the first tasks
    rate = 200 / 10  # after them; 900 / 75 from the start would promise 8 s for the last 100, not 5
    assert lines[3] == f"caption_wmd upper: 900/1,000 pairs (90.0 %) in 01:15, {rate:.1f} pairs/s, about 00:05 left"
    assert lines[-1] == f"caption_wmd upper: 1,000/1,000 pairs (100.0 %), done in 01:20, {300 / 15:.1f} pairs/s"


def test_tasks_that_load_nothing_are_estimated_from_the_start(monkeypatch, capsys) -> None:
    monkeypatch.setenv(EVERY_ENV, "0")
    clock = Clock()
    bar = FirstTasks(100, "pose rows", "item", first=0, workers=2, enabled=None, clock=clock)
    clock.now += 4
    bar.update(50)
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[:2] == [
        "pose rows: 0/100 items (0.0 %)",
        "pose rows: 50/100 items (50.0 %) in 00:04, 12.5 items/s, about 00:04 left",
    ]
    bar = FirstTasks(100, "pose", "item", first=2, workers=2, enabled=False, clock=clock)
    bar.update(100)
    bar.close()
    assert capsys.readouterr().err == ""


def test_a_job_without_a_total_counts_and_rates() -> None:
    clock, log = Clock(), io.StringIO()
    bar = PlainProgress(None, "scan", unit="query", units="queries", file=log, every=0, clock=clock)
    clock.now += 2
    bar.update(30)
    assert lines_of(log)[-1] == "scan: 30 queries in 00:02, 15.0 queries/s"


def test_the_interval_comes_from_the_environment(monkeypatch) -> None:
    assert progress_every() == DEFAULT_EVERY
    monkeypatch.setenv(EVERY_ENV, "0.5")
    assert progress_every() == 0.5 and progress_every(2) == 2.0
    clock, log = Clock(), io.StringIO()
    bar = progress_bar(10, "job", file=log, clock=clock)
    clock.now += 0.5
    assert bar.update()
    for bad in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv(EVERY_ENV, bad)
        with pytest.raises(ValueError, match=EVERY_ENV):
            progress_every()


def test_on_a_terminal_it_is_tqdms_bar() -> None:
    term = Terminal()
    bar = progress_bar(100, "pose", file=term, unit_scale=True)
    assert isinstance(bar, std_tqdm) and not isinstance(bar, PlainProgress)
    assert not bar.disable and bar.unit_scale and bar.desc == "pose"
    bar.update(100)
    bar.close()
    assert "\r" in term.getvalue() and "100/100" in term.getvalue()  # drawn in place, as before


@pytest.mark.parametrize("stream", [io.StringIO, Terminal])
def test_disabled_shows_nothing_either_way(stream) -> None:
    out = stream()
    with progress_bar(100, "pose", file=out, enabled=False) as bar:
        bar.update(50)
        bar.set_postfix(loss="1")
    assert out.getvalue() == ""


def test_a_redirected_precompute_log_has_periodic_plain_lines(tmp_path) -> None:
    """A real ``labeldist precompute pose`` on a Dask LocalCluster, stderr redirected to a file: with the interval
    at 0, a plain line as each block of 20 rows finishes, between a first and a final line."""
    small = tmp_path / "mpii_120.csv"
    small.write_text("\n".join(CSV.read_text().splitlines()[:121]) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LABELDIST_")} | {EVERY_ENV: "0"}
    log = tmp_path / "precompute.log"
    with open(log, "w") as err:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "labeldist.cli",
                "precompute",
                "pose",
                str(small),
                "--k",
                "10",
                "--workers",
                "1",
                "--block-rows",
                "20",
                "--out",
                str(tmp_path / "store"),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            timeout=600,
        )
    text = log.read_text()
    assert proc.returncode == 0, text
    assert "6 of 6 blocks computed" in proc.stdout, proc.stdout
    assert "\r" not in text
    said = [line for line in text.splitlines() if line.startswith("pose: ")]
    assert said[0].startswith("pose: 120 items on 1 worker; the first task of each also loads what"), text
    lines = said[1:]
    counts = [int(re.match(r"pose: (\d+)/120 items", line).group(1)) for line in lines]
    # the first task's line (no estimate from a task that compiles the kernels), one a block, the final line
    assert counts == [20, 40, 60, 80, 100, 120, 120], text
    assert all(re.search(r"\d items/s|s/item", line) for line in lines[1:]), text
    assert all(re.search(r", about \d\d:\d\d left$", line) for line in lines[1:-2]), text
    assert ", done in " in lines[-1] and "left" not in lines[-1], text
