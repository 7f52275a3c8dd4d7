"""eSRRF in batch runs: a recipe's ``drift_trace`` artifact corrects every position with it.

The batch runner (:mod:`napari_gpuscope.batch`) calls :meth:`RunHooks.prepare` once per run and
:meth:`RunHooks.job` once per position (``JobSpec.batch`` of eSRRF's ``run`` job names
:data:`batch_hooks`). Without artifacts a position runs the registry's job with the recipe's
parameters, exactly as before (drift estimated per position when ``drift_correction`` is on). A
recipe saved from the dock while it runs with a trace loaded from a file carries that trace as
its ``drift_trace`` artifact (a drift-trace CSV,
:meth:`~napari_gpuscope.compute.esrrf.DriftResult.to_csv`: ``(dy, dx)`` per frame in input
pixels, frame ``t`` showing frame 0's content moved by ``+(dy, dx)``); :meth:`RunHooks.prepare`
loads it once and every position is corrected with it, as the dock's run was
(``drift_shifts``). A position with another number of frames than the trace is refused, naming
the artifact; the other positions run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._types import ArrayLike
from ..jobs import Job
from ._params import EsrrfParams

if TYPE_CHECKING:  # imported when used: the registry and recipes load these hooks cheaply
    from ._channels import ChannelsResult
    from ._drift_result import DriftResult
    from ._stream import EsrrfResult

__all__ = ["DRIFT_TRACE_ARTIFACT", "PreparedTrace", "RunHooks", "batch_hooks"]

DRIFT_TRACE_ARTIFACT = "drift_trace"
"""Recipe artifact name of a drift-trace CSV (``frame, dy_px, dx_px``, or a unit's columns with
a ``# pixel_size`` line, as :func:`~napari_gpuscope.compute.esrrf.load_drift_trace` reads): the
``drift_shifts`` of every position (the dock's trace loaded from a file)."""


@dataclass(frozen=True)
class PreparedTrace:
    """The run's drift trace and the file it came from (named in refusals)."""

    trace: DriftResult
    file: str


def _load_trace(path: Path) -> DriftResult:
    from ._drift_result import DriftResult

    try:
        return DriftResult.from_csv(path)
    except (ValueError, OSError) as exc:
        raise ValueError(f"artifact {DRIFT_TRACE_ARTIFACT!r} ({Path(path).name}): {exc}") from None


def _frames(shape: Sequence[int], channel_axis: int | None) -> int | None:
    """Frames of a ``(T, Y, X)`` stack or of each channel of a 4D one; None otherwise (the job
    refuses the shape in its own words)."""
    if len(shape) == 3:
        return int(shape[0])
    if len(shape) == 4:
        axis = 0 if channel_axis is None else channel_axis
        return int(shape[1 - axis]) if axis in (0, 1) else None
    return None


class RunHooks:
    """The batch hooks of eSRRF's ``run`` job (:data:`batch_hooks`).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> import numpy as np
    >>> from napari_gpuscope.compute.esrrf import DriftResult
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> path = DriftResult.from_shifts(np.zeros((6, 2))).to_csv(folder / "trace.csv")
    >>> prepared = batch_hooks.prepare(
    ...     EsrrfParams(drift_correction=True), [], device="cpu", artifacts={"drift_trace": path}
    ... )
    >>> prepared.trace.shifts.shape, prepared.file
    ((6, 2), 'trace.csv')
    >>> stack = np.zeros((4, 16, 16), np.float32)
    >>> batch_hooks.job(stack, EsrrfParams(), prepared=prepared, device="cpu", cache_key="")
    Traceback (most recent call last):
    ...
    ValueError: artifact 'drift_trace' (trace.csv) has 6 frames but this position has 4: ...
    """

    @staticmethod
    def replaces_fit(names: set[str]) -> bool:
        """Always: :meth:`prepare` reads no position (it only loads the artifact), so the
        positions are neither screened nor fitted on, and ``validate`` makes each position's
        job with what it returns."""
        del names
        return True

    @staticmethod
    def check_artifact(name: str, path: Path) -> list[Path]:
        """Check an artifact when a recipe is made: only a ``drift_trace`` that loads as a
        drift-trace CSV; it is one file (no other files to pin).

        Examples
        --------
        >>> import pathlib, tempfile
        >>> text = pathlib.Path(tempfile.mkdtemp()) / "notes.txt"
        >>> _ = text.write_text("hello")
        >>> batch_hooks.check_artifact("profile", text)
        Traceback (most recent call last):
        ...
        ValueError: eSRRF's run takes only a 'drift_trace' artifact (a drift-trace CSV), ...
        """
        if name != DRIFT_TRACE_ARTIFACT:
            raise ValueError(
                f"eSRRF's run takes only a {DRIFT_TRACE_ARTIFACT!r} artifact (a drift-trace "
                f"CSV), not {name!r}"
            )
        _load_trace(path)
        return []

    @staticmethod
    def check_params(params: EsrrfParams, artifacts: Sequence[str]) -> None:
        """Refuse a recipe whose artifacts contradict its parameters: a ``drift_trace`` is the
        drift correction, so it needs ``drift_correction`` on (the dock sets it so).

        Examples
        --------
        >>> batch_hooks.check_params(EsrrfParams(drift_correction=False), ["drift_trace"])
        Traceback (most recent call last):
        ...
        ValueError: artifact 'drift_trace' cannot be combined with drift_correction=false: ...
        """
        unknown = sorted(set(artifacts) - {DRIFT_TRACE_ARTIFACT})
        if unknown:
            raise ValueError(
                f"eSRRF's run takes only a {DRIFT_TRACE_ARTIFACT!r} artifact, not "
                f"{', '.join(map(repr, unknown))}"
            )
        if DRIFT_TRACE_ARTIFACT in artifacts and not params.drift_correction:
            raise ValueError(
                f"artifact {DRIFT_TRACE_ARTIFACT!r} cannot be combined with "
                "drift_correction=false: the trace is the drift correction; valid: "
                f"drift_correction=true with a {DRIFT_TRACE_ARTIFACT!r} artifact, or no "
                f"{DRIFT_TRACE_ARTIFACT!r} artifact"
            )

    @staticmethod
    def prepare(
        params: EsrrfParams,
        tiles: Sequence[Callable[[], Any]],
        *,
        device: str,
        artifacts: Mapping[str, Path],
    ) -> PreparedTrace | None:
        """The recipe's drift trace, loaded once per run (None without a ``drift_trace``
        artifact: each position estimates its own drift when ``drift_correction`` is on)."""
        del tiles, device
        RunHooks.check_params(params, list(artifacts))
        if DRIFT_TRACE_ARTIFACT not in artifacts:
            return None
        path = Path(artifacts[DRIFT_TRACE_ARTIFACT])
        return PreparedTrace(_load_trace(path), path.name)

    @staticmethod
    def job(
        data: ArrayLike,
        params: EsrrfParams,
        *,
        prepared: PreparedTrace | None,
        device: str,
        cache_key: str,
        channel_axis: int | None = None,
    ) -> Job[EsrrfResult | ChannelsResult]:
        """One position's eSRRF job: the registry's, corrected with the recipe's trace when it
        has one (every channel of a 4D position with the same trace, as the dock does).

        Raises
        ------
        ValueError
            The trace holds another number of frames than the position.
        """
        from ._job import iter_esrrf

        del cache_key
        trace = None
        if prepared is not None:
            trace = prepared.trace
            frames = _frames(tuple(int(n) for n in data.shape), channel_axis)
            if frames is not None and trace.shifts.shape[0] != frames:
                raise ValueError(
                    f"artifact {DRIFT_TRACE_ARTIFACT!r} ({prepared.file}) has "
                    f"{trace.shifts.shape[0]} frames but this position has {frames}: a drift "
                    "trace is one (dy, dx) per frame of the stack it corrects; run this "
                    "position with its own trace, or with a recipe without the artifact "
                    "(its drift is then estimated)"
                )
        return iter_esrrf(
            data, params, device=device, drift_shifts=trace, channel_axis=channel_axis
        )


batch_hooks = RunHooks()
"""eSRRF's ``run`` job's batch hooks (``JobSpec.batch``)."""
