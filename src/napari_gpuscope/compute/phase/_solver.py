"""Re-solving one stack for another regularization: the dock's live slider."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._types import Device
from ..devices import resolve_device
from ._auto_tv import TVStrengthChoice
from ._job import _check_stack, _load, download
from ._optics import OpticsCache, shared_cache
from ._params import PhaseParams
from ._reconstruct import Reconstructor, solve_all
from ._tiles import TileGrid, TiltMap

__all__ = ["PhaseSolver"]

_FREE = (
    "regularization", "tv_strength", "tv_iterations", "regularizer", "tilt_mode", "tilt_zenith",
    "tilt_azimuth", "tiles_y", "tiles_x", "tile_overlap", "iterations", "optimizer", "tilt_loss",
    "lr_zenith", "lr_azimuth", "lr_focus",
)  # fmt: skip
"""Fields that do not change the normal equations (the tilt is held by the tilt map)."""


class PhaseSolver:
    """The normal equations of one stack at one tilt (map), kept on the device.

    Building them costs the transfer functions and the stack's FFTs; :meth:`solve` for another
    regularization is then one elementwise pass and two inverse FFTs per tile.

    Parameters
    ----------
    zyx : array-like
        ``(Z, Y, X)`` brightfield stack.
    params : PhaseParams
        The parameters (regularization is taken per :meth:`solve`).
    tilt_map : TiltMap, optional
        Tilt per tile; default: the manual tilt of ``params`` (zero for ``tilt_mode="none"``
        and for the estimating modes, which need a run first).
    device : str or torch.device, optional
        ``None`` = first GPU; ``"cpu"`` only when named.
    optics_cache : OpticsCache, optional
        Device optics to reuse.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.compute import phase
    >>> p = phase.PhaseParams(wavelength=0.45, yx_pixel_size=0.325, z_pixel_size=1.0,
    ...                       na_illumination=0.4, na_detection=0.55, index_of_refraction=1.0)
    >>> solver = phase.PhaseSolver(np.ones((5, 32, 32), np.float32), p, device="cpu")
    >>> absorption, ph = solver.solve(1e-2)
    >>> ph.shape
    (32, 32)
    """

    def __init__(
        self,
        zyx: Any,
        params: PhaseParams,
        *,
        tilt_map: TiltMap | None = None,
        device: Device | None = None,
        optics_cache: OpticsCache | None = None,
    ) -> None:
        _check_stack(zyx, params)
        dev = resolve_device(device)
        with torch.no_grad():
            data = _load(zyx, dev)
            shape = tuple(data.shape[-2:])
            self._implied = _implied_tilt(params) if tilt_map is None else None
            if tilt_map is None:
                grid = TileGrid(shape, (1, 1), shape, (0,), (0,))
                tilt_map = TiltMap.uniform(grid, *self._implied)
            self.tilt_map = tilt_map
            self.params = params
            cache = shared_cache(dev) if optics_cache is None else optics_cache
            # Statistics of the automatic regularization always: it may become "auto" later.
            self._recon = Reconstructor(data, params, cache, gather_stats=True)
            self._systems = list(self._recon.tile_systems(tilt_map))

    def matches(self, params: PhaseParams, tilt_map: TiltMap | None = None) -> bool:
        """Whether these normal equations serve ``params`` (and ``tilt_map``) too."""
        if tilt_map is not None and tilt_map is not self.tilt_map:
            return False
        if tilt_map is None and self._implied != _implied_tilt(params):
            return False
        a = {k: v for k, v in self.params.to_dict().items() if k not in _FREE}
        b = {k: v for k, v in params.to_dict().items() if k not in _FREE}
        return a == b

    def solve(
        self, regularization: float | None = None, params: PhaseParams | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Absorption and phase ``(Y, X)`` float32 for a regularization (default: the params',
        chosen automatically when they say None or "auto": :attr:`chosen_regularization`).

        ``params`` may change the regularizer (Tikhonov or TV) and its strengths.
        """
        if params is not None:
            self._recon.params = params
        if regularization is not None:
            # Through the parameter model: 0, -1, NaN or infinity are refused with its message
            # (they gave finite-looking or all-NaN phase).
            self._recon.params.replace(regularization=regularization)
        self._recon.chosen_regularization = None
        self._recon.tv_choice = None
        with torch.no_grad():
            absorption, phase = solve_all(self._recon, self.tilt_map, self._systems, regularization)
        return download(absorption), download(phase)

    @property
    def chosen_regularization(self) -> float | None:
        """The value the latest :meth:`solve` chose automatically (None: it was given)."""
        return self._recon.chosen_regularization

    @property
    def tv_choice(self) -> TVStrengthChoice | None:
        """The TV strength the latest :meth:`solve` chose automatically (None: it was given)."""
        return self._recon.tv_choice


def _implied_tilt(params: PhaseParams) -> tuple[float, float]:
    """The one tilt ``params`` stand for without a map: the manual one, else none."""
    if params.tilt_mode == "manual":
        return float(params.tilt_zenith), float(params.tilt_azimuth)
    return 0.0, 0.0
