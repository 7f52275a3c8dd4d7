"""The batch progress display (issue 18 item 16): redrawn in place on a terminal; off a
terminal one line per 10 % of the positions or per minute, and never the same line twice."""

from __future__ import annotations

import io
import re

import pytest

from napari_gpuscope.batch.progress import ProgressBar


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _counts(text: str) -> list[tuple[int, int, int]]:
    pattern = r"(\d+) done, (\d+) failed, (\d+) remaining"
    return [tuple(map(int, m)) for m in re.findall(pattern, text)]


def _run(bar: ProgressBar, clock: Clock, total: int, seconds: float, fail_every: int = 0):
    """A run as the CLI drives it: one update per finished position, then the final one."""
    done = failed = 0
    for index in range(1, total + 1):
        clock.now += seconds
        if fail_every and index % fail_every == 0:
            failed += 1
        else:
            done += 1
        bar.update(done=done, failed=failed)
    bar.update(done=done, failed=failed, final=True)
    return done, failed


def test_a_log_gets_one_line_per_tenth_of_the_positions_and_the_last_once():
    clock, stream = Clock(), io.StringIO()
    bar = ProgressBar(200, stream=stream, clock=clock)
    _run(bar, clock, 200, seconds=0.1, fail_every=20)
    lines = stream.getvalue().splitlines()
    finished = [done + failed for done, failed, _ in _counts(stream.getvalue())]
    assert finished == [20 * k for k in range(1, 11)]  # 10 %, 20 %, ... 100 %
    assert len(lines) == len(set(lines)) == 10
    assert lines[-1].startswith("[" + "#" * 30 + "] 190 done, 10 failed, 0 remaining")
    assert "\r" not in stream.getvalue()


def test_a_slow_run_logs_a_line_a_minute_between_the_steps():
    clock, stream = Clock(), io.StringIO()
    bar = ProgressBar(1000, stream=stream, clock=clock)
    _run(bar, clock, 30, seconds=25.0)  # 30 of 1000 positions, 25 s each: 3 % in 12.5 min
    finished = [done + failed for done, failed, _ in _counts(stream.getvalue())]
    # A line at the first update at least 60 s after the last: every third position (75 s),
    # and the final update (position 30) once, at 30.
    assert finished == [3, 6, 9, 12, 15, 18, 21, 24, 27, 30]
    assert "0.04 positions/s" in stream.getvalue()  # 1 position per 25 s


def test_few_positions_log_each_and_the_final_update_adds_nothing():
    clock, stream = Clock(), io.StringIO()
    bar = ProgressBar(3, stream=stream, clock=clock)
    _run(bar, clock, 3, seconds=30.0)
    assert [c[:2] for c in _counts(stream.getvalue())] == [(1, 0), (2, 0), (3, 0)]


def test_a_terminal_redraws_one_line_in_place():
    clock, stream = Clock(), Terminal()
    bar = ProgressBar(50, stream=stream, clock=clock)
    _run(bar, clock, 50, seconds=0.1)
    text = stream.getvalue()
    assert text.count("\r") == 51  # every update, the final one included
    assert text.count("\n") == 1 and text.endswith("\n")
    assert _counts(text)[-1] == (50, 0, 0)


def test_the_step_is_a_fraction():
    with pytest.raises(ValueError, match=r"step must be a fraction in \(0, 1\], got 0"):
        ProgressBar(10, step=0)
