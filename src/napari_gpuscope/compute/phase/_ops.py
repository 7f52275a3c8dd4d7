"""Elementwise passes of the no-grad reconstruction: fused kernels beside their torch twins.

``phase_kernels.cu`` (beside this file) holds two kernels, each a
:class:`~napari_gpuscope.compute.kernels.FusedOp` whose twin here computes the same thing:

- :data:`normal_equations_op`: the Gram entries and right-hand sides of the per-frequency 2x2
  Tikhonov systems, one pass over the transfer functions and the data spectra (the twin makes
  ~10 passes over ``(B, Z, Y, X)`` complex arrays);
- :data:`tikhonov_solve_op`: the closed-form solve for one regularization (the live slider).

Complex tensors travel as their float32 ``view_as_real`` views (interleaved re, im), so the
dispatch rules of the platform apply unchanged: CUDA float32 -> kernel, CPU with
``NAPARI_GPUSCOPE_HOST_KERNELS=1`` -> the same source under g++, else the twin. The autograd
path (tilt optimisation) uses the differentiable twins directly.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from ..kernels import FusedOp, KernelSource, path_report

__all__ = [
    "kernel_paths",
    "normal_equations",
    "normal_equations_op",
    "normal_equations_twin",
    "tikhonov_solve",
    "tikhonov_solve_op",
    "tikhonov_solve_twin",
]

SOURCE = KernelSource("phase_kernels.cu", beside=__file__)
OPS = ("phase_normal_equations", "phase_tikhonov_solve", "phase_regularization_components")


def normal_equations_twin(
    data_hat: torch.Tensor, left_a: torch.Tensor, left_p: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """``(g_aa, g_pp, g_ap, b_a, b_p)`` reduced over the slice axis (-3); differentiable."""
    g_aa = (left_a.real**2 + left_a.imag**2).sum(-3)
    g_pp = (left_p.real**2 + left_p.imag**2).sum(-3)
    g_ap = (left_a * left_p.conj()).sum(-3)
    b_a = (left_a * data_hat).sum(-3)
    b_p = (left_p * data_hat).sum(-3)
    return g_aa, g_pp, g_ap, b_a, b_p


def tikhonov_solve_twin(system: Any, regularization: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorption and phase spectra of the 2x2 Tikhonov systems; differentiable."""
    a11 = system.g_aa + regularization
    a22 = system.g_pp + regularization
    g_ap = system.g_ap
    det = a11 * a22 - (g_ap.real**2 + g_ap.imag**2)
    absorption = (a22 * system.b_a - g_ap * system.b_p) / det
    phase = (a11 * system.b_p - g_ap.conj() * system.b_a) / det
    return absorption, phase


# ------------------------------------------------------------------ fused ops (float views)
def _as_complex(x: torch.Tensor) -> torch.Tensor:
    return torch.view_as_complex(x)


def _normal_equations_views(data, tf_a, tf_p, g_aa, g_pp, g_ap, b_a, b_p, sign: float) -> None:
    """Twin of the kernel on the float views: writes the five outputs in place."""
    a, p, d = _as_complex(tf_a), _as_complex(tf_p), _as_complex(data)
    if sign < 0:
        a, p = a.conj(), p.conj()
    outs = normal_equations_twin(d, a, p)
    for target, value in zip((g_aa, g_pp, g_ap, b_a, b_p), outs, strict=True):
        target.copy_(torch.view_as_real(value) if value.is_complex() else value)


def _launch_normal_equations(
    backend, data, tf_a, tf_p, g_aa, g_pp, g_ap, b_a, b_p, sign: float
) -> None:
    n_z, n_freq = data.shape[-4], data.shape[-3] * data.shape[-2]
    tf_batches = tf_a.shape[0]
    matching = tf_p.shape == tf_a.shape and tf_a.shape[1:] == data.shape[1:]
    if not matching or tf_batches not in (1, data.shape[0]):
        raise ValueError(
            f"transfer functions {tuple(tf_a.shape)} / {tuple(tf_p.shape)} do not match data "
            f"{tuple(data.shape)} (one set per problem, or one shared set)"
        )
    total = g_aa.numel()
    kernel = backend.function(SOURCE, "phase_normal_equations")
    arrays = [backend.array(t) for t in (data, tf_a, tf_p, g_aa, g_pp, g_ap, b_a, b_p)]
    scalars = [np.int64(n_z), np.int64(n_freq), np.int64(tf_batches), np.int64(total)]
    backend.launch(kernel, total, [*arrays, np.float32(sign), *scalars])


def _normal_equations_example(device, generator):
    shape = (2, 5, 7, 9, 2)  # (B, Z, Y, X, re/im): N = 63 is not a multiple of the block
    data = torch.randn(shape, generator=generator).to(device)
    # One set of transfer functions shared by both problems: the batch index must not move it.
    a, p = (torch.randn((1, *shape[1:]), generator=generator).to(device) for _ in range(2))
    out = shape[:1] + shape[2:4]
    g_aa, g_pp = (torch.empty(out, device=device) for _ in range(2))
    g_ap, b_a, b_p = (torch.empty((*out, 2), device=device) for _ in range(3))
    return (data, a, p, g_aa, g_pp, g_ap, b_a, b_p, -1.0), {}


normal_equations_op = FusedOp(
    name="phase_normal_equations",
    launch=_launch_normal_equations,
    twin=_normal_equations_views,
    example=_normal_equations_example,
    outputs=(3, 4, 5, 6, 7),
    rtol=1e-5,
    atol=1e-5,
)
"""``normal_equations_op(data, tf_a, tf_p, g_aa, g_pp, g_ap, b_a, b_p, sign)`` on float views:
``data (B, Z, Y, X, 2)`` and transfer functions of the same shape or ``(1, Z, Y, X, 2)`` (shared
by the ``B`` problems) in, ``(B, Y, X)`` / ``(B, Y, X, 2)`` out; ``sign=-1`` conjugates the
rows."""


def _tikhonov_views(g_aa, g_pp, g_ap, b_a, b_p, out_a, out_p, reg: float) -> None:
    system = SimpleNamespace(
        g_aa=g_aa, g_pp=g_pp, g_ap=_as_complex(g_ap), b_a=_as_complex(b_a), b_p=_as_complex(b_p)
    )
    absorption, phase = tikhonov_solve_twin(system, reg)
    out_a.copy_(torch.view_as_real(absorption))
    out_p.copy_(torch.view_as_real(phase))


def _launch_tikhonov(backend, g_aa, g_pp, g_ap, b_a, b_p, out_a, out_p, reg: float) -> None:
    kernel = backend.function(SOURCE, "phase_tikhonov_solve")
    arrays = [backend.array(t) for t in (g_aa, g_pp, g_ap, b_a, b_p, out_a, out_p)]
    backend.launch(kernel, g_aa.numel(), [*arrays, np.float32(reg), np.int64(g_aa.numel())])


def _tikhonov_example(device, generator):
    shape = (3, 7, 9)
    g_aa = torch.rand(shape, generator=generator).to(device)
    g_pp = torch.rand(shape, generator=generator).to(device)
    # |g_ap|^2 <= g_aa g_pp (Cauchy-Schwarz), as for real Gram entries
    g_ap = (0.5 * torch.rand((*shape, 2), generator=generator) - 0.25).to(device)
    g_ap = g_ap * torch.sqrt(g_aa * g_pp)[..., None]
    b_a, b_p = (torch.randn((*shape, 2), generator=generator).to(device) for _ in range(2))
    out_a, out_p = (torch.empty((*shape, 2), device=device) for _ in range(2))
    return (g_aa, g_pp, g_ap, b_a, b_p, out_a, out_p, 1e-2), {}


tikhonov_solve_op = FusedOp(
    name="phase_tikhonov_solve",
    launch=_launch_tikhonov,
    twin=_tikhonov_views,
    example=_tikhonov_example,
    outputs=(5, 6),
    rtol=1e-4,
    atol=1e-5,
)
"""``tikhonov_solve_op(g_aa, g_pp, g_ap, b_a, b_p, out_a, out_p, reg)`` on float views."""


# ------------------------------------------------------------------ entry points (no grad)
def _batched(x: torch.Tensor, trailing: int) -> torch.Tensor:
    """``x`` with exactly one leading batch axis before its ``trailing`` axes."""
    return x.reshape(-1, *x.shape[x.ndim - trailing :])


def normal_equations(
    data_hat: torch.Tensor, absorption: torch.Tensor, phase: torch.Tensor, conjugate: bool
) -> tuple[torch.Tensor, ...]:
    """The five reductions through the fused op (kernel where it runs, else the twin).

    ``data_hat (..., Z, Y, X)``; the transfer functions have the same batch axes, or none
    (one set shared by every problem: passed as is, not copied per problem).
    """
    batch = data_hat.shape[:-3]
    data = torch.view_as_real(_batched(data_hat, 3).contiguous())
    if absorption.shape[:-3] != batch and math.prod(absorption.shape[:-3]) == 1:
        absorption = absorption.reshape(absorption.shape[-3:])
        phase = phase.reshape(phase.shape[-3:])
    else:
        absorption, phase = absorption.expand_as(data_hat), phase.expand_as(data_hat)
    tf_a = torch.view_as_real(_batched(absorption, 3).contiguous())
    tf_p = torch.view_as_real(_batched(phase, 3).contiguous())
    out = (data.shape[0], *data.shape[2:4])
    g_aa, g_pp = (data.new_empty(out) for _ in range(2))
    g_ap, b_a, b_p = (data.new_empty((*out, 2)) for _ in range(3))
    normal_equations_op(data, tf_a, tf_p, g_aa, g_pp, g_ap, b_a, b_p, -1.0 if conjugate else 1.0)
    shape = (*batch, *out[1:])
    return (
        g_aa.reshape(shape),
        g_pp.reshape(shape),
        *(torch.view_as_complex(t).reshape(shape) for t in (g_ap, b_a, b_p)),
    )


def tikhonov_solve(system: Any, regularization: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The closed-form solve through the fused op."""
    shape = system.g_aa.shape
    g_aa = system.g_aa.contiguous()
    g_pp = system.g_pp.contiguous()
    g_ap, b_a, b_p = (
        torch.view_as_real(t.resolve_conj().contiguous())
        for t in (system.g_ap, system.b_a, system.b_p)
    )
    out_a, out_p = torch.empty_like(b_a), torch.empty_like(b_p)
    tikhonov_solve_op(g_aa, g_pp, g_ap, b_a, b_p, out_a, out_p, float(regularization))
    return (
        torch.view_as_complex(out_a).reshape(shape),
        torch.view_as_complex(out_p).reshape(shape),
    )


def kernel_paths(device: torch.device) -> dict[str, str]:
    """Which implementation of each fused pass ran on ``device`` (for provenance)."""
    report = path_report(device)
    where = str(torch.device(device))
    return {name: report.get(name, {}).get(where, "not run") for name in OPS}
