"""Phase-from-brightfield parameters: the one list every part of the plugin uses."""

from __future__ import annotations

import math
import warnings
from typing import ClassVar

from pydantic import field_validator

from ..params import Params, param

__all__ = [
    "OPTIMIZERS",
    "TILT_MODES",
    "TILT_REGULARIZATION",
    "Z_ORDERS",
    "PhaseParams",
    "PhaseWarning",
]

TILT_MODES = ("none", "manual", "global", "tiles")
Z_ORDERS = ("descending", "ascending")
OPTIMIZERS = ("nadam", "newton")
REGULARIZERS = ("tikhonov", "tv")
TILT_REGULARIZATION = 1e-3
"""The tilt estimate's Tikhonov strength when the regularization is automatic (the default of
the fixed value before "auto"; the tilt estimates were validated with it)."""
MAX_UNIT_RATIO = 50.0
"""Largest ratio between two lengths (pixel size, z step, wavelength) before we conclude that
they are not in the same unit: a 20x/0.55 stack has pixel/z-step ~0.3 and wavelength/pixel ~1.5;
mixing um and nm gives a factor 1000."""


class PhaseWarning(UserWarning):
    """Parameters that are valid but probably not what the user meant."""


class PhaseParams(Params):
    """Parameters of tilt-corrected 2D quantitative phase from a brightfield z-stack.

    The model is waveorder's ``isotropic_thin_3d`` (weak-object transfer functions of a thin
    sample imaged through focus with partially coherent, possibly tilted illumination). All
    lengths are in the same unit (micrometres are assumed in labels).

    Tilt convention: the illumination direction is ``(sin z cos a, sin z sin a, cos z)`` in
    ``(x, y, z)`` with ``z = tilt_zenith`` and ``a = tilt_azimuth`` measured from +x (columns)
    toward +y (rows), in the forward model's convention, for slice 0 at the most positive z
    (``z_order="descending"``). waveorder's *fitted* azimuths equal ours + pi
    (:func:`~napari_gpuscope.compute.phase.azimuth_from_waveorder`).

    Examples
    --------
    >>> p = PhaseParams(wavelength=0.45, yx_pixel_size=0.325, z_pixel_size=1.0,
    ...                 na_illumination=0.4, na_detection=0.55, index_of_refraction=1.0)
    >>> PhaseParams.from_json(p.to_json()) == p
    True
    >>> PhaseParams().regularization is None  # automatic by default; "auto" reads as None
    True
    >>> PhaseParams(regularization="auto") == PhaseParams()
    True
    >>> PhaseParams(regularizer="tv").tv_strength is None  # the TV strength too
    True
    >>> PhaseParams(na_detection=1.5, index_of_refraction=1.33)
    Traceback (most recent call last):
    ...
    napari_gpuscope.compute.params.ParameterError: PhaseParams.na_detection ...
    """

    method_id: ClassVar[str] = "phase"

    @field_validator("regularization", "tv_strength", mode="before")
    @classmethod
    def _auto_is_none(cls, value: object) -> object:
        """``"auto"`` (the word the docs and recipes use) is ``None``, as stored."""
        return None if isinstance(value, str) and value.strip().lower() == "auto" else value

    wavelength: float = param(
        0.532,
        unit="µm",
        minimum=0.0,
        exclusive_minimum=True,
        maximum=1e4,
        step=0.001,
        help="Illumination wavelength in vacuum (same unit as the pixel size)",
    )
    na_illumination: float = param(
        0.9,
        label="Illumination NA",
        minimum=0.0,
        exclusive_minimum=True,
        maximum=2.0,
        step=0.01,
        help=(
            "Condenser numerical aperture; below the detection NA (above it is clamped to "
            "0.9 x detection NA, as waveorder does, with a warning)"
        ),
    )
    na_detection: float = param(
        1.2,
        label="Detection NA",
        minimum=0.0,
        exclusive_minimum=True,
        maximum=2.0,
        step=0.01,
        help="Objective numerical aperture; at most the refractive index",
    )
    index_of_refraction: float = param(
        1.3,
        label="Refractive index",
        minimum=1.0,
        maximum=2.0,
        step=0.01,
        help="Refractive index of the immersion/sample medium",
    )
    yx_pixel_size: float = param(
        0.1,
        label="Pixel size",
        unit="µm",
        minimum=0.0,
        exclusive_minimum=True,
        maximum=1e4,
        step=0.001,
        help="Pixel size in the sample plane (camera pixel / magnification)",
    )
    z_pixel_size: float = param(
        0.25,
        label="Z step",
        unit="µm",
        minimum=0.0,
        exclusive_minimum=True,
        maximum=1e4,
        step=0.01,
        help="Distance between slices of the stack",
    )
    z_order: str = param(
        "descending",
        label="Z order",
        choices={
            "descending": "slice 0 on top",
            "ascending": "slice 0 at bottom",
        },
        help=(
            "Which way the stack runs: slice 0 on top = the first slice is the highest z "
            "(waveorder's order), at bottom = the lowest; the wrong order flips the sign of the "
            "phase and mirrors the tilt azimuth"
        ),
    )
    z_focus_offset: float = param(
        0.0,
        label="Focus offset",
        unit="slices",
        minimum=-1000.0,
        maximum=1000.0,
        step=0.1,
        help="Position of the focal plane relative to the middle slice, in slices",
    )
    regularization: float | None = param(
        None,
        minimum=0.0,
        exclusive_minimum=True,
        maximum=1e3,
        step=1e-4,
        help=(
            "Tikhonov strength: larger is smoother and less noisy, smaller is sharper. None "
            '(or "auto", the default) = chosen per stack: the value whose phase has the '
            "largest estimated correlation with the true phase, from the data's noise measured "
            "by the fit (the result says the number); a number (e.g. 1e-3, the default before "
            '"auto") fixes it. The tilt estimate uses 1e-3 when it is automatic'
        ),
    )
    tilt_mode: str = param(
        "manual",
        label="Tilt",
        choices={
            "none": "none",
            "manual": "manual",
            "global": "estimate (global)",
            "tiles": "estimate per tile",
        },
        help=(
            "Illumination tilt: none; the given zenith and azimuth; or estimated from the data, "
            "once for the field (global) or per tile of a grid"
        ),
    )
    tilt_zenith: float = param(
        0.0,
        label="Tilt zenith",
        unit="rad",
        minimum=-math.pi / 2,
        maximum=math.pi / 2,
        step=0.01,
        help="Angle of the illumination axis from the optical axis (manual mode; start value)",
    )
    tilt_azimuth: float = param(
        0.0,
        label="Tilt azimuth",
        unit="rad",
        minimum=-4 * math.pi,
        maximum=4 * math.pi,
        step=0.05,
        help="Direction of the tilt from +x toward +y (forward-model convention)",
    )
    tiles_y: int = param(
        4, label="Tiles (y)", minimum=1, maximum=64, help="Tile rows of the per-tile tilt map"
    )
    tiles_x: int = param(
        4, label="Tiles (x)", minimum=1, maximum=64, help="Tile columns of the per-tile tilt map"
    )
    tile_overlap: float = param(
        0.25,
        minimum=0.0,
        maximum=0.75,
        step=0.05,
        advanced=True,
        help="Overlap of neighbouring tiles as a fraction of the tile size (blended smoothly)",
    )
    iterations: int = param(
        200,  # a cap: the estimate stops once converged (NAdam ~20-35, Newton ~7-11 on samples)
        minimum=1,
        maximum=10_000,
        advanced=True,
        help="Most optimiser iterations of the tilt estimate (it stops once converged)",
    )
    optimizer: str = param(
        "nadam",
        choices={"nadam": "NAdam", "newton": "damped Newton"},
        advanced=True,
        help="Tilt optimiser: NAdam (robust) or a damped diagonal Newton step (fewer iterations)",
    )
    tilt_loss: str = param(
        "residual",
        label="Tilt loss",
        choices={"residual": "model misfit", "midband": "midband power"},
        advanced=True,
        help=(
            "What the tilt estimate minimises: the misfit of the model to the data (unbiased), "
            "or waveorder's midband power of the phase (over-estimates small tilts)"
        ),
    )
    lr_zenith: float = param(
        0.02,
        label="Step zenith",
        unit="rad",
        minimum=0.0,
        maximum=1.0,
        step=0.005,
        advanced=True,
        help="NAdam learning rate of the zenith; 0 freezes it",
    )
    lr_azimuth: float = param(
        0.2,
        label="Step azimuth",
        unit="rad",
        minimum=0.0,
        maximum=5.0,
        step=0.01,
        advanced=True,
        help="NAdam learning rate of the azimuth; 0 freezes it",
    )
    lr_focus: float = param(
        0.0,
        label="Step focus",
        unit="slices",
        minimum=0.0,
        maximum=10.0,
        step=0.01,
        advanced=True,
        help="NAdam learning rate of the per-tile focus offset; 0 (default) freezes it",
    )
    invert_phase_contrast: bool = param(
        False,
        advanced=True,
        help="Negate the z positions (a stack recorded with the opposite focus convention)",
    )
    regularizer: str = param(
        "tikhonov",
        choices={"tikhonov": "Tikhonov", "tv": "TV (ADMM)"},
        advanced=True,
        help="Tikhonov: one closed-form solve; TV: edge-preserving, iterative (slower)",
    )
    tv_strength: float | None = param(
        None,
        label="TV strength",
        minimum=0.0,
        exclusive_minimum=True,
        maximum=10.0,
        step=1e-4,
        advanced=True,
        help=(
            "TV weight on the phase (regularizer='tv'), in radians of phase per unit gradient. "
            'None (or "auto", the default) = chosen per stack: the weight whose fit to the data '
            "is as close as the true phase's would be at the noise the fit measures "
            "(discrepancy principle; the result says the number); a number (e.g. 1e-3, the "
            'default before "auto") fixes it'
        ),
    )
    tv_iterations: int = param(
        15,
        label="TV iterations",
        minimum=1,
        maximum=1000,
        advanced=True,
        help=(
            "ADMM iterations of the TV-regularised phase (regularizer='tv'): each is one "
            "closed-form solve and one TV step, all on the device; more is closer to the exact "
            "TV solution"
        ),
    )

    def validate(self) -> None:
        """NAs within the refractive index; lengths in one unit; warn on NA_ill > NA_det."""
        n = self.index_of_refraction
        for name in ("na_detection", "na_illumination"):
            if getattr(self, name) > n:
                self.fail(
                    name,
                    f"({getattr(self, name):g}) must not exceed the refractive index "
                    f"index_of_refraction={n:g}: an NA above n is not physical",
                )
        pairs = (
            ("yx_pixel_size", "z_pixel_size"),
            ("wavelength", "yx_pixel_size"),
        )
        for a, b in pairs:
            ratio = getattr(self, a) / getattr(self, b)
            if not 1 / MAX_UNIT_RATIO <= ratio <= MAX_UNIT_RATIO:
                self.fail(
                    a,
                    f"({getattr(self, a):g}) and {b} ({getattr(self, b):g}) differ by a factor "
                    f"{max(ratio, 1 / ratio):.3g}: are they in the same unit? Give all lengths "
                    "(wavelength, pixel size, z step) in micrometres",
                )
        if self.na_illumination >= self.na_detection:
            warnings.warn(
                f"PhaseParams: na_illumination ({self.na_illumination:g}) >= na_detection "
                f"({self.na_detection:g}) gives almost no phase contrast; the model uses "
                f"0.9 x na_detection = {0.9 * self.na_detection:g} instead (as waveorder does)",
                PhaseWarning,
                stacklevel=4,
            )

    @property
    def effective_na_illumination(self) -> float:
        """The illumination NA the model uses (clamped below the detection NA)."""
        if self.na_illumination >= self.na_detection:
            return 0.9 * self.na_detection
        return self.na_illumination

    @property
    def label(self) -> str:
        """The key parameter in a few characters, for layer names: ``"reg=0.001"``."""
        if self.regularizer == "tv":
            return "TV=auto" if self.tv_strength is None else f"TV={self.tv_strength:.2g}"
        if self.regularization is None:
            return "reg=auto"
        return f"reg={self.regularization:.2g}"

    @property
    def tilt_regularization(self) -> float:
        """The Tikhonov strength of the tilt estimate: the given one, or
        :data:`TILT_REGULARIZATION` when it is automatic (the tilt's loss is evaluated at
        every optimiser step, where no selection runs)."""
        return TILT_REGULARIZATION if self.regularization is None else self.regularization
