"""Headless demonstrations: every registered method run on each of its samples.

Driven by the method registry (:data:`napari_gpuscope.methods.METHODS`): for each sample, the
method's demo parameters are built from the sample's layer kwargs (``MethodSpec.demo_params``,
which lives beside the method's samples), the job runs on the chosen device, and the result's own
``layers()`` give the layers to write and show. A new method needs no code here. Nothing in this
module imports Qt or napari.
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .compute import devices
from .compute.jobs import run_job
from .compute.results import Geometry, LayerDataTuple, split_result_name
from .methods import METHODS, MethodSpec
from .provenance import PROVENANCE_KEY, build_provenance

if TYPE_CHECKING:
    from .compute._types import ArrayLike, JSONDict
    from .compute.params import Params
    from .compute.results import MethodResult

__all__ = [
    "DEMO_QUANTITY_KEY",
    "NOTE_KEY",
    "DemoRun",
    "available_demos",
    "output_kind",
    "run_demo",
    "trim_zero_frame",
]


@dataclass
class DemoRun:
    """One method run on one sample, ready to be written and displayed.

    Attributes
    ----------
    slug : str
        File-name stem, e.g. ``"tv-2d"``.
    input_layer : tuple
        The sample's layer-data tuple.
    result_layers : list of tuple
        The result's layer-data tuples (``result.layers()``), each carrying the provenance in
        ``kwargs["metadata"][PROVENANCE_KEY]``.
    summary : str
        One line for the console.
    explanation : str, optional
        The result in plain words where the summary alone would mislead (e.g. an estimate
        that differs from the sample's truth because of the method's limit).
    """

    slug: str
    input_layer: LayerDataTuple
    result_layers: list[LayerDataTuple]
    summary: str
    explanation: str | None = None

    @property
    def result_layer(self) -> LayerDataTuple:
        """The main (first) result layer."""
        return self.result_layers[0]

    @property
    def provenance(self) -> JSONDict:
        """The result's provenance record."""
        return self.result_layer[1]["metadata"][PROVENANCE_KEY]

    def figure_layers(self) -> list[LayerDataTuple]:
        """The input and the results as the figure shows them: one field of view without the
        main result's all-zero border (:func:`trim_zero_frame`: eSRRF's ring of zeros was a
        black frame around its panel); the TIFF keeps :attr:`result_layer` whole."""
        return trim_zero_frame([self.input_layer, *self.result_layers])


def run_demo(spec: MethodSpec, device: str) -> list[DemoRun]:
    """Run one method on each of its samples.

    Parameters
    ----------
    spec : MethodSpec
        The method (an entry of :data:`~napari_gpuscope.methods.METHODS`).
    device : str
        ``"cuda:N"`` or, for a reference run, ``"cpu"``.

    Returns
    -------
    list of DemoRun
    """
    job_function = spec.job_function()
    follow_up = _sample_hook(spec, "demo_follow_up")
    explain = _sample_hook(spec, "demo_explanation")
    runs = []
    for sample in spec.samples:
        for data, kwargs, layer_type in sample.load():
            params = spec.params_for_sample(kwargs)
            start = time.perf_counter()
            result = run_job(job_function(data, params=params, device=device))
            elapsed = time.perf_counter() - start
            unit = (kwargs.get("metadata") or {}).get("intensity_unit")
            if unit and hasattr(result, "with_intensity_unit"):  # as the dock says it
                result = result.with_intensity_unit(unit)
            summary = result.summary()
            record = build_provenance(
                spec.id,
                params.to_dict(),
                device=devices.device_label(device),
                input_name=kwargs["name"],
                elapsed_seconds=elapsed,
                result=summary,
            )
            layers = result.layers(
                kwargs["name"], Geometry.from_kwargs(kwargs), metadata={PROVENANCE_KEY: record}
            )
            if follow_up is not None:
                layers += _follow_up_layers(follow_up, spec, (data, kwargs), result, params, device)
            for _, layer_kwargs, _ in layers:
                label = str(getattr(params, "label", ""))
                what = output_kind(layer_kwargs["name"], kwargs["name"], label)
                if what:
                    layer_kwargs.setdefault("metadata", {}).setdefault(DEMO_QUANTITY_KEY, what)
            explanation = None if explain is None else explain(kwargs, result)
            if explanation:
                # The figure's caption carries it too: a panel that differs from the sample's
                # truth (flat-field's darkfield) is explained under the figure, not only here.
                metadata = layers[0][1]["metadata"]
                metadata[PROVENANCE_KEY] = {**metadata[PROVENANCE_KEY], NOTE_KEY: explanation}
            runs.append(
                DemoRun(
                    slug=sample.key,
                    input_layer=(data, kwargs, layer_type),
                    result_layers=layers,
                    summary=f"{sample.key}: {data.shape} in {elapsed:.2f} s: {result.describe()}",
                    explanation=explanation,
                )
            )
    return runs


NOTE_KEY = "note"
"""Provenance key of the words the figure caption adds to a result's sentence (the export's
``napari_gpuscope.export._caption.NOTE_KEY``; the demo may not import the export)."""

DEMO_QUANTITY_KEY = "demo_quantity"
"""Metadata key of what a result layer shows (``"phase"``, ``"flatfield"``), from its name; the
demo figure labels a colorbar with it when the layer has its own display range."""


def output_kind(name: str, input_name: str, label: str = "") -> str:
    """What a result layer named ``"<kind> · <input> [<label>]"`` shows: its kind.

    ``label`` is kept for callers that pass the settings; the kind no longer depends on it.

    Examples
    --------
    >>> output_kind("phase · cells [reg=0.001]", "cells", "reg=0.001")
    'phase'
    >>> output_kind("flatfield · tiles [auto, dark]", "tiles", "auto, dark")
    'flatfield'
    >>> output_kind("widefield mean · frames", "frames", "M4 R1.5 S1")
    'widefield mean'
    >>> output_kind("something else", "cells", "x")
    ''
    """
    del label
    parts = split_result_name(name)
    return parts[0] if parts is not None and parts[1] == input_name else ""


def _follow_up_layers(
    follow_up: Callable[..., tuple[str, MethodResult]],
    spec: MethodSpec,
    sample: tuple[ArrayLike, dict[str, object]],
    result: MethodResult,
    params: Params,
    device: str,
) -> list[LayerDataTuple]:
    """The layers of the follow-up job (e.g. flat-field's Apply of the fitted profile), with
    their own provenance record."""
    data, kwargs = sample
    start = time.perf_counter()
    job, job_result = follow_up(data, kwargs, result, params, device)
    record = build_provenance(
        spec.id,
        params.to_dict(),
        device=devices.device_label(device),
        input_name=kwargs["name"],
        elapsed_seconds=time.perf_counter() - start,
        result={"job": job, **job_result.summary()},
    )
    return job_result.layers(
        kwargs["name"], Geometry.from_kwargs(kwargs), metadata={PROVENANCE_KEY: record}
    )


def _sample_hook(spec: MethodSpec, name: str) -> Callable[..., object] | None:
    """An optional function ``name`` beside the method's ``demo_params`` (its sample module):
    ``demo_follow_up(data, kwargs, result, params, device) -> (job name, result)`` runs a job
    on the main result whose layers the demo shows too (flat-field: the tiles corrected with the
    fitted profile); ``demo_explanation(kwargs, result)`` says the result in plain words, or
    returns None."""
    try:
        module = importlib.import_module(spec.demo_params.partition(":")[0])
    except ImportError:  # loading demo_params itself then says what is missing
        return None
    return getattr(module, name, None)


def available_demos() -> dict[str, MethodSpec]:
    """Methods that have samples to run on, by id."""
    return {key: spec for key, spec in METHODS.items() if spec.samples}


# ---------------------------------------------------------------- the figure's field of view
_EPS = 1e-6


def _geometry(layer: LayerDataTuple) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Scale, translate (world units) and shape of the layer's last two axes."""
    data, kwargs, _ = layer
    ndim = len(np.shape(data))
    scale = np.asarray(kwargs.get("scale") or (1.0,) * ndim, dtype=float)[-2:]
    translate = np.asarray(kwargs.get("translate") or (0.0,) * ndim, dtype=float)[-2:]
    return scale, translate, tuple(int(n) for n in np.shape(data)[-2:])  # type: ignore[return-value]


def _inside(layer: LayerDataTuple, low: np.ndarray, high: np.ndarray) -> list[tuple[int, int]]:
    """Per axis, the pixels ``[start, stop)`` lying wholly within ``[low, high]`` (world)."""
    scale, translate, shape = _geometry(layer)
    ranges = []
    for a in range(2):
        start = math.ceil((low[a] - translate[a]) / scale[a] + 0.5 - _EPS)
        last = math.floor((high[a] - translate[a]) / scale[a] - 0.5 + _EPS)
        ranges.append((max(start, 0), min(last + 1, shape[a])))
    return ranges


def _edges(layer: LayerDataTuple, ranges: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    scale, translate, _ = _geometry(layer)
    low = np.array([translate[a] + (ranges[a][0] - 0.5) * scale[a] for a in range(2)])
    high = np.array([translate[a] + (ranges[a][1] - 0.5) * scale[a] for a in range(2)])
    return low, high


def _crop(layer: LayerDataTuple, ranges: list[tuple[int, int]]) -> LayerDataTuple:
    data, kwargs, kind = layer
    (y0, y1), (x0, x1) = ranges
    scale, translate, _ = _geometry(layer)
    ndim = len(np.shape(data))
    moved = list(kwargs.get("translate") or (0.0,) * ndim)
    moved[-2] = float(translate[0] + y0 * scale[0])
    moved[-1] = float(translate[1] + x0 * scale[1])
    return np.asarray(data)[..., y0:y1, x0:x1], {**kwargs, "translate": tuple(moved)}, kind


def trim_zero_frame(layers: Sequence[LayerDataTuple]) -> list[LayerDataTuple]:
    """Crop every image layer to the field inside the first result's all-zero border.

    Parameters
    ----------
    layers : sequence of layer-data tuples
        The input first, then the results; ``layers[1]`` is the main result.

    Returns
    -------
    list of layer-data tuples
        The same layers when the main result has no all-zero border (or is no 2D+ image),
        else each cropped to whole pixels of one common field of view.

    Examples
    --------
    >>> import numpy as np
    >>> image = np.ones((8, 8))
    >>> result = np.zeros((32, 32))
    >>> result[6:26, 6:26] = 1.0  # a 6-pixel frame of zeros at 4 x the input's pixels
    >>> shown = trim_zero_frame(
    ...     [
    ...         (image, {"scale": (1.0, 1.0)}, "image"),
    ...         (result, {"scale": (0.25, 0.25), "translate": (-0.375, -0.375)}, "image"),
    ...     ]
    ... )
    >>> [layer[0].shape for layer in shown], bool((shown[1][0] == 0).any())
    ([(4, 4), (16, 16)], False)
    """
    if len(layers) < 2 or layers[1][2] != "image" or len(np.shape(layers[1][0])) < 2:
        return list(layers)
    main = np.asarray(layers[1][0])
    flat = np.abs(np.nan_to_num(main.reshape(-1, *main.shape[-2:]))).sum(axis=0)
    rows, cols = np.flatnonzero(flat.sum(axis=1)), np.flatnonzero(flat.sum(axis=0))
    if rows.size == 0 or (
        (rows[0], rows[-1] + 1, cols[0], cols[-1] + 1) == (0, main.shape[-2], 0, main.shape[-1])
    ):
        return list(layers)
    images = [k for k, layer in enumerate(layers) if layer[2] == "image"]
    low, high = _edges(
        layers[1], [(int(rows[0]), int(rows[-1]) + 1), (int(cols[0]), int(cols[-1]) + 1)]
    )
    for k in images:  # the field every layer covers with whole pixels inside the border
        layer_low, layer_high = _edges(layers[k], _inside(layers[k], low, high))
        low, high = np.maximum(low, layer_low), np.minimum(high, layer_high)
    if not (high > low).all():
        return list(layers)
    return [
        _crop(layer, _inside(layer, low, high)) if k in images else layer
        for k, layer in enumerate(layers)
    ]
