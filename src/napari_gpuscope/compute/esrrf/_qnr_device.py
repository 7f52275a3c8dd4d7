"""The error map's least-squares line (:func:`_line_fit`, the host's and the device's), and
the error map (:func:`._qnr.error_map`) with its blurs and fits on a torch device.

A live session measures its reconstruction every few frames; on a GPU the frames take about a
millisecond each, but the error map's fit blurred a 1024 x 1024 crop some ten times with SciPy
on the host (0.25 s for M 4), a stall of hundreds of frames at a camera's rate. Here the blurs
are the decorrelation's SciPy-exact ones (:func:`._decorr_blur._blur_rows`, in float64 as
``scipy.ndimage.gaussian_filter`` filters a float64 image), the line and the correlation are
sums on the device, and only the search over sigma (SciPy's bounded minimiser, reading one
number per step), the map's copy, and, before the dispatch (:func:`._qnr.error_map`), the
reference's Catmull-Rom upsampling and the reconstruction's float64 copy run on the host.
The same search on the same numbers: sigma, RSP and RSE agree with the host's to rounding
(``tests/compute/test_esrrf_qnr.py``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import optimize

from .._types import Device
from ._decorr_blur import _blur_rows, _gaussian_weights

__all__ = ["blurred_correlation", "error_map_on_device", "on_gpu"]


def on_gpu(device: Device | None) -> bool:
    """Whether ``device`` names a GPU (the error map and the split halves then run there)."""
    return device is not None and torch.device(device).type != "cpu"


def _line_fit(
    x: np.ndarray, target: np.ndarray, centred_target: np.ndarray
) -> tuple[float, float, float]:
    """``alpha, beta`` of the least-squares ``target ~ alpha x + beta`` and its RMS residual,
    in closed form from centred moments (``centred_target``: the target less its mean): the
    same solution as ``numpy.linalg.lstsq`` on the
    design ``[x, 1]``, without its SVD of a million-row matrix (which took 40 % of a live
    measurement's RSP). A constant ``x`` leaves the mean: ``alpha`` 0, as the least-squares
    residual, though lstsq's minimum-norm ``alpha, beta`` would split it.

    Examples
    --------
    >>> x = np.array([0.0, 1.0, 2.0, 3.0])
    >>> t = 2 * x + 1 + np.array([0.1, -0.1, -0.1, 0.1])
    >>> alpha, beta, rse = _line_fit(x, t, t - t.mean())
    >>> print(f"{alpha:.3f} {beta:.3f} {rse:.3f}")
    2.000 1.000 0.100
    """
    # Array methods only: NumPy arrays here, torch tensors on a GPU (._qnr_device).
    mean_x = float(x.mean())
    centred = x - mean_x
    variance = float((centred * centred).mean())
    covariance = float((centred * centred_target).mean())
    alpha = covariance / variance if variance > 0 else 0.0
    beta = float(target.mean()) - alpha * mean_x
    # The residual summed directly, not as target_power - alpha covariance: that difference
    # cancels where the fit is close (the RSE the search minimises would lose digits).
    residual = float(((centred_target - alpha * centred) ** 2).mean())
    return alpha, beta, math.sqrt(residual)


def _blur(image: torch.Tensor, sigma: float) -> torch.Tensor:
    """``scipy.ndimage.gaussian_filter(image, sigma, mode="reflect")`` of a float64 image."""
    if sigma <= 0:
        return image
    weights, radius = _gaussian_weights(sigma)
    along_y = _blur_rows(image.T.contiguous(), weights, radius).T
    return _blur_rows(along_y.contiguous(), weights, radius)


def _pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson correlation of two tensors; NaN when either is constant."""
    a, b = a - a.mean(), b - b.mean()
    spread_a, spread_b = float((a * a).mean()), float((b * b).mean())
    if not (spread_a > 0 and spread_b > 0):
        return math.nan
    return float((a * b).mean()) / math.sqrt(spread_a * spread_b)


def error_map_on_device(
    sr: np.ndarray,
    reference: np.ndarray,
    inner: tuple[slice, slice],
    magnification: int,
    device: torch.device,
) -> tuple[float, float, float, float, float, np.ndarray]:
    """``(rsp, rse, sigma, alpha, beta, map)`` of :func:`._qnr.error_map`, given its float64
    ``sr``, the upsampled ``reference`` and the ``inner`` region, computed on ``device``."""
    with torch.no_grad():
        image = torch.as_tensor(sr, dtype=torch.float64, device=device)
        target = torch.as_tensor(reference[inner], dtype=torch.float64, device=device)
        centred_target = target - target.mean()

        def rse(sigma: float) -> float:
            return _line_fit(_blur(image, sigma)[inner], target, centred_target)[2]

        best = optimize.minimize_scalar(
            rse,
            bounds=(0.0, 4.0 * magnification / 2.355),
            method="bounded",
            options={"xatol": 1e-2},
        )
        sigma = float(best.x)
        x = _blur(image, sigma)[inner]
        alpha, beta, error = _line_fit(x, target, centred_target)
        rsp = _pearson(x, target)
        errors = torch.zeros_like(image)
        errors[inner] = (target - (alpha * x + beta)).abs()
        return rsp, error, sigma, alpha, beta, errors.to(torch.float32).cpu().numpy()


def blurred_correlation(
    first: np.ndarray,
    second: np.ndarray,
    sigma: float,
    inner: tuple[slice, slice],
    device: torch.device,
) -> float:
    """Pearson correlation of two images over ``inner``, each blurred as
    ``scipy.ndimage.gaussian_filter(image, sigma)`` (float64), on ``device`` (a live
    session's split halves); NaN when either is constant there."""
    with torch.no_grad():
        a, b = (
            _blur(torch.as_tensor(image, dtype=torch.float64, device=device), sigma)[inner]
            for image in (first, second)
        )
        return _pearson(a, b)
