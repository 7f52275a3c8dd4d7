"""Phase's live preview: the whole-field phase, re-solved as the regularization moves.

Building the normal equations (transfer functions, FFTs of the stack) is the expensive part; a
new regularization is then one elementwise pass (:class:`~napari_gpuscope.compute.phase.
PhaseSolver`). The solver of the latest input and optics is kept (weakly keyed by the array),
so dragging the slider re-solves without rebuilding anything.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from .._types import ArrayLike
from ..jobs import Job, Progress
from ..preview import PlaneView, PreviewResult
from ._params import PhaseParams
from ._result import PhaseResult
from ._solver import PhaseSolver
from ._tiles import TiltMap

__all__ = ["PhaseSolvers", "preview_job"]


class PhaseSolvers:
    """The :class:`PhaseSolver` of the latest input, optics and tilt (worker threads only)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: weakref.ref[Any] | None = None
        self._device: str | None = None
        self._solver: PhaseSolver | None = None

    def get(
        self, data: ArrayLike, params: PhaseParams, tilt_map: TiltMap | None, device: str
    ) -> PhaseSolver | None:
        """The kept solver if it serves these inputs, else None."""
        with self._lock:
            solver = self._solver
            same_data = self._data is not None and self._data() is data
            if solver is None or not same_data or self._device != device:
                return None
            return solver if solver.matches(params, tilt_map) else None

    def build(
        self, data: ArrayLike, params: PhaseParams, tilt_map: TiltMap | None, device: str
    ) -> PhaseSolver:
        """Build (and keep) the solver of these inputs."""
        solver = PhaseSolver(data, params, tilt_map=tilt_map, device=device)
        with self._lock:
            try:
                self._data = weakref.ref(data)
            except TypeError:  # an array that cannot be weakly referenced: keep nothing
                self._data = None
            self._device, self._solver = device, solver
        return solver

    def clear(self) -> None:
        """Forget the kept solver (frees its device memory)."""
        with self._lock:
            self._data = self._solver = None


def preview_job(
    solvers: PhaseSolvers,
    data: ArrayLike,
    params: PhaseParams,
    device: str,
    view: PlaneView,
    tilt_map: TiltMap | None,
) -> Job[PreviewResult]:
    """The phase of the whole field at the current regularization, shown at the current z.

    An automatic regularization (None, "auto") is chosen as a run chooses it, from the kept
    normal equations; the result's ``regularization_chosen`` says the value.

    ``tilt_map``: the tilt of the latest run on this input (the estimating modes), else the
    manual tilt of ``params`` (or none).
    """
    if tuple(view.axes) != (len(view.shape) - 2, len(view.shape) - 1):
        raise ValueError(
            "the phase preview needs the y-x view (the phase is a plane); switch the viewer "
            "back to the x and y axes"
        )
    estimating = params.tilt_mode in ("global", "tiles")
    use_map = tilt_map if estimating else None
    solver = solvers.get(data, params, use_map, device)
    if solver is None:
        yield Progress(None, "preview: building the optics and the stack's spectra")
        solver = solvers.build(data, params, use_map, device)
    absorption, phase = solver.solve(params.regularization, params)
    result = PhaseResult(
        phase,
        absorption,
        params,
        solver.tilt_map,
        regularization_chosen=solver.chosen_regularization,
        tv_choice=solver.tv_choice,
    )
    note = "whole field"
    if estimating and use_map is None:
        note += ", tilt not estimated yet (Run estimates it)"
    elif estimating:
        note += ", tilt of the latest run"
    return PreviewResult(result, {"phase": phase}, note=note)
