"""Sample data of the TV denoise dock: noisy fluorescence images as a camera records them."""

from __future__ import annotations

import numpy as np

from napari_gpuscope.compute.camera import CameraModel
from napari_gpuscope.compute.results import Geometry, LayerDataTuple, image_layer

from ._camera import DEFAULT_CAMERA, Illumination, simulate_camera
from ._phantoms import fluorescence_phantom_2d, fluorescence_phantom_3d

__all__ = ["demo_params", "noisy_cells_2d", "noisy_cells_3d"]


def _layer(
    data: np.ndarray,
    name: str,
    scale: tuple[float, ...],
    camera: CameraModel,
    light: Illumination,
) -> LayerDataTuple:
    geometry = Geometry(
        scale=scale, units=("um",) * data.ndim, axis_labels=("z", "y", "x")[-data.ndim :]
    )
    metadata = {
        # Figures label colorbars with it (export.units reads this key).
        "intensity_unit": "ADU",
        "sample": {
            "camera_gain_adu_per_photon": camera.gain,
            "camera_offset_adu": camera.offset,
            "read_noise_adu": camera.read_noise,
            "peak_photons": light.peak_photons,
            "background_photons": light.background_photons,
        },
    }
    return image_layer(data, name, geometry, metadata=metadata, colormap="gray")


def noisy_cells_2d() -> list[LayerDataTuple]:
    """napari sample: a noisy 512 x 512 uint16 fluorescence image, 0.1 um pixels."""
    light = Illumination()
    data = simulate_camera(fluorescence_phantom_2d(), DEFAULT_CAMERA, light)
    return [_layer(data, "noisy cells 2D", (0.1, 0.1), DEFAULT_CAMERA, light)]


def noisy_cells_3d() -> list[LayerDataTuple]:
    """napari sample: a noisy 32 x 256 x 256 uint16 volume, 0.4 um z-steps, 0.1 um pixels."""
    light = Illumination()
    data = simulate_camera(fluorescence_phantom_3d(), DEFAULT_CAMERA, light)
    return [_layer(data, "noisy cells 3D", (0.4, 0.1, 0.1), DEFAULT_CAMERA, light)]


def demo_params(sample_kwargs: dict) -> object:
    """Parameters of the headless demo on a TV sample: strength 1 (weight = the estimated noise
    level) and the spacing of the sample's voxel size."""
    from napari_gpuscope.compute import tv

    return tv.TVParams(strength=1.0, spacing=tv.spacing_from_scale(sample_kwargs["scale"]))
