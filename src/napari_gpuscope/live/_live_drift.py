"""The drift of a live eSRRF session, tracked as its blocks of frames complete.

Offline, eSRRF's drift correction estimates the drift over the whole stack (blocks of frames,
each correlated with a reference, then a trace through them) before it reconstructs: a live
session cannot, since the frames after the current one do not exist yet. What it can do is say
how far the sample has moved so far, so that the microscopist sees a drift worth stopping for:
:class:`LiveDriftTrack` averages the frames into blocks of ``block`` frames as the session's
worker reads them and correlates each completed block with the first one, exactly as the
offline estimate with ``reference="first"`` measures a block (the same correlator, the same
noise spectra from the block's halves, the same significance test; a block that shares no
structure with the first is not measured). The track is the block shifts at the blocks'
centres, relative to the first block's centre; the offline trace, its ends extrapolated and its
origin at frame 0, is made once the stack is complete.

Memory: two frame-sized sums and the first block's spectra, whatever the number of frames.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is loaded when the first frame is added, not with the package
    import torch

    from ..compute._types import Device
    from ..compute.esrrf._drift_blocks import _BlockSums
    from ..compute.esrrf._drift_correlate import _Correlator

__all__ = ["DriftTrack", "LiveDriftTrack"]


@dataclass(frozen=True)
class DriftTrack:
    """The blocks completed so far.

    Attributes
    ----------
    block : int
        Frames per block.
    centres : ndarray, shape (B,)
        Each block's centre, in frames received (block ``k`` spans ``k * block`` to
        ``(k + 1) * block - 1``).
    shifts : ndarray, shape (B, 2)
        ``(dy, dx)`` in input pixels of each block relative to the first (NaN: not measured,
        the block shares no structure with the first, or it moved beyond ``max_drift``).
    """

    block: int
    centres: np.ndarray
    shifts: np.ndarray

    @property
    def measured(self) -> int:
        """Blocks whose shift was measured (the first, at 0, included once another is)."""
        return int(np.isfinite(self.shifts[:, 0]).sum())

    def summary(self) -> dict[str, object]:
        """JSON-able facts (provenance): block length, centres, shifts (None: not measured).

        Examples
        --------
        >>> DriftTrack(20, np.array([9.5, 29.5]), np.array([[0.0, 0.0], [np.nan, np.nan]])
        ...            ).summary()["shifts"]
        [[0.0, 0.0], [None, None]]
        """
        return {
            "frames_per_block": self.block,
            "block_centres": [float(c) for c in self.centres],
            "shifts": [[float(v) if np.isfinite(v) else None for v in s] for s in self.shifts],
            "reference": "first block",
        }

    def describe(self, unit: str = "px", pixel: float = 1.0) -> str:
        """One line for a status: the drift so far and the blocks it rests on.

        Examples
        --------
        >>> track = DriftTrack(20, np.array([9.5, 29.5, 49.5]),
        ...                    np.array([[0.0, 0.0], [0.3, -0.4], [0.6, -0.8]]))
        >>> track.describe()
        'drift so far 1 px (dy 0.6, dx -0.8) over 3 blocks of 20 frames'
        >>> track.describe("nm", 130.0)
        'drift so far 130 nm (dy 78, dx -104) over 3 blocks of 20 frames'
        """
        blocks = len(self.centres)
        if blocks < 2:
            return f"drift: waiting for 2 blocks of {self.block} frames"
        finite = np.isfinite(self.shifts[:, 0])
        if finite.sum() < 2:
            return f"drift: not measured (no block of {blocks} shares structure with the first)"
        dy, dx = self.shifts[np.flatnonzero(finite)[-1]] * pixel
        unmeasured = blocks - int(finite.sum())
        missed = f", {unmeasured} not measured" if unmeasured else ""
        return (
            f"drift so far {np.hypot(dy, dx):.3g} {unit} (dy {dy:.3g}, dx {dx:.3g}) over "
            f"{blocks} blocks of {self.block} frames{missed}"
        )


class LiveDriftTrack:
    """Block shifts measured as frames are added (see the module docstring).

    Parameters
    ----------
    block : int
        Frames per block (eSRRF's ``drift_time_averaging``; 50 when that is automatic).
    max_drift : float or None
        The largest shift searched, in input pixels (None: the whole frame).
    device : str or torch.device
        Where the sums and correlations run.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> scene = rng.poisson(50.0, (40, 40)).astype(float)
    >>> track = LiveDriftTrack(block=4, max_drift=None, device="cpu")
    >>> for t in range(12):  # the scene moves 1 px down per block of 4 frames
    ...     track.add(np.roll(scene, t // 4, axis=0)[None] + rng.normal(0, 1, (1, 40, 40)))
    >>> (np.round(track.track().shifts, 1) + 0.0).tolist()
    [[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]
    """

    def __init__(self, block: int, max_drift: float | None, device: Device) -> None:
        if block < 2:
            raise ValueError(f"a live drift track needs blocks of at least 2 frames, not {block}")
        self.block = int(block)
        self.max_drift = max_drift
        self.device = device
        self._lock = threading.Lock()
        self._shifts: list[np.ndarray] = []
        self._sums: _BlockSums | None = None
        self._correlator: _Correlator | None = None
        self._reference: tuple[torch.Tensor, torch.Tensor] | None = None
        self._first_measured = False

    def add(self, frames: np.ndarray) -> None:
        """Add ``(n, Y, X)`` frames in order; measures each block they complete."""
        import torch

        from ..compute.devices import resolve_device
        from ..compute.esrrf._drift_blocks import _BlockSums

        frames = np.asarray(frames)
        for frame in frames:
            if self._sums is None:
                device = resolve_device(self.device)
                self._sums = _BlockSums(frame.shape, device, middle=self.block // 2)
            sums = self._sums
            image = torch.as_tensor(np.asarray(frame, np.float64), device=sums.total.device)
            sums.total += image
            if sums.frames < sums.middle:
                sums.first_half += image
            sums.frames += 1
            if sums.frames == self.block:
                self._complete(sums)
                self._sums = _BlockSums(frame.shape, sums.total.device, middle=self.block // 2)

    def _complete(self, sums: _BlockSums) -> None:
        from ..compute.esrrf._drift_blocks import _noise_image
        from ..compute.esrrf._drift_correlate import _Correlator

        count = self.block
        mean = sums.total / count
        if self._correlator is None:
            height, width = mean.shape
            self._correlator = _Correlator(height, width, mean.device)
        correlator = self._correlator
        spectrum = correlator.spectrum(mean)
        noise = correlator.spectrum(_noise_image(sums, count))
        if self._reference is None:
            self._reference = (spectrum, noise)
            shift = np.full(2, np.nan)  # block 0 is at 0 once another block correlates with it
        else:
            shift, on_edge, significance = correlator.measure(
                mean, self._reference[0], self.max_drift, noise, self._reference[1]
            )
            if not significance >= 1.0 or on_edge:
                shift = np.full(2, np.nan)
            elif not self._first_measured:
                self._first_measured = True
        with self._lock:
            self._shifts.append(np.asarray(shift, np.float64))
            if self._first_measured:
                self._shifts[0] = np.zeros(2)

    def track(self) -> DriftTrack:
        """The blocks completed so far (thread-safe: the worker adds, a dock reads)."""
        with self._lock:
            shifts = np.array(self._shifts, np.float64).reshape(-1, 2)
        centres = np.arange(len(shifts)) * self.block + (self.block - 1) / 2
        return DriftTrack(self.block, centres, shifts)
