"""The clip method's sample and demo parameters (layer data with a scale, units and an
intensity unit, as every method's samples)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from napari_gpuscope.compute.results import Geometry, LayerDataTuple, image_layer

from .compute import ClipParams


def gradient() -> list[LayerDataTuple]:
    """A 32 x 48 uint16 gradient in ADU, 0.25 um pixels."""
    data = np.add.outer(np.arange(32), 4 * np.arange(48)).astype(np.uint16)
    geometry = Geometry(scale=(0.25, 0.25), units=("um", "um"), axis_labels=("y", "x"))
    metadata = {"intensity_unit": "ADU"}
    return [image_layer(data, "gradient", geometry, metadata=metadata, colormap="gray")]


def demo_params(sample_kwargs: Mapping[str, Any]) -> ClipParams:
    """The headless demo's parameters for a sample."""
    del sample_kwargs
    return ClipParams(low=20.0, high=120.0)
