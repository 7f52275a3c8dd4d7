"""The error map (:func:`._qnr.error_map`) with its blurs and fits on a torch device.

A live session measures its reconstruction every few frames; on a GPU the frames take about a
millisecond each, but the error map's fit blurred a 1024 x 1024 crop some ten times with SciPy
on the host (0.25 s for M 4), a stall of hundreds of frames at a camera's rate. Here the blurs
are the decorrelation's SciPy-exact ones (:func:`._decorr_blur._blur_rows`, in float64 as
``scipy.ndimage.gaussian_filter`` filters a float64 image), the least-squares line and the
correlation are sums on the device, and only the search over sigma (SciPy's bounded
minimiser, reading one number per step) and the map's copy run on the host. The same search
on the same numbers: sigma, RSP and RSE agree with the host's to rounding
(``tests/compute/test_esrrf_qnr.py``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import optimize

from ._decorr_blur import _blur_rows, _gaussian_weights

__all__ = ["blurred_correlation", "error_map_on_device"]


def _blur(image: torch.Tensor, sigma: float) -> torch.Tensor:
    """``scipy.ndimage.gaussian_filter(image, sigma, mode="reflect")`` of a float64 image."""
    if sigma <= 0:
        return image
    weights, radius = _gaussian_weights(sigma)
    along_y = _blur_rows(image.T.contiguous(), weights, radius).T
    return _blur_rows(along_y.contiguous(), weights, radius)


def _line(x: torch.Tensor, centred_target: torch.Tensor, target_mean: float) -> tuple:
    """``alpha, beta`` of ``target ~ alpha x + beta`` and its RMS residual (as
    :func:`._qnr._line_fit`)."""
    mean_x = float(x.mean())
    centred = x - mean_x
    variance = float((centred * centred).mean())
    covariance = float((centred * centred_target).mean())
    alpha = covariance / variance if variance > 0 else 0.0
    residual = float(((centred_target - alpha * centred) ** 2).mean())
    return alpha, target_mean - alpha * mean_x, math.sqrt(residual)


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
        target_mean = float(target.mean())
        centred_target = target - target_mean

        def rse(sigma: float) -> float:
            return _line(_blur(image, sigma)[inner], centred_target, target_mean)[2]

        best = optimize.minimize_scalar(
            rse,
            bounds=(0.0, 4.0 * magnification / 2.355),
            method="bounded",
            options={"xatol": 1e-2},
        )
        sigma = float(best.x)
        blurred = _blur(image, sigma)
        x = blurred[inner]
        alpha, beta, error = _line(x, centred_target, target_mean)
        spread_x = float(x.std(correction=0))
        spread_t = float(centred_target.std(correction=0))
        if spread_x > 0 and spread_t > 0:
            centred = x - x.mean()
            covariance = float((centred * centred_target).mean())
            rsp = covariance / (spread_x * spread_t)
        else:
            rsp = float("nan")
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
        a, b = a - a.mean(), b - b.mean()
        spread_a, spread_b = float(a.pow(2).mean()), float(b.pow(2).mean())
        if not (spread_a > 0 and spread_b > 0):
            return math.nan
        return float((a * b).mean()) / math.sqrt(spread_a * spread_b)
