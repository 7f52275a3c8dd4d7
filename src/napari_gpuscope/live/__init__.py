"""Live processing: a method's job applied to the frames of a microscope while it acquires.

``session = live.attach(source, method, params, device=...)`` connects a source of frames (a
pymmcore-plus core's MDA, its continuous acquisition (:class:`ContinuousSource`), a napari
image layer that grows, a folder TIFF files are written into (:class:`FolderSource`), a
:class:`FrameFeed`) to a registered method's job. The source's
callback copies each frame into a bounded buffer and returns at once; one worker thread runs
the job on the frames kept; a frame that arrives while the worker is ``capacity`` frames
behind is dropped and counted (:data:`DROP_POLICIES`). The session's ``result()`` is the
offline job's result type over the frames processed, byte-equal on the CPU to the offline job
over the same frames (``tests/live``). See ``docs/live.md``.

:func:`register_core` offers a script's core to the docks' Live part (:func:`session_cores`
lists what they offer). A live eSRRF measures its reconstruction every K frames
(:class:`QualityTrack`), can say when more frames stop helping (:class:`PlateauRule`,
``session.on_good_enough``) and tracks the drift as blocks of frames complete
(:class:`DriftTrack`, ``session.drift_track()``). A live flat-field fit (:class:`LiveFit`)
refits a BaSiC profile over the tiles received so far, from :data:`MIN_TILES` tiles on. A
multi-channel MDA is followed one channel at a time (``CoreSource(core, channel=...)``). No Qt
and no GUI toolkit: the layer source uses napari's layer model and its events only.
pymmcore-plus is needed only to attach to a core (the ``[live]`` extra).
"""

from ._buffer import DROP_POLICIES, FrameBuffer
from ._continuous import ContinuousSource
from ._cores import register_core, session_cores, unregister_core
from ._folder import FolderSource
from ._live_drift import DriftTrack, LiveDriftTrack
from ._live_fit import MIN_TILES, TILE_BYTES_LIMIT, LiveFit
from ._methods import LIVE_JOBS, LiveMethod, live_method
from ._quality import (
    DEFAULT_MEASURE_EVERY,
    MAX_SHARE,
    GoodEnough,
    PlateauRule,
    QualityPoint,
    QualityTrack,
)
from ._session import DEFAULT_CAPACITY, LiveSession, attach
from ._sources import CoreSource, FrameFeed, LayerSource, Source, as_source

__all__ = [
    "DEFAULT_CAPACITY",
    "DEFAULT_MEASURE_EVERY",
    "DROP_POLICIES",
    "LIVE_JOBS",
    "MAX_SHARE",
    "MIN_TILES",
    "TILE_BYTES_LIMIT",
    "ContinuousSource",
    "CoreSource",
    "DriftTrack",
    "FolderSource",
    "FrameBuffer",
    "FrameFeed",
    "GoodEnough",
    "LayerSource",
    "LiveDriftTrack",
    "LiveFit",
    "LiveMethod",
    "LiveSession",
    "PlateauRule",
    "QualityPoint",
    "QualityTrack",
    "Source",
    "as_source",
    "attach",
    "live_method",
    "register_core",
    "session_cores",
    "unregister_core",
]
