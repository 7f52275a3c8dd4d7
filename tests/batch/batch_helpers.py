"""Helpers of the batch tests: realistic noisy fluorescence positions as TIFF files and the
direct call that is the oracle of a batch output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tifffile

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
