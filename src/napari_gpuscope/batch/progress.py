"""A terminal progress bar for batch runs: done / failed / remaining, throughput and ETA."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["ProgressBar"]


class ProgressBar:
    """Positions done, failed and remaining, throughput and ETA, on one line.

    On a terminal the line is redrawn in place; otherwise (a log file, a SLURM output) a line is
    printed at most every ``every`` seconds and at the end.

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
        self, total: int, *, stream: TextIO | None = None, width: int = 30, every: float = 10.0
    ) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.every = every
        self.start = time.perf_counter()
        self._last_print = -float("inf")
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def text(self, done: int, failed: int) -> str:
        """The progress line."""
        finished = done + failed
        remaining = self.total - finished
        filled = int(self.width * finished / self.total) if self.total else self.width
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.perf_counter() - self.start
        rate = finished / elapsed if elapsed > 0 and finished else 0.0
        eta = f"{remaining / rate:.0f} s" if rate > 0 else "--"
        return (
            f"[{bar}] {done} done, {failed} failed, {remaining} remaining | "
            f"{rate:.2f} positions/s | ETA {eta}"
        )

    def update(self, *, done: int, failed: int, final: bool = False) -> None:
        """Show the current counts."""
        now = time.perf_counter()
        if self._tty:
            self.stream.write("\r" + self.text(done, failed) + ("\n" if final else ""))
        elif final or now - self._last_print >= self.every:
            self.stream.write(self.text(done, failed) + "\n")
            self._last_print = now
        else:
            return
        self.stream.flush()
