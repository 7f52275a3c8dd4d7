"""The eSRRF dock's "Estimate drift": the registry's ``drift`` job of eSRRF on the dock's one
runner (refused while a run holds the device), its blocks and outcome told by signals to the
drift section (:mod:`.drift`), which plots and keeps the trace."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qtpy.QtCore import QObject, Signal

from napari_gpuscope.compute.devices import device_label
from napari_gpuscope.dock.jobs import JobHandlers, JobRefused
from napari_gpuscope.dock.messages import plain_error_message
from napari_gpuscope.provenance import PROVENANCE_KEY, build_provenance
from napari_gpuscope.widgets.esrrf.drift_trace import channel_axis

if TYPE_CHECKING:
    import napari.layers

    from napari_gpuscope.compute.esrrf import DriftResult, EsrrfParams
    from napari_gpuscope.dock.context import DockContext

__all__ = ["DriftEstimate"]


class DriftEstimate(QObject):
    """Runs the drift estimate of the dock's input.

    Parameters
    ----------
    parent : QObject
        The drift section.
    dock : DockContext
        The dock as its parts see it (input, device, parameters, its one runner).

    Signals
    -------
    starting(str)
        The estimate of the named layer is about to start: its live plot begins.
    refused()
        It did not start (the status says why).
    started(str)
        It started on the named layer.
    progressed(Progress)
        A block's shifts (``dy``, ``dx`` in its metrics).
    estimated(DriftResult, float, Layer, dict)
        The trace, the seconds it took, the layer it is of and its layers' metadata (the
        provenance).
    failed()
        It failed (the status says why).
    ended()
        It ended in any way.
    """

    starting = Signal(str)
    refused = Signal()
    started = Signal(str)
    progressed = Signal(object)
    estimated = Signal(object, float, object, object)
    failed = Signal()
    ended = Signal()

    def __init__(self, parent: QObject, dock: DockContext) -> None:
        super().__init__(parent)
        self.dock = dock

    def start(self) -> bool:
        """Run the ``drift`` job on the dock's input, on its runner; return whether it
        started (False: the dock's status says why)."""
        dock = self.dock
        layer, device = dock.input_layer, dock.device
        try:
            if device is None:
                raise ValueError("no usable CUDA GPU (see the device row)")
            if layer is None:
                raise ValueError("no input stack")
            dock.validate_input(layer, check_values=False)
            params: EsrrfParams = dock.params()  # type: ignore[assignment]
            drift = params.drift_params()
            # Channels drift together: channel 0 (the registration's reference) stands for all.
            stack = layer.data
            if layer.ndim == 4:  # channel 0 along the channel axis
                stack = stack[0] if channel_axis(layer) == 0 else stack[:, 0]
            job = dock.spec.job_spec("drift").job_function()(
                stack, params=drift, device=device, name=f"layer '{layer.name}'"
            )
            self.starting.emit(layer.name)
            dock.start_job(
                "drift",
                job,
                title="The drift estimate",
                description=f"Drift estimate: {layer.name}",
                handlers=JobHandlers(
                    succeeded=lambda result, elapsed: self._on_succeeded(
                        result, elapsed, layer, drift, device
                    ),
                    failed=self._on_failed,
                    progressed=self.progressed.emit,
                    ended=self.ended.emit,
                ),
                layer=layer,
                params=drift,
            )
        except JobRefused:
            self.refused.emit()
            return False  # the status says why
        except ValueError as exc:  # ParameterError and InvalidInputError included
            self.refused.emit()
            dock.set_status(f"The drift cannot be estimated: {exc}")
            return False
        self.started.emit(layer.name)
        return True

    def _on_succeeded(
        self,
        result: DriftResult,
        elapsed: float,
        layer: napari.layers.Image,
        drift: Any,
        device: str,
    ) -> None:
        record = build_provenance(
            "esrrf",
            drift.to_dict(),
            device=device_label(device),
            input_name=layer.name,
            elapsed_seconds=elapsed,
            result=result.summary(),
        )
        self.estimated.emit(result, elapsed, layer, {PROVENANCE_KEY: record})

    def _on_failed(self, exc: BaseException) -> None:
        self.failed.emit()
        self.dock.set_status(f"The drift estimate failed: {plain_error_message(exc)}")
