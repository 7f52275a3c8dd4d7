"""The live flat-field fit: the registry's BaSiC fit job refitted over every tile received so
far, as a grid scan's tiles arrive (see :mod:`._methods`).

The worker keeps every tile (full size, in the camera's dtype) and runs the fit job over all of
them; when it ends, the next fit starts over every tile received by then (never one fit per
tile). Between the fit's reweighting passes it moves new tiles out of the session's buffer, so a
long fit does not make the buffer drop them. What the session shows is the flatfield of the
latest complete fit; its result is that fit's :class:`~napari_gpuscope.compute.flatfield.
ShadingProfile`, byte-equal on the CPU to the offline fit job over the same tiles.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from ._buffer import FrameBuffer
from ._live_method import Control, LiveMethod

if TYPE_CHECKING:
    from ..compute.flatfield import ShadingProfile

__all__ = ["MIN_TILES", "TILE_BYTES_LIMIT", "LiveFit"]

MIN_TILES = 10
"""Tiles a live fit waits for before its first fit. The job takes 2, but its error against the
true flatfield falls as about 1/sqrt(tiles) (the sample's structure averages out): on the
sample's tiles (64 x 64, seed 0, vignetting 19.6 % RMS, default parameters) 30 % at 2 tiles, 21 %
at 8, 18.9 % at 9, 16.6 % at 10, 15.5 % at 12, 10 % at 32 and 6 % at 64. Below about 10 tiles a
fit is hardly better than no correction."""

TILE_BYTES_LIMIT = 2 << 30
"""Host bytes of tiles a live fit keeps (2 GiB: 256 tiles of 2048 x 2048 uint16, 1024 of 1024 x
1024). A tile beyond it (or beyond ``max_frames``) is refused: the fit goes on over the tiles
kept, and the session says why."""


class _Tiles:
    """The first ``count`` tiles as the fit job reads a ``(T, Y, X)`` stack (a frame range at
    a time), without stacking them all again at every fit."""

    def __init__(self, tiles: list[np.ndarray], count: int) -> None:
        self._tiles = tiles[:count]  # the tiles appended later are not this fit's
        self.shape = (count, *tiles[0].shape)
        self.dtype = tiles[0].dtype
        self.ndim = 3

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, int):
            return self._tiles[key]
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError(f"live tiles are read in frame ranges, not {key!r}")
        return np.stack(self._tiles[key])


class LiveFit(LiveMethod):
    """Flat-field: a BaSiC profile refitted over all the tiles received so far.

    Parameters
    ----------
    *args
        :class:`LiveMethod`'s (the fit job, its :class:`BasicParams`, the device, the job's
        optional inputs: ``dark_frame``, and a ``(Y, X)`` ``fitting_weight``).
    max_frames : int, optional
        The most tiles kept (and fitted); further tiles are refused. At most what
        :data:`TILE_BYTES_LIMIT` holds.

    Notes
    -----
    - The first fit starts once :data:`MIN_TILES` tiles are kept; each later one as soon as
      the previous one ends, over every tile kept by then, when new tiles came.
    - ``latest()`` is the flatfield of the latest complete fit (its tile count is
      ``frames_processed``); ``partial_result()`` that fit's profile.
    - The acquisition's end (or ``finish()``) lets the running fit end, then fits once more
      over all the tiles when some came after it (from 2 tiles, the job's minimum, even
      below :data:`MIN_TILES`): the result is the fit over every tile kept.
    - Stop & keep closes the running fit at its next reweighting pass (at most one pass
      later: seconds on this project's loaded 2-core CPU, where a fit of 60 tiles at
      128 x 128 took 10 passes in 20-50 s) and keeps the latest
      complete fit, over fewer tiles: what the user has watched. Tiles kept after it are
      counted as pending.
    - The smoothness is the parameters' (a value, or automatic from each fit's tiles);
      autotune is not run live (17 fits at every refit): run it on the tiles afterwards.
    """

    def __init__(self, *args: Any, max_frames: int | None = None) -> None:
        super().__init__(*args)
        self._check_darkfield()
        self.max_frames = max_frames
        self.min_tiles = MIN_TILES
        self._tiles: list[np.ndarray] = []
        self._profile: ShadingProfile | None = None
        self._fitted = 0
        self._taken = 0
        """Kept frames moved out of the buffer (tiles, and those refused past the limit)."""
        self._lock = threading.Lock()
        self.fits = 0
        """Fits completed."""

    @property
    def tiles_kept(self) -> int:
        """Tiles held for the fits."""
        return len(self._tiles)

    def partial_result(self) -> ShadingProfile | None:
        with self._lock:
            return self._profile

    def run(self, buffer: FrameBuffer, control: Control) -> ShadingProfile | None:
        while not control.stopping():
            self._take(buffer)
            count = len(self._tiles)
            if count >= self.min_tiles and count > self._fitted:
                if not self._fit(buffer, control):
                    break  # stopped within the fit
                continue
            if not buffer.wait_for(self._taken + 1):
                # No tile will come: the last fit covers every tile kept (2, the job's
                # minimum, suffice at the end: the result is the offline fit's over them).
                if count > self._fitted and count >= 2 and not control.stopping():
                    self._fit(buffer, control)
                break
        return self.partial_result()

    # -- internals ----------------------------------------------------------------------------

    def _take(self, buffer: FrameBuffer) -> None:
        """Move every tile the buffer holds now into the tiles kept (never waits)."""
        start, stop = self._taken, buffer.kept
        if stop <= start:
            return
        frames = buffer.take(start, stop)
        buffer.release(stop)
        self._taken = stop
        if frames.ndim != 3:
            buffer.refuse(
                f"the live flat-field fit takes (Y, X) tiles, got frames of {frames.shape[1:]}",
                discarded=len(frames),
            )
            return
        if not self._tiles:
            self._check_inputs(frames.shape[1:])
        limit = self._limit(frames[0])
        room = max(0, limit - len(self._tiles))
        self._tiles.extend(np.array(frame) for frame in frames[:room])
        if len(frames) > room:
            reason = (
                f"the live flat-field fit keeps at most {limit} tiles of {frames[0].shape} "
                f"{frames[0].dtype} ({self._why_limit(frames[0])}); it fits the first {limit}. "
                "Start a new session for more, or fit the saved tiles offline"
            )
            buffer.refuse(reason, discarded=len(frames) - room)

    def _check_darkfield(self) -> None:
        """A dark frame is the darkfield: with an estimated one or a camera offset it is
        refused at attach (at Start in a dock), not by the first fit ten tiles later."""
        if self.inputs.get("dark_frame") is None:
            return
        offset = self.params.camera_offset
        conflicts = ["get_darkfield=True"] if self.params.get_darkfield else []
        conflicts += [] if offset is None else [f"camera_offset={offset:g}"]
        if conflicts:
            raise ValueError(
                f"the live fit's dark_frame cannot be combined with {' and '.join(conflicts)}: "
                "the dark frame is the darkfield (give no camera offset and no estimated "
                "darkfield with it, or no dark frame)"
            )

    def _check_inputs(self, tile: tuple[int, ...]) -> None:
        """A dark frame or a mask not of the tiles' shape ends the session at the first tile,
        in words, not at the first fit ten tiles later."""
        for name in ("dark_frame", "fitting_weight"):
            given = self.inputs.get(name)
            if given is not None and tuple(np.shape(given)) != tuple(tile):
                raise ValueError(
                    f"the live fit's {name} has shape {tuple(np.shape(given))}; the tiles are "
                    f"{tuple(tile)}: give a (Y, X) {name} of the tiles' shape"
                )

    def _limit(self, tile: np.ndarray) -> int:
        by_bytes = _by_bytes(tile)
        return by_bytes if self.max_frames is None else min(by_bytes, self.max_frames)

    def _why_limit(self, tile: np.ndarray) -> str:
        if self.max_frames is not None and self.max_frames <= _by_bytes(tile):
            return f"max_frames={self.max_frames}"
        return f"{TILE_BYTES_LIMIT / 2**30:g} GiB of host memory"

    def _fit(self, buffer: FrameBuffer, control: Control) -> bool:
        """One fit over every tile kept now; False when a stop closed it before it ended."""
        from ..compute.flatfield import broadcast_weight

        count = len(self._tiles)
        stack = _Tiles(self._tiles, count)
        inputs = dict(self.inputs)
        if inputs.get("fitting_weight") is not None:
            inputs["fitting_weight"] = broadcast_weight(inputs["fitting_weight"], stack.shape)
        job = self.function(stack, self.params, device=self.device, **inputs)
        try:
            while True:
                try:
                    next(job)
                except StopIteration as end:
                    profile = end.value
                    break
                self._take(buffer)  # between passes: a long fit does not fill the buffer
                if control.stopping():
                    return False
        finally:
            job.close()  # a stopped fit is discarded: its memory is released now
        with self._lock:
            self._profile = profile
        self._fitted, self.fits = count, self.fits + 1
        flatfield = np.asarray(profile.flatfield)
        self._show(flatfield, count)
        control.processed(count)
        return True


def _by_bytes(tile: np.ndarray) -> int:
    """Tiles like ``tile`` that :data:`TILE_BYTES_LIMIT` holds."""
    return max(1, TILE_BYTES_LIMIT // max(1, tile.nbytes))
