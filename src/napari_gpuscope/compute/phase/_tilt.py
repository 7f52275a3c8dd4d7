"""Per-tile optimisation of the illumination tilt (zenith, azimuth) and focus offset.

All tiles are optimised together as one batch (one set of FFTs per iteration); the loss is
the sum of the tiles' losses, so each tile's parameters follow their own gradient. Two losses:

- ``"residual"`` (default): the relative misfit ``sum |d - A a - P phi|^2 / sum |d|^2`` of the
  model at its own Tikhonov solution -- the tilt that explains the data best;
- ``"midband"``: waveorder's *midband power*, minus the mean magnitude of the reconstructed
  phase spectrum in ``0.125 f_c < |u| < 0.25 f_c`` (``f_c = 2 NA_det / lambda``). It rewards
  gain as well as sharpness, so it over-estimates small zeniths (0.18 for a true 0.1 on a
  64-128 px field; the residual finds 0.1).

The reconstruction inside the loop is the closed-form (least-squares consistent) Tikhonov
inverse, differentiable, with a smooth detection pupil (steepness 100) for usable gradients.

Two optimisers: NAdam with a learning rate per parameter (0 freezes it), and a
Levenberg-Marquardt-damped diagonal Newton step whose per-tile second derivatives come from
Hessian-vector products (tiles are independent, so one product per parameter gives the exact
diagonal for every tile).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass

import numpy as np
import torch

from ._grid import _Grid, key_for, z_positions
from ._inverse import NormalEquations, normalize_stack
from ._ops import normal_equations_twin, tikhonov_solve_twin
from ._params import PhaseParams
from ._tiles import TileGrid
from ._wotf import defocused_pupil, illumination_pupil, wotf

__all__ = [
    "OPTIMIZER_STEEPNESS",
    "TiltStep",
    "bytes_per_tile",
    "midband_mask",
    "noise_only_reason",
    "not_measurable_reason",
    "optimise_tilt",
    "slice_structure",
]

OPTIMIZER_STEEPNESS = 100.0
"""Detection-pupil steepness inside the optimiser (waveorder's ``phase.optimize`` uses 100)."""
MIDBAND = (0.125, 0.25)
MIN_ZENITH_START = 0.05
"""The azimuth has no gradient at zenith 0: start at least this far from it."""
MAX_NEWTON_STEP = {"zenith": 0.05, "azimuth": 0.5, "focus": 0.5}


@dataclass
class TiltStep:
    """One iteration of the optimiser: the per-tile values after the step and the loss before."""

    iteration: int
    loss: np.ndarray
    zenith: np.ndarray
    azimuth: np.ndarray
    focus: np.ndarray
    non_finite: bool = False
    """Set on the returned step when the loss went non-finite and the loop stopped."""


def midband_mask(shape: tuple[int, int], pixel: float, na_det: float, wavelength: float, device):
    """Boolean ``(h, w)`` mask of the midband ``0.125 f_c < |u| < 0.25 f_c``."""
    fy = torch.fft.fftfreq(shape[0], pixel, device=device)
    fx = torch.fft.fftfreq(shape[1], pixel, device=device)
    radial = torch.sqrt(fy[:, None] ** 2 + fx[None, :] ** 2)
    cutoff = 2 * na_det / wavelength
    return (radial > MIDBAND[0] * cutoff) & (radial < MIDBAND[1] * cutoff)


class _Problem:
    """The batched forward model of the tiles (everything that does not change per step)."""

    def __init__(self, data: torch.Tensor, params: PhaseParams, grid: TileGrid, boxes=None) -> None:
        self.params = params
        boxes = grid.boxes() if boxes is None else boxes
        tiles = torch.stack([data[..., ys, xs] for ys, xs in boxes])  # (B, Z, h, w)
        self.count = tiles.shape[0]
        self.n_z = tiles.shape[1]
        self.data_hat = torch.fft.fft2(normalize_stack(tiles))
        self.data_power = (self.data_hat.abs() ** 2).sum(dim=(-3, -2, -1)).clamp(min=1e-30)
        self.key = key_for(params, grid.size, data.device, steepness=OPTIMIZER_STEEPNESS)
        self.grid = _Grid(self.key)
        mask = midband_mask(
            grid.size, params.yx_pixel_size, params.na_detection, params.wavelength, data.device
        )
        # The midband mean as a weighted sum: a boolean index would wait for the device to
        # count the selected frequencies on every evaluation.
        self.midband_weights = mask / mask.sum()
        self._fixed_pupil: tuple[torch.Tensor, torch.Tensor] | None = None

    def z(self, focus: torch.Tensor) -> torch.Tensor:
        p = self.params
        z = z_positions(
            self.n_z,
            p.z_pixel_size,
            p.z_focus_offset + focus,
            descending=p.z_order == "descending",
            device=self.data_hat.device,
        )
        return -z if p.invert_phase_contrast else z

    def loss(
        self, zenith: torch.Tensor, azimuth: torch.Tensor, focus: torch.Tensor, focus_free: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-tile loss ``(B,)`` and the phase ``(B, h, w)``."""
        source = illumination_pupil(self.grid, zenith, azimuth)[:, None]  # (B, 1, Yo, Xo)
        if focus_free:
            pupil = defocused_pupil(self.grid, self.z(focus))  # (B, Z, Yo, Xo)
            pupil_hat = None
        else:
            if self._fixed_pupil is None:
                with torch.no_grad():
                    pupil = defocused_pupil(self.grid, self.z(focus[:1].detach())[0])
                    self._fixed_pupil = (pupil, torch.fft.fft2(pupil))
            pupil, pupil_hat = self._fixed_pupil
        absorption, phase_tf = wotf(self.grid, source, pupil, pupil_hat)
        system = NormalEquations(
            *normal_equations_twin(self.data_hat, absorption.conj(), phase_tf.conj())
        )
        absorption_hat, phase_hat = tikhonov_solve_twin(system, self.params.regularization)
        phase = torch.fft.ifft2(phase_hat).real
        if self.params.tilt_loss == "residual":
            model = absorption * absorption_hat[:, None] + phase_tf * phase_hat[:, None]
            misfit = self.data_hat - model
            loss = (misfit.real**2 + misfit.imag**2).sum(dim=(-3, -2, -1)) / self.data_power
        else:
            spectrum = torch.fft.fft2(phase).abs()
            loss = -(spectrum * self.midband_weights).sum(dim=(-2, -1))
        return loss, phase


def optimise_tilt(
    data: torch.Tensor,
    params: PhaseParams,
    grid: TileGrid,
    *,
    zenith: np.ndarray | float,
    azimuth: np.ndarray | float,
    focus: np.ndarray | float = 0.0,
    shared: bool = False,
    boxes: list[tuple[slice, slice]] | None = None,
) -> Generator[tuple[TiltStep, torch.Tensor], bool, TiltStep]:
    """Optimise the tilt of every tile of ``grid``; yields ``(step, phase)`` per iteration.

    The consumer sends ``True`` to stop (the best values so far are returned). ``shared``
    makes all tiles share one set of parameters (a global estimate from several tiles).
    Returns the best step (lowest loss per tile; for ``shared``, of the sum). ``boxes``: only
    these tiles of ``grid`` (a group of a grid too large for the device at once).
    """
    problem = _Problem(data, params, grid, boxes)
    count = problem.count
    device = data.device
    rates = {"zenith": params.lr_zenith, "azimuth": params.lr_azimuth, "focus": params.lr_focus}
    zen0 = np.asarray(zenith, dtype=np.float64)
    zen0 = np.where(np.abs(zen0) < MIN_ZENITH_START, MIN_ZENITH_START, zen0)
    if rates["zenith"] == 0:
        zen0 = np.asarray(zenith, dtype=np.float64)
    # One upload for the three start vectors (each host-to-device copy waits for the device).
    starts = np.stack(
        [np.broadcast_to(np.asarray(v, np.float32), (count,)) for v in (zen0, azimuth, focus)]
    )
    on_device = torch.from_numpy(starts[:, :1] if shared else starts).to(device)
    values = {name: on_device[i].clone() for i, name in enumerate(("zenith", "azimuth", "focus"))}
    free = [name for name, rate in rates.items() if rate > 0]
    for name in free:
        values[name].requires_grad_(True)
    focus_free = rates["focus"] > 0

    def evaluate(create_graph: bool = False):
        expanded = {k: v.expand(count) if shared else v for k, v in values.items()}
        loss, phase = problem.loss(
            expanded["zenith"], expanded["azimuth"], expanded["focus"], focus_free
        )
        return loss, phase

    def snapshot(loss: torch.Tensor, iteration: int, *extra: torch.Tensor):
        """The step on the host: the loss, the values and ``extra`` per-tile flags come back in
        one copy, the iteration's only wait for the device (two after a rejected Newton
        step)."""
        rows = [loss.detach()] + [
            values[n].detach().expand(count) for n in ("zenith", "azimuth", "focus")
        ]
        rows += [e.to(loss.dtype).expand(count) for e in extra]
        host = torch.stack(rows).cpu().numpy().astype(np.float64)
        step = TiltStep(iteration, host[0], host[1].copy(), host[2].copy(), host[3].copy())
        return step, host[4:].astype(bool)

    best: TiltStep | None = None
    optimiser = None
    if free and params.optimizer == "nadam":
        optimiser = torch.optim.NAdam([{"params": [values[n]], "lr": rates[n]} for n in free])
    damping: dict[str, torch.Tensor] = {}
    previous: tuple[torch.Tensor, dict[str, torch.Tensor]] | None = None
    non_finite = False
    for iteration in range(params.iterations if free else 1):
        newton = bool(free) and params.optimizer == "newton"
        loss, phase = evaluate()
        total = loss.sum()
        if newton and previous is not None:
            # LM acceptance, per tile: a worse loss undoes that tile's step, more damping.
            old_loss, old_values = previous
            worse = loss > old_loss
            if shared:
                worse = (total > old_loss.sum()).reshape(1)
            with torch.no_grad():
                for name in free:
                    damping[name] = torch.where(worse, damping[name] * 4, damping[name] / 3)
            step, (rejected,) = snapshot(loss, iteration, worse)
            if rejected.any() and np.isfinite(step.loss).all():
                with torch.no_grad():  # in place: the loss's graph is dropped just below
                    for name in free:
                        values[name].copy_(torch.where(worse, old_values[name], values[name]))
                # the undone tiles' graph is stale: evaluate again
                loss, phase = evaluate()
                total = loss.sum()
                step, _ = snapshot(loss, iteration)
        else:
            step, _ = snapshot(loss, iteration)
        if not np.isfinite(step.loss).all():
            non_finite = True
            break  # keep the best finite values (never report non-finite as a result)
        if best is None:
            best = step
        else:
            better = step.loss < best.loss
            if shared:
                better[:] = step.loss.sum() < best.loss.sum()
            best = TiltStep(
                iteration,
                np.where(better, step.loss, best.loss),
                np.where(better, step.zenith, best.zenith),
                np.where(better, step.azimuth, best.azimuth),
                np.where(better, step.focus, best.focus),
            )
        stop = yield step, phase.detach()
        if stop or not free:
            break
        if optimiser is not None:
            optimiser.zero_grad()
            total.backward()
            optimiser.step()
        else:
            grads = torch.autograd.grad(total, [values[n] for n in free], create_graph=True)
            previous = (loss.detach(), {n: values[n].detach().clone() for n in free})
            steps = {}
            for name, g in zip(free, grads, strict=True):
                (h,) = torch.autograd.grad(g.sum(), values[name], retain_graph=True)
                if name not in damping:
                    damping[name] = 1e-3 + 1e-2 * h.abs().detach()  # per tile: no coupling
                step_size = -g / (h.abs() + damping[name])
                limit = MAX_NEWTON_STEP[name]
                steps[name] = torch.clamp(step_size, -limit, limit).detach()
            with torch.no_grad():
                for name in free:
                    values[name] += steps[name]
    if best is None:
        raise FloatingPointError(
            "the tilt loss is not finite at the start values: check the optics parameters"
        )
    best.non_finite = non_finite
    return best


def bytes_per_tile(params: PhaseParams, size: tuple[int, int], n_slices: int) -> int:
    """Device bytes one tile costs in the batched optimiser (forward, the tensors autograd
    keeps, and the second-order pass of the Newton step)."""
    key = key_for(params, size, "cpu", steepness=OPTIMIZER_STEEPNESS)
    oversampled = size[0] * size[1] * key.factor**2
    planes = 12 if params.optimizer == "nadam" else 30
    return 8 * n_slices * (planes * oversampled + 4 * size[0] * size[1])


# ----------------------------------------------------------------- is there anything to fit
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
        spectrum = torch.fft.fft2((contrast - contrast.mean()) * window) * band
        if previous is not None:
            power = ((spectrum.abs() ** 2) * (previous.abs() ** 2)).sum() * correction
            surface = torch.fft.ifft2(spectrum * previous.conj()).real * n
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
    flag, peak_value = torch.stack([constant.to(torch.float64), peak]).cpu().tolist()
    if flag:
        return (
            f"every one of the {slices} slices is constant (no contrast), so the stack shows "
            "no tilt"
        )
    if not math.isfinite(peak_value) or peak_value > threshold:
        return ""
    return (
        f"its {slices} slices share no structure above the noise (neighbouring slices "
        f"correlate at {peak_value:.1f} sigma, below the {threshold:.1f} sigma that pure "
        f"noise reaches with probability {FALSE_ALARM:g}), so the stack shows no tilt: a fit "
        "would follow the noise"
    )


def noise_only_reason(data: torch.Tensor, params: PhaseParams) -> str:
    """:func:`not_measurable_reason` for stacks whose slices are not all constant: why their
    slices share no structure above the noise, or ``""``."""
    reason = not_measurable_reason(data, params)
    return reason if "share no structure" in reason else ""
