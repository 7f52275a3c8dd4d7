"""Frames from a folder an acquisition program writes TIFF files into (Micro-Manager's GUI, a
camera's own software): every file, once it has settled, handed on frame by frame."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ._sources import EndCallback, FrameCallback, join_poller

__all__ = ["FolderSource"]


class FolderSource:
    """The frames of the TIFF files written into a folder, in the order they settle.

    A file is read once it is readable and its size and time stamp have not changed for
    ``settle_s`` seconds (:class:`napari_gpuscope.batch.watch_positions.PositionWatcher`, which
    ``napari-gpuscope run --watch`` uses too); files that settle together go in name order. A
    ``(Y, X)`` file is one frame, a ``(T, Y, X)`` file its frames in order. A file that grows
    after it was read (a writer that paused longer than ``settle_s``) hands on its new frames
    only. A poller thread looks every ``poll_s`` seconds; the folder says nothing about the end
    of an acquisition, so the session ends with Stop & keep (or after ``idle_s`` seconds
    without a new frame, when given).

    Parameters
    ----------
    folder : str or Path
        The folder to follow.
    pattern : str
        The files to take (``"*.tif"``; ``"*.tif*"`` takes ``.tiff`` too).
    settle_s, poll_s : float
        See above.
    idle_s : float, optional
        End the session after this long without a new frame (None: never by itself).
    include_existing : bool
        Take the files already there (default); False: only files written from now on.

    Examples
    --------
    >>> import tempfile, numpy as np, tifffile
    >>> folder = Path(tempfile.mkdtemp())
    >>> tifffile.imwrite(folder / "a.tif", np.ones((2, 4, 4), np.uint16))
    >>> frames, ended = [], threading.Event()
    >>> source = FolderSource(folder, settle_s=0, poll_s=0.01, idle_s=0.2)
    >>> source.connect(frames.append, lambda error=None: ended.set())
    >>> ended.wait(10), [f.shape for f in frames]
    (True, [(4, 4), (4, 4)])
    >>> source.disconnect()
    """

    def __init__(
        self,
        folder: str | Path,
        pattern: str = "*.tif*",
        *,
        settle_s: float = 2.0,
        poll_s: float = 0.5,
        idle_s: float | None = None,
        include_existing: bool = True,
    ) -> None:
        folder = Path(folder)
        if not folder.is_dir():
            raise ValueError(
                f"folder {str(folder)!r} does not exist (give the folder a program writes TIFF "
                "files into)"
            )
        self.folder, self.pattern = folder, pattern
        self.name = folder.name or str(folder)
        self.settle_s, self.poll_s, self.idle_s = settle_s, poll_s, idle_s
        self.include_existing = include_existing
        self._sent: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def connect(self, on_frame: FrameCallback, on_end: EndCallback) -> None:
        from napari_gpuscope.batch.watch_positions import PositionWatcher

        # Every file is taken, whatever its name (pos.tif and pos.tiff are two files of frames).
        watcher = PositionWatcher(
            [str(self.folder / self.pattern)], settle_s=self.settle_s, by_name=False
        )
        if not self.include_existing:  # what is there now counts as handed on
            for path in sorted(self.folder.glob(self.pattern)):
                with contextlib.suppress(OSError, ValueError, IndexError):
                    self._sent[os.path.abspath(path)] = _frames_in(str(path))
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._poll,
            args=(watcher, on_frame, on_end),
            name="napari-gpuscope-live-folder",
            daemon=True,
        )
        self._thread.start()

    def disconnect(self) -> None:
        self._stop.set()  # the poller ends at its next look; the session's detach joins it

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the poller thread to end; True when it has (or
        never started). Never from the poller itself (its ``on_end``), which is returning."""
        return join_poller(self._thread, timeout)

    def expected_frames(self) -> int | None:
        return None

    def _poll(self, watcher: Any, on_frame: FrameCallback, on_end: EndCallback) -> None:
        import time

        last = time.monotonic()
        try:
            while not self._stop.is_set():
                for position in watcher.poll():
                    if self._hand_on(position.path, on_frame):
                        last = time.monotonic()
                if self.idle_s is not None and time.monotonic() - last >= self.idle_s:
                    break
                self._stop.wait(self.poll_s)
        except Exception as error:  # an unreadable file: the session ends with its reason
            if not self._stop.is_set():
                on_end(error)
            return
        if not self._stop.is_set():
            on_end()

    def _hand_on(self, path: str, on_frame: FrameCallback) -> bool:
        """Hand on the file's frames not handed on before; whether there were any."""
        path = os.path.abspath(path)
        start = self._sent.get(path, 0)
        frames = _frames_from(path, start)
        for frame in frames:
            if self._stop.is_set():
                break
            on_frame(np.ascontiguousarray(frame))
            start += 1
        handed = start > self._sent.get(path, 0)
        self._sent[path] = start
        return handed


def _frames_from(path: str, start: int) -> np.ndarray:
    """The file's frames from ``start`` on, as ``(n, Y, X)``: only their pages are read when
    a frame is a page (a file that grew is not read again from its start)."""
    import tifffile

    with tifffile.TiffFile(path) as tif:
        series = tif.series[0]
        shape = tuple(series.shape)
        if len(shape) not in (2, 3):
            raise ValueError(
                f"{Path(path).name} has shape {shape}; a folder source takes (Y, X) or "
                "(T, Y, X) TIFF files"
            )
        count = 1 if len(shape) == 2 else shape[0]
        plane = shape[-2:]
        if start >= count:
            return np.empty((0, *plane), series.dtype)
        if len(shape) == 3 and start > 0 and len(series.pages) == count:
            frames = tif.asarray(key=range(start, count), series=0)
            return np.asarray(frames).reshape(count - start, *plane)
        return np.asarray(series.asarray()).reshape(count, *plane)[start:]


def _frames_in(path: str) -> int:
    import tifffile

    with tifffile.TiffFile(path) as tif:
        shape = tif.series[0].shape
    return 1 if len(shape) == 2 else int(shape[0])
