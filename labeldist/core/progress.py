"""Progress of long jobs, for a terminal and for a log file alike.

:func:`progress_bar` is the one place the jobs (precompute and append, ``sts fit``, ``trainer fit``, ``eval``,
``render``) get their progress display from: tqdm's bar on a terminal (the stream's ``isatty()``); off a terminal,
:class:`PlainProgress`: a plain line at the start, at most one every :data:`DEFAULT_EVERY` seconds
(``LABELDIST_PROGRESS_EVERY``, or ``every=``) and one at the end, such as
``pose: 1,234/5,000 items (24.7 %) in 00:04, 310 items/s, about 00:12 left``; nothing with ``enabled=False``
(``--no-progress``). Not tqdm off a terminal: it draws every refresh as ``'\\r' + line`` on one row
(``tqdm.std.tqdm.status_printer``), which a log file keeps as one ever-growing line, and no setting changes that.
:class:`PlainProgress` has tqdm's interface as the jobs use it (``update``, ``set_postfix``, ``write``, ``close``,
``with``) and tqdm's own ``format_interval`` for the times.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from tqdm.auto import tqdm

from labeldist.errors import UsageError

#: the environment variable that sets the seconds between two plain lines (0: a line at every update)
EVERY_ENV = "LABELDIST_PROGRESS_EVERY"
#: seconds between two plain progress lines by default
DEFAULT_EVERY = 5.0


def progress_every(every: float | None = None) -> float:
    """The seconds between two plain lines: ``every`` when given, else ``LABELDIST_PROGRESS_EVERY``, else
    :data:`DEFAULT_EVERY`. ValueError naming the variable for a value that is not a number of seconds >= 0."""
    source = "every"
    if every is None:
        raw = os.environ.get(EVERY_ENV, "").strip()
        if not raw:
            return DEFAULT_EVERY
        source = EVERY_ENV
        try:
            every = float(raw)
        except ValueError:
            every = math.nan
    if not (math.isfinite(every) and every >= 0):
        raise UsageError(f"{source} must be a number of seconds >= 0 (0: a line at every update), got {every!r}")
    return float(every)


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (a closed or odd stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def progress_bar(
    total: float | None,
    desc: str,
    *,
    unit: str = "item",
    units: str | None = None,
    enabled: bool | None = None,
    initial: float = 0,
    unit_scale: bool = False,
    leave: bool = True,
    file: IO[str] | None = None,
    every: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    started: float | None = None,
) -> Any:
    """A progress display for a job of ``total`` ``unit`` (``units``: the plural, default ``unit + "s"``).

    ``enabled``: False shows nothing (a disabled tqdm, whose methods do nothing); None or True shows the job's
    progress on ``file`` (default: ``sys.stderr`` at the time of the call) as suits it: tqdm's bar on a terminal
    (``desc``, ``unit``, ``unit_scale``, ``initial``, ``leave`` as tqdm takes them), plain lines elsewhere
    (:class:`PlainProgress`: counts in full, ``every``, ``clock`` and ``started`` its own). Either has ``update``,
    ``set_postfix``, ``write``, ``close`` and works as a context manager."""
    if enabled is False:
        return tqdm(total=total, disable=True)
    file = sys.stderr if file is None else file
    if is_terminal(file):
        return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, initial=initial, leave=leave, file=file)
    return PlainProgress(
        total, desc, unit=unit, units=units, initial=initial, file=file, every=every, clock=clock, started=started
    )


class PlainProgress:
    """Progress as plain lines: one when made, then at most one every ``every`` seconds of ``clock`` (an update
    that comes sooner after the last line prints nothing), and one on :meth:`close`. Each line is whole: written
    with its newline and flushed, never a carriage return.

    A line says the items done of the total and the share, the time since the start, the rate (items per second
    since the start, not counting ``initial``: a resumed job's rate is its own), and the time left at that rate;
    then the postfix (``set_postfix``), as tqdm's ``key=value``. The last line says ``done in`` (or ``stopped
    after``, closed before the total).

    ``started``: when the job began on ``clock``, if before this display (a display made once the job's first
    tasks are done, ``initial`` then counting them): the time shown counts from it, the rate still from now."""

    def __init__(
        self,
        total: float | None,
        desc: str,
        *,
        unit: str = "item",
        units: str | None = None,
        initial: float = 0,
        file: IO[str] | None = None,
        every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        started: float | None = None,
    ) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.units = units or (unit if unit.endswith("s") else unit + "s")
        self.n = self.initial = initial
        self.file = sys.stderr if file is None else file
        self.every = progress_every(every)
        self.postfix: dict[str, Any] = {}
        self.closed = False
        self._clock = clock
        self._start = self._last = clock()
        self._origin = self._start if started is None else min(started, self._start)
        self._print(self._start)

    # tqdm's interface, as the jobs use it
    def update(self, n: float = 1) -> bool:
        """Count ``n`` more done; True when this printed a line (the interval since the last one has passed)."""
        if self.closed:
            return False
        self.n += n
        now = self._clock()
        if now - self._last < self.every:
            return False
        self._print(now)
        return True

    def set_postfix(self, ordered_dict: Mapping[str, Any] | None = None, refresh: bool = True, **kwargs: Any) -> None:
        """Shown after the numbers from the next line on (``refresh`` is tqdm's: a line waits for its time)."""
        self.postfix = {**(ordered_dict or {}), **kwargs}

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        self.desc = desc or ""

    def write(self, s: str, file: IO[str] | None = None, end: str = "\n", nolock: bool = False) -> None:
        """A message of its own, as ``tqdm.write`` (default ``sys.stdout``): no bar to clear off a terminal."""
        fp = sys.stdout if file is None else file
        fp.write(s + end)
        fp.flush()

    def close(self) -> None:
        """The last line (once)."""
        if self.closed:
            return
        self.closed = True
        self._print(self._clock(), last=True)

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # the line
    @staticmethod
    def _count(n: float) -> str:
        # in full with thousands separators, not tqdm's unit_scale (2.96k): a log is read for its numbers
        return f"{n:,}" if float(n).is_integer() else f"{n:,.2f}"

    def line(self, now: float, last: bool = False) -> str:
        """The line this progress shows at time ``now`` of its clock."""
        elapsed = max(now - self._start, 0.0)  # the rate's
        shown = max(now - self._origin, 0.0)
        done = self.n - self.initial
        parts = [f"{self._count(self.n)}"]
        if self.total is not None:
            parts[0] += f"/{self._count(self.total)}"
        parts[0] += f" {self.units}"
        if self.total:
            parts[0] += f" ({100 * self.n / self.total:.1f} %)"
        if last:
            finished = self.total is not None and self.n >= self.total
            parts[0] += f", {'done in' if finished else 'stopped after'} {tqdm.format_interval(shown)}"
        elif shown > 0:
            parts[0] += f" in {tqdm.format_interval(shown)}"
        rate = done / elapsed if elapsed > 0 and done > 0 else None
        if rate is not None:
            parts.append(f"{self._rate(rate)} {self.units}/s" if rate >= 1 else f"{self._rate(1 / rate)} s/{self.unit}")
            if not last and self.total is not None and self.n < self.total:
                parts.append(f"about {tqdm.format_interval((self.total - self.n) / rate)} left")
        parts += [f"{key}={value}" for key, value in self.postfix.items()]
        return f"{self.desc}: " * bool(self.desc) + ", ".join(parts)

    @staticmethod
    def _rate(value: float) -> str:
        return f"{value:,.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"

    def _print(self, now: float, last: bool = False) -> None:
        self.file.write(self.line(now, last) + "\n")
        self.file.flush()
        self._last = now


class FileReadProgress:
    """The progress of a library reading the file at ``path`` itself (gensim's word-vector parser), ``passes``
    times over: a thread looks, every ``interval`` seconds, at how far this process's open file descriptors on
    ``path`` are (Linux's ``/proc/self/fdinfo``), and shows it as :func:`progress_bar` in MB, with its rate and the
    time left. Where there is no ``/proc`` it shows a line when it starts and one when it ends (no estimate).
    A context manager: ``with FileReadProgress(path, "word vectors"): load(path)``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        desc: str,
        *,
        passes: int = 1,
        enabled: bool | None = None,
        interval: float = 0.5,
    ) -> None:
        self.path, self.desc, self.passes, self.enabled, self.interval = (
            os.path.realpath(path),
            desc,
            passes,
            enabled,
            interval,
        )
        self.size = os.path.getsize(self.path)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.bar: Any = None
        self._started = time.monotonic()

    def position(self) -> int | None:
        """How far the furthest open descriptor on the file is, in bytes; None where it cannot be seen (no
        ``/proc``) and -1 when no descriptor is open on it now."""
        try:
            fds = os.listdir("/proc/self/fd")
        except OSError:
            return None
        best = -1
        for fd in fds:
            try:
                if os.readlink(f"/proc/self/fd/{fd}") != self.path:
                    continue
                with open(f"/proc/self/fdinfo/{fd}") as f:
                    for line in f:
                        if line.startswith("pos:"):
                            best = max(best, int(line.split()[1]))
            except (OSError, ValueError):
                continue
        return best

    def _watch(self) -> None:
        done_passes, last, shown = 0, -1, 0
        while not self._stop.wait(self.interval):
            pos = self.position()
            if pos is None or pos < 0:
                continue
            if pos < last:  # the file opened again: the next pass
                done_passes += 1
            last = pos
            mb = (done_passes * self.size + pos) // 1_000_000
            if mb > shown:
                self.bar.update(mb - shown)
                shown = mb

    def __enter__(self) -> FileReadProgress:
        if self.enabled is False:
            return self
        total = max(self.passes * self.size // 1_000_000, 1)
        if self.position() is None:
            sys.stderr.write(f"{self.desc}: reading {self.size / 1e6:,.0f} MB (no estimate on this system) ...\n")
            return self
        self.bar = progress_bar(total, self.desc, unit="MB", units="MB", enabled=self.enabled)
        self._thread = threading.Thread(target=self._watch, name="labeldist-file-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.bar is not None:
            if exc[0] is None:
                self.bar.update(max(self.bar.total - self.bar.n, 0))
            self.bar.close()
        elif self.enabled is not False:
            sys.stderr.write(f"{self.desc}: read in {time.monotonic() - self._started:.1f} s\n")


class FirstTasks:
    """The progress of a job whose first ``first`` tasks (one per worker) also load and compile what the job needs:
    a line saying so at the start, a line as each of them ends (the work done and the time, no estimate), then the
    display of :func:`~labeldist.core.progress.progress_bar` from the work done, its rate (and the time left)
    counted from there, its time from the start. ``first=0``: that display from the start. ``enabled`` as
    ``progress_bar``'s: False shows nothing."""

    def __init__(
        self,
        total: int,
        desc: str,
        unit: str,
        first: int,
        workers: int,
        enabled: bool | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.desc, self.unit, self.first, self.enabled = total, desc, unit, first, enabled
        self.n, self.tasks, self.bar, self._clock = 0, 0, None, clock
        self._start = clock()
        self.units = unit if unit.endswith("s") else unit + "s"
        if first == 0:  # nothing to load: the display from the start
            self._show()
        elif enabled is not False:
            tqdm.write(
                f"{desc}: {total:,} {self.units} on {workers} worker{'s' * (workers != 1)}; the first task of each "
                "also loads what the distance needs (compiled kernels, a model), so the time left is estimated once "
                "those are done",
                file=sys.stderr,
            )

    def update(self, n: int) -> None:
        self.n += n
        self.tasks += 1
        if self.bar is not None:
            self.bar.update(n)
            return
        if self.tasks < self.first and self.n < self.total:
            if self.enabled is not False:
                elapsed = tqdm.format_interval(self._clock() - self._start)
                tqdm.write(
                    f"{self.desc}: {self.n:,}/{self.total:,} {self.units} ({100 * self.n / self.total:.1f} %) in "
                    f"{elapsed}, {self.tasks} of the first {self.first} tasks done (loading what they need)",
                    file=sys.stderr,
                )
            return
        self._show()

    def _show(self) -> None:
        self.bar = progress_bar(
            self.total,
            self.desc,
            unit=self.unit,
            unit_scale=True,
            enabled=self.enabled,
            initial=self.n,
            clock=self._clock,
            started=self._start if self.first else None,  # shown from the job's start
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
