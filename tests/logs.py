"""Waiting for events, not for times: a process's output followed line by line, so that a test waits for an event
the process logs (a computation started, a store reloaded), and a state polled until it holds, instead of sleeping
for a time it hopes is long enough."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable

#: how long a test waits for a line before it fails: long, because CI runs on a loaded 2-core machine
LOG_TIMEOUT = 120.0


def wait_until(condition: Callable[[], bool], what: str, timeout: float = LOG_TIMEOUT) -> None:
    """Until ``condition()`` holds (a state the code under test reaches, polled often), or fail naming ``what``
    after ``timeout`` s: a deadline, long because CI is a loaded 2-core machine, never a pace the test relies on."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not reached within {timeout:.0f} s"
        time.sleep(0.01)


class LogFollower:
    """Reads ``proc``'s text stdout in a thread; :meth:`wait_for` blocks until a line holding a text appears."""

    def __init__(self, proc: subprocess.Popen) -> None:
        if proc.stdout is None:
            raise ValueError("the process's stdout is not a pipe")
        self.proc = proc
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def text(self) -> str:
        with self._changed:
            return "".join(self.lines)

    def wait_for(self, needle: str, timeout: float = LOG_TIMEOUT, start: int = 0) -> int:
        """The index of the first line from ``start`` on that holds ``needle``, once it is there; TimeoutError
        (with the output so far) if it does not come within ``timeout`` s or the process ends without it."""
        with self._changed:
            ok = self._changed.wait_for(
                lambda: any(needle in line for line in self.lines[start:]) or self._closed, timeout
            )
            for i in range(start, len(self.lines)):
                if needle in self.lines[i]:
                    return i
        why = "the process ended" if ok else f"{timeout:.0f} s passed"
        raise TimeoutError(f"{why} before a line with {needle!r}; output:\n{self.text()[-4000:]}")

    def stop(self) -> str:
        """Terminate the process (SIGTERM, then SIGKILL), and return everything it printed."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._thread.join(timeout=30)
        return self.text()
