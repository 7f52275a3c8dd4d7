"""eSRRF parameters: the one list every part of the plugin uses."""

from __future__ import annotations

from typing import ClassVar

from pydantic import field_validator

from ..params import Params, param
from ._drift_params import DriftParams

__all__ = ["DRIFT_FIELDS", "GEOMETRIES", "REGISTRATIONS", "TEMPORAL_MODES", "EsrrfParams"]

TEMPORAL_MODES = ("AVG", "VAR", "TAC2")
GEOMETRIES = ("nanopyx", "centred")
DRIFT_FIELDS = {
    "drift_reference": "reference",
    "drift_time_averaging": "time_averaging",
    "max_drift": "max_drift",
    "drift_smoothing": "smoothing",
}
"""eSRRF's drift fields -> the :class:`DriftParams` field each one is (declared there once)."""

class EsrrfParams(Params):
    """Parameters of enhanced super-resolution radial fluctuations (eSRRF).

    The defaults are NanoPyx's (``nanopyx.methods.eSRRF``): magnification 5, radius 1.5 input
    pixels, sensitivity 1, all frames in one time point, temporal average, intensity weighting
    and macro-pixel correction on.

    Examples
    --------
    >>> p = EsrrfParams(magnification=4, temporal="VAR")
    >>> EsrrfParams.from_json(p.to_json()) == p
    True
    >>> "drift_correction" in p.to_dict()  # added later: written once it differs
    False
    >>> EsrrfParams(radius=0)
    Traceback (most recent call last):
    ...
    napari_gpuscope.compute.params.ParameterError: EsrrfParams.radius must be ...
    """

    method_id: ClassVar[str] = "esrrf"

    magnification: int = param(
        5,
        minimum=1,
        maximum=10,
        help="Output pixels per input pixel along each axis (the output is M times larger)",
    )
    radius: float = param(
        1.5,
        unit="px",
        minimum=0.5,
        maximum=5.0,
        step=0.25,
        help=(
            "Radius of the gradient ring in input pixels; about the PSF's sigma x 2.355 / 2 "
            "(1-2 for a Nyquist-sampled widefield or TIRF image)"
        ),
    )
    sensitivity: float = param(
        1.0,
        minimum=0.0,
        maximum=10.0,
        step=0.5,
        help=(
            "Power applied to the radial gradient convergence when above 1 (sharper, fewer "
            "weak structures); values up to 1 leave it unchanged, as in NanoPyx"
        ),
    )
    frames_per_timepoint: int = param(
        0,
        label="Frames per time point",
        minimum=0,
        maximum=10_000_000,
        help="Frames combined into one reconstruction; 0 = all frames (one output image)",
    )
    temporal: str = param(
        "AVG",
        label="Temporal analysis",
        choices={
            "AVG": "AVG (mean)",
            "VAR": "VAR (variance)",
            "TAC2": "TAC2 (autocovariance)",
        },
        help=(
            "How the frames of one time point are combined: AVG is robust and linear; VAR and "
            "TAC2 reward fluctuations (sharper, less linear in brightness)"
        ),
    )
    intensity_weighting: bool = param(
        True,
        label="Intensity weighting",
        help="Multiply the gradient convergence by the magnified intensity",
    )
    macro_pixel_correction: bool = param(
        True,
        label="Macro-pixel correction",
        help=(
            "Divide each of the M x M sub-pixel positions by its mean, removing the grid pattern; "
            "values become dimensionless (mean about 1)"
        ),
    )
    geometry: str = param(
        "nanopyx",
        choices={"nanopyx": "NanoPyx (exact)", "centred": "Pixel-centred"},
        help=(
            "nanopyx: reproduce NanoPyx 2.1.5 exactly (its map sits half an input pixel off); "
            "centred: the same method on a pixel-centred grid, aligned with the input"
        ),
    )
    frame_gap: int = param(
        0,
        label="Rolling frame gap",
        minimum=0,
        maximum=10_000_000,
        advanced=True,
        help=(
            "0 = consecutive, non-overlapping time points (NanoPyx; a short last one is kept); "
            "> 0 = rolling analysis as in NanoJ: a time point of frames_per_timepoint frames "
            "starts every frame_gap frames, incomplete ones are dropped"
        ),
    )
    drift_correction: bool = param(
        False,
        label="Drift correction",
        help=(
            "Estimate the sample's drift over the whole stack (blocks of frames "
            "cross-correlated) and move every frame back before eSRRF"
        ),
        added_later=True,
    )
    channel_registration: str = param(
        "off",
        label="Register channels",
        choices={
            "off": "Off",
            "translation": "Translation",
            "elastic": "Elastic (per block)",
        },
        help=(
            "For (C, T, Y, X) input: align every channel to channel 0 before eSRRF, by a "
            "sub-pixel translation or an elastic per-block map (chromatic or field "
            "distortion), measured on the channels' means (drift-corrected with drift "
            "correction); no effect on a single (T, Y, X) stack"
        ),
        added_later=True,
    )
    measure_resolution: bool = param(
        False,
        label="Measure resolution",
        help=(
            "After the reconstruction, measure the first time point's resolution: the FRC of "
            "its even and odd frames (reconstructed again, about doubling the run's time) and "
            "the decorrelation (Descloux et al. 2019) of its eSRRF image, named as limited by "
            "the pixel grid when it is, and of its widefield mean (the central 1024 x 1024 "
            "pixels at most); recorded with the result"
        ),
        added_later=True,
    )
    # The drift estimate's options, declared once in DriftParams (see DRIFT_FIELDS).
    drift_reference: str = DriftParams.declaration(
        "reference", label="Drift reference", advanced=True, added_later=True
    )
    # Automatic since 2026-11-30; a record without the field was made with 50 frames.
    drift_time_averaging: int | None = DriftParams.declaration(
        "time_averaging", label="Frames per drift block", advanced=True, added_later=True,
        older_default=50,
    )  # fmt: skip
    max_drift: float | None = DriftParams.declaration("max_drift", advanced=True, added_later=True)
    drift_smoothing: float = DriftParams.declaration(
        "smoothing", label="Drift smoothing", advanced=True, added_later=True
    )

    @field_validator("drift_time_averaging", mode="before")
    @classmethod
    def _auto_is_none(cls, value: object) -> object:
        """``"auto"`` is ``None`` (automatic), as :class:`DriftParams` reads it."""
        return None if isinstance(value, str) and value.strip().lower() == "auto" else value

    def validate(self) -> None:
        """A rolling analysis needs a fixed number of frames per time point."""
        if self.frame_gap > 0 and self.frames_per_timepoint == 0:
            self.fail(
                "frame_gap",
                f"is {self.frame_gap} (rolling analysis), which needs frames_per_timepoint > 0 "
                "(how many frames each time point holds)",
            )

    def drift_params(self) -> DriftParams:
        """The drift estimation these parameters ask for.

        Examples
        --------
        >>> EsrrfParams(drift_time_averaging=20).drift_params().time_averaging
        20
        >>> EsrrfParams(drift_time_averaging="auto").drift_params().time_averaging is None
        True
        """
        return DriftParams(**{field: getattr(self, own) for own, field in DRIFT_FIELDS.items()})

    @property
    def label(self) -> str:
        """The key parameters in a few characters, for layer names: ``"M5 R1.5 S1"``."""
        text = f"M{self.magnification} R{self.radius:g} S{self.sensitivity:g}"
        if self.temporal != "AVG":
            text += f" {self.temporal}"
        return text


REGISTRATIONS = tuple(EsrrfParams.info("channel_registration").choices or ())
"""Channel registration choices (:attr:`EsrrfParams.channel_registration`)."""
