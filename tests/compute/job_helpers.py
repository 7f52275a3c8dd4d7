"""Driving jobs in tests as the dock does (shared by the compute tests)."""

from __future__ import annotations

from typing import Any

from napari_gpuscope.compute.jobs import STOP


def stop_after(job: Any, updates: int) -> tuple[Any, int]:
    """Take ``updates`` updates, then send STOP at every resume (as the dock's Stop & keep);
    the job's result and how many updates came after the stop."""
    for _ in range(updates):
        next(job)
    after = 0
    try:
        while True:
            job.send(STOP)
            after += 1
    except StopIteration as end:
        return end.value, after
