"""The job protocol: progress generators, blocking runner, cancellation, sub-job scaling."""

import pytest

from napari_gpuscope.compute.jobs import (
    CancelToken,
    JobCancelled,
    PreviewThrottle,
    Progress,
    mapped,
    run_job,
    scaled,
)


def counting_job(n, log):
    try:
        for i in range(n):
            yield Progress((i + 1) / n, f"step {i + 1}")
        return "done"
    finally:
        log.append("closed")


def test_run_job_returns_result_and_reports_every_update():
    seen, log = [], []
    assert run_job(counting_job(4, log), on_progress=seen.append) == "done"
    assert [u.fraction for u in seen] == [0.25, 0.5, 0.75, 1.0]
    assert log == ["closed"]


def test_cancel_stops_between_yields_and_runs_cleanup():
    token, log, seen = CancelToken(), [], []

    def on_progress(update):
        seen.append(update)
        if len(seen) == 2:
            token.cancel()

    with pytest.raises(JobCancelled):
        run_job(counting_job(10, log), on_progress=on_progress, cancel=token)
    assert len(seen) == 2
    assert log == ["closed"]  # the generator's finally ran: device memory gets released


def test_scaled_maps_fractions_and_passes_result_through():
    def parent():
        first = yield from scaled(counting_job(2, []), 0.0, 0.5, "a: ")
        second = yield from scaled(counting_job(2, []), 0.5, 1.0, "b: ")
        return first + second

    seen = []
    assert run_job(parent(), on_progress=seen.append) == "donedone"
    assert [u.fraction for u in seen] == [0.25, 0.5, 0.75, 1.0]
    assert seen[0].message == "a: step 1"


def test_progress_rejects_fraction_outside_unit_interval():
    with pytest.raises(ValueError, match="fraction"):
        Progress(1.5, "too far")


def test_preview_throttle_limits_rate():
    now = [0.0]
    throttle = PreviewThrottle(interval=1.0, clock=lambda: now[0])
    assert throttle.due()
    now[0] = 0.5
    assert not throttle.due()
    now[0] = 1.2
    assert throttle.due()


def test_mapped_transforms_drops_and_closes():
    log = []

    def ticks():
        try:
            yield from range(1, 5)
            return "solved"
        finally:
            log.append("closed")

    even_only = mapped(ticks(), lambda k: Progress(k / 4, f"tick {k}") if k % 2 == 0 else None)
    seen = []
    assert run_job(even_only, on_progress=seen.append) == "solved"
    assert [u.message for u in seen] == ["tick 2", "tick 4"]
    assert log == ["closed"]

    stopped_early = mapped(ticks(), lambda k: Progress(k / 4, "x"))
    next(stopped_early)
    stopped_early.close()  # a cancelled consumer: the wrapped generator is closed too
    assert log == ["closed", "closed"]
