"""The elementwise passes of one BaSiC ALM iteration: fused kernels (``basic_alm.cu``) beside
their torch twins.

``sparse_step`` is one pass over the ``(P, T, m, n)`` stacks and ``dual_step`` another (it also
sums over the images for the next flatfield step and the residual norm), so ``I_B = S B + D``
is never stored and an iteration reads the stacks about four times instead of ~20 (the twins'
count). Outputs are written in place, as every :class:`~napari_gpuscope.compute.kernels.FusedOp`.
"""

from __future__ import annotations

import numpy as np
import torch

from ..kernels import Backend, FusedOp, KernelSource

__all__ = ["basic_dual", "basic_sparse", "dual_step", "sparse_step"]

SOURCE = KernelSource("basic_alm.cu", beside=__file__)


def _sizes(images: torch.Tensor) -> tuple[int, int, int]:
    p, t = images.shape[:2]
    return p, t, images[0, 0].numel()


def _sparse_launch(backend: Backend, images, flat, baseline, dark, dual, weight, mu, out) -> None:
    _, t, pixels = _sizes(images)
    n = images.numel()
    backend.launch(
        backend.function(SOURCE, "basic_sparse"),
        n,
        [
            *(backend.array(x) for x in (images, flat, baseline, dark, dual, weight, mu, out)),
            np.int64(pixels),
            np.int64(t),
            np.int64(n),
        ],
    )


def basic_sparse_twin(images, flat, baseline, dark, dual, weight, mu, out) -> None:
    """``out = shrink(I - S B - D + Y / mu, W / mu)`` (torch, any device)."""
    mu4 = mu[:, None, None, None]
    value = images - flat[:, None] * baseline[:, :, None, None] - dark[:, None] + dual / mu4
    out.copy_(torch.sign(value) * torch.clamp(value.abs() - weight / mu4, min=0))


def _dual_launch(
    backend: Backend, images, flat, baseline, dark, sparse, dual, mu, mu_next, column, square
) -> None:
    p, t, pixels = _sizes(images)
    backend.launch(
        backend.function(SOURCE, "basic_dual"),
        p * pixels,
        [
            *(
                backend.array(x)
                for x in (images, flat, baseline, dark, sparse, dual, mu, mu_next, column, square)
            ),
            np.int64(pixels),
            np.int64(t),
            np.int64(p * pixels),
        ],
    )


def basic_dual_twin(
    images, flat, baseline, dark, sparse, dual, mu, mu_next, column, square
) -> None:
    """``F = I - S B - D - I_R``; ``dual += mu F``; ``column = mean_T(F + dual / mu_next)``;
    ``square = sum_T F^2`` (per problem and pixel)."""
    residual = images - flat[:, None] * baseline[:, :, None, None] - dark[:, None] - sparse
    dual.add_(mu[:, None, None, None] * residual)
    column.copy_((residual + dual / mu_next[:, None, None, None]).mean(dim=1))
    square.copy_(residual.square().sum(dim=1))


def _example_state(
    device: torch.device,
    generator: torch.Generator,
    p: int = 2,
    t: int = 5,
    shape: tuple[int, int] = (7, 9),
):
    def rand(*size):
        return torch.rand(size, generator=generator).to(device)

    images = 100 * rand(p, t, *shape) + 50
    flat = 0.5 + rand(p, *shape)
    baseline = 50 + 100 * rand(p, t)
    dark = 10 * rand(p, *shape)
    dual = rand(p, t, *shape) - 0.5
    weight = rand(p, t, *shape) + 0.1
    mu = 0.01 + 0.02 * rand(p)
    return images, flat, baseline, dark, dual, weight, mu


def _sparse_example(device, generator):
    images, flat, baseline, dark, dual, weight, mu = _example_state(device, generator)
    return (images, flat, baseline, dark, dual, weight, mu, torch.empty_like(images)), {}


def _dual_example(device, generator):
    images, flat, baseline, dark, dual, _, mu = _example_state(device, generator)
    sparse = 20 * (torch.rand(images.shape, generator=generator).to(device) - 0.5)
    column = torch.empty_like(flat)
    return (
        images,
        flat,
        baseline,
        dark,
        sparse,
        dual,
        mu,
        1.5 * mu,
        column,
        torch.empty_like(flat),
    ), {}


basic_sparse = FusedOp(
    "basic_sparse",
    launch=_sparse_launch,
    twin=basic_sparse_twin,
    example=_sparse_example,
    outputs=(7,),
    # I - S B - D cancels terms of ~200 down to a few units: one float32 ulp of the inputs
    # (1.5e-5 at 200) is the kernel's (FMA) vs the twin's rounding, so the tolerance is
    # absolute at the inputs' scale (an H100 measured 3.05e-5, which atol=1e-6 rejected).
    atol=1e-4,
)
"""``basic_sparse(images, flat, baseline, dark, dual, weight, mu, out)``: the sparse step."""
basic_dual = FusedOp(
    "basic_dual",
    launch=_dual_launch,
    twin=basic_dual_twin,
    example=_dual_example,
    outputs=(5, 8, 9),
    rtol=1e-5,
    atol=1e-3,
)
"""``basic_dual(images, flat, baseline, dark, sparse, dual, mu, mu_next, column, square)``:
the dual step with the sums over images (the kernel sums in float64)."""


def sparse_step(images, flat, baseline, dark, dual, weight, mu, inner):
    """Sparse (foreground) step and the row sums the baseline and darkfield steps need.

    Returns ``I_R``, ``sum_xy(I - I_R)`` and ``sum_xy((I - I_R) [S >= mean S])`` per image
    (``(P, T)`` each; the last is None when ``inner`` is None).
    """
    sparse = torch.empty_like(images)
    basic_sparse(images, flat, baseline, dark, dual, weight, mu, sparse)
    rest = images - sparse
    residual_sum = rest.sum(dim=(-2, -1))
    residual_in = None if inner is None else (rest * inner[:, None]).sum(dim=(-2, -1))
    return sparse, residual_sum, residual_in


def dual_step(images, flat, baseline, dark, sparse, dual, mu, mu_next):
    """Dual ascent ``Y += mu F`` (in place on ``dual``) with ``F = I - S B - D - I_R``.

    Returns ``Y``, ``sum F^2`` per problem ``(P,)`` and ``mean_T(F + Y / mu_next)``
    ``(P, m, n)`` (the next flatfield step's input, up to a darkfield change).
    """
    column = torch.empty_like(flat)
    square = torch.empty_like(flat)
    basic_dual(images, flat, baseline, dark, sparse, dual, mu, mu_next, column, square)
    return dual, square.sum(dim=(-2, -1)), column
