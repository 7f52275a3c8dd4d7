"""The error map (:func:`._qnr.error_map`) with its blurs and fits on a torch device.

A live session measures its reconstruction every few frames; on a GPU the frames take about a
millisecond each, but the error map's fit blurred a 1024 x 1024 crop some ten times with SciPy
on the host (0.25 s for M 4), a stall of hundreds of frames at a camera's rate. Here the blurs
are the decorrelation's SciPy-exact ones (:func:`._decorr_blur._blur_rows`, in float64 as
``scipy.ndimage.gaussian_filter`` filters a float64 image), the least-squares line (the
host's :func:`._qnr._line_fit`, on tensors) and the correlation are sums on the device, and
only the search over sigma (SciPy's bounded minimiser, reading one number per step) and the
map's copy run on the host. The same search
on the same numbers: sigma, RSP and RSE agree with the host's to rounding
(``tests/compute/test_esrrf_qnr.py``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import optimize

from ._decorr_blur import _blur_rows, _gaussian_weights
from ._qnr import _line_fit

__all__ = ["blurred_correlation", "error_map_on_device"]


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
