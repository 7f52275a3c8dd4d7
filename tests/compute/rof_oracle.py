"""The ROF energy recomputed in NumPy (float64): the independent oracle of the TV tests."""

from __future__ import annotations

import numpy as np


def gradient(u: np.ndarray, spacing=None) -> np.ndarray:
    """Weighted forward differences ``s_a * np.diff(u, axis=a)``, 0 on the last index of each
    axis (Neumann boundaries); shape ``(ndim, *u.shape)``, float64."""
    u = np.asarray(u, dtype=np.float64)
    spacing = [1.0] * u.ndim if spacing is None else spacing
    g = np.zeros((u.ndim, *u.shape))
    for axis, s in enumerate(spacing):
        index = [slice(None)] * u.ndim
        index[axis] = slice(0, -1)
        g[axis][tuple(index)] = s * np.diff(u, axis=axis)
    return g


def rof_energy(u: np.ndarray, f: np.ndarray, weight: float, spacing=None) -> float:
    """``0.5 ||u - f||^2 + weight * sum |grad u|`` (isotropic TV), in float64."""
    u = np.asarray(u, dtype=np.float64)
    tv_term = np.sqrt((gradient(u, spacing) ** 2).sum(0)).sum()
    return float(0.5 * np.sum((u - np.asarray(f, dtype=np.float64)) ** 2) + weight * tv_term)
