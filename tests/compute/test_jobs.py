"""The job protocol: progress generators, blocking runner, cancellation, sub-job scaling."""

import inspect

import numpy as np
import pytest

from napari_gpuscope.compute.job_control import (
    CancelToken,
    JobCancelled,
    PreviewThrottle,
    StopToken,
)
from napari_gpuscope.compute.job_parts import mapped, scaled, stoppable_part
from napari_gpuscope.compute.jobs import (
    STOP,
    Output,
    Progress,
    blocking,
    is_stop,
    run_job,
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


# --- protocol v2: indeterminate progress, keyed lazy outputs, stop-and-keep ------------------


def test_indeterminate_progress_is_explicit_and_survives_scaling():
    def estimating():
        yield Progress(None, "estimating")
        yield Progress(1.0, "done")
        return 1

    seen = []
    run_job(scaled(estimating(), 0.5, 1.0), on_progress=seen.append)
    assert seen[0].indeterminate and seen[0].fraction is None
    assert seen[1].fraction == 1.0 and not seen[1].indeterminate


def test_lazy_outputs_are_never_materialised_when_nobody_displays_them():
    calls = []

    def copy_to_host():
        calls.append("copied")
        return np.zeros((8, 8))

    def job():
        for i in range(5):
            yield Progress((i + 1) / 5, "x", outputs={"preview": Output(copy_to_host)})
        return "done"

    assert run_job(job()) == "done"
    assert calls == []  # a script or batch run pays nothing for previews
    seen = []
    run_job(job(), on_progress=lambda u: seen.append(u.materialized().outputs["preview"]))
    assert len(calls) == 5 and all(not o.is_lazy and o.array().shape == (8, 8) for o in seen)


def test_materialized_keeps_only_the_selected_outputs():
    update = Progress(
        0.5,
        "x",
        outputs={"a": Output(lambda: np.ones(2)), "b": Output(lambda: 1 / 0)},
    )
    kept = update.materialized(lambda name: name == "a")
    assert set(kept.outputs) == {"a"} and not kept.outputs["a"].is_lazy


def test_outputs_carry_region_kind_and_full_shape():
    out = Output(np.ones((2, 3)), region=(slice(2, 4), slice(0, 3)), shape=(6, 3))
    assert out.kind == "image" and out.shape == (6, 3)
    with pytest.raises(ValueError, match="kind"):
        Output(np.ones(3), kind="movie")
    with pytest.raises(TypeError, match="Output"):
        Progress(0.1, "x", outputs={"a": np.ones(3)})


def best_so_far_job(log):
    best = 0
    try:
        for i in range(1, 100):
            best = i
            command = yield Progress(i / 100, f"step {i}")
            if is_stop(command):
                return ("stopped", best)
        return ("finished", best)
    finally:
        log.append("closed")


def test_stop_returns_the_current_result_and_is_not_a_cancel():
    token, log = StopToken(), []

    def on_progress(update):
        if update.message == "step 3":
            token.stop()

    assert run_job(best_so_far_job(log), on_progress=on_progress, stop=token) == ("stopped", 3)
    assert log == ["closed"]


def test_stop_is_forwarded_through_mapped_and_scaled():
    token = StopToken()

    def parent():
        return (yield from scaled(mapped(best_so_far_job([]), lambda u: u), 0.0, 0.5))

    def on_progress(update):
        if update.fraction >= 0.02:
            token.stop()

    assert run_job(parent(), on_progress=on_progress, stop=token) == ("stopped", 4)


def test_a_job_that_cannot_stop_ignores_the_command():
    token = StopToken()
    token.stop()
    log = []
    assert run_job(counting_job(3, log), stop=token) == "done"


def test_blocking_twin_has_the_job_signature_and_unwraps():
    def iter_double(x, *, factor=2):
        """Double a number."""
        yield Progress(None, "working")
        return {"value": x * factor}

    double = blocking(iter_double, unwrap=lambda r: r["value"])
    assert double(3) == 6 and double(3, factor=3) == 9
    assert str(inspect.signature(double)) == "(x, *, factor=2)"
    assert double.__doc__ == "Double a number."


def test_a_stoppable_part_maps_drops_outputs_and_returns_none_on_stop():
    closed = []

    def sub():
        try:
            yield Progress(
                0.5, "half", step=3, metrics={"loss": 1.0}, outputs={"a": Output(np.ones(2))}
            )
            yield Progress(1.0, "all")
            return "done"
        finally:
            closed.append(True)

    part = stoppable_part(sub(), 0.2, 0.6, "part: ")
    updates = [next(part), next(part)]
    with pytest.raises(StopIteration) as finished:
        next(part)
    assert [u.fraction for u in updates] == pytest.approx([0.4, 0.6])
    assert updates[0].message == "part: half" and updates[0].outputs == {}
    assert updates[0].metrics == {"loss": 1.0} and finished.value.value == "done"

    quiet = stoppable_part(sub(), 0.0, 1.0, metrics=False)
    first = next(quiet)
    assert first.metrics == {} and first.step is None and first.message == "half"
    with pytest.raises(StopIteration) as stopped:
        quiet.send(STOP)
    assert stopped.value.value is None and closed == [True, True]
