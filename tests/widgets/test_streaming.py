"""The dock base's job protocol: named outputs (image and vectors), regions, lazy outputs,
metrics plot, stop & keep, kernel warm-up, and the runner's start after the old job closed."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
import pytest

from napari_gpuscope.compute.jobs import Output, Progress
from napari_gpuscope.compute.results import image_layer, vectors_layer
from napari_gpuscope.widgets._runner import JobRunner


def _finish(dock, qtbot, timeout=20_000):
    qtbot.waitUntil(lambda: not dock.is_running(), timeout=timeout)


@pytest.fixture
def image(viewer):
    return viewer.add_image(np.arange(48, dtype=np.float32).reshape(6, 8) + 1, name="cells")


@dataclass(frozen=True)
class PhaseLikeResult:
    phase: np.ndarray
    tilt: np.ndarray
    stopped_early: bool = False

    def summary(self):
        return {"vectors": len(self.tilt)}

    def describe(self):
        return "converged in 2 iterations (loss 1.0e-03)"

    def layers(self, name="image", geometry=None, metadata=None):
        return [
            image_layer(self.phase, f"{name} [Two phase]", geometry, metadata=metadata),
            vectors_layer(self.tilt, f"{name} [Two tilt]", geometry, metadata=metadata),
        ]


def test_named_outputs_stream_into_layers_the_result_takes_over(
    viewer, qtbot, image, fake_dock, cpu_device
):
    dock = fake_dock()
    dock.streamed_outputs = ("phase", "tilt")
    materialised = []
    gate = threading.Event()

    def job(layer, params, device):
        data = np.asarray(layer.data, np.float32)
        n = data.shape[0]
        tilt = None
        for k in (1, 2):
            rows = slice(0, n * k // 2)

            def phase(rows=rows, k=k):
                materialised.append("phase")
                return data[rows] * k

            def hidden():
                materialised.append("hidden")
                return data

            tilt = np.zeros((k, 2, 2), np.float32)
            tilt[:, 0, 0] = np.arange(k)
            tilt[:, 1, 1] = 1.0
            yield Progress(
                k / 2,
                f"step {k}",
                outputs={
                    "phase": Output(phase, region=(rows,), shape=data.shape),
                    "tilt": Output(tilt, kind="vectors"),
                    "hidden": Output(hidden),  # not displayed: never copied
                },
            )
            gate.wait(10)
            time.sleep(0.3)  # past the preview throttle: both updates are shown
        return PhaseLikeResult(data * 2, tilt)

    dock.make_job = job
    seen = []
    viewer.layers.events.inserted.connect(lambda e: seen.append(e.value))
    dock.run()
    qtbot.waitUntil(lambda: len(seen) == 2)
    phase, tilt = seen
    assert (phase.__class__.__name__, tilt.__class__.__name__) == ("Image", "Vectors")
    assert [phase.name, tilt.name] == ["Fake running · cells", "tilt running · cells"]
    partial = np.asarray(phase.data)
    np.testing.assert_allclose(partial[:3], image.data[:3])  # the first region...
    assert not partial[3:].any()  # ...in a buffer of the full shape
    gate.set()
    _finish(dock, qtbot)
    assert [ly.name for ly in viewer.layers] == ["cells", "cells [Two phase]", "cells [Two tilt]"]
    assert viewer.layers["cells [Two phase]"] == phase  # the streamed layers became the result
    assert viewer.layers["cells [Two tilt]"] == tilt
    np.testing.assert_allclose(phase.data, image.data * 2)
    assert tilt.data.shape == (2, 2, 2)
    assert "hidden" not in materialised and materialised.count("phase") == 2


def test_metrics_are_plotted_live_for_runs_not_previews(
    viewer, qtbot, image, fake_dock, cpu_device
):
    dock = fake_dock()
    assert dock.panel.plot.isHidden()  # nothing to show before a job reports metrics
    dock.run()
    _finish(dock, qtbot)
    assert not dock.panel.plot.isHidden()
    assert dock.panel.plot.values("loss") == pytest.approx([1, 1 / 2, 1 / 3, 1 / 4])
    assert dock.panel.plot.log_scale  # a loss spans decades
    dock.panel.live_preview.setChecked(True)
    qtbot.waitUntil(lambda: "Fake preview · cells" in viewer.layers)
    _finish(dock, qtbot)
    assert dock.panel.plot.values("loss") == pytest.approx([1, 1 / 2, 1 / 3, 1 / 4])  # kept


def test_stop_and_keep_returns_the_result_so_far(viewer, qtbot, image, fake_dock, cpu_device):
    dock = fake_dock()
    assert dock.panel.stop_button.isVisibleTo(dock) and not dock.panel.stop_button.isEnabled()
    dock.gate = threading.Event()
    dock.run()
    qtbot.waitUntil(lambda: "Fake running · cells" in viewer.layers)
    assert dock.panel.stop_button.isEnabled()
    dock.panel.stop_button.click()
    assert "result so far will be kept" in dock.panel.status.text()
    dock.gate.set()
    _finish(dock, qtbot)
    result = viewer.layers["cells [Fake x2]"]  # kept, not rolled back
    steps = result.metadata["napari_gpuscope"]["result"]["steps"]
    assert result.metadata["napari_gpuscope"]["result"]["stopped_early"] is True
    assert steps < 4
    np.testing.assert_allclose(result.data, image.data * 2.0 * steps / 4)
    assert "stopped early by request" in dock.panel.status.text()


def test_no_stop_button_for_methods_that_cannot_stop(viewer, qtbot, image, fake_dock, cpu_device):
    dock = fake_dock(supports_stop=False)
    assert not dock.panel.stop_button.isVisibleTo(dock)
    assert dock.panel.cancel_button.isVisibleTo(dock)


def _fused_op(name):
    """A fused op as a method module would define it (torch twin only on the CPU)."""
    from napari_gpuscope.compute.kernels import FusedOp, axpby

    return FusedOp(
        name, lambda *a: None, axpby.axpby_twin, axpby._example, outputs=(2,), register=True
    )


def test_kernels_are_prepared_first_and_a_run_waits_for_them(
    viewer, qtbot, image, fake_dock, cpu_device, monkeypatch
):
    from napari_gpuscope.compute import kernels

    gate = threading.Event()
    prepared = []
    real_warm_up = kernels.warm_up

    def warm_up(device, packages=None):
        prepared.append(device)
        yield Progress(0.5, "preparing GPU kernel first_method_op")
        gate.wait(10)
        return (yield from real_warm_up(device, packages))

    monkeypatch.setattr(kernels, "warm_up", warm_up)
    first_op = _fused_op("first_method_op")  # never prepared on any device yet
    dock = fake_dock(wait=False)
    qtbot.waitUntil(lambda: prepared == ["cpu"])
    assert dock.runner.tag == "warmup"
    assert "Preparing GPU kernels on cpu" in dock.panel.status.text()
    qtbot.waitUntil(lambda: "preparing GPU kernel" in dock.panel.progress.text())
    assert dock.run() is True  # queued behind the warm-up
    assert "Preparing GPU kernels first" in dock.panel.status.text()
    assert dock.starts == []
    gate.set()
    qtbot.waitUntil(lambda: "cells [Fake x2]" in viewer.layers)
    _finish(dock, qtbot)
    assert [s["preview"] for s in dock.starts] == [False]
    assert "first_method_op" in kernels.path_report("cpu")  # the kernels module knows

    # every op is prepared on this device: another dock does not prepare them again...
    fake_dock(wait=False)
    qtbot.wait(100)
    assert prepared == ["cpu"]
    # ...until a method imported later brings kernels of its own
    later_op = _fused_op("later_method_op")
    dock.device_row.device_changed.emit("cpu")  # the device selected again
    qtbot.waitUntil(lambda: prepared == ["cpu", "cpu"])
    _finish(dock, qtbot)
    assert "later_method_op" in kernels.path_report("cpu")
    del first_op, later_op


def test_runner_starts_a_new_job_only_after_the_superseded_one_closed(qtbot):
    runner = JobRunner()
    events = []
    gate = threading.Event()

    def job(name):
        events.append(f"{name} planning")  # e.g. measuring free device memory
        try:
            for k in range(3):
                yield Progress((k + 1) / 3, f"{name} {k}")
                gate.wait(10)
            return name
        finally:
            events.append(f"{name} closed")

    results = []
    runner.succeeded.connect(lambda result, _: results.append(result))
    runner.start(job("old"), description="old")
    qtbot.waitUntil(lambda: events == ["old planning"])
    runner.start(job("new"), description="new")
    assert runner.running and runner.waiting
    qtbot.wait(200)
    assert events == ["old planning"]  # the old job still holds its memory
    gate.set()
    qtbot.waitUntil(lambda: not runner.running)
    assert events == ["old planning", "old closed", "new planning", "new closed"]
    assert results == ["new"]


def test_a_method_without_preview_shows_no_preview_toggle(
    viewer, qtbot, image, fake_dock_class, cpu_device
):
    from napari_gpuscope.widgets import MethodDock

    hooks = {"make_preview_job": MethodDock.make_preview_job}  # not overridden
    dock = type("NoPreviewDock", (fake_dock_class,), hooks)(viewer)
    qtbot.addWidget(dock)
    assert not dock.supports_preview
    assert not dock.panel.live_preview.isVisibleTo(dock)
    assert dock.preview_now() is False


def test_a_method_dock_warms_up_only_its_own_kernels(viewer):
    """The TV dock prepares TV's and the platform's kernels, not eSRRF's, flat-field's or
    phase's (all five .cu files took 7.3 s to compile on an H100 with an empty CuPy cache)."""
    from napari_gpuscope.compute import kernels
    from napari_gpuscope.widgets.tv.dock import TVDenoiseDock

    dock = TVDenoiseDock(viewer)
    packages = dock.kernel_packages()
    assert packages == ("napari_gpuscope.compute.tv", "napari_gpuscope.compute.kernels")
    names = {op.name for op in kernels.ops_under(packages)}
    assert names == {"axpby", "fgp_primal", "fgp_step", "tv_gap_partials"}
    dock.close()


def test_a_streamed_result_s_display_follows_its_data_until_the_user_sets_it(
    viewer, image, monkeypatch
):
    """Issue 18: eSRRF's display froze at its first update (a few frames), leaving the finished
    image nearly black. The oracle is the data range of each update."""
    from napari_gpuscope.dock import outputs as _outputs

    monkeypatch.setattr(_outputs, "REFIT_SECONDS", 0.0)
    outputs = _outputs.OutputLayers(viewer, image, lambda n: f"cells [{n}]", link=False)
    final = np.linspace(0.0, 500.0, 48, dtype=np.float32).reshape(6, 8)
    outputs.show("sr", Output(final * 0.04))  # the first few frames
    layer = viewer.layers["cells [sr]"]
    np.testing.assert_allclose(layer.contrast_limits, (0.0, 20.0))
    outputs.show("sr", Output(final * 0.5))
    np.testing.assert_allclose(layer.contrast_limits, (0.0, 250.0))
    (done,) = outputs.finish([image_layer(final, "cells [sr]")], ["sr"])
    np.testing.assert_allclose(done.contrast_limits, (0.0, 500.0))  # once more at the end

    again = _outputs.OutputLayers(viewer, image, lambda n: f"cells [{n}] 2", link=False)
    again.show("sr", Output(final * 0.04))
    mine = viewer.layers["cells [sr] 2"]
    mine.contrast_limits = (1.0, 7.0)  # the user's choice stands
    again.show("sr", Output(final))
    (kept,) = again.finish([image_layer(final, "cells [sr] 2")], ["sr"])
    np.testing.assert_allclose(kept.contrast_limits, (1.0, 7.0))


def test_a_display_linked_to_the_input_is_not_refitted(viewer, image, monkeypatch):
    from napari_gpuscope.dock import outputs as _outputs

    monkeypatch.setattr(_outputs, "REFIT_SECONDS", 0.0)
    image.contrast_limits = (1.0, 48.0)
    outputs = _outputs.OutputLayers(viewer, image, lambda n: f"cells [{n}]", link=True)
    outputs.show("den", Output(np.full((6, 8), 3.0, np.float32)))
    outputs.show("den", Output(np.full((6, 8), 900.0, np.float32)))
    np.testing.assert_allclose(viewer.layers["cells [den]"].contrast_limits, (1.0, 48.0))
    np.testing.assert_allclose(image.contrast_limits, (1.0, 48.0))
