"""The TV dock's noise level, estimated as soon as an input is chosen: on a worker thread, with
the estimator a run uses (:func:`~napari_gpuscope.compute.tv.resolve_weight`, through the
dock's :class:`~napari_gpuscope.compute.tv.WholeImageWeights`, so the first preview finds it
remembered), so the dock says "noise σ ≈ 0.1 → weight 0.15" before anything runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from qtpy.QtCore import QObject, Signal

from napari_gpuscope.compute.preview import DataIdentity
from napari_gpuscope.dock.messages import plain_error_message

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from napari_gpuscope.compute.tv import TVParams, WholeImageWeights

__all__ = ["NoiseEstimate"]


class NoiseEstimate(QObject):
    """One whole-image noise estimate at a time, off the GUI thread.

    Only in-memory (NumPy) inputs are estimated here: a lazy volume is read by the first
    preview or run, never just because it was selected.

    Parameters
    ----------
    parent : QObject
        The dock.
    weights : WholeImageWeights
        The dock's remembered whole-image weights (shared with its previews).

    Signals
    -------
    found(object, float)
        The :class:`~napari_gpuscope.compute.preview.DataIdentity` of the array and its noise
        level (in the input's units).
    failed(object, str)
        The array's identity and why its noise level cannot be estimated, in words.
    """

    found = Signal(object, float)
    failed = Signal(object, str)

    def __init__(self, parent: QObject, weights: WholeImageWeights) -> None:
        super().__init__(parent)
        self.weights = weights
        self.running: DataIdentity | None = None
        self.released = False

    def start(self, data: ArrayLike, params: TVParams) -> bool:
        """Estimate the noise level of ``data`` (Gaussian model) unless one estimate runs
        already or ``data`` is lazy; returns whether it started."""
        if self.released or self.running is not None or not isinstance(data, np.ndarray):
            return False
        from napari.qt.threading import create_worker

        from napari_gpuscope.compute.tv import TVParams

        identity = DataIdentity(data)
        # The noise level depends on the channel axis only (not on the strength, the solver or
        # the camera fields of the Poisson model): the key the previews' cache uses.
        key = TVParams(channel_axis=params.channel_axis)
        weights = self.weights

        def estimate() -> float | str:
            # A refusal is an answer here, not a crash: the worker never raises into Qt.
            try:
                sigma = weights.resolve(data, key).noise_sigma
            except Exception as exc:  # said in the dock, as a run would say it
                return plain_error_message(exc)
            return float(sigma) if sigma is not None else "no noise level"

        worker = create_worker(estimate, _start_thread=False)
        worker.returned.connect(lambda answer: self._done(identity, answer))
        self.running = identity
        worker.start()
        return True

    def _done(self, identity: DataIdentity, answer: float | str) -> None:
        self.running = None
        if self.released:
            return
        try:
            if isinstance(answer, float):
                self.found.emit(identity, answer)
            else:
                self.failed.emit(identity, answer)
        except RuntimeError:  # the dock was deleted before its estimate returned (napari closed)
            self.released = True

    def release(self) -> None:
        """Say nothing more (the dock is closing); a running estimate finishes unheard."""
        self.released = True
