"""Headless demonstrations: every available method run on its sample data.

Each entry of :data:`DEMOS` maps a method id to a function ``demo(device) -> list[DemoRun]``.
Adding a method to the headless demo (``napari-gpuscope demo --headless``) means adding one
function here. Nothing in this module imports Qt or napari.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import sample_data
from .compute import devices
from .compute.jobs import run_job
from .provenance import PROVENANCE_KEY, build_provenance

__all__ = ["DEMOS", "DemoRun", "tv_demo"]


@dataclass
class DemoRun:
    """One method run on one sample, ready to be written and displayed.

    Attributes
    ----------
    slug : str
        File-name stem, e.g. ``"tv-2d"``.
    input_layer, result_layer : tuple
        napari layer-data tuples ``(data, kwargs, layer_type)``; the result carries provenance in
        ``kwargs["metadata"][PROVENANCE_KEY]``.
    summary : str
        One line for the console.
    """

    slug: str
    input_layer: tuple[np.ndarray, dict[str, Any], str]
    result_layer: tuple[np.ndarray, dict[str, Any], str]
    summary: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def provenance(self) -> dict[str, Any]:
        """The result's provenance record."""
        return self.result_layer[1]["metadata"][PROVENANCE_KEY]


def tv_demo(device: str) -> list[DemoRun]:
    """TV-denoise the 2D and 3D samples at strength 1 (weight = estimated noise sigma).

    Parameters
    ----------
    device : str
        ``"cuda:N"`` or, for a reference run, ``"cpu"``.

    Returns
    -------
    list of DemoRun
    """
    from .compute import tv
    from .compute.noise import estimate_noise_sigma

    runs = []
    for slug, make in (
        ("tv-2d", sample_data.noisy_cells_2d),
        ("tv-3d", sample_data.noisy_cells_3d),
    ):
        data, kwargs, layer_type = make()[0]
        sigma = estimate_noise_sigma(data)
        parameters = {
            "weight": 1.0 * sigma,
            "method": "fgp",
            "spacing": tv.spacing_from_scale(kwargs["scale"]),
            "noise_model": "gaussian",
            "max_iterations": 200,
            "tolerance": 1e-3,
            "nonnegative": False,
        }
        start = time.perf_counter()
        result = run_job(tv.iter_denoise(data, device=device, **parameters))
        elapsed = time.perf_counter() - start
        record = build_provenance(
            "tv",
            {**parameters, "strength": 1.0, "estimated_sigma": sigma},
            device=devices.device_label(device),
            input_name=kwargs["name"],
            elapsed_seconds=elapsed,
            result=result.summary(),
        )
        result_kwargs = {
            key: kwargs[key] for key in ("scale", "units", "axis_labels") if key in kwargs
        }
        result_kwargs.update(
            name=f"{kwargs['name']} [TV denoise]",
            colormap="gray",
            metadata={PROVENANCE_KEY: record},
        )
        runs.append(
            DemoRun(
                slug=slug,
                input_layer=(data, kwargs, layer_type),
                result_layer=(result.image, result_kwargs, "image"),
                summary=(
                    f"{slug}: {data.shape} in {elapsed:.2f} s, {result.iterations} iterations, "
                    f"relative gap {result.relative_gap:.2e}"
                ),
            )
        )
    return runs


DEMOS: dict[str, Callable[[str], list[DemoRun]]] = {"tv": tv_demo}
