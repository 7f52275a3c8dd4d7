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

Both stop by themselves once every tile has converged (:mod:`._convergence`: the loss settled
and the gradient fallen, both required), at the latest after ``params.iterations``. At the
best values the returned step carries the share of the loss's curvature that comes from the
data (:mod:`._determined`): below one half the tilt is not determined by the data.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import numpy as np
import torch

from ..fourier import fft2, ifft2
from ._convergence import Convergence
from ._determined import signal_share
from ._grid import _Grid, key_for, z_positions
from ._inverse import NormalEquations, normalize_stack
from ._measurable import noise_only_reason, not_measurable_reason, slice_structure
from ._ops import normal_equations_twin, tikhonov_solve_twin
from ._params import PhaseParams
from ._tiles import TileGrid
from ._wotf import defocused_pupil, illumination_pupil, wotf

# noise_only_reason, not_measurable_reason, slice_structure: the checks of a stack's content
# (._measurable) lived here; importers of this module still find them.
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
    converged: bool = False
    """Set on the returned step when the stopping rule (:class:`~._convergence.Convergence`)
    ended the loop before the iteration limit."""
    signal_share: torch.Tensor | None = None
    """Set on the returned step, on the device (read with the stack's checks): per problem,
    the share of the loss's curvature that comes from the data
    (:func:`~._determined.signal_share`; below one half the tilt is not determined)."""


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
        self.data_hat = fft2(normalize_stack(tiles))
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

    def _fit(self, zenith, azimuth, focus, focus_free: bool):
        """The transfer functions, the 2 x 2 systems and their Tikhonov solution per tile."""
        source = illumination_pupil(self.grid, zenith, azimuth)[:, None]  # (B, 1, Yo, Xo)
        if focus_free:
            pupil = defocused_pupil(self.grid, self.z(focus))  # (B, Z, Yo, Xo)
            pupil_hat = None
        else:
            if self._fixed_pupil is None:
                with torch.no_grad():
                    pupil = defocused_pupil(self.grid, self.z(focus[:1].detach())[0])
                    self._fixed_pupil = (pupil, fft2(pupil))
            pupil, pupil_hat = self._fixed_pupil
        absorption, phase_tf = wotf(self.grid, source, pupil, pupil_hat)
        system = NormalEquations(
            *normal_equations_twin(self.data_hat, absorption.conj(), phase_tf.conj())
        )
        absorption_hat, phase_hat = tikhonov_solve_twin(system, self.params.regularization)
        return absorption, phase_tf, system, absorption_hat, phase_hat

    def _misfit(self, absorption, phase_tf, absorption_hat, phase_hat) -> torch.Tensor:
        model = absorption * absorption_hat[:, None] + phase_tf * phase_hat[:, None]
        misfit = self.data_hat - model
        return (misfit.real**2 + misfit.imag**2).sum(dim=(-3, -2, -1)) / self.data_power

    def misfit_and_dof(self, zenith, azimuth, focus, focus_free: bool):
        """Per tile, the relative misfit (the ``"residual"`` loss) and the degrees of freedom
        of the Tikhonov fit, ``sum_u tr((G + lambda)^-1 G)`` over the frequencies' 2 x 2
        Gram matrices ``G``: how much of the data, noise included, the model can fit."""
        absorption, phase_tf, system, absorption_hat, phase_hat = self._fit(
            zenith, azimuth, focus, focus_free
        )
        reg = self.params.regularization
        a11, a22 = system.g_aa + reg, system.g_pp + reg
        det = a11 * a22 - (system.g_ap.real**2 + system.g_ap.imag**2)
        dof = (2 - reg * (a11 + a22) / det).sum(dim=(-2, -1))
        return self._misfit(absorption, phase_tf, absorption_hat, phase_hat), dof

    def loss(
        self, zenith: torch.Tensor, azimuth: torch.Tensor, focus: torch.Tensor, focus_free: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-tile loss ``(B,)`` and the phase ``(B, h, w)``."""
        absorption, phase_tf, _, absorption_hat, phase_hat = self._fit(
            zenith, azimuth, focus, focus_free
        )
        phase = ifft2(phase_hat).real
        if self.params.tilt_loss == "residual":
            loss = self._misfit(absorption, phase_tf, absorption_hat, phase_hat)
        else:
            spectrum = fft2(phase).abs()
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

    It stops by itself when every tile has converged (:class:`~._convergence.Convergence`:
    the loss settled and the gradient small), at the latest after ``params.iterations``. The
    consumer sends ``True`` to stop (the best values so far are returned). ``shared`` makes
    all tiles share one set of parameters (a global estimate from several tiles). Returns the
    best step (lowest loss per tile; for ``shared``, of the sum), ``converged`` when the rule
    stopped it. ``boxes``: only these tiles of ``grid`` (a group of a grid too large for the
    device at once).

    NAdam keeps a fixed learning rate, so near the minimum it circles it instead of settling:
    each time a tile's loss rises, that tile's steps are halved from then on.
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

    gradient: torch.Tensor | None = None  # norm per problem at the values of the last step

    def snapshot(loss: torch.Tensor, iteration: int, *extra: torch.Tensor):
        """The step on the host, and the last gradient norm: the loss, the values, the norm
        and ``extra`` per-tile flags come back in one copy, the iteration's only wait for the
        device (two after a rejected Newton step)."""
        rows = [loss.detach()] + [
            values[n].detach().expand(count) for n in ("zenith", "azimuth", "focus")
        ]
        rows += [gradient.to(loss.dtype).expand(count)] if gradient is not None else []
        rows += [e.to(loss.dtype).expand(count) for e in extra]
        host = torch.stack(rows).cpu().numpy().astype(np.float64)
        step = TiltStep(iteration, host[0], host[1].copy(), host[2].copy(), host[3].copy())
        norm = host[4] if gradient is not None else None
        return step, norm, host[5 if gradient is not None else 4 :].astype(bool)

    best: TiltStep | None = None
    kept: tuple[torch.Tensor, dict[str, torch.Tensor]] | None = None
    optimiser = None
    if free and params.optimizer == "nadam":
        optimiser = torch.optim.NAdam([{"params": [values[n]], "lr": rates[n]} for n in free])
    # NAdam's step factor per parameter and problem, and the gradients of the last step
    scale = {n: torch.ones_like(values[n]).detach() for n in free}
    last_grad: dict[str, torch.Tensor] = {}
    damping: dict[str, torch.Tensor] = {}
    previous: tuple[torch.Tensor, dict[str, torch.Tensor]] | None = None
    rule = Convergence()
    non_finite = converged = False
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
            step, norm, (rejected,) = snapshot(loss, iteration, worse)
            if rejected.any() and np.isfinite(step.loss).all():
                with torch.no_grad():  # in place: the loss's graph is dropped just below
                    for name in free:
                        values[name].copy_(torch.where(worse, old_values[name], values[name]))
                # the undone tiles' graph is stale: evaluate again
                loss, phase = evaluate()
                total = loss.sum()
                step, norm, _ = snapshot(loss, iteration)
        else:
            step, norm, _ = snapshot(loss, iteration)
        if not np.isfinite(step.loss).all():
            non_finite = True
            break  # keep the best finite values (never report non-finite as a result)
        with torch.no_grad():  # the best values on the device too (no read: for the checks)
            now = loss.detach().sum().reshape(1) if shared else loss.detach()
            held = {n: values[n].detach() for n in ("zenith", "azimuth", "focus")}
            if kept is not None:
                better_here = now < kept[0]
                now = torch.where(better_here, now, kept[0])
                held = {n: torch.where(better_here, v, kept[1][n]) for n, v in held.items()}
            kept = (now, {n: v.clone() for n, v in held.items()})
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
        judged = step.loss.sum(keepdims=True) if shared else step.loss
        done = bool(free) and rule.update(judged, None if norm is None else norm[: judged.size])
        stop = yield step, phase.detach()
        if stop or not free:
            break
        if done:
            converged = True
            break
        if optimiser is not None:
            optimiser.zero_grad()
            total.backward()
            grads = [values[n].grad.detach() for n in free]
            gradient = torch.sqrt(sum(g**2 for g in grads))
            with torch.no_grad():
                for name, g in zip(free, grads, strict=True):
                    if name in last_grad:  # a sign change: this parameter stepped over
                        flip = g * last_grad[name] < 0
                        grown = (scale[name] * 1.2).clamp(max=1.0)
                        scale[name] = torch.where(flip, scale[name] / 2, grown)
                    last_grad[name] = g.clone()
                before = {n: values[n].detach().clone() for n in free}
            optimiser.step()
            with torch.no_grad():
                for name in free:
                    values[name].copy_(before[name] + scale[name] * (values[name] - before[name]))
        else:
            grads = torch.autograd.grad(total, [values[n] for n in free], create_graph=True)
            gradient = torch.sqrt(sum(g.detach() ** 2 for g in grads))
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
    best.converged = converged and not non_finite
    if free and kept is not None:
        at = {n: v.expand(count) for n, v in kept[1].items()}
        best.signal_share = signal_share(
            problem, at["zenith"], at["azimuth"], at["focus"], focus_free, shared
        )
    return best


def bytes_per_tile(params: PhaseParams, size: tuple[int, int], n_slices: int) -> int:
    """Device bytes one tile costs in the batched optimiser (forward, the tensors autograd
    keeps, and the second-order pass of the Newton step)."""
    key = key_for(params, size, "cpu", steepness=OPTIMIZER_STEEPNESS)
    oversampled = size[0] * size[1] * key.factor**2
    planes = 12 if params.optimizer == "nadam" else 30
    return 8 * n_slices * (planes * oversampled + 4 * size[0] * size[1])
