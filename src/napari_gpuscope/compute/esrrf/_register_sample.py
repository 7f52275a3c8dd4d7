"""Resampling for channel registration: separable Catmull-Rom (cubic convolution, exact for
integer shifts) of a batch of images at float64 positions, edge pixels repeated outside.
"""

from __future__ import annotations

import torch

from ._resample import catmull_rom_weights


def _shift_batch(images: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """``out[b, y, x] = images[b, y + dy_b, x + dx_b]`` for ``(B, H, W)`` images."""
    height, width = images.shape[-2:]
    dev = images.device
    ys = (
        torch.arange(height, device=dev, dtype=torch.float64)[None, :, None]
        + shifts[:, 0, None, None]
    )
    xs = (
        torch.arange(width, device=dev, dtype=torch.float64)[None, None, :]
        + shifts[:, 1, None, None]
    )
    return _sample(images, ys.expand(-1, height, width), xs.expand(-1, height, width))


def _sample(images: torch.Tensor, ys: torch.Tensor, xs: torch.Tensor) -> torch.Tensor:
    """Catmull-Rom samples (the 4 x 4 tensor-product taps) of ``(B, H, W)`` images at float64
    positions, ``(H, W)`` shared by every image or ``(B, H, W)`` one set each; positions
    beyond the edges take the edge pixels."""
    count, height, width = images.shape
    shared = ys.dim() == 2
    y0, x0 = torch.floor(ys), torch.floor(xs)
    wy = catmull_rom_weights(ys - y0).to(images.dtype)  # (..., H, W, 4)
    wx = catmull_rom_weights(xs - x0).to(images.dtype)
    y0, x0 = y0.to(torch.int64), x0.to(torch.int64)
    flat = images.reshape(count, -1)
    out = torch.zeros_like(images)
    for ty in range(4):
        rows = (y0 + (ty - 1)).clamp(0, height - 1)
        for tx in range(4):
            index = rows * width + (x0 + (tx - 1)).clamp(0, width - 1)
            if shared:
                taps = flat[:, index.reshape(-1)].reshape(images.shape)
            else:
                taps = torch.gather(flat, 1, index.reshape(count, -1)).reshape(images.shape)
            out.add_(taps * (wy[..., ty] * wx[..., tx]))
    return out
