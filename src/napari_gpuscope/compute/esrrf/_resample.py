"""What drift correction and channel registration share: the Catmull-Rom taps that move an
image by a fraction of a pixel, and the Tukey window their cross-correlations use."""

from __future__ import annotations

import math

import torch

__all__ = ["catmull_rom_weights", "tukey_window"]


def catmull_rom_weights(fraction: torch.Tensor) -> torch.Tensor:
    """``(..., 4)`` weights of the taps at offsets -1, 0, 1, 2 for fractions in [0, 1).

    Exactly ``(0, 1, 0, 0)`` at 0, so integer shifts copy pixels (no rounding).

    Examples
    --------
    >>> catmull_rom_weights(torch.tensor([0.0, 0.5])).tolist()
    [[0.0, 1.0, 0.0, 0.0], [-0.0625, 0.5625, 0.5625, -0.0625]]
    """
    f = fraction
    f2, f3 = f * f, f * f * f
    return torch.stack(
        [
            (-f3 + 2 * f2 - f) / 2,
            (3 * f3 - 5 * f2 + 2) / 2,
            (-3 * f3 + 4 * f2 + f) / 2,
            (f3 - f2) / 2,
        ],
        dim=-1,
    )


def tukey_window(n: int, device: torch.device | str) -> torch.Tensor:
    """float64 Tukey window of ``n`` samples, an eighth of each side tapered: an image's edges,
    which the periodic FFT wraps around, do not correlate with themselves at zero shift.

    Examples
    --------
    >>> w = tukey_window(16, "cpu")
    >>> float(w[0]) < 0.2, float(w[8]), bool(torch.equal(w, w.flip(0)))
    (True, 1.0, True)
    """
    taper = max(1, n // 8)
    w = torch.ones(n, dtype=torch.float64, device=device)
    ramp = 0.5 * (1 - torch.cos(math.pi * (torch.arange(taper, device=device) + 0.5) / taper))
    w[:taper] = ramp.to(torch.float64)
    w[n - taper :] = ramp.flip(0).to(torch.float64)
    return w
