"""Helpers of the batch tests: realistic noisy fluorescence positions as TIFF files and the
direct call that is the oracle of a batch output."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import tifffile

from napari_gpuscope.compute.jobs import Progress
from napari_gpuscope.compute.params import Params, param
from napari_gpuscope.compute.results import image_layer
from napari_gpuscope.sample_data._camera import simulate_camera
from napari_gpuscope.sample_data._phantoms import fluorescence_phantom_2d

PIXEL_UM = 0.1


def write_positions(folder: Path, count: int, shape=(192, 192)) -> list[Path]:
    """``count`` different noisy cell images (uint16 ADU, 0.1 um pixels) as ImageJ TIFFs."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        image = simulate_camera(fluorescence_phantom_2d(shape, seed=index), seed=100 + index)
        path = folder / f"field{index:02d}.tif"
        tifffile.imwrite(
            path,
            image,
            imagej=True,
            resolution=(1 / PIXEL_UM, 1 / PIXEL_UM),
            metadata={"unit": "um", "axes": "YX"},
        )
        paths.append(path)
    return paths


def direct(path: Path, params) -> np.ndarray:
    """The method called directly on one position (the oracle of the batch output)."""
    from napari_gpuscope.compute import tv

    return tv.denoise(tifffile.imread(path), params=params, device="cpu")


# -- a two-phase method for the MethodSpec.batch hook (registered by the tests that use it) ----
class FlatParams(Params):
    """Divide each tile by the mean of the tiles (a toy BaSiC)."""

    method_id: ClassVar[str] = "flat"
    sample: int = param(3, minimum=1, maximum=1000, help="Tiles the fit reads")


@dataclass(frozen=True)
class FlatResult:
    image: np.ndarray
    stopped_early: bool = False

    def summary(self) -> dict[str, Any]:
        return {"mean": float(self.image.mean())}

    def describe(self) -> str:
        return "flat-fielded"

    def layers(self, name="image", geometry=None, metadata=None):
        return [image_layer(self.image, f"{name} [flat]", geometry, metadata=metadata)]


def iter_flat(data, params=None, *, device=None, profile=None):
    yield Progress(0.0, "dividing")
    return FlatResult((np.asarray(data, np.float32) / profile).astype(np.float32))


class FlatHooks:
    """``prepare`` fits the profile on the first ``params.sample`` tiles (or loads the recipe's
    ``profile`` artifact); ``job`` applies it and counts the jobs it made per cache key (as
    phase caches transfer functions)."""

    reads = 0
    built: ClassVar[dict[str, int]] = {}

    @classmethod
    def prepare(cls, params, tiles, *, device, artifacts):
        if "profile" in artifacts:  # a profile saved earlier replaces the fit
            return np.load(artifacts["profile"])["profile"]
        stack = []
        for read in tiles[: params.sample]:
            cls.reads += 1
            stack.append(read().astype(np.float64))
        return np.mean(stack, axis=0).astype(np.float32)

    @classmethod
    def job(cls, data, params, *, prepared, device, cache_key):
        cls.built[cache_key] = cls.built.get(cache_key, 0) + 1
        return iter_flat(data, params, device=device, profile=prepared)
