"""Deterministic sample data, one module per method, on shared phantoms and camera simulation.

- :mod:`._phantoms` -- noise-free fluorescence-like phantoms in [0, 1];
- :mod:`._camera` -- what a camera records of them (:class:`~.compute.camera.CameraModel`, the
  one camera model of the plugin, plus an :class:`Illumination` photon budget);
- :mod:`.tv` -- the TV denoise samples (napari sample-data contributions).
"""

from napari_gpuscope.compute.camera import CameraModel

from ._camera import DEFAULT_CAMERA, Illumination, expected_camera_signal, simulate_camera
from ._phantoms import SEED, fluorescence_phantom_2d, fluorescence_phantom_3d
from .tv import noisy_cells_2d, noisy_cells_3d

__all__ = [
    "DEFAULT_CAMERA",
    "SEED",
    "CameraModel",
    "Illumination",
    "expected_camera_signal",
    "fluorescence_phantom_2d",
    "fluorescence_phantom_3d",
    "noisy_cells_2d",
    "noisy_cells_3d",
    "simulate_camera",
]
