"""The generalized Anscombe transform (GAT) of Poisson-Gaussian camera data and its exact
unbiased inverse: the Poisson noise model of :mod:`.noise`, which is the public home of both
functions.

References
----------
M. Makitalo and A. Foi, "A closed-form approximation of the exact unbiased inverse of the
Anscombe variance-stabilizing transformation", IEEE Trans. Image Process. 20(9), 2697-2698 (2011).
M. Makitalo and A. Foi, "Optimal inversion of the generalized Anscombe transformation for
Poisson-Gaussian noise", IEEE Trans. Image Process. 22(1), 91-103 (2013).
"""

from __future__ import annotations

import math

import torch

from .camera import CameraModel

# Below this value of the VST, the closed-form exact unbiased inverse turns back upwards (its
# D^-3 term dominates); sqrt(3/2) = E[2 sqrt(0 + 3/8)] is exactly where it reaches 0.
_INVERSE_FLOOR = math.sqrt(1.5)


def _float(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_floating_point() else x.to(torch.float32)


def anscombe_forward(x: torch.Tensor, p: CameraModel) -> torch.Tensor:
    """Generalized Anscombe transform: Poisson-Gaussian ADU -> approximately unit-variance noise.

    ``z = (2 / gain) * sqrt(t)``, ``t = gain * x + 3/8 * gain**2 + read_noise**2 - gain * offset``,
    for ``t`` above the model's knot ``k = 3/8 gain**2 + floor variance`` (zero photons for a
    known camera, :attr:`CameraModel.knot`), and its tangent ``(2 / gain) * (sqrt(k) + (t - k) /
    (2 sqrt(k)))`` below it. There only read noise is left, whose constant variance the tangent
    stabilises; the usual clip of ``t`` at 0 instead maps every pixel more than ~2 read-noise
    sigmas below the offset to one value far below its neighbours, a dip that TV denoising
    keeps and the inverse then pins at zero photons.

    Parameters
    ----------
    x : torch.Tensor
        Image in ADU (any device; integer tensors are computed in float32).
    p : CameraModel
        Camera model.

    Returns
    -------
    torch.Tensor
        New tensor (``x`` is not modified) in "VST units", where the noise std is ~1 for counts
        above a few photons.
    """
    x = _float(x)
    inside = x * p.gain + (0.375 * p.gain**2 + p.beta)
    knot = p.knot
    root = math.sqrt(knot)
    tangent = (inside - knot) * (0.5 / root) + root
    stabilised = torch.where(inside >= knot, torch.sqrt(torch.clamp(inside, min=knot)), tangent)
    return stabilised * (2.0 / p.gain)


def anscombe_inverse(d: torch.Tensor, p: CameraModel, *, exact: bool = True) -> torch.Tensor:
    """Return from VST units to ADU, by default with the exact unbiased inverse.

    A denoised VST image estimates ``E[z]``, not ``z`` of the mean, so the algebraic inverse of
    the transform is biased at low counts. The exact unbiased inverse maps ``E[z | lambda]`` back
    to ``lambda``; its closed-form approximation (Makitalo & Foi 2011, 2013) in photon units,
    with ``s = read_noise / gain``, is::

        lambda = 1/4 D^2 + 1/4 sqrt(3/2) D^-1 - 11/8 D^-2 + 5/8 sqrt(3/2) D^-3 - 1/8 - s^2

    clipped at 0 (and set to 0 for ``D < sqrt(3/2)``, the expected transform of zero photons,
    below which the expansion turns upwards). The result is ``gain * lambda + offset``.

    Parameters
    ----------
    d : torch.Tensor
        Values in VST units (typically a denoised :func:`anscombe_forward` image).
    p : CameraModel
        The camera model used in the forward transform.
    exact : bool
        ``True`` (default) for the exact unbiased inverse; ``False`` for the algebraic inverse
        ``lambda = (D / 2)^2 - 3/8 - s^2`` (biased at low counts; for comparison only).

    Returns
    -------
    torch.Tensor
        New tensor in ADU.

    Notes
    -----
    In ADU the result is ``gain * (lambda' - s^2) + offset = gain * lambda' - beta / gain``
    (``lambda'`` = the expansion without ``s^2``), so, like the forward transform, it depends
    only on ``gain`` and ``beta``: a model from :func:`estimate_poisson_gaussian`
    (``read_noise = 0``, ``beta`` carried by the offset) inverts identically except where the
    result is clipped at zero photons.
    """
    d = _float(d)
    s2 = (p.read_noise / p.gain) ** 2
    if exact:
        safe = torch.clamp(d, min=_INVERSE_FLOOR)
        inv = 1.0 / safe
        root = math.sqrt(1.5)
        lam = (
            0.25 * safe * safe
            + (0.25 * root) * inv
            - 1.375 * inv * inv
            + (0.625 * root) * inv * inv * inv
            - 0.125
            - s2
        )
        lam = torch.where(d < _INVERSE_FLOOR, torch.zeros_like(lam), lam)
    else:
        lam = 0.25 * d * d - 0.375 - s2
    return torch.clamp(lam, min=0.0) * p.gain + p.offset
