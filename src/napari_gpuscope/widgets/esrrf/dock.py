"""The "eSRRF" dock: super-resolution from a stack of blinking-fluorophore frames.

Everything generic -- parameter rows (from :class:`~napari_gpuscope.compute.esrrf.EsrrfParams`),
Run / Stop & keep / Cancel, streaming, results, provenance, settings, export -- comes from
:class:`~napari_gpuscope.widgets.MethodDock`. This dock adds:

- the radius's length in the layer's units beside it;
- the geometry of its layers: the super-resolved image has the input's scale / M, translated so
  that pixel centres stay aligned with the input's (while it streams, in the preview and as the
  result), shown with its own colormap and contrast (its values are not in the input's units);
- a live preview of the visible region from a few frames
  (:mod:`napari_gpuscope.compute.esrrf._preview`);
- the "Drift correction" section (:mod:`.drift`): off, estimated in the run, or an
  estimated or loaded trace, plotted and drawn over the image;
- multi-channel input: a 4D layer is read as ``(C, T, Y, X)``, or as ``(T, C, Y, X)`` where
  its axis labels say so or its first axis is too long to be channels (an ImageJ hyperstack
  as napari opens it; :func:`~napari_gpuscope.compute.esrrf.guess_channel_axis`); "Register
  channels" (the model's ``channel_registration``: off, translation, elastic; shown for 4D
  layers only)
  aligns the channels to channel 0 before each is reconstructed; for a (T, Y, X) input,
  "More channels" (:mod:`.channels`) adds other layers of its shape as channels 1, 2, ...
  (:func:`~napari_gpuscope.compute.esrrf.iter_channels`);
- the parameter sweep panel (:mod:`.sweep`).

A full run is the registry's eSRRF job with the dock's parameters, nothing added: what a recipe
saved from the dock runs in ``napari-gpuscope run`` (a drift trace loaded from a file is the
job's ``drift_trace`` input: the recipe carries it as an artifact beside it). It streams the
reconstruction of the current time point as frames go through, and adds the widefield mean
(same frames) for comparison. "Measure resolution" (on in the dock, ``measure_resolution``)
has the job measure the decorrelation resolution of the first time point's eSRRF image and of
its widefield mean (:mod:`napari_gpuscope.compute.esrrf._resolution`): the result's
``describe()`` says it in the status line and its ``summary()`` in the provenance. The dock
asks for small frame chunks so that the image visibly builds up; the result does not depend on
the chunks (the job's statistics and widefield sums run frame by frame), so a batch run's own
chunks give the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
from magicgui.widgets import Label
from qtpy.QtCore import QTimer
from qtpy.QtWidgets import QSizePolicy

from napari_gpuscope.compute.esrrf import (
    MAX_CHANNELS,
    OUTPUT,
    EsrrfParams,
    PreviewRegion,
    StackedChannels,
    output_geometry,
    preview_job,
    time_points,
    visible_region,
)
from napari_gpuscope.compute.jobs import Job, Progress
from napari_gpuscope.compute.preview import PlaneView, PreviewResult
from napari_gpuscope.compute.results import Geometry
from napari_gpuscope.dock.jobs import RUN
from napari_gpuscope.provenance import PROVENANCE_KEY
from napari_gpuscope.widgets._base import MethodDock
from napari_gpuscope.widgets._controls import FieldStyle
from napari_gpuscope.widgets._controls._changes import mark_labels
from napari_gpuscope.widgets.esrrf.channels import ChannelLayers, with_input_colormaps
from napari_gpuscope.widgets.esrrf.drift import DriftSection, channel_axis, layer_unit
from napari_gpuscope.widgets.esrrf.drift_trace import pixel_of
from napari_gpuscope.widgets.esrrf.sweep import SweepPanel

if TYPE_CHECKING:
    import napari.layers

    from napari_gpuscope.compute.esrrf import DriftResult, EsrrfResult
    from napari_gpuscope.compute.results import MethodResult

__all__ = ["EsrrfDock"]

SR_COLORMAP = "magma"
STREAM_UPDATES = 50
"""About this many image updates per run while frames stream (the chunks change how often the
image updates, not the result)."""
MAX_STREAM_CHUNK = 32


class EsrrfDock(MethodDock):
    """Dock widget for eSRRF super-resolution.

    Parameters
    ----------
    viewer : napari.viewer.Viewer
        Injected by napari.
    """

    method_id = "esrrf"
    short_title = "eSRRF"
    streamed_outputs = (OUTPUT,)
    input_layouts = ("TYX", "CTYX", "TCYX")  # a 4D layer: channels of one stack
    # The form needs 352 px ("Frames per time point", the output-size line) and the sweep
    # panel makes the dock taller than a screen, so its vertical scroll bar needs room too.
    dock_width = 380
    step_label = "frame"
    # The dock measures the resolution of what it shows (the model's default, off, keeps
    # recipes saved before the option their hash).
    dock_defaults: ClassVar[Mapping[str, Any]] = {"measure_resolution": True}
    field_styles = {  # noqa: RUF012 (read-only presentation table)
        "radius": FieldStyle(slider=True, minimum=0.5, maximum=4.0),
        "sensitivity": FieldStyle(slider=True, minimum=0.0, maximum=5.0),
        # None: any drift up to half the frame (the box's minimum says so).
        "max_drift": FieldStyle(auto_text="any"),
        # At the box's minimum (0, which the model refuses as a number) the length is None:
        # chosen per stack, the default.
        "drift_time_averaging": FieldStyle(minimum=0, auto_text="auto"),
    }

    def __init__(self, viewer: napari.viewer.Viewer) -> None:
        # The region of the latest preview made, where its plane is placed (the dock's one
        # runner runs one preview at a time; GUI thread only).
        self._preview_region: PreviewRegion | None = None
        super().__init__(viewer)
        layout = self.content.layout()
        layout.insertWidget(layout.count() - 1, self.sweep)  # before the closing stretch

    # ---------------------------------------------------------------- controls
    def build_controls(self) -> None:
        """The radius's length in the layer's units; the sweep panel."""
        self.radius_label = Label(value="")
        self.radius_label.tooltip = "The radius in the input layer's physical units (its scale)."
        self.radius_label.native.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.form.add_row("", self.radius_label.native, after="radius")
        self.pixel_label = Label(value="")
        self.pixel_label.tooltip = "The output's pixel size and shape at this magnification."
        self.pixel_label.native.setSizePolicy(
            QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred
        )
        self.pixel_label.native.setWordWrap(True)  # "→ 192×192, 0.0333 µm pixels" was cut
        self.form.add_row("", self.pixel_label.native, after="magnification")
        self.form.widgets["radius"].changed.connect(self._update_radius_label)
        self.form.widgets["magnification"].changed.connect(self._update_radius_label)
        # Other layers as channels of a (T, Y, X) input (shown when there are any).
        self.channel_layers = ChannelLayers(self.viewer)
        self.channel_layers.add_to(self.form, after="drift_correction")
        self.channel_layers.changed.connect(self._show_registration)
        # The section's choice stands for the drift_correction checkbox, which it drives.
        self.drift = DriftSection(self, self.form.widgets["drift_correction"])
        self.drift.add_to(self.form, after="drift_correction")
        # The changes row says the choice's words ("Use the trace below"), not True/False.
        mode = self.drift.mode
        self.form.words["drift_correction"] = lambda on: mode.currentText() if on else "Off"
        self._drift_source: str | None = None  # where the latest run's correction came from
        self.form.set_row_visible("drift_correction", False)
        self.runner.progressed.connect(self._on_run_progress)
        self.sweep = SweepPanel(self)  # placed under the run controls once the layout exists

    def on_input_changed(self, layer: napari.layers.Image | None) -> None:
        """Show the radius in the new layer's units; the channel row for a 4D layer."""
        self._update_radius_label()
        self.channel_layers.follow(layer)
        self._show_registration()
        self.drift.follow_input(layer)

    def _show_registration(self) -> None:
        """ "Register channels" applies to a 4D input or one with more channel layers."""
        layer = self.input_layer
        channels = layer is not None and (layer.ndim == 4 or bool(self.channel_layers.selected))
        self.form.set_row_visible("channel_registration", channels)

    def release(self) -> None:
        """Also stop following the viewer's layers for the channel list."""
        super().release()
        self.channel_layers.stop_following()

    def validate_input(
        self, layer: napari.layers.Layer | None, *, check_values: bool = True
    ) -> None:
        """A (T, Y, X) stack, or (C, T, Y, X) / (T, C, Y, X) channels (2 to MAX_CHANNELS)."""
        super().validate_input(layer, check_values=check_values)
        shape = np.shape(layer.data)
        if len(shape) == 4 and not 2 <= shape[channel_axis(layer)] <= MAX_CHANNELS:
            raise ValueError(
                f"'{layer.name}' is 4D {tuple(shape)}: eSRRF reads a 4D layer as (C, T, Y, X) "
                f"or (T, C, Y, X), 2 to {MAX_CHANNELS} channels of blinking frames; a single "
                "channel is a (T, Y, X) stack"
            )

    def _update_radius_label(self, *_: Any) -> None:
        layer = self.input_layer
        if layer is None or layer.ndim < 2:
            self.radius_label.value = self.pixel_label.value = ""
            return
        radius = float(self.form.value("radius"))
        pixel = float(layer.scale[-1])
        unit = layer_unit(layer)
        m = int(self.form.value("magnification"))
        rows, cols = (int(n) * m for n in np.shape(layer.data)[-2:])
        self.radius_label.value = f"= {radius * pixel:.3g} {unit}"
        if unit == "px":  # no physical unit: the sizes in input pixels say it all
            self.pixel_label.value = f"→ {rows}×{cols} pixels"
        else:
            self.pixel_label.value = f"→ {rows}×{cols}, {pixel / m:.3g} {unit} pixels"

    def build_params(self) -> EsrrfParams:
        """The parameters the controls describe."""
        return EsrrfParams(**self.form.values())

    def make_job(
        self, layer: napari.layers.Image, params: EsrrfParams, device: str
    ) -> Job[EsrrfResult]:
        """The registry's eSRRF job (the model's :meth:`~DockModel.default_job`, as the CLI
        and batch build it), in chunks small enough that the image visibly builds up (about 50
        updates; fewer frames per chunk when device memory is short; the result is the same
        whatever the chunks). A trace in the drift section is passed as the
        :class:`~napari_gpuscope.compute.esrrf.DriftResult` it is; channels chosen in "More
        channels" are read lazily as channel c = the c-th layer."""
        shape = np.shape(layer.data)
        frames = int(shape[1 - channel_axis(layer)] if layer.ndim == 4 else shape[-3])
        per_chunk = int(np.clip(np.ceil(frames / STREAM_UPDATES), 1, MAX_STREAM_CHUNK))
        drift = self.drift.shifts_for(layer)  # None: off, or estimated in the run
        self._drift_source = self.drift.run_source()
        extra = self.channel_layers.selected if layer.ndim == 3 else []
        data, axis, names = layer.data, None, None
        if layer.ndim == 4:
            axis = channel_axis(layer)
        elif extra:
            data = StackedChannels([layer.data, *(other.data for other in extra)])
            axis, names = 0, tuple(other.name for other in (layer, *extra))
        job = self.model.default_job(
            data,
            params,
            device,
            frames_per_chunk=per_chunk,
            name=f"layer '{layer.name}'",
            drift_shifts=drift,
            channel_axis=axis,
            channel_names=names,
        )
        # The status says the resolution in the layer's unit (the job measures pixels).
        job = _in_units(job, pixel_of(layer))
        if axis is None:
            return job
        return with_input_colormaps(job, [layer, *extra])  # each channel in its colours

    def loaded_trace(self) -> DriftResult | None:
        """The trace the next run is corrected with when it was loaded from a file (not
        estimated): the run's ``drift_trace`` input, which a recipe saved now carries."""
        trace = self.drift.trace
        if self.drift.current_mode != "trace" or trace is None or trace.params is not None:
            return None
        return None if trace.stopped_early else trace

    def recipe_artifacts(self) -> dict[str, tuple[Any, str]]:
        """A drift trace loaded from a file, when runs use it (the run job's ``accepts``): the
        Recipe row writes it beside the recipe as a drift-trace CSV (``(dy, dx)`` per frame in
        input pixels, what the job's ``drift_shifts`` takes), and a batch run corrects every
        position with it. An estimated trace is not carried: a recipe run estimates each
        position's drift with the recipe's drift options."""
        trace = self.loaded_trace()
        if trace is None:
            return {}
        return {"drift_trace": (trace, self.drift.trace_source)}

    def recipe_notes(self) -> list[str]:
        """What a recipe does otherwise than runs here: other layers added as channels (More
        channels) are not carried (a batch position's channels are its file's); a loaded trace
        (carried) corrects every position of a batch run; a trace estimated with other drift
        options than the parameters', or channel 0's trace used for every channel, is not
        carried (a recipe run estimates each position's, and each channel's, drift with the
        recipe's options)."""
        notes = []
        layer = self.input_layer
        extra = self.channel_layers.selected if layer is not None and layer.ndim == 3 else []
        if extra:  # other layers, which no recipe names: a position's channels are its file's
            names = ", ".join(f"'{other.name}'" for other in extra)
            notes.append(
                f"runs here add {names} as channels (More channels), which a recipe does not "
                "carry: a batch run reconstructs each position's own channels (a 4D file)"
            )
        trace = self.drift.trace
        if self.drift.current_mode != "trace" or trace is None:
            return notes
        if trace.params is None:
            return [
                *notes,
                f"the recipe carries the drift trace {self.drift.trace_source} (its "
                f"drift_trace artifact): a batch run corrects every position with it, and "
                f"refuses positions that have not {trace.shifts.shape[0]} frames",
            ]
        try:
            if trace.params != cast("EsrrfParams", self.params()).drift_params():
                notes.append(
                    "the drift trace here was estimated with other drift options than the "
                    "recipe's: a batch run estimates with the recipe's"
                )
        except ValueError:
            pass  # invalid parameters: no recipe is saved
        if layer is not None and (layer.ndim == 4 or self.channel_layers.selected):
            notes.append(
                "runs here correct every channel with channel 0's estimated trace; a batch run "
                "estimates each channel's drift"
            )
        return notes

    def show_changes(self) -> list[str]:
        """Mark the drift choice too when drift correction differs from its default."""
        changed = super().show_changes()
        mark_labels([self.drift.title], "drift_correction" in changed)
        return changed

    def _on_run_progress(self, update: Progress) -> None:
        if self.model.kind == RUN and update.metrics:
            self.drift.on_run_progress(update)

    # ---------------------------------------------------------------- layers
    def output_geometry(
        self,
        geometry: dict[str, Any],
        ndim: int,
        *,
        preview: bool,
        params: EsrrfParams,
        layer: napari.layers.Image,
    ) -> dict[str, Any]:
        """Scale / M on the last two axes with pixel centres aligned, a run's time points over
        their frames, a preview at its region's place; the super-resolution colormap (its
        values are not in the input's units)."""
        if "scale" not in geometry or ndim != 3:
            return {**geometry, "colormap": SR_COLORMAP}
        m = params.magnification
        scale = [float(s) for s in geometry["scale"]]
        translate = [float(t) for t in geometry.get("translate", (0.0,) * len(scale))]
        if preview and self._preview_region is not None:
            for axis, offset in zip((-2, -1), self._preview_region.origin, strict=True):
                translate[axis] += scale[axis] * offset
            placed = None  # the preview plane stays on the displayed frame
        else:
            placed = time_points(int(np.shape(layer.data)[0]), params)
        sr = output_geometry(Geometry(scale=tuple(scale), translate=tuple(translate)), m, placed)
        return {**geometry, **sr.as_kwargs(), "colormap": SR_COLORMAP}

    def on_result(
        self, result: MethodResult | PreviewResult, *, preview: bool, layer: napari.layers.Image
    ) -> None:
        """Put the super-resolved image on top (the widefield mean, added after it, would hide
        it) and select it."""
        if not preview:  # once the base has recorded the result's layers
            source = self._drift_source
            self.drift.on_run_result(getattr(result, "drift", None), layer)
            QTimer.singleShot(0, lambda: self._raise_result(source))
            # The status is short; the parameters and each measure are in its tooltip.
            details = getattr(result, "details", None)
            self.panel.status.setToolTip(details() if details is not None else "")

    def _raise_result(self, drift_source: str | None = None) -> None:
        if drift_source is not None:  # the provenance says where the trace came from
            for result_layer in self.last_results or []:
                record = result_layer.metadata.get(PROVENANCE_KEY)
                if isinstance(record, dict):
                    record["drift_trace"] = drift_source
        sr = self.last_result_layer
        if sr is not None and sr in self.viewer.layers:
            layers = self.viewer.layers
            layers.move(layers.index(sr), len(layers))
            layers.selection.active = sr

    # ---------------------------------------------------------------- preview
    def make_preview_job(
        self, layer: napari.layers.Image, params: EsrrfParams, device: str, view: PlaneView
    ) -> Job[PreviewResult]:
        """A reconstruction of the visible region from the frames at the displayed one."""
        if layer.ndim == 4:
            raise ValueError(
                "Live preview shows one (T, Y, X) stack; Run reconstructs every channel of "
                f"'{layer.name}'."
            )
        corners = np.asarray(getattr(layer, "corner_pixels", np.zeros((2, 3))))
        region = visible_region(tuple(np.shape(layer.data)), corners, view.index[0])
        self._preview_region = region
        return preview_job(layer.data, params, device, view, region)


def _in_units(job: Job[Any], pixel: tuple[float, str] | None) -> Job[Any]:
    """``job`` whose result says its resolution in the layer's unit (``pixel``: its pixel
    size and unit; None keeps pixels). The pixels and the provenance stay the job's."""
    result = yield from job
    if pixel is None or not hasattr(result, "in_units"):
        return result
    return result.in_units(*pixel)
