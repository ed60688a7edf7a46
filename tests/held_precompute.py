"""A real ``labeldist precompute`` held at a known point of its job, until the test lets it go.

    python -m tests.held_precompute POINT precompute pose CSV --out OUT ...

POINT names a function that :mod:`labeldist.engine.build` calls once, in this process: ``create_store``
(nothing written yet), ``publish`` (every block written, the store not yet complete) or ``replace_with_staged``
(an ``--overwrite`` job's new store complete, not yet swapped in). Just before that call the job prints
``held at POINT`` and reads a line from stdin; it goes on when the test writes one (or closes stdin). Everything
else is the command as a user runs it, Dask cluster included, so a test can check what a second job does while
this one is at a point it chose, without timing.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from pathlib import Path

#: how long a test waits for the job to reach its point: long, the machine may be a busy 2-core one
REACH_TIMEOUT = 300.0


def hold_at(point: str) -> None:
    """Wrap ``labeldist.engine.build.<point>`` so that it announces itself and waits for a line on stdin."""
    import labeldist.engine.build

    original = getattr(labeldist.engine.build, point)

    def held(*args, **kwargs):
        print(f"held at {point}", flush=True)
        sys.stdin.readline()
        return original(*args, **kwargs)

    setattr(labeldist.engine.build, point, held)


def main() -> int:
    point, argv = sys.argv[1], sys.argv[2:]
    hold_at(point)
    from labeldist.cli import main as labeldist

    return labeldist(argv)


class HeldJob:
    """The helper run as a subprocess: :meth:`wait_held` until it is at its point, :meth:`release` to let it
    finish. Its stderr goes to a file (a pipe nobody reads could fill up and stall it)."""

    def __init__(self, point: str, args: list[str], log: Path) -> None:
        root = Path(__file__).resolve().parents[1]
        self.log = log
        self._stderr = open(log, "w")  # noqa: SIM115 - closed in release()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.held_precompute", point, *map(str, args)],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.point = point
        self.lines: list[str] = []
        self._held = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.strip() == f"held at {self.point}":
                self._held.set()
        self._held.set()  # the job ended: wait_held must not wait out its timeout

    def wait_held(self) -> None:
        """Until the job is at its point; AssertionError with its output if it ends or never gets there."""
        reached = self._held.wait(REACH_TIMEOUT)
        if not reached or self.proc.poll() is not None:
            self.release()
            raise AssertionError(
                f"the job did not reach {self.point} (exit {self.proc.returncode}):\n"
                f"{''.join(self.lines)}{self.log.read_text()}"
            )

    def release(self, timeout: float = REACH_TIMEOUT) -> tuple[int, str, str]:
        """Let the job go on; its exit status, stdout and stderr once it has ended."""
        with contextlib.suppress(BrokenPipeError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write("go\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(30)
            self._stderr.close()
        return self.proc.returncode, "".join(self.lines), self.log.read_text()


if __name__ == "__main__":
    sys.exit(main())
