"""A terminal progress bar for batch runs: done / failed / remaining, throughput and ETA."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["ProgressBar"]


class ProgressBar:
    """Positions done, failed and remaining, throughput and ETA, on one line.

    On a terminal the line is redrawn in place at every update. Otherwise (a log file, a SLURM
    output, a pipe) a line is printed each time another ``step`` of the positions has finished
    (10 %) or ``every`` seconds have passed since the last line (a minute), whichever comes
    first, and at the end; the same counts are never printed twice.

    Parameters
    ----------
    total : int
        The positions to finish.
    stream : file, optional
        Where to write (default: standard error); its ``isatty()`` chooses the display.
    width : int
        Characters of the bar.
    step : float
        The fraction of the positions between two lines off a terminal.
    every : float
        The most seconds between two lines off a terminal (an update still has to come: a
        line is printed when a position finishes).
    clock : callable, optional
        Seconds (default :func:`time.perf_counter`; tests pass their own).

    Examples
    --------
    >>> import io
    >>> stream = io.StringIO()
    >>> bar = ProgressBar(4, stream=stream, width=8)
    >>> bar.update(done=1, failed=1)
    >>> "1 done, 1 failed, 2 remaining" in stream.getvalue()
    True
    """

    def __init__(
        self,
        total: int,
        *,
        stream: TextIO | None = None,
        width: int = 30,
        step: float = 0.1,
        every: float = 60.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not 0 < step <= 1:
            raise ValueError(f"step must be a fraction in (0, 1], got {step}")
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.step = step
        self.every = every
        self.clock = clock or time.perf_counter
        self.start = self.clock()
        self._last_print = self.start
        self._last_step = 0
        self._last_counts: tuple[int, int] | None = None
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def text(self, done: int, failed: int) -> str:
        """The progress line."""
        finished = done + failed
        remaining = self.total - finished
        filled = int(self.width * finished / self.total) if self.total else self.width
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = self.clock() - self.start
        rate = finished / elapsed if elapsed > 0 and finished else 0.0
        eta = f"{remaining / rate:.0f} s" if rate > 0 else "--"
        return (
            f"[{bar}] {done} done, {failed} failed, {remaining} remaining | "
            f"{rate:.2f} positions/s | ETA {eta}"
        )

    def update(self, *, done: int, failed: int, final: bool = False) -> None:
        """Show the current counts (``final``: the run's last update)."""
        if self._tty:
            self.stream.write("\r" + self.text(done, failed) + ("\n" if final else ""))
            self.stream.flush()
            return
        now = self.clock()
        finished = done + failed
        steps = math.floor(finished / self.total / self.step + 1e-9) if self.total else 0
        if (done, failed) == self._last_counts:
            return  # the final update repeats the last position's: one line is enough
        if not (final or steps > self._last_step or now - self._last_print >= self.every):
            return
        self.stream.write(self.text(done, failed) + "\n")
        self.stream.flush()
        self._last_print, self._last_step, self._last_counts = now, steps, (done, failed)
