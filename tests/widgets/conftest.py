"""Fixtures for the widget tests: a tiny fake method on the MethodDock base, and notifications."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest

from napari_gpuscope.compute.jobs import Output, Progress, is_stop
from napari_gpuscope.compute.params import Params, param
from napari_gpuscope.compute.results import image_layer
from napari_gpuscope.widgets import MethodDock, PreviewResult
from napari_gpuscope.widgets._controls import FieldStyle


@pytest.fixture(autouse=True)
def _settings_in_tmp(tmp_path, monkeypatch):
    """Saved dock settings go to a fresh folder per test (never the user's)."""
    from napari_gpuscope.dock.settings import CONFIG_DIR_ENV

    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path / "config"))


class FakeParams(Params):
    """Parameters of the fake method (a pydantic model, as every params model)."""

    method_id: ClassVar[str] = "fake"
    factor: float = param(
        2.0, minimum=0.0, exclusive_minimum=True, maximum=10.0, help="Multiply by this"
    )
    steps: int = param(4, minimum=1, maximum=1000, advanced=True, help="Streamed updates")

    @property
    def label(self) -> str:
        return f"x{self.factor:g}"


@dataclass(frozen=True)
class FakeResult:
    """What the fake job returns (result protocol)."""

    image: np.ndarray
    steps: int
    factor: float = 2.0
    stopped_early: bool = False

    def summary(self) -> dict[str, Any]:
        return {"steps": self.steps, "stopped_early": self.stopped_early}

    def describe(self) -> str:
        early = ", stopped early by request" if self.stopped_early else ""
        return f"fake done in {self.steps} steps{early}"

    def layers(self, name="image", geometry=None, metadata=None):
        name = f"{name} [Fake x{self.factor:g}]"
        return [image_layer(self.image, name, geometry, metadata=metadata)]


@dataclass(frozen=True)
class FakeSpec:
    """A registry entry for the fake method (duck-typed MethodSpec)."""

    id: str = "fake"
    title: str = "Fake"
    supports_stop: bool = True

    def params_class(self) -> type:
        return FakeParams

    def job_function(self):
        return None


class FakeDock(MethodDock):
    """Scales the input by ``factor`` in ``steps`` streamed updates.

    Instance knobs let a test pace the job (``gate``), make it fail (``fail_at``) or stream
    into regions (``regions``). ``starts`` records every job that actually started running.
    """

    method_id = "fake"
    streamed_outputs = ("result",)
    field_styles: ClassVar = {"factor": FieldStyle(slider=True)}
    preview_debounce_ms = 150

    def __init__(self, viewer: Any) -> None:
        self.starts: list[dict[str, Any]] = []
        self.gate: threading.Event | None = None
        self.closed = threading.Event()
        self.fail_at: int | None = None
        self.regions = False
        super().__init__(viewer)

    @classmethod
    def method_spec(cls):
        return FakeSpec()

    @property
    def factor(self):
        return self.form.widgets["factor"]

    @property
    def image_combo(self):
        return self.input.combo

    def make_job(self, layer, params, device):
        return self._job_on(np.asarray(layer.data), params, preview=False)

    def make_preview_job(self, layer, params, device, view):
        slab = view.slab([1.0] * layer.ndim, 0)
        return self._preview(np.asarray(layer.data)[slab.selection][slab.centre], params)

    def _preview(self, data, params):
        result = yield from self._job_on(data, params, preview=True)
        return PreviewResult(result, {"result": result.image}, "current plane")

    def _job_on(self, data, params, *, preview):
        # The body runs on first iteration: records the thread the job is iterated in.
        factor, steps = params.factor, params.steps
        self.starts.append({"preview": preview, "factor": factor, "thread": threading.get_ident()})
        closed = self.closed  # the event of *this* job, even if a test swaps it later
        closed.clear()
        try:
            for k in range(1, steps + 1):
                if self.fail_at == k:
                    raise RuntimeError("the fake solver diverged")
                value = data.astype(np.float32) * factor * k / steps
                if self.regions:
                    n = data.shape[0]
                    rows = slice((k - 1) * n // steps, k * n // steps)
                    output = Output(value[rows], region=(rows,), shape=data.shape)
                else:
                    output = Output(value.copy())
                command = yield Progress(
                    k / steps,
                    f"step {k}",
                    step=k,
                    metrics={"loss": 1.0 / k},
                    outputs={"result": output},
                )
                if self.gate is not None:
                    self.gate.wait(timeout=10)
                if is_stop(command):
                    return FakeResult(value, k, factor, stopped_early=True)
            return FakeResult(data.astype(np.float32) * factor, steps, factor)
        finally:
            closed.set()


@pytest.fixture
def fake_dock_class():
    """The fake method's dock class (to derive variants from)."""
    return FakeDock


@pytest.fixture
def fake_result():
    """The fake method's result class."""
    return FakeResult


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
    """``make(supports_stop=True, wait=True)``: a FakeDock on the test viewer (``wait``: until
    its kernel warm-up has finished)."""

    def make(*, supports_stop: bool = True, wait: bool = True) -> FakeDock:
        cls = FakeDock
        if not supports_stop:
            cls = type("NoStopDock", (FakeDock,), {"method_spec": classmethod(_no_stop_spec)})
        dock = cls(viewer)
        qtbot.addWidget(dock)
        if wait:
            qtbot.waitUntil(lambda: not dock.is_running(), timeout=10_000)
        return dock

    return make


def _no_stop_spec(cls) -> FakeSpec:
    return FakeSpec(supports_stop=False)
