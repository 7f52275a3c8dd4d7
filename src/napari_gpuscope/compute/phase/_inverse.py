"""The closed-form 2x2 Tikhonov inverse of the thin-sample model, and its SVD reference.

Per spatial frequency ``u`` the slices give ``d_z = A_z a + P_z phi``: a ``Z x 2`` linear
system. Tikhonov's estimate ``argmin |d - H x|^2 + reg |x|^2`` solves the 2x2 normal
equations ``(H^H H + reg I) x = H^H d``, i.e. with the Gram entries

    g_aa = sum_z |A_z|^2,  g_pp = sum_z |P_z|^2,  g_ap = sum_z conj(A_z) P_z,
    b_a = sum_z conj(A_z) d_z,  b_p = sum_z conj(P_z) d_z,
    det = (g_aa + reg)(g_pp + reg) - |g_ap|^2  (>= reg (g_aa + g_pp) + reg^2 > 0),

    a = ((g_pp + reg) b_a - g_ap b_p) / det,  phi = ((g_aa + reg) b_p - conj(g_ap) b_a) / det.

This is the least-squares inverse of the forward model (``convention="consistent"``, ours).
waveorder 3.0.5 applies ``U diag(s / (s^2 + reg)) Vh`` from the SVD of ``H``, which equals the
same formulas with ``A, P`` in place of ``conj(A), conj(P)`` (``convention="waveorder"``): the
two agree for real transfer functions (zero tilt) and otherwise waveorder's inverse at azimuth
``a`` is ours at ``a + pi``.

The Gram entries and right-hand sides do not depend on ``reg``: :class:`NormalEquations` keeps
them so that a new regularization costs one elementwise pass (the live slider).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..fourier import fft2
from . import _ops

if TYPE_CHECKING:
    from ._auto_regularization import RegularizationStats

__all__ = [
    "CONVENTIONS",
    "NormalEquations",
    "normalize_stack",
    "spectrum",
    "svd_filter",
    "tikhonov_filter",
]

CONVENTIONS = ("consistent", "waveorder")


def normalize_stack(zyx: torch.Tensor) -> torch.Tensor:
    """Per-slice contrast ``I / mean(I) - 1`` (waveorder's ``inten_normalization``, no filter)."""
    means = torch.clamp(zyx.mean(dim=(-2, -1), keepdim=True), min=1e-12)
    return zyx / means - 1


def spectrum(zyx: torch.Tensor) -> torch.Tensor:
    """``FFT2`` of :func:`normalize_stack` of ``(..., Y, X)``, complex64.

    The contrast is written straight into the real lanes of a complex array: ``fft2`` of a real
    tensor would first copy it to a complex one, one more array of the stack's size.
    """
    means = torch.clamp(zyx.mean(dim=(-2, -1), keepdim=True), min=1e-12)
    lanes = torch.empty((*zyx.shape, 2), dtype=torch.float32, device=zyx.device)
    torch.div(zyx, means, out=lanes[..., 0]).sub_(1)
    lanes[..., 1].zero_()
    return fft2(torch.view_as_complex(lanes))


def _rows(absorption: torch.Tensor, phase: torch.Tensor, convention: str):
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    if convention == "consistent":
        return absorption.conj(), phase.conj()
    return absorption, phase


@dataclass
class NormalEquations:
    """Gram entries and right-hand sides of the 2x2 systems, one per frequency.

    Attributes
    ----------
    g_aa, g_pp : torch.Tensor
        ``(..., Y, X)`` float32.
    g_ap, b_a, b_p : torch.Tensor
        ``(..., Y, X)`` complex64.
    """

    g_aa: torch.Tensor
    g_pp: torch.Tensor
    g_ap: torch.Tensor
    b_a: torch.Tensor
    b_p: torch.Tensor
    stats: RegularizationStats | None = None
    """What the automatic regularization needs (:mod:`._auto_regularization`), when gathered."""

    @classmethod
    def build(
        cls,
        data_hat: torch.Tensor,
        absorption: torch.Tensor,
        phase: torch.Tensor,
        convention: str = "consistent",
    ) -> NormalEquations:
        """Reduce over z (the slice axis is -3): ``data_hat`` and the TFs are ``(..., Z, Y, X)``."""
        if not torch.is_grad_enabled():  # one fused pass (kernel or twin, by dispatch)
            conjugate = _rows(absorption, phase, convention)[0] is not absorption
            return cls(*_ops.normal_equations(data_hat, absorption, phase, conjugate))
        left_a, left_p = _rows(absorption, phase, convention)
        return cls(*_ops.normal_equations_twin(data_hat, left_a, left_p))

    def add_(self, other: NormalEquations) -> NormalEquations:
        """Add ``other``'s sums in place (the slices of another chunk); returns ``self``."""
        for mine, theirs in zip(self.fields(), other.fields(), strict=True):
            mine.add_(theirs)
        return self

    def fields(self) -> tuple[torch.Tensor, ...]:
        """``(g_aa, g_pp, g_ap, b_a, b_p)``."""
        return self.g_aa, self.g_pp, self.g_ap, self.b_a, self.b_p

    def solve(self, regularization: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Absorption and phase spectra ``(..., Y, X)`` for a regularization strength."""
        if not torch.is_grad_enabled():
            return _ops.tikhonov_solve(self, float(regularization))
        return _ops.tikhonov_solve_twin(self, regularization)


def tikhonov_filter(
    absorption: torch.Tensor, phase: torch.Tensor, regularization: float, convention: str
) -> torch.Tensor:
    """The inverse filter ``W (2, Z, Y, X)`` that maps data spectra to (absorption, phase).

    ``W`` applied as ``sum_z W[k, z] d_z``; used to compare with the SVD path.
    """
    left_a, left_p = _rows(absorption, phase, convention)
    g_aa = (left_a.abs() ** 2).sum(-3) + regularization
    g_pp = (left_p.abs() ** 2).sum(-3) + regularization
    g_ap = (left_a * left_p.conj()).sum(-3)
    det = g_aa * g_pp - g_ap.abs() ** 2
    w_a = (g_pp[..., None, :, :] * left_a - g_ap[..., None, :, :] * left_p) / det[..., None, :, :]
    w_p = (g_aa[..., None, :, :] * left_p - g_ap.conj()[..., None, :, :] * left_a) / det[
        ..., None, :, :
    ]
    return torch.stack((w_a, w_p))


def svd_filter(
    absorption: torch.Tensor, phase: torch.Tensor, regularization: float
) -> torch.Tensor:
    """waveorder's SVD inverse filter ``U diag(s / (s^2 + reg)) Vh`` as ``(2, Z, Y, X)``.

    The slow reference (batched complex SVD of ``2 x Z`` matrices); tests compare it with
    :func:`tikhonov_filter` with ``convention="waveorder"``.
    """
    h = torch.stack((absorption, phase)).permute(2, 3, 0, 1)  # (Y, X, 2, Z)
    u, s, vh = torch.linalg.svd(h, full_matrices=False)
    s_reg = (s / (s**2 + regularization)).to(u.dtype)
    w = torch.einsum("yxsj,yxj,yxjz->yxsz", u, s_reg, vh)
    return w.permute(2, 3, 0, 1)
