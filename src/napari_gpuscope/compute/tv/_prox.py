"""The proximal step of isotropic TV on device tensors, for solvers that call TV in a loop.

``prox(f, weight)`` is ``argmin_u 1/2 |u - f|^2 + weight TV(u)``, the ROF problem that
:func:`~napari_gpuscope.compute.tv.denoise` solves, as a tensor-in, tensor-out step: a fixed
number of FGP iterations (:func:`~._fgp.fgp_iterations`, the fused ``fgp_step`` kernel on a
GPU) and one ``fgp_primal``, with no input scan, no noise estimate, no host copy and no
convergence check, so it never waits for the device. An ADMM or proximal-gradient loop (the
TV-regularised phase) calls it once per outer iteration; ``dual=`` carries the dual field from
one call to the next, so a target that moves little starts next to its solution.

Without ``dual`` it runs exactly the iterations of :func:`~._fgp.solve_fgp` (same momenta, same
fused steps), i.e. ``denoise(f, weight, max_iterations=iterations, tolerance=0)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from . import _ops as ops
from ._fgp import fgp_iterations, fgp_momenta

__all__ = ["PROX_ITERATIONS", "prox", "prox_bytes"]

PROX_ITERATIONS = 50
"""Default FGP iterations of one step: what the TV-regularised phase runs per ADMM iteration,
warm-started (its z-steps took 10-160 iterations each as certified ``denoise`` jobs from a zero
dual; measurements in :data:`~napari_gpuscope.compute.phase._reconstruct.TV_PROX_ITERATIONS`)."""


def prox(
    image: torch.Tensor,
    weight: float,
    *,
    iterations: int = PROX_ITERATIONS,
    spacing: Sequence[float] | None = None,
    dual: torch.Tensor | None = None,
    nonnegative: bool = False,
) -> torch.Tensor:
    """``argmin_u 1/2 |u - f|^2 + weight TV(u)`` on the device of ``image``, by FGP.

    Parameters
    ----------
    image : torch.Tensor
        ``f``: ``(..., n_0, ..., n_{d-1})``; the last ``d`` axes are coupled (``d =
        len(spacing)``, default every axis, at most 4), leading axes are independent
        problems. Any float dtype (computed in float32); never modified.
    weight : float
        TV weight in the image's units (>= 0; 0 returns a copy of ``f``).
    iterations : int
        FGP iterations (>= 1). No convergence test: the caller picks the count.
    spacing : sequence of float, optional
        Difference weight per coupled axis (default 1 each).
    dual : torch.Tensor, optional
        Warm start: a float32 ``(d, *image.shape)`` dual field (zeros is the cold start). It
        is overwritten with the final dual, ready for the next call.
    nonnegative : bool
        Constrain ``u >= 0``.

    Returns
    -------
    torch.Tensor
        float32, the shape of ``image``, on its device.

    Examples
    --------
    >>> import torch
    >>> f = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    >>> prox(f, 0.1, iterations=200)
    tensor([[0.0500, 0.0500, 0.9500, 0.9500]])
    """
    if not weight >= 0 or not math.isfinite(weight):
        raise ValueError(f"weight must be finite and >= 0, got {weight!r}")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations!r}")
    d = image.ndim if spacing is None else len(spacing)
    spacing = (1.0,) * d if spacing is None else tuple(float(s) for s in spacing)
    if not 1 <= d <= min(ops.MAX_COUPLED_AXES, image.ndim):
        raise ValueError(
            f"prox couples 1 to {ops.MAX_COUPLED_AXES} trailing axes of a tensor with at least "
            f"that many; got {d} for shape {tuple(image.shape)}"
        )
    f = image.detach().to(torch.float32).contiguous()
    f = f.reshape(-1, *f.shape[f.ndim - d :])  # (B, n_0, ..., n_{d-1})
    lo = 0.0 if nonnegative else -math.inf
    if weight == 0:
        u = f.clamp(min=0.0) if nonnegative else f.clone()
        return u.reshape(image.shape)
    shape = (d, *f.shape)
    if dual is None:
        y = f.new_zeros(shape)
        z = f.new_zeros(shape)
    else:
        if dual.dtype != torch.float32 or dual.numel() != math.prod(shape):
            raise ValueError(
                f"dual must be a float32 tensor of shape {(d, *image.shape)}, got "
                f"{dual.dtype} {tuple(dual.shape)}"
            )
        y = dual.view(shape) if dual.is_contiguous() else dual.reshape(shape).contiguous()
        z = y.clone()
    z_next = torch.empty_like(y)
    inv_l2 = 1.0 / (4.0 * sum(s * s for s in spacing))
    momenta, _ = fgp_momenta(1.0, iterations)
    fgp_iterations(
        f, z, y, z_next, momenta, spacing=spacing, lo=lo, hi=math.inf, inv_l2=inv_l2, weight=weight
    )
    if dual is not None and y.data_ptr() != dual.data_ptr():
        dual.copy_(y.view(dual.shape))
    del z, z_next
    u = torch.empty_like(f)
    # The estimate of the dual iterate y (not the extrapolated z), as solve_fgp returns it.
    ops.fgp_primal.bind(f, y, u)(f, y, u, spacing=spacing, lo=lo, hi=math.inf)
    return u.reshape(image.shape)


def prox_bytes(numel: int, n_coupled: int, *, warm: bool = False) -> int:
    """Device bytes one :func:`prox` call allocates for ``numel`` float32 elements: ``f``
    (unless the input is float32 and contiguous already, counted here), the duals ``y`` (not
    with ``warm``: the caller's), ``z`` and ``z_next``, and ``u``; the twins' work buffers on
    top where the fused kernels do not run (:data:`~._ops.TWIN_WORK_BUFFERS`)."""
    duals = (2 if warm else 3) * n_coupled
    return 4 * numel * (2 + duals + ops.TWIN_WORK_BUFFERS)
