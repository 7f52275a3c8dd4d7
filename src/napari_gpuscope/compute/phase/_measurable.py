"""Is there a tilt to measure: a constant stack, or slices that share no structure above the
noise (issue 26 items 1 and 12), are refused before the optimiser fits the noise."""

from __future__ import annotations

import math

import numpy as np
import torch

from ..fourier import fft2, ifft2
from ._params import PhaseParams

__all__ = [
    "FALSE_ALARM",
    "measurability",
    "noise_only_reason",
    "not_measurable_reason",
    "slice_structure",
]

FALSE_ALARM = 1e-3
"""Chance that a stack of pure noise passes :func:`noise_only_reason` as holding structure."""
LOW_CUT_BINS = 4
"""Frequencies below this many bins of the frame (the window's own spread and a smooth
illumination profile common to every slice) are left out of :func:`slice_structure`."""


def _lag_radius(params: PhaseParams, shape: tuple[int, int]) -> int:
    """Lags searched (pixels, per axis): the content moves between slices by ``z step x
    tan(zenith)``; twice the z step covers zeniths up to 63 degrees; 4 to 32 pixels, at most
    a quarter of the frame."""
    reach = math.ceil(2.0 * params.z_pixel_size / params.yx_pixel_size)
    return int(min(max(reach, 4), 32, min(shape) // 4))


def _pooled_surface(data: torch.Tensor, params: PhaseParams) -> tuple[torch.Tensor, float]:
    """``(surface, threshold)``: the pooled cross-correlation of neighbouring slices of
    ``data (Z, Y, X)`` at the lags within :func:`_lag_radius`, ``(2 r + 1, 2 r + 1)`` in
    units of its standard deviation for independent slices, and the height pure noise
    exceeds somewhere on it with probability :data:`FALSE_ALARM`.

    Each slice's contrast ``I / mean - 1`` is windowed (Hann: no edge discontinuity common to
    the slices) and Fourier transformed, and kept within the band the optics pass
    (``LOW_CUT_BINS`` bins up to ``(NA_ill + NA_det) / lambda`` or Nyquist). The
    cross-correlation of two slices, ``c = IFFT(A conj(B))``, has for independent slices mean
    0 and at every lag the variance ``sum |A|^2 |B|^2 / N^2`` (the frequencies nearly
    independent, each term's expected value the product of the two slices' powers: the
    observed periodograms estimate it whatever the noise's spectrum, Poisson, read noise or
    spatially correlated), times ``N sum w^4 / (sum w^2)^2`` for the window ``w``, which
    couples neighbouring frequencies (Bartlett; channel registration uses the same). Each
    pair's surface in those units is standard normal at every lag; the ``Z - 1`` pairs are
    uncorrelated for independent slices, so their sum over ``sqrt(Z - 1)`` is too. Real
    structure seen through focus correlates neighbouring slices at the lag by which the tilt
    moves the content from one slice to the next, the same for every pair: the pooled peak
    is the sum of the pairs'. A structure's own power in the variance only makes the score
    conservative. The threshold is Bonferroni's over the ``(2 r + 1)^2`` lags and both signs
    (the contrast of a phase object inverts through focus). Memory: two slices' spectra and a
    surface (O(frame)), float64.
    """
    from scipy.special import ndtri

    z_count, height, width = (int(v) for v in data.shape[-3:])
    device = data.device
    window = torch.outer(
        torch.hann_window(height, periodic=False, dtype=torch.float64, device=device),
        torch.hann_window(width, periodic=False, dtype=torch.float64, device=device),
    )
    n = height * width
    # The window's correction from the same window on the host (no read from the device).
    host = np.outer(np.hanning(height), np.hanning(width))
    correction = n * float((host**4).sum()) / float((host**2).sum()) ** 2
    fy = torch.fft.fftfreq(height, device=device, dtype=torch.float64)
    fx = torch.fft.fftfreq(width, device=device, dtype=torch.float64)
    radial = torch.sqrt(fy[:, None] ** 2 + fx[None, :] ** 2)  # cycles per pixel
    cutoff = (params.na_illumination + params.na_detection) / params.wavelength
    top = min(cutoff * params.yx_pixel_size, 0.5 * math.sqrt(2.0))
    band = ((radial >= LOW_CUT_BINS / min(height, width)) & (radial <= top)).to(torch.float64)
    radius = _lag_radius(params, (height, width))
    lags = torch.arange(-radius, radius + 1, device=device)
    rows, cols = lags % height, lags % width
    pooled = torch.zeros((2 * radius + 1, 2 * radius + 1), dtype=torch.float64, device=device)
    previous = None
    for z in range(z_count):  # no read back from the device: the caller reads once
        plane = data[..., z, :, :].to(torch.float64)
        level = plane.mean()
        contrast = torch.where(level != 0, plane / torch.where(level != 0, level, 1.0) - 1, plane)
        spectrum = fft2((contrast - contrast.mean()) * window) * band
        if previous is not None:
            power = ((spectrum.abs() ** 2) * (previous.abs() ** 2)).sum() * correction
            surface = ifft2(spectrum * previous.conj()).real * n
            scale = torch.where(power > 0, torch.rsqrt(torch.clamp(power, min=1e-300)), 0.0)
            pooled += surface[rows][:, cols] * scale  # a pair without power adds nothing
        previous = spectrum
    threshold = float(-ndtri(FALSE_ALARM / (2 * pooled.numel())))
    return pooled / math.sqrt(max(z_count - 1, 1)), threshold


def slice_structure(data: torch.Tensor, params: PhaseParams) -> tuple[float, float]:
    """``(peak, threshold)``: the largest ``|z|`` of :func:`_pooled_surface` and the height
    pure noise exceeds there with probability :data:`FALSE_ALARM`."""
    surface, threshold = _pooled_surface(data, params)
    return float(surface.abs().max()), threshold


_CONSTANT = 1e-6
"""A slice whose spatial standard deviation is below this fraction of its mean magnitude is
constant: float32 rounding of a uniform image (2**-24 relative) is far below it, any contrast
a camera records far above."""


def not_measurable_reason(data: torch.Tensor, params: PhaseParams) -> str:
    """Why ``data (Z, Y, X)`` holds no tilt to measure, or ``""``, with one read from the
    device: every slice constant (no contrast), or slices that share no structure above the
    noise (:func:`slice_structure`; pure noise: the optimiser would fit the noise and report
    an invented tilt; a stack of pure noise is called so wrongly with probability
    :data:`FALSE_ALARM`). A stack of one slice has no pair: only the constant test applies.
    """
    return measurability(data, params)[0]


def measurability(
    data: torch.Tensor, params: PhaseParams, extra: torch.Tensor | None = None
) -> tuple[str, list[float]]:
    """:func:`not_measurable_reason` and the values of the 1-D device tensor ``extra`` (e.g.
    the estimate's per-tile signal shares), read from the device together in one copy."""
    values = data.to(torch.float64)
    spread = values.std(dim=(-2, -1))
    level = values.abs().mean(dim=(-2, -1))
    constant = (spread <= _CONSTANT * torch.clamp(level, min=1e-300)).all()
    slices = int(data.shape[-3])
    if slices >= 2:
        surface, threshold = _pooled_surface(data, params)
        peak = surface.abs().max()
    else:
        peak, threshold = torch.tensor(math.inf, dtype=torch.float64, device=data.device), 0.0
    rows = [constant.to(torch.float64).reshape(1), peak.reshape(1)]
    rows += [] if extra is None else [extra.to(torch.float64).reshape(-1)]
    flag, peak_value, *read = torch.cat(rows).cpu().tolist()
    if flag:
        return (
            f"every one of the {slices} slices is constant (no contrast), so the stack shows "
            "no tilt"
        ), read
    if not math.isfinite(peak_value) or peak_value > threshold:
        return "", read
    return (
        f"its {slices} slices share no structure above the noise (neighbouring slices "
        f"correlate at {peak_value:.1f} sigma, below the {threshold:.1f} sigma that pure "
        f"noise reaches with probability {FALSE_ALARM:g}), so the stack shows no tilt: a fit "
        "would follow the noise"
    ), read


def noise_only_reason(data: torch.Tensor, params: PhaseParams) -> str:
    """:func:`not_measurable_reason` for stacks whose slices are not all constant: why their
    slices share no structure above the noise, or ``""``."""
    reason = not_measurable_reason(data, params)
    return reason if "share no structure" in reason else ""
