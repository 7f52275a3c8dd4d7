"""The Qt-free dock model: one runner, one job on the device at a time, refusals in words.

No QApplication: the runner is a stand-in with the few members the model uses.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import napari_gpuscope.dock as dock_package
import napari_gpuscope.widgets as widgets_package
from napari_gpuscope.compute.params import Params
from napari_gpuscope.dock.jobs import PREVIEW, RUN, WARMUP, DockJob
from napari_gpuscope.dock.model import DockModel
from napari_gpuscope.methods import method

WIDGETS = Path(widgets_package.__file__).parent
QT = (
    "qtpy",
    "PyQt5",
    "PyQt6",
    "PySide2",
    "PySide6",
    "magicgui",
    "superqt",
    "vispy",
    "napari.qt",
    "napari._qt",
    "napari.window",
)


class FakeRunner:
    """A runner that records what it was asked (``running`` until cancelled or finished)."""

    def __init__(self) -> None:
        self.running, self.tag, self.started, self.stops = False, None, [], 0

    def start(self, job, *, description, tag=None, wanted=None):
        self.running, self.tag = True, tag
        self.started.append((tag, description))

    def cancel(self):
        was, self.running, self.tag = self.running, False, None
        return was

    def request_stop(self):
        self.stops += 1
        return self.running

    def finish(self):
        self.running, self.tag = False, None


@pytest.fixture
def jobs():
    return DockModel(method("tv"), FakeRunner())


def _module_level_imports(path: Path) -> set[str]:
    """Modules imported at module level, TYPE_CHECKING blocks excepted (never run)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Import):
                names |= {alias.name for alias in inner.names}
            elif isinstance(inner, ast.ImportFrom) and inner.module:
                names.add(inner.module)
    return names


DOCK = Path(dock_package.__file__).parent


@pytest.mark.parametrize("module", sorted(path.stem for path in DOCK.glob("*.py")))
def test_the_dock_model_package_imports_no_qt(module):
    """Every import, TYPE_CHECKING and function-level ones included: the package is Qt-free."""
    tree = ast.parse((DOCK / f"{module}.py").read_text(encoding="utf-8"))
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not {name for name in imported if name.split(".")[0] in QT or name.startswith(QT)}
    assert not {name for name in imported if name.startswith("napari_gpuscope.widgets")}


def test_widgets_holds_only_qt_views():
    """Every module of ``widgets/`` is a Qt view: it imports Qt (or Qt views of the package) at
    module level itself; the Qt-free side of the docks lives in ``napari_gpuscope.dock``."""
    qt_free = []
    for path in sorted(WIDGETS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = _module_level_imports(path)
        qt = any(name.startswith(QT) for name in imported)
        # a package's __init__ only says what the package holds (its docstring, __all__) or
        # gathers its own Qt modules
        gathers = path.name == "__init__.py" and all(
            isinstance(node, ast.Expr)
            or (isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__")
            or (
                isinstance(node, ast.ImportFrom)
                and (
                    node.level > 0
                    or (node.module or "").startswith(("__future__", "napari_gpuscope.widgets"))
                )
            )
            for node in tree.body
        )
        if not (qt or gathers):
            qt_free.append(str(path.relative_to(WIDGETS)))
    assert qt_free == []


@pytest.mark.parametrize(
    "module",
    [
        "_dock_parts",
        "_recipes",
        "_job_view",
        "_status_view",
        "_form_binding",
        "esrrf/sweep",
        "flatfield/apply",
        "esrrf/dock",
    ],
)
def test_parts_use_no_private_member_of_their_dock(module):
    """The parts talk to the dock through its context (public names), never its internals."""
    tree = ast.parse((WIDGETS / f"{module}.py").read_text(encoding="utf-8"))
    private = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and "dock" in ast.unparse(node.value)
    ]
    assert private == []


def test_a_run_is_never_disturbed_and_says_why(jobs):
    jobs.launch(DockJob(RUN, name="cells"), iter(()), description="TV denoise: cells")
    assert jobs.holds_device() and jobs.is_running()
    assert jobs.refusal(RUN) == (
        "TV denoise is already running on 'cells'; it was not started again (Escape cancels it)."
    )
    assert "start the sweep when it has finished" in jobs.refusal("sweep")
    assert jobs.refusal(PREVIEW) is not None


def test_a_side_job_blocks_the_run_and_other_side_jobs(jobs):
    jobs.launch(DockJob("sweep", name="blink", title="The sweep"), iter(()), description="s")
    assert jobs.refusal(RUN) == (
        "The sweep is running on 'blink'; start it when it has finished (Escape cancels it)."
    )
    assert "already running" in jobs.refusal("sweep")
    assert "start the apply" in jobs.refusal("apply")
    assert jobs.request_stop() and jobs.runner.stops == 1


def test_a_preview_gives_way(jobs):
    jobs.launch(DockJob(PREVIEW, name="cells"), iter(()), description="p")
    assert not jobs.holds_device()
    assert jobs.refusal(RUN) is None and jobs.refusal("sweep") is None
    assert not jobs.request_stop()  # nothing to keep: a preview is cancelled, not stopped
    cancelled = jobs.cancel_preview()
    assert cancelled.kind == PREVIEW and jobs.job is None and not jobs.is_running()


def test_the_warm_up_queues_runs_and_previews_and_refuses_side_jobs(jobs):
    jobs.launch(DockJob(WARMUP, device="cuda:0"), iter(()), description="kernels")
    assert jobs.warming_up
    assert jobs.refusal(RUN) is None  # the dock queues it
    assert "being prepared" in jobs.refusal("apply")
    jobs.queue(PREVIEW)
    jobs.queue(RUN)
    jobs.queue(PREVIEW)
    assert jobs.queued == RUN  # a run wins over a preview
    assert jobs.next_queued() is None  # still busy: dropped, as the dock always did
    jobs.queue(PREVIEW)
    jobs.take()
    jobs.runner.finish()
    assert jobs.next_queued() == PREVIEW and jobs.queued is None


def test_cancel_forgets_the_job_and_the_queue(jobs):
    assert jobs.cancel() is None  # nothing ran
    jobs.launch(DockJob(RUN, name="cells"), iter(()), description="r")
    jobs.queued = PREVIEW
    job = jobs.cancel()
    assert job.kind == RUN and jobs.job is None and jobs.queued is None


def test_settings_are_saved_only_while_saving_and_only_valid(jobs, tmp_path, monkeypatch):
    from napari_gpuscope.dock.settings import CONFIG_DIR_ENV

    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path))
    from napari_gpuscope.compute.tv import TVParams

    jobs.save_settings(lambda: TVParams(strength=2.0), {})
    assert not jobs.settings.path.exists()  # not loaded yet
    jobs.saving = True

    def invalid() -> Params:
        raise ValueError("strength must be positive")

    jobs.save_settings(invalid, {})
    assert not jobs.settings.path.exists()
    jobs.save_settings(lambda: TVParams(strength=2.0), {"replace_last": True})
    params, options = jobs.load_settings()
    assert params.strength == 2.0 and options == {"replace_last": True}
    jobs.forget_settings()
    assert not jobs.settings.path.exists()


def test_the_controller_holds_the_input_weakly_and_the_parameters_or_why_not(jobs):
    import gc

    from napari_gpuscope.compute.params import ParameterError
    from napari_gpuscope.compute.tv import TVParams

    class Layer:  # what the picker hands over (the controller only keeps it)
        name = "cells"

    layer = Layer()
    jobs.set_input(layer)
    assert jobs.input_layer is layer
    del layer
    gc.collect()
    assert jobs.input_layer is None  # deleted from the viewer: not kept alive here
    good = jobs.update_params(lambda: TVParams(strength=2.0))
    assert jobs.params is good and jobs.params_error is None
    with pytest.raises(ParameterError):
        jobs.update_params(lambda: TVParams(tolerance=-1.0))
    assert jobs.params is good  # the last valid ones stay
    assert jobs.params_error.startswith("TVParams.tolerance must be")
    jobs.update_params(lambda: TVParams())
    assert jobs.params_error is None
