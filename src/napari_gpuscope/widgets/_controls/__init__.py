"""Reusable dock controls, so a method dock only says what is special about its method.

- :class:`ParamForm` -- rows generated from a parameter model (labels, units, bounds, tooltips),
  with a collapsible "Advanced" section for fields marked ``advanced``;
- :class:`LayerPicker` -- the input combo, following the selected and newly added layer;
- :class:`SpacingRow` -- per-axis spacing weights from the layer scale, kept in step with it;
- :class:`CameraRows` -- gain ("auto" = estimate), offset, read noise, and the estimate;
- :class:`MetricsPlot` -- a live matplotlib plot of ``Progress.metrics``;
- :class:`~._changes.ChangesRow` -- which fields differ from their defaults, with a reset.
"""

from napari_gpuscope.widgets._controls._camera import CameraRows, describe_camera
from napari_gpuscope.widgets._controls._form import FieldStyle, ParamForm, field_tooltip
from napari_gpuscope.widgets._controls._layer_picker import LayerPicker
from napari_gpuscope.widgets._controls._plot import MetricsPlot, is_log_metric
from napari_gpuscope.widgets._controls._spacing import SPACING_TOOLTIP, SpacingRow, axis_names

__all__ = [
    "SPACING_TOOLTIP",
    "CameraRows",
    "FieldStyle",
    "LayerPicker",
    "MetricsPlot",
    "ParamForm",
    "SpacingRow",
    "axis_names",
    "describe_camera",
    "field_tooltip",
    "is_log_metric",
]
