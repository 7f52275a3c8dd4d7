"""Elementwise passes of the no-grad reconstruction: torch twins (fused kernels: see below)."""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "fusable",
    "normal_equations",
    "normal_equations_twin",
    "tikhonov_solve",
    "tikhonov_solve_twin",
]


def fusable(*tensors: torch.Tensor) -> bool:
    """Whether the fused kernels may run on these tensors (CUDA, contiguous complex64)."""
    return False


def normal_equations_twin(
    data_hat: torch.Tensor, left_a: torch.Tensor, left_p: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """``(g_aa, g_pp, g_ap, b_a, b_p)`` reduced over the slice axis (-3)."""
    g_aa = (left_a.real**2 + left_a.imag**2).sum(-3)
    g_pp = (left_p.real**2 + left_p.imag**2).sum(-3)
    g_ap = (left_a * left_p.conj()).sum(-3)
    b_a = (left_a * data_hat).sum(-3)
    b_p = (left_p * data_hat).sum(-3)
    return g_aa, g_pp, g_ap, b_a, b_p


def tikhonov_solve_twin(system: Any, regularization: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorption and phase spectra of the 2x2 Tikhonov systems."""
    a11 = system.g_aa + regularization
    a22 = system.g_pp + regularization
    g_ap = system.g_ap
    det = a11 * a22 - (g_ap.real**2 + g_ap.imag**2)
    absorption = (a22 * system.b_a - g_ap * system.b_p) / det
    phase = (a11 * system.b_p - g_ap.conj() * system.b_a) / det
    return absorption, phase


normal_equations = normal_equations_twin
tikhonov_solve = tikhonov_solve_twin


def kernel_paths(device: torch.device) -> dict[str, str]:
    """Which implementation of each fused pass runs on ``device``."""
    return dict.fromkeys(("phase_normal_equations", "phase_tikhonov_solve"), "torch twin")
