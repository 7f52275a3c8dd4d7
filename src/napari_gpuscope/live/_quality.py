"""A live eSRRF's quality track: its reconstruction measured every K frames, and the rule that
says when more frames stop helping ("acquire until good enough").

Each measurement (:class:`QualityPoint`) reads the running reconstruction of the frames
processed so far:

- its **decorrelation resolution** (Descloux et al. 2019,
  :func:`~napari_gpuscope.compute.esrrf.decorrelation_resolution`), with the finding when it
  gives none (no peak) or when it sits at the pixel grid's limit
  (:data:`~napari_gpuscope.compute.esrrf._resolution.PIXEL_LIMIT_PX`): on an eSRRF image it
  mostly measures the magnified pixel grid, as the offline measurement says;
- its **RSP error**, ``1 - RSP``: NanoJ-SQUIRREL's resolution-scaled Pearson correlation of
  the reconstruction (blurred by the Gaussian that best maps it onto the reference) with the
  widefield mean of the same frames (:func:`~napari_gpuscope.compute.esrrf._qnr.error_map`),
  the reference-free error of QnR. It falls as the reconstruction's noise averages out and
  levels off at what the reconstruction cannot explain of the data;
- its **noise part** (AVG only): how much of its correlation with anything noiseless its noise
  costs, from two disjoint halves of its frames (:mod:`._split_half`).

:class:`PlateauRule` reads the track: the estimated error against the truth (the noise part
on a floor estimated from the RSP error; or the RSP error itself) has improved by less than
``change`` (a fraction) over the last ``window`` measurements. :class:`QualityTrack` holds the
points thread-safely (the session's worker appends, a GUI or a script reads) and calls its callbacks
once when the rule fires (:class:`GoodEnough`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np

from ._plateau import ESTIMATED, GoodEnough, PlateauRule, QualityPoint, _number
from ._split_half import SPLIT_SIGMA_PER_RSP, SplitHalves

if TYPE_CHECKING:
    from ..compute._types import Device

__all__ = [
    "DEFAULT_MEASURE_EVERY",
    "MAX_SHARE",
    "GoodEnough",
    "PlateauRule",
    "QualityPoint",
    "QualityTrack",
    "load_measurement",
    "measure_quality",
]

DEFAULT_MEASURE_EVERY = 10
"""Frames processed between two measurements (see ``docs/live.md`` for the share of the
processing time it costs)."""

MAX_SHARE = 0.25
"""The most of a live eSRRF worker's time its measurements take by default: a GPU processes a
frame in about a millisecond, and one measurement of a large frame takes a good part of a
second (1.3 s at M 4 for a 512 x 512 frame on a 2-core CPU, 1.1 s of it the decorrelation;
on a GPU both parts run on the device, not yet timed there), so every 10 frames would make
the worker fall behind the camera."""

_RSP_INPUT_SIDE = 256
"""The RSP reads at most this many input pixels per side (the frame's centre): its fit blurs
the image some twenty times, and 256 pixels hold enough structure."""


def _centre(image: np.ndarray, side: int) -> np.ndarray:
    rows, cols = image.shape
    top, left = max(0, (rows - side) // 2), max(0, (cols - side) // 2)
    return image[top : top + side, left : left + side]


def load_measurement() -> None:
    """Import what a measurement uses (SciPy's optimizer...) before the worker's time counts:
    the first measurement would otherwise carry it against :attr:`QualityTrack.max_share`."""
    import scipy.ndimage  # noqa: F401  (the split halves' blur)

    from ..compute.esrrf import _decorr, _qnr, _resolution  # noqa: F401


def measure_quality(
    image: np.ndarray,
    widefield: np.ndarray,
    magnification: int,
    *,
    frames: int,
    timepoint: int = 0,
    device: Device = "cpu",
    halves: SplitHalves | None = None,
) -> QualityPoint:
    """Measure one reconstruction: its decorrelation resolution, its RSP error and (with
    ``halves``) its noise part.

    Parameters
    ----------
    image : numpy.ndarray
        The eSRRF reconstruction ``(Y M, X M)``.
    widefield : numpy.ndarray
        The mean of the frames it was made from ``(Y, X)``.
    magnification : int
        M.
    frames, timepoint : int
        What the point records.
    device : str or torch.device
        Where the decorrelation's spectra are computed.
    halves : SplitHalves, optional
        The session's split halves (an AVG reconstruction's): the block of frames since the
        previous measurement is added to them (the RSP's crop), and the point gets their noise
        part, compared at :data:`~._split_half.SPLIT_SIGMA_PER_RSP` of the RSP's fitted blur.

    Returns
    -------
    QualityPoint

    Examples
    --------
    >>> from scipy import ndimage
    >>> rng = np.random.default_rng(0)
    >>> truth = ndimage.gaussian_filter(rng.random((64, 64)), 2)
    >>> wide = truth.reshape(32, 2, 32, 2).mean(axis=(1, 3))
    >>> point = measure_quality(truth, wide, 2, frames=10)
    >>> point.frames, point.rsp_error < 0.05, point.seconds >= 0
    (10, True, True)
    """
    from ..compute.esrrf import decorrelation_resolution
    from ..compute.esrrf._qnr import error_map
    from ..compute.esrrf._resolution import DECORRELATION_SIDE, PIXEL_LIMIT_PX

    started = time.perf_counter()
    analysed = decorrelation_resolution(_centre(image, DECORRELATION_SIDE), device=device)
    value = float(analysed.resolution)
    if not math.isfinite(value):
        finding = "no peak"
    elif value < PIXEL_LIMIT_PX:
        finding = "limited by the pixel grid"
    else:
        finding = ""
    wide = _centre(widefield, _RSP_INPUT_SIDE)
    rows, cols = widefield.shape
    top, left = max(0, (rows - _RSP_INPUT_SIDE) // 2), max(0, (cols - _RSP_INPUT_SIDE) // 2)
    m = magnification
    sr = image[top * m : (top + wide.shape[0]) * m, left * m : (left + wide.shape[1]) * m]
    try:
        fitted = error_map(sr, wide, m, device=device)
        rsp_error, sigma = 1.0 - fitted.rsp, fitted.sigma
    except ValueError:  # a frame too small for the fit's border
        rsp_error = sigma = math.nan
    noise = math.nan
    if halves is not None:
        noise = halves.add(sr, frames, SPLIT_SIGMA_PER_RSP * sigma, device).noise
    return QualityPoint(
        frames=int(frames),
        timepoint=int(timepoint),
        resolution_px=value,
        finding=finding,
        rsp_error=float(rsp_error),
        seconds=time.perf_counter() - started,
        noise=float(noise),
    )


class QualityTrack:
    """The measurements of a live eSRRF session, read and written from any thread.

    Parameters
    ----------
    every : int
        Frames processed between two measurements (0: none).
    magnification : int
        M (to say output pixels in input pixels).
    split_half : bool
        Whether the points have a noise part (an AVG reconstruction's): the default rule
        reads the estimated error then, the RSP error otherwise (:meth:`default_rule`).

    Examples
    --------
    >>> track = QualityTrack(every=10, magnification=2)
    >>> fired = []
    >>> track.on_good_enough(fired.append)
    >>> track.watch(PlateauRule.rsp(change=0.05, window=1))
    >>> for frames, error in [(10, 0.2), (20, 0.1), (30, 0.099)]:
    ...     track.add(QualityPoint(frames, 0, 2.1, "limited by the pixel grid", error, 0.01))
    >>> [p.frames for p in track.points()], track.good_enough.frames, len(fired)
    ([10, 20, 30], 30, 1)
    """

    def __init__(
        self,
        every: int = DEFAULT_MEASURE_EVERY,
        magnification: int = 1,
        *,
        split_half: bool = False,
    ) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ValueError(f"measure_every must be an integer >= 0, got {every!r}")
        self.every = every
        self.magnification = magnification
        self.split_half = split_half
        self._lock = threading.Lock()
        self._points: list[QualityPoint] = []
        self._rule: PlateauRule | None = None
        self._good_enough: GoodEnough | None = None
        self._callbacks: list[Callable[[GoodEnough], None]] = []
        self.stop_when_good_enough = False
        self.callback_errors: list[BaseException] = []
        """What a callback raised (the worker goes on; a script reads them here)."""
        self.max_share: float | None = MAX_SHARE
        """The most of the worker's time the measurements may take: a measurement due while
        they have taken more is skipped (counted in :attr:`skipped`); None: never skipped."""
        self.skipped = 0
        """Measurements skipped to hold :attr:`max_share`."""

    def due(self, worker_seconds: float) -> bool:
        """Whether a measurement due now may run: the measurements so far have taken at most
        :attr:`max_share` of the worker's ``worker_seconds`` (its time since it started);
        counts a skipped one."""
        if self.max_share is None or self.seconds() <= self.max_share * worker_seconds:
            return True
        self.skipped += 1
        return False

    def default_rule(self) -> PlateauRule:
        """``good_enough=True``'s rule: on the estimated error when the points have a noise
        part (AVG), on the RSP error otherwise (VAR, TAC2)."""
        return PlateauRule() if self.split_half else PlateauRule.rsp()

    def watch(self, rule: PlateauRule | None, *, stop: bool = False) -> None:
        """Apply ``rule`` from the worker's next measurement on (None: no rule); ``stop``: the
        session stops (Stop & keep) when it fires. The points already measured count; the
        rule is evaluated in the worker only, so its callbacks never run in the caller's
        (a GUI's) thread. Another rule forgets when the previous one fired."""
        if rule is not None and rule.measure == ESTIMATED and not self.split_half:
            raise ValueError(
                "good_enough: the estimated error needs the reconstruction's split halves, "
                "which only a temporal AVG has; give live.PlateauRule.rsp() for VAR and TAC2"
            )
        with self._lock:
            if rule != self._rule:
                self._good_enough = None
            self._rule, self.stop_when_good_enough = rule, bool(stop and rule is not None)

    @property
    def rule(self) -> PlateauRule | None:
        """The rule applied (None: none)."""
        return self._rule

    def on_good_enough(self, callback: Callable[[GoodEnough], None]) -> None:
        """Call ``callback(good_enough)`` once, in the session's worker thread, when the rule
        fires (at once when it has fired already)."""
        with self._lock:
            self._callbacks.append(callback)
            fired = self._good_enough
        if fired is not None:
            self._call([callback], fired)

    def add(self, point: QualityPoint) -> None:
        """Append a measurement (the worker), then apply the rule."""
        with self._lock:
            self._points.append(point)
        self._check()

    def points(self) -> list[QualityPoint]:
        """The measurements so far, oldest first (a copy)."""
        with self._lock:
            return list(self._points)

    @property
    def good_enough(self) -> GoodEnough | None:
        """When the rule fired (None: not, or no rule)."""
        return self._good_enough

    def seconds(self) -> float:
        """Seconds spent measuring."""
        with self._lock:
            return sum(p.seconds for p in self._points)

    def summary(self) -> dict[str, Any]:
        """JSON-able facts for the result's provenance: every point, the rule, when it fired."""
        with self._lock:
            points, rule, fired = list(self._points), self._rule, self._good_enough
        return {
            "measure_every": self.every,
            "skipped": self.skipped,
            "track": [
                {
                    "frames": p.frames,
                    "timepoint": p.timepoint,
                    "resolution_px": _number(p.resolution_px),
                    "finding": p.finding,
                    "rsp_error": _number(p.rsp_error),
                    "noise": _number(p.noise),
                }
                for p in points
            ],
            "good_enough_rule": None if rule is None else asdict(rule) | {"words": rule.describe()},
            "good_enough": None if fired is None else fired.summary(),
        }

    def _check(self) -> None:
        with self._lock:
            rule, points = self._rule, self._points
            if rule is None or self._good_enough is not None or not points:
                return
            # A rolling session's time points each start again: the rule reads the newest one.
            current = rule.values([p for p in points if p.timepoint == points[-1].timepoint])
            if not rule.fires(current):
                return
            before = current[-1 - rule.window]
            fired = GoodEnough(points[-1].frames, rule, points[-1], before, current[-1])
            self._good_enough = fired
            callbacks = list(self._callbacks)
        self._call(callbacks, fired)

    def _call(self, callbacks: list[Callable[[GoodEnough], None]], fired: GoodEnough) -> None:
        for callback in callbacks:
            try:
                callback(fired)
            except Exception as error:  # a script's callback must not end the processing
                self.callback_errors.append(error)
