"""Fixtures for the widget tests: a tiny fake method on the MethodDock base, and notifications."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from magicgui.widgets import ComboBox, Container, FloatSlider

from napari_gpuscope.compute.jobs import Output, Progress
from napari_gpuscope.widgets import MethodDock


class FakeResult:
    """What the fake job returns."""

    def __init__(self, image: np.ndarray, steps: int) -> None:
        self.image = image
        self.steps = steps

    def summary(self) -> dict[str, Any]:
        return {"steps": self.steps}


class FakeDock(MethodDock):
    """Scales the input by ``factor`` in ``steps`` streamed updates.

    Class-level knobs let a test pace the job (``gate``), make it fail (``fail_at``) or stream
    into regions (``regions``). ``starts`` records every job that actually started running.
    """

    method_id = "fake"
    method_title = "Fake"
    preview_debounce_ms = 150

    def __init__(self, viewer: Any) -> None:
        self.starts: list[dict[str, Any]] = []
        self.gate: threading.Event | None = None
        self.closed = threading.Event()
        self.fail_at: int | None = None
        self.regions = False
        self.steps = 4
        super().__init__(viewer)

    def build_parameters(self) -> Container:
        from napari.layers import Image

        self.image_combo = ComboBox(
            label="Input",
            choices=lambda *_: [
                (ly.name, ly) for ly in self.viewer.layers if isinstance(ly, Image)
            ],
        )
        self.factor = FloatSlider(label="Factor", min=0.0, max=10.0, value=2.0)
        return Container(widgets=[self.image_combo, self.factor])

    def input_layer(self):
        return self.image_combo.value

    def collect_parameters(self) -> dict[str, Any]:
        if self.factor.value == 0:
            raise ValueError("Factor must not be 0.")
        return {"factor": float(self.factor.value)}

    def make_job(self, layer, params, device, *, preview):
        data = np.asarray(layer.data)
        if preview:
            data = data[-2:] if data.ndim > 2 else data
        return self._job(data, params["factor"], preview)

    def _job(self, data, factor, preview):
        # The body runs on first iteration: records the thread the job is iterated in.
        self.starts.append({"preview": preview, "factor": factor, "thread": threading.get_ident()})
        closed = self.closed  # the event of *this* job, even if a test swaps it later
        closed.clear()
        try:
            out = np.zeros(data.shape, np.float32)
            for k in range(1, self.steps + 1):
                if self.fail_at == k:
                    raise RuntimeError("the fake solver diverged")
                value = data.astype(np.float32) * factor * k / self.steps
                if self.regions:
                    n = data.shape[0]
                    rows = slice((k - 1) * n // self.steps, k * n // self.steps)
                    output = Output(value[rows], region=(rows,), shape=data.shape)
                else:
                    out = value
                    output = Output(out.copy())
                yield Progress(k / self.steps, f"step {k}", outputs={"result": output})
                if self.gate is not None:
                    self.gate.wait(timeout=10)
            return FakeResult(data.astype(np.float32) * factor, self.steps)
        finally:
            closed.set()

    def result_layers(self, result, layer, params, *, preview):
        return [(result.image, {}, "image")]

    def describe_result(self, result) -> str:
        return f"Fake done in {result.steps} steps."


@pytest.fixture
def errors(monkeypatch):
    """Capture napari error notifications instead of showing them."""
    from napari.utils import notifications

    seen: list[str] = []
    monkeypatch.setattr(notifications, "show_error", lambda message: seen.append(str(message)))
    return seen


@pytest.fixture
def viewer(make_napari_viewer_proxy):
    return make_napari_viewer_proxy()


@pytest.fixture
def fake_dock(viewer, qtbot):
    def make() -> FakeDock:
        dock = FakeDock(viewer)
        qtbot.addWidget(dock)
        return dock

    return make
