"""TV denoising parameters: the one list every part of the plugin uses."""

from __future__ import annotations

from typing import ClassVar

from ..geometry import MAX_SPACING, MIN_SPACING
from ..params import Params, param

__all__ = ["METHODS", "NOISE_MODELS", "TVParams"]

METHODS = ("fgp", "chambolle")
FLOAT32_MAX = 3.4028234663852886e38
"""float32's largest value: the largest weight (results are float32 in the input's units, which
reach it) and the largest magnitude an input may hold."""
NOISE_MODELS = ("gaussian", "poisson")


class TVParams(Params):
    """Parameters of total-variation (ROF) denoising.

    The smoothing weight is either given in the image's intensity units (``weight``) or, when
    ``weight`` is None, derived from the data: ``strength`` times the noise standard deviation
    estimated from the image (Gaussian model), or ``strength`` itself in Poisson mode, where the
    variance-stabilised noise has unit standard deviation. A strength therefore means the same
    amount of smoothing on any image, which is what a recipe applied to a whole experiment needs.

    Examples
    --------
    >>> p = TVParams(strength=1.5, spacing=(0.25, 1.0, 1.0))
    >>> TVParams.from_json(p.to_json()) == p
    True
    >>> TVParams(tolerance=-1)
    Traceback (most recent call last):
    ...
    napari_gpuscope.compute.params.ParameterError: TVParams.tolerance must be a finite ...
    """

    method_id: ClassVar[str] = "tv"

    weight: float | None = param(
        None,
        minimum=0.0,
        maximum=FLOAT32_MAX,
        help=(
            "TV weight in the image's intensity units (Anscombe units in Poisson mode); larger "
            "is smoother. None = strength x the estimated noise level"
        ),
    )
    strength: float = param(
        1.0,
        minimum=0.0,
        maximum=100.0,
        step=0.05,
        help=(
            "Smoothing as a multiple of the noise level estimated from the image (used when "
            "weight is None); 1 is a good start, 0.8-1.4 is usually best"
        ),
    )
    noise_model: str = param(
        "gaussian",
        label="Noise model",
        choices={"gaussian": "Gaussian", "poisson": "Poisson (photon counts)"},
        help=(
            "gaussian: noise of the same strength everywhere; poisson: photon-counting camera "
            "noise, variance-stabilised with the generalised Anscombe transform first"
        ),
    )
    gain: float | None = param(
        None,
        label="Camera gain",
        unit="ADU/photon",
        minimum=0.0,
        exclusive_minimum=True,
        maximum=1e6,
        help=(
            "Poisson mode: grey values per detected photon; None = estimate gain, offset and "
            "read noise"
        ),
    )
    offset: float | None = param(
        None,
        unit="ADU",
        minimum=-1e9,
        maximum=1e9,
        help="Poisson mode with a known gain: camera offset (grey value of a dark pixel); None = 0",
    )
    read_noise: float | None = param(
        None,
        label="Read noise",
        unit="ADU",
        minimum=0.0,
        maximum=1e6,
        help="Poisson mode with a known gain: read-noise standard deviation; None = 0",
    )
    spacing: tuple[float, ...] | None = param(
        None,
        minimum=0.0,
        maximum=MAX_SPACING,
        help=(
            "Difference weight per non-channel axis: x pixel size / step along that axis "
            f"(0 = axis not coupled, e.g. time; else {MIN_SPACING:g} to {MAX_SPACING:g}); "
            "None = 1 for every axis"
        ),
    )
    channel_axis: int | None = param(
        None,
        label="Channel axis",
        minimum=-5,
        maximum=4,
        advanced=True,
        help="Axis holding independent channels (each is denoised on its own); None = no channels",
    )
    method: str = param(
        "fgp",
        label="Solver",
        choices={"fgp": "FGP (fast)", "chambolle": "Chambolle (skimage)"},
        advanced=True,
        help=(
            "fgp: accelerated dual solver with a certified (duality-gap) stopping rule; "
            "chambolle: scikit-image's algorithm and stopping rule, for exact parity"
        ),
    )
    max_iterations: int = param(
        1000,
        label="Max iterations",
        minimum=1,
        maximum=1_000_000,
        advanced=True,
        help=(
            "Upper limit on solver iterations; FGP stops at the tolerance long before it (the "
            "samples need 110-490 iterations at strengths 1-3), so the limit only guards against "
            "slow cases. scikit-image's Chambolle default is 200"
        ),
    )
    tolerance: float = param(
        1e-3,
        minimum=0.0,
        maximum=0.5,
        step=1e-4,
        advanced=True,
        help=(
            "fgp: stop once the relative duality gap (a guaranteed bound on the distance to the "
            "exact solution's energy) is below this, 0 = run all iterations; chambolle: "
            "scikit-image's eps"
        ),
    )
    nonnegative: bool = param(
        False,
        label="Non-negative",
        advanced=True,
        help="Forbid negative intensities in the result (fluorescence counts cannot be negative)",
    )

    def validate(self) -> None:
        """Spacing weights are 0 or within the representable range; camera fields need a gain."""
        if self.spacing is not None:
            for index, s in enumerate(self.spacing):
                if s != 0 and not MIN_SPACING <= s <= MAX_SPACING:
                    self.fail(
                        f"spacing[{index}]",
                        f"must be 0 (not coupled) or within [{MIN_SPACING:g}, {MAX_SPACING:g}], "
                        f"got {s!r} (in {self.spacing!r})",
                    )
            if not any(self.spacing):
                self.fail(
                    "spacing",
                    f"has no coupled axis (all weights 0: {self.spacing!r}); at least one axis "
                    "must be smoothed",
                )
        if self.gain is None and (self.offset is not None or self.read_noise is not None):
            self.fail(
                "gain",
                "is None (estimate the whole camera model), so offset and read_noise must be "
                f"None too; got offset={self.offset!r}, read_noise={self.read_noise!r}",
            )

    @property
    def label(self) -> str:
        """The key parameter in a few characters, for layer names: ``"s=1.0"`` or ``"w=0.05"``."""
        if self.weight is not None:
            return f"w={self.weight:.3g}"
        return f"s={self.strength:g}"
