"""Headless demonstrations: every registered method run on each of its samples.

Driven by the method registry (:data:`napari_gpuscope.methods.METHODS`): for each sample, the
method's demo parameters are built from the sample's layer kwargs (``MethodSpec.demo_params``,
which lives beside the method's samples), the job runs on the chosen device, and the result's own
``layers()`` give the layers to write and show. A new method needs no code here. Nothing in this
module imports Qt or napari.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .compute import devices
from .compute.jobs import run_job
from .compute.results import Geometry, LayerDataTuple, split_result_name
from .methods import METHODS, MethodSpec
from .provenance import PROVENANCE_KEY, build_provenance

if TYPE_CHECKING:
    from .compute._types import ArrayLike, JSONDict
    from .compute.params import Params
    from .compute.results import MethodResult

__all__ = ["DEMO_QUANTITY_KEY", "DemoRun", "available_demos", "output_kind", "run_demo"]


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
            runs.append(
                DemoRun(
                    slug=sample.key,
                    input_layer=(data, kwargs, layer_type),
                    result_layers=layers,
                    summary=f"{sample.key}: {data.shape} in {elapsed:.2f} s: {result.describe()}",
                    explanation=None if explain is None else explain(kwargs, result),
                )
            )
    return runs


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
