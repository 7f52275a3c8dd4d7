"""Parameters of drift estimation: the one list the API, the dock, the CLI and recipes use."""

from __future__ import annotations

from typing import ClassVar

from pydantic import field_validator

from ..params import Params, param

__all__ = ["DRIFT_REFERENCES", "DriftParams"]

DRIFT_REFERENCES = ("first", "previous", "mean")


class DriftParams(Params):
    """Parameters of drift estimation from a blinking (or any) time series.

    Consecutive frames are averaged into blocks of ``time_averaging`` frames (single blinking
    frames hold too few emitters to correlate), each block is cross-correlated with a reference,
    the correlation peak is refined to sub-pixel, and the block shifts are interpolated to every
    frame. NanoPyx's ``DriftEstimator`` works the same way (its ``ref_option`` 0 and 1 are
    ``"first"`` and ``"previous"``).

    Examples
    --------
    >>> p = DriftParams(reference="previous", time_averaging=50)
    >>> DriftParams.from_json(p.to_json()) == p
    True
    >>> DriftParams().time_averaging is None  # automatic by default: chosen per stack
    True
    >>> DriftParams(time_averaging="auto") == DriftParams()  # "auto" reads as None
    True
    >>> DriftParams(time_averaging=0)
    Traceback (most recent call last):
    ...
    napari_gpuscope.compute.params.ParameterError: DriftParams.time_averaging must be ...
    """

    method_id: ClassVar[str] = "esrrf"

    @field_validator("time_averaging", mode="before")
    @classmethod
    def _auto_is_none(cls, value: object) -> object:
        """``"auto"`` (the word the docs and the issue use) is ``None``, as stored."""
        return None if isinstance(value, str) and value.strip().lower() == "auto" else value

    reference: str = param(
        "first",
        choices={
            "first": "First block",
            "previous": "Previous block",
            "mean": "Mean of frames",
        },
        help=(
            "What each block is correlated with: the first block (no accumulated error), the "
            "previous block (follows a sample that changes; errors accumulate) or the mean of "
            "the other blocks, aligned by their shifts (2 to 5 more reads of the stack)"
        ),
    )
    time_averaging: int | None = param(
        None,
        label="Frames per block",
        minimum=1,
        maximum=10_000_000,
        help=(
            "Frames averaged into one block before correlating (one blinking frame holds too "
            "few emitters; more frames per block: less noise, slower drift followed); the "
            "stack needs at least two blocks. None (or \"auto\", the default) = automatic: the "
            "length of least estimated error, from the blocks' measured noise and the drift's "
            "curvature, measured in one more read of the stack (the result says the number; "
            "docs/esrrf.md)"
        ),
    )
    max_drift: float | None = param(
        None,
        label="Maximum drift",
        unit="px",
        minimum=0.5,
        maximum=10_000.0,
        help=(
            "Largest displacement (per axis, input pixels) to search for; a larger drift is an "
            "error. None = anything up to half the frame"
        ),
        advanced=True,
    )
    smoothing: float = param(
        0.0,
        unit="blocks",
        minimum=0.0,
        maximum=1000.0,
        step=0.5,
        help=(
            "Gaussian smoothing of the block shifts (sigma in blocks) before they are "
            "interpolated to every frame; 0 = none"
        ),
        advanced=True,
    )
