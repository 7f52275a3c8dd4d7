"""Sources of frames: a pymmcore-plus core's acquisition, a napari image layer that grows, or
frames pushed by a script.

A source connects one callback that hands each new frame to the session (``on_frame``, which
copies it and returns at once) and one that says no more frames will come (``on_end``), and
undoes both in :meth:`disconnect`. Neither callback processes anything: the acquisition's
thread (or napari's) only pays for a copy.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

__all__ = ["CoreSource", "FrameFeed", "LayerSource", "Source", "as_source"]

FrameCallback = Callable[[Any], object]


class EndCallback(Protocol):
    """What a source calls when no more frames will come: with the error that stopped it when
    the source itself failed (a core that raised while its frames were read)."""

    def __call__(self, error: BaseException | None = None) -> object: ...


class Source(Protocol):
    """What a live session needs of a source of frames."""

    name: str

    def connect(self, on_frame: FrameCallback, on_end: EndCallback) -> None:
        """Start handing frames to ``on_frame``; call ``on_end`` when no more will come
        (``on_end(error)`` when the source failed)."""

    def disconnect(self) -> None:
        """Undo :meth:`connect`: no callback of the session stays connected."""

    def expected_frames(self) -> int | None:
        """How many frames the acquisition will deliver, when known (None otherwise)."""


class CoreSource:
    """The frames of a pymmcore-plus core's multi-dimensional acquisitions (MDA).

    Connects to ``core.mda.events.frameReady`` (every frame of an MDA, in order, on the
    acquisition's thread) and ``sequenceFinished`` (also after a cancelled MDA). The callback
    copies the frame into the session's bounded buffer and returns: the processing happens in
    the session's worker, so the acquisition never waits for it (what
    ``mda_listeners_connected(..., asynchronous=True)`` achieves with an unbounded relay queue
    and a thread per sequence, which a detach in the middle of an MDA could not end).

    Parameters
    ----------
    core : pymmcore_plus.CMMCorePlus
        A ``CMMCorePlus`` or ``UniMMCore``.
    end_with_sequence : bool
        End the session when the MDA finishes (default). False: the session takes the frames
        of several MDAs until :meth:`~napari_gpuscope.live.LiveSession.finish`.
    channel : str, optional
        Follow this channel (its preset's name, e.g. ``"FITC"``) of an MDA that acquires
        several: the other channels' frames are not handed on. Without it an MDA of several
        channels is refused when it starts (their frames come interleaved, and no method may
        mix them: an eSRRF would add both channels into one image).

    Examples
    --------
    >>> source = CoreSource(core, channel="FITC")  # doctest: +SKIP
    >>> session = live.attach(source, "esrrf", device="cuda:0")  # doctest: +SKIP
    """

    def __init__(
        self, core: Any, *, end_with_sequence: bool = True, channel: str | None = None
    ) -> None:
        self.core = core
        self.channel = channel
        self.name = "core" if channel is None else f"core {channel}"
        self.end_with_sequence = end_with_sequence
        self._events = core.mda.events
        self._on_frame: FrameCallback | None = None
        self._on_end: EndCallback | None = None
        self._expected: int | None = None
        self._stack: tuple[int, Callable[[str], object]] | None = None

    def expect_stacks(self, slices: int, refuse: Callable[[str], object]) -> None:
        """The session takes units of ``slices`` frames (1: single frames; more: z-stacks).
        An MDA that does not deliver them is refused with ``refuse(reason)`` when it starts:
        several channels when none is chosen (or not the channel chosen), and for z-stacks
        frames that are not such stacks one after the other (z not the innermost axis, another
        number of slices)."""
        self._stack = (slices, refuse)

    def connect(self, on_frame: FrameCallback, on_end: EndCallback) -> None:
        self._on_frame, self._on_end = on_frame, on_end
        self._events.sequenceStarted.connect(self._started)
        self._events.frameReady.connect(self._frame)
        self._events.sequenceFinished.connect(self._finished)

    def disconnect(self) -> None:
        for signal, slot in (
            (self._events.sequenceStarted, self._started),
            (self._events.frameReady, self._frame),
            (self._events.sequenceFinished, self._finished),
        ):
            _disconnect(signal, slot)
        self._on_frame = self._on_end = None

    def expected_frames(self) -> int | None:
        return self._expected

    def _started(self, sequence: Any, *_: Any) -> None:
        try:
            self._expected = sum(1 for event in sequence if self._follows(event))
        except (TypeError, ValueError):  # an open-ended sequence
            self._expected = None
        if self._stack is None:
            return
        slices, refuse = self._stack
        problem = channel_problem(sequence, self.channel)
        if problem is None and slices > 1:
            problem = stack_order_problem(sequence, slices)
            if problem is None and self.channel is not None:
                # The channel's own events: a channel without a z plan (do_stack=False) or
                # acquired every other time point gets no stacks of its own.
                zs = [dict(event.index).get("z") for event in sequence if self._follows(event)]
                if zs != list(range(slices)) * (len(zs) // slices) or not zs:
                    problem = (
                        f"channel {self.channel!r}'s frames are not z-stacks of {slices} "
                        f"slices one after the other (its z positions {zs[: 2 * slices]}...): "
                        "follow a channel acquired with the z plan at every time point"
                    )
        if problem is not None:
            refuse(problem)

    def _follows(self, event: Any) -> bool:
        if self.channel is None:
            return True
        channel = getattr(event, "channel", None)
        return channel is not None and getattr(channel, "config", None) == self.channel

    def _frame(self, image: Any, event: Any = None, *_: Any) -> None:
        callback = self._on_frame
        if callback is not None and (event is None or self._follows(event)):
            callback(image)

    def _finished(self, *_: Any) -> None:
        callback = self._on_end
        if callback is not None and self.end_with_sequence:
            callback()


class LayerSource:
    """The frames a napari image layer gains.

    Listens to ``layer.events.data``. A ``(T, Y, X)`` layer whose data is replaced by a longer
    stack (or appended to in place, then the event emitted) hands on the frames beyond those
    already seen; a ``(Y, X)`` layer whose data is replaced hands on each new image as a frame
    (a live view). The frames the layer holds when the session attaches are handed on first
    (``include_existing``). The layer says nothing about the end of an acquisition: call
    :meth:`~napari_gpuscope.live.LiveSession.finish` when it is over.

    Parameters
    ----------
    layer : napari.layers.Image
        The layer (napari's layer model; no Qt is needed).
    include_existing : bool
        Hand on the frames already in the layer first (default True).
    """

    def __init__(self, layer: Any, *, include_existing: bool = True) -> None:
        self.layer = layer
        self.name = str(getattr(layer, "name", "layer"))
        self.include_existing = include_existing
        self._on_frame: FrameCallback | None = None
        self._seen = 0

    def connect(self, on_frame: FrameCallback, on_end: EndCallback) -> None:
        del on_end  # a layer has no end of acquisition
        self._on_frame = on_frame
        data = self.layer.data
        if np.ndim(data) == 2:
            self._seen = 0
            if self.include_existing:
                on_frame(np.asarray(data))
        else:
            self._seen = 0 if self.include_existing else int(data.shape[0])
            self._hand_on(data)
        self.layer.events.data.connect(self._changed)

    def disconnect(self) -> None:
        self.layer.events.data.disconnect(self._changed)
        self._on_frame = None

    def expected_frames(self) -> int | None:
        return None

    def _changed(self, event: Any = None) -> None:
        del event
        data = self.layer.data
        callback = self._on_frame
        if callback is None:
            return
        if np.ndim(data) == 2:
            callback(np.asarray(data))
            return
        self._hand_on(data)

    def _hand_on(self, data: Any) -> None:
        callback = self._on_frame
        if callback is None:
            return
        if np.ndim(data) != 3:
            raise ValueError(
                f"layer {self.name!r} has {np.ndim(data)} dimensions {tuple(data.shape)}; a live "
                "session follows a (T, Y, X) stack or a (Y, X) image"
            )
        total = int(data.shape[0])
        if total < self._seen:
            # The stack was replaced by a shorter one: a new acquisition; take it from its start.
            self._seen = 0
        for index in range(self._seen, total):
            callback(np.asarray(data[index]))
        self._seen = total


class FrameFeed:
    """Frames handed on by a script (or a test): :meth:`push` each one, then :meth:`end`.

    Examples
    --------
    >>> feed = FrameFeed()
    >>> got = []
    >>> feed.connect(got.append, lambda: got.append("end"))
    >>> feed.push(np.zeros((2, 2))); feed.end()
    >>> len(got), got[-1]
    (2, 'end')
    """

    def __init__(self, name: str = "frames", expected: int | None = None) -> None:
        self.name = name
        self._expected = expected
        self._on_frame: FrameCallback | None = None
        self._on_end: EndCallback | None = None

    def connect(self, on_frame: FrameCallback, on_end: EndCallback) -> None:
        self._on_frame, self._on_end = on_frame, on_end

    def disconnect(self) -> None:
        self._on_frame = self._on_end = None

    def expected_frames(self) -> int | None:
        return self._expected

    def push(self, frame: Any) -> None:
        """Hand on one frame (dropped when the session's buffer is full)."""
        if self._on_frame is not None:
            self._on_frame(frame)

    def end(self) -> None:
        """No more frames."""
        if self._on_end is not None:
            self._on_end()


def as_source(source: object) -> Source:
    """``source`` as a :class:`Source`: one already, a pymmcore-plus core (it has
    ``mda.events.frameReady``) or a napari image layer (it has ``events.data`` and ``data``)."""
    if all(hasattr(source, name) for name in ("connect", "disconnect", "expected_frames")):
        return source  # type: ignore[no-any-return]
    mda = getattr(source, "mda", None)
    if mda is not None and hasattr(getattr(mda, "events", None), "frameReady"):
        return CoreSource(source)
    events = getattr(source, "events", None)
    if events is not None and hasattr(events, "data") and hasattr(source, "data"):
        return LayerSource(source)
    raise TypeError(
        f"cannot attach to {type(source).__name__}: give a pymmcore-plus core (CMMCorePlus, "
        "UniMMCore), a napari image layer, or a napari_gpuscope.live.FrameFeed"
    )


def channel_problem(sequence: Any, channel: str | None) -> str | None:
    """Why an MDA's frames are not one channel's (None when they are): several channels and
    none chosen, or a ``channel`` the MDA does not acquire.

    Examples
    --------
    >>> import useq
    >>> two = useq.MDASequence(channels=["DAPI", "FITC"], time_plan={"interval": 0, "loops": 2})
    >>> channel_problem(two, "FITC") is None
    True
    >>> print(channel_problem(two, None))  # doctest: +ELLIPSIS
    the MDA acquires 2 channels (DAPI, FITC), their frames interleaved: a live session follows ...
    """
    names = list(dict.fromkeys(str(c.config) for c in getattr(sequence, "channels", ()) or ()))
    if channel is None:
        if len(names) <= 1:
            return None
        return (
            f"the MDA acquires {len(names)} channels ({', '.join(names)}), their frames "
            "interleaved: a live session follows one channel, so choose it (the Live list has "
            "an entry per channel of the core's channel group; a script: "
            f"live.CoreSource(core, channel={names[0]!r}))"
        )
    if channel in names:
        return None
    acquired = f"channels {', '.join(names)}" if names else "no channel plan"
    return (
        f"the session follows channel {channel!r}, but the MDA acquires {acquired}: follow "
        + ("one of those" if names else "the MDA without choosing a channel")
    )


def stack_order_problem(sequence: Any, slices: int) -> str | None:
    """Why an MDA's frames are not z-stacks of ``slices`` slices one after the other (None
    when they are): z must be the innermost axis the sequence uses, with ``slices`` positions
    (channels inside z are let through: a session follows one channel, whose own frames
    :class:`CoreSource` checks)."""
    sizes = {str(getattr(k, "value", k)): int(v) for k, v in dict(sequence.sizes).items()}
    order = [str(getattr(a, "value", a)) for a in sequence.axis_order]
    used = [axis for axis in order if sizes.get(axis, 0) > 1 and axis != "c"]
    z = sizes.get("z", 0)
    if z == slices and used and used[-1] == "z":
        return None
    axes = "".join(used) or "none"
    seen = (
        f"the MDA's frames are not z-stacks of {slices} slices one after the other (its axes "
        f"{axes}, {z} z positions)"
    )
    if z <= 1:
        return f"{seen}: a live session of z-stacks follows an MDA with a z plan"
    if used[-1] != "z":
        return f"{seen}: z must be the MDA's innermost axis (its axis order ending in z)"
    return f"{seen}: the slices per stack (frames_per_stack) must be its {z} z positions"


def join_poller(thread: threading.Thread | None, timeout: float | None) -> bool:
    """Wait up to ``timeout`` seconds for a source's own thread to end; True when it has (or
    never started). Never waits on itself: the thread's own ``on_end`` is returning anyway."""
    if thread is None or thread is threading.current_thread():
        return True
    thread.join(timeout)
    return not thread.is_alive()


def _disconnect(signal: Any, slot: Callable[..., object]) -> None:
    """Disconnect ``slot`` from a core's signal, psygnal's or Qt's (pymmcore-plus uses Qt's
    signals when a Qt application runs, as in napari), and never fail on one already gone."""
    try:
        signal.disconnect(slot, missing_ok=True)  # psygnal
    except TypeError:  # Qt's disconnect takes no keywords, and raises when not connected
        with contextlib.suppress(TypeError, RuntimeError):
            signal.disconnect(slot)
