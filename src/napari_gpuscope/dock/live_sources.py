"""What a dock's Live part can follow, and where its images sit in the viewer.

The choices (:func:`source_choices`): each pymmcore-plus core of the session
(:func:`napari_gpuscope.live.session_cores`: registered by a script, or napari-micromanager's)
through its MDA or its continuous acquisition, and each 2D or 3D image layer (one that grows,
or a live view replaced image by image), and each folder chosen with "Folder..." that an
acquisition program writes TIFF files into (:class:`napari_gpuscope.live.FolderSource`). The
command line follows a folder too, position by position into a store
(``napari-gpuscope run RECIPE "folder/*.tif" --out OUT.zarr --watch``, ``docs/batch.md``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_gpuscope import live
from napari_gpuscope.compute.results import Geometry

if TYPE_CHECKING:
    import napari.layers

    from napari_gpuscope.live import Source

__all__ = [
    "CONTINUOUS",
    "FOLDER",
    "LAYER",
    "MDA",
    "SourceChoice",
    "channel_presets",
    "folder_label",
    "live_layer_geometry",
    "source_choices",
]

MDA, CONTINUOUS, LAYER, FOLDER = "mda", "continuous", "layer", "folder"
_TYX = ("t", "y", "x")


@dataclass(frozen=True)
class SourceChoice:
    """One thing a dock can follow.

    Attributes
    ----------
    label : str
        What the dock's list shows.
    kind : str
        :data:`MDA`, :data:`CONTINUOUS` (a core), :data:`LAYER` or :data:`FOLDER`.
    target : object
        The core, the layer or the folder's path.
    name : str
        The input's name in the result layers' names and provenance.
    channel : str or None
        The one channel of an MDA followed (a preset of the core's channel group).
    """

    label: str
    kind: str
    target: Any
    name: str
    channel: str | None = None

    def source(self) -> Source:
        """A new source over the target (one per session)."""
        if self.kind == CONTINUOUS:
            return live.ContinuousSource(self.target)
        if self.kind == MDA:
            return live.CoreSource(self.target, channel=self.channel)
        if self.kind == FOLDER:
            return live.FolderSource(self.target)
        return live.LayerSource(self.target)

    def geometry(self) -> Geometry:
        """The ``(T, Y, X)`` geometry of the frames: a layer's (a time axis of step 1 before a
        2D layer's), or a core's pixel size (µm) when it has one."""
        if self.kind == LAYER:
            geometry = Geometry.of_layer(self.target)
            if np.ndim(self.target.data) == 2 and geometry.scale is not None:
                geometry = Geometry(
                    scale=(1.0, *geometry.scale),
                    translate=None if geometry.translate is None else (0.0, *geometry.translate),
                )
            return geometry
        if self.kind == FOLDER:
            return Geometry(axis_labels=_TYX)  # the files' pixel size is not known before
        try:
            pixel = float(self.target.getPixelSizeUm())
        except Exception:  # a core without a pixel size configuration
            pixel = 0.0
        # Named axes: napari would label the kept results' time slider "-3".
        if pixel > 0:
            return Geometry(scale=(1.0, pixel, pixel), units=("", "µm", "µm"), axis_labels=_TYX)
        return Geometry(axis_labels=_TYX)


def source_choices(
    layers: Iterable[napari.layers.Layer],
    *,
    follows: Callable[[Any], bool] = bool,
    folders: Iterable[str] = (),
) -> list[SourceChoice]:
    """What a dock can follow now: every core of the session (its MDA, one channel of its MDA
    per preset of its channel group, its continuous acquisition), then the 2D and 3D image
    layers ``follows`` accepts (not the dock's own), then the ``folders`` chosen (TIFF files
    written into them).

    Examples
    --------
    >>> import napari.layers
    >>> layer = napari.layers.Image(np.zeros((2, 4, 4)), name="acquiring")
    >>> [c.label for c in source_choices([layer]) if c.kind == "layer"]
    ['layer: acquiring (grows)']
    """
    choices: list[SourceChoice] = []
    for name, core in live.session_cores().items():
        choices.append(SourceChoice(f"{name}: MDA", MDA, core, name))
        for channel in channel_presets(core):
            label = f"{name}: MDA, channel {channel}"
            choices.append(SourceChoice(label, MDA, core, f"{name} {channel}", channel))
        choices.append(
            SourceChoice(f"{name}: continuous acquisition", CONTINUOUS, core, f"{name} (live)")
        )
    for layer in layers:
        if type(layer).__name__ != "Image" or not follows(layer):
            continue
        ndim = np.ndim(layer.data)
        if ndim in (2, 3) and not getattr(layer, "rgb", False):
            how = "grows" if ndim == 3 else "new images"
            choices.append(SourceChoice(f"layer: {layer.name} ({how})", LAYER, layer, layer.name))
    folders = list(folders)
    names = [os.path.basename(os.path.normpath(folder)) or folder for folder in folders]
    for folder, name in zip(folders, names, strict=True):
        if names.count(name) > 1:  # day1/run and day2/run: told apart, results named so too
            parent = os.path.basename(os.path.dirname(os.path.normpath(folder)))
            name = f"{parent}/{name}"
        choices.append(SourceChoice(_folder_text(name), FOLDER, folder, name))
    return choices


def channel_presets(core: Any) -> list[str]:
    """The presets of ``core``'s channel group when it has several (an MDA may then acquire
    them interleaved, and a session follows one); none for a core without such a group."""
    try:
        group = core.getChannelGroup()
        presets = [str(preset) for preset in core.getAvailableConfigs(group)] if group else []
    except Exception:  # a core without configurations, or one not initialised
        return []
    return presets if len(presets) > 1 else []


def folder_label(folder: str) -> str:
    """What the list shows for a folder source (alone of its name: :func:`source_choices`
    adds the parent folder to two of one name).

    Examples
    --------
    >>> folder_label("/data/run 3/")
    'folder: run 3 (TIFF files)'
    >>> [c.label for c in source_choices([], folders=["/d/day1/run", "/d/day2/run"])]
    ['folder: day1/run (TIFF files)', 'folder: day2/run (TIFF files)']
    """
    return _folder_text(os.path.basename(os.path.normpath(folder)) or folder)


def _folder_text(name: str) -> str:
    return f"folder: {name} (TIFF files)"


def live_layer_geometry(
    geometry: Geometry, frame_shape: tuple[int, ...], image_shape: tuple[int, ...]
) -> dict[str, object]:
    """Layer kwargs placing a live image over the frames it came from: the image spans the
    frame's field (a magnified one has a finer scale), pixel centres aligned as the result
    layers align them (output pixel ``i`` is centred at input pixel ``(i + 0.5) / f - 0.5``).

    Examples
    --------
    >>> live_layer_geometry(Geometry(scale=(1.0, 2.0, 2.0)), (16, 16), (64, 64))
    {'scale': (0.5, 0.5), 'translate': (-0.75, -0.75)}
    """
    plane = geometry.trailing(2)
    scale = plane.scale or (1.0, 1.0)
    origin = plane.translate or (0.0, 0.0)
    out_scale, out_translate = [], []
    for step, start, before, after in zip(
        scale, origin, frame_shape[-2:], image_shape[-2:], strict=True
    ):
        factor = after / before
        out_scale.append(float(step / factor))
        out_translate.append(float(start + step * (0.5 / factor - 0.5)))
    kwargs: dict[str, object] = {"scale": tuple(out_scale), "translate": tuple(out_translate)}
    if plane.units is not None:
        kwargs["units"] = plane.units
    return kwargs
