"""Headless demonstrations: every registered method run on each of its samples.

Driven by the method registry (:data:`napari_gpuscope.methods.METHODS`): for each sample, the
method's demo parameters are built from the sample's layer kwargs (``MethodSpec.demo_params``,
which lives beside the method's samples), the job runs on the chosen device, and the result's own
``layers()`` give the layers to write and show. A new method needs no code here. Nothing in this
module imports Qt or napari.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .compute import devices
from .compute.jobs import run_job
from .compute.results import Geometry, LayerDataTuple
from .methods import METHODS, MethodSpec
from .provenance import PROVENANCE_KEY, build_provenance

__all__ = ["DemoRun", "available_demos", "run_demo"]


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
    """

    slug: str
    input_layer: LayerDataTuple
    result_layers: list[LayerDataTuple]
    summary: str

    @property
    def result_layer(self) -> LayerDataTuple:
        """The main (first) result layer."""
        return self.result_layers[0]

    @property
    def provenance(self) -> dict[str, Any]:
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
            runs.append(
                DemoRun(
                    slug=sample.key,
                    input_layer=(data, kwargs, layer_type),
                    result_layers=layers,
                    summary=f"{sample.key}: {data.shape} in {elapsed:.2f} s: {result.describe()}",
                )
            )
    return runs


def available_demos() -> dict[str, MethodSpec]:
    """Methods that have samples to run on, by id."""
    return {key: spec for key, spec in METHODS.items() if spec.samples}
