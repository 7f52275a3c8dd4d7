"""BaSiC flat-field parameters: the one list every part of the plugin uses."""

from __future__ import annotations

from typing import ClassVar

from ..params import Params, param

__all__ = ["APPLY_FIELDS", "DEFAULTS_NOTE", "OUTPUT_DTYPES", "BasicParams"]

OUTPUT_DTYPES = ("float32", "uint16", "same")
"""Types of a corrected image (``BasicParams.output_dtype``)."""

APPLY_FIELDS = ("timelapse_baseline", "clip_negative", "output_dtype")
"""The fields that only applying a profile reads (the fit ignores them)."""

DEFAULTS_NOTE = (
    "Defaults measured (docs/flatfield.md): at optimization_tol 1e-4, up to 25 reweighting "
    "passes and reweighting_tol 1e-3 the flatfield moves by 0.01 percentage points (RMS) when "
    "tightened to KINTSUGI's 500 / 1e-6 / 25 / 1e-3; BaSiCPy's 1e-3 / 10 / 1e-2 stops after "
    "2 passes, 2.8 points away from the converged flatfield."
)


class BasicParams(Params):
    """Parameters of a BaSiC shading fit (Peng et al. 2017, BaSiCPy 2.0 approximate mode).

    The model is ``image_n = baseline_n * flatfield + darkfield + foreground_n``, fitted on the
    stack shrunk to ``working_size`` pixels along its longer side (aspect ratio kept).

    The darkfield (camera offset and its spatial shape) is either estimated
    (``get_darkfield``, weakly identifiable: it needs images of different brightness), given as
    a constant ``camera_offset``, or given as a measured dark frame (the ``dark_frame``
    argument of :func:`fit_basic`); it is zero otherwise.

    The last three fields (:data:`APPLY_FIELDS`) say how a profile is applied
    (:func:`iter_apply_profile`, the dock's Apply, a batch run's correction); the fit ignores
    them. Their defaults are a float32 image ``(image - darkfield) / flatfield``, negative values
    kept, no baseline removed. Settings and recipes saved without them load with these defaults.

    Examples
    --------
    >>> p = BasicParams(get_darkfield=True)
    >>> BasicParams.from_json(p.to_json()) == p
    True
    >>> BasicParams(working_size=4)
    Traceback (most recent call last):
    ...
    napari_gpuscope.compute.params.ParameterError: BasicParams.working_size must be an ...
    >>> BasicParams.from_dict({"get_darkfield": True}).output_dtype  # saved before the field
    'float32'
    >>> BasicParams(output_dtype="int8")
    Traceback (most recent call last):
    ...
    napari_gpuscope.compute.params.ParameterError: BasicParams.output_dtype must be one of ...
    """

    method_id: ClassVar[str] = "flatfield"

    get_darkfield: bool = param(
        False,
        label="Estimate darkfield",
        help=(
            "Estimate the darkfield (camera offset + its smooth shape) from the data; needs "
            "images of different brightness, and is weakly determined: prefer a measured offset"
        ),
    )
    camera_offset: float | None = param(
        None,
        label="Camera offset",
        unit="ADU",
        minimum=-1e9,
        maximum=1e9,
        help=(
            "Constant darkfield (the camera's offset, e.g. 100): subtracted before the fit; "
            "None = no constant offset"
        ),
    )
    smoothness_flatfield: float | None = param(
        None,
        label="Flatfield smoothness",
        step=0.01,
        minimum=0.0,
        exclusive_minimum=True,
        maximum=1e6,
        help=(
            "L1 weight on the flatfield's DCT (larger = smoother); None = automatic "
            "(sum |DCT(mean image)| / 800, as BaSiCPy 2.0)"
        ),
    )
    smoothness_darkfield: float | None = param(
        None,
        label="Darkfield smoothness",
        step=0.001,
        minimum=0.0,
        exclusive_minimum=True,
        maximum=1e6,
        help="L1 weight on the darkfield's DCT; None = 0.1 x the flatfield smoothness",
    )
    sort_intensity: bool = param(
        False,
        label="Sort intensities",
        help=(
            "Sort every pixel's values over the images first (classic BaSiC); off by default: "
            "it made the flatfield worse on our test data"
        ),
    )
    working_size: int = param(
        128,
        label="Working size",
        unit="px",
        minimum=16,
        maximum=1024,
        advanced=True,
        help="The fit runs on images shrunk to this many pixels along their longer side",
    )
    max_iterations: int = param(
        500,
        label="Max. iterations",
        minimum=1,
        maximum=100000,
        advanced=True,
        help="Inner (ALM) iterations per reweighting pass at most",
    )
    optimization_tol: float = param(
        1e-4,
        label="ALM tolerance",
        step=1e-6,
        minimum=0.0,
        exclusive_minimum=True,
        maximum=1.0,
        advanced=True,
        help="An ALM pass stops when ||residual|| / ||images|| falls below this",
    )
    max_reweight_iterations: int = param(
        25,
        label="Reweighting passes",
        minimum=1,
        maximum=1000,
        advanced=True,
        help="Reweighting passes (each a full ALM) at most",
    )
    reweighting_tol: float = param(
        1e-3,
        label="Reweighting tolerance",
        step=1e-5,
        minimum=0.0,
        exclusive_minimum=True,
        maximum=1.0,
        advanced=True,
        help=(
            "Reweighting stops when the flatfield and the darkfield change by less than this "
            "(mean absolute change / mean absolute value)"
        ),
    )
    epsilon: float = param(
        0.1,
        minimum=0.0,
        exclusive_minimum=True,
        maximum=10.0,
        advanced=True,
        help="Reweighting: weight = 1 / (|relative residual| + epsilon)",
    )
    batch_axis: int | None = param(
        None,
        label="Independent axis",
        minimum=0,
        maximum=1,
        advanced=True,
        added_later=True,
        help=(
            "For 4D input: the axis of independent problems, each fitted on its own, all in "
            "one batch: 0 = (C, T, Y, X) channels, 1 = (T, Z, Y, X) z-planes; None = the "
            "input is one (T, Y, X) stack"
        ),
    )
    # -- applying a profile (the fit ignores these) ----------------------------------------
    timelapse_baseline: bool = param(
        False,
        label="Timelapse: remove frame baselines",
        help=(
            "Apply: also fit and subtract each frame's background level (photobleaching, "
            "drift), as BaSiCPy's is_timelapse transform; the result's background is about 0. "
            "Needs a stack of frames"
        ),
    )
    clip_negative: bool = param(
        False,
        label="Clip negative values at 0",
        help="Apply: set negative corrected values (background below the darkfield) to 0",
    )
    output_dtype: str = param(
        "float32",
        label="Output type",
        choices={"float32": "float32", "uint16": "uint16", "same": "same as input"},
        help=(
            "Apply: type of the corrected image. float32 keeps every value; uint16 rounds "
            "(half to even) and saturates at 0 and 65535; 'same' gives the input's type (an "
            "integer type rounded and saturated at its range, a float type converted)"
        ),
    )

    def validate(self) -> None:
        if self.get_darkfield and self.camera_offset is not None:
            self.fail(
                "camera_offset",
                "cannot be combined with get_darkfield=True: either estimate the darkfield or "
                "give the offset",
            )
        if self.smoothness_darkfield is not None and not self.get_darkfield:
            self.fail("smoothness_darkfield", "is only used with get_darkfield=True")

    @property
    def label(self) -> str:
        """Short text for layer names, e.g. ``"auto"`` or ``"λ=2.5, dark"``."""
        text = "auto" if self.smoothness_flatfield is None else f"λ={self.smoothness_flatfield:g}"
        if self.get_darkfield:
            text += ", dark"
        elif self.camera_offset is not None:
            text += f", offset {self.camera_offset:g}"
        return text
