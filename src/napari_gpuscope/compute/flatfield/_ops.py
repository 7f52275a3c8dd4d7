"""The elementwise passes of one BaSiC ALM iteration, as torch twins of the fused kernels.

Each function reads the ``(P, T, m, n)`` stacks once and returns what the next small (``m x
n`` or per-image) step needs, so ``I_B = S B + D`` is never stored.
"""

from __future__ import annotations

import torch

__all__ = ["dual_step", "sparse_step"]


def sparse_step(
    images: torch.Tensor,
    flat: torch.Tensor,
    baseline: torch.Tensor,
    dark: torch.Tensor,
    dual: torch.Tensor,
    weight: torch.Tensor,
    mu: torch.Tensor,
    inner: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sparse (foreground) step and the row sums the baseline and darkfield steps need.

    ``I_R = shrink(I - S B - D + Y / mu, W / mu)``; returns ``I_R``, ``sum_xy(I - I_R)`` and
    ``sum_xy((I - I_R) [S >= mean S])`` per image, ``(P, T)`` each.
    """
    mu4 = mu[:, None, None, None]
    value = images - flat[:, None] * baseline[:, :, None, None] - dark[:, None] + dual / mu4
    threshold = weight / mu4
    sparse = torch.sign(value) * torch.clamp(value.abs() - threshold, min=0)
    rest = images - sparse
    residual_sum = rest.sum(dim=(-2, -1))
    residual_in = (rest * inner[:, None]).sum(dim=(-2, -1))
    return sparse, residual_sum, residual_in


def dual_step(
    images: torch.Tensor,
    flat: torch.Tensor,
    baseline: torch.Tensor,
    dark: torch.Tensor,
    sparse: torch.Tensor,
    dual: torch.Tensor,
    mu: torch.Tensor,
    mu_next: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Dual ascent ``Y += mu F`` with ``F = I - S B - D - I_R``.

    Returns the new ``Y``, ``sum F^2`` per problem ``(P,)`` and ``mean_T(F + Y_new / mu_next)``
    ``(P, m, n)`` (the next flatfield step's input, up to a darkfield change).
    """
    residual = images - flat[:, None] * baseline[:, :, None, None] - dark[:, None] - sparse
    new_dual = dual + mu[:, None, None, None] * residual
    norm_sq = residual.square().sum(dim=(1, 2, 3))
    column = (residual + new_dual / mu_next[:, None, None, None]).mean(dim=1)
    return new_dual, norm_sq, column
