"""The figure's caption: what the results shown are, and where the shown plane lies.

One sentence per result a reader can see (a layer with a provenance record, not hidden under an
opaque layer): its kind ("eSRRF"), how many frames or planes of its input it was computed from
when it has fewer dimensions than its input ("of 100 frames"), its key parameters (the settings
its name carries), and the choices made automatically (the record's ``"automatic"`` mapping,
when it has one). Then the position of the shown plane on the axes not displayed, for the axes
the seen layers span only: a 2D reconstruction over all frames is not "t = 49 s".
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from napari_gpuscope.compute.results import split_result_name
from napari_gpuscope.export import _panels
from napari_gpuscope.export.lengths import pixel_of
from napari_gpuscope.provenance import AUTOMATIC_KEY, provenance_of

if TYPE_CHECKING:
    from napari.layers import Layer
    from napari.viewer import Viewer

__all__ = ["AUTOMATIC_KEY", "NOTE_KEY", "figure_caption", "plane_caption", "result_sentence"]

NOTE_KEY = "note"
"""Key of a provenance record's words about the result that the caption carries (e.g. the
demo's explanation of a darkfield below the truth)."""

_NOUNS = {"t": "frames", "time": "frames", "frame": "frames", "z": "planes", "tile": "tiles"}


def _input_layer(layer: Layer, layers: Sequence[Layer]) -> Layer | None:
    record = provenance_of(layer)
    return _input_layer_of(record, layers) if isinstance(record, dict) else None


def _input_layer_of(record: dict, layers: Sequence[Layer]) -> Layer | None:
    source = record.get("input")
    return next((other for other in layers if other.name == source), None)


def _frames_used(layer: Layer) -> int | None:
    """The frames the result says it used (``frames_analysed`` of its record's result facts):
    fewer than the input's after a stop, in a live session's result, or where the time points
    leave frames over."""
    record = provenance_of(layer)
    facts = record.get("result") if isinstance(record, dict) else None
    used = facts.get("frames_analysed") if isinstance(facts, dict) else None
    return used if isinstance(used, int) and not isinstance(used, bool) else None


def _frames(layer: Layer, layers: Sequence[Layer]) -> str:
    """ "of 100 frames" when the result collapsed an axis of its input (found in ``layers``);
    "of 40 of 100 frames" when it used fewer than the input holds."""
    source = _input_layer(layer, layers)
    used = _frames_used(layer)
    if source is None:
        return "" if used is None else f" of {used} frame{'' if used == 1 else 's'}"
    if source.ndim < layer.ndim or layer.ndim < 2:
        return ""
    kept = ""
    if source.ndim == layer.ndim:  # an axis kept but shortened: eSRRF's time points of frames
        axis, made = 0, int(np.shape(layer.data)[0])
        if layer.ndim < 3 or made >= int(np.shape(source.data)[0]):
            return ""
        kept = f" in {made} time points" if made > 1 else ""
    else:
        axis = source.ndim - layer.ndim - 1  # the input's axis just before the result's own
    count = int(source.data.shape[axis])
    labels = getattr(source, "axis_labels", None)
    label = str(labels[axis]).lower() if labels is not None and len(labels) > axis else ""
    noun = _NOUNS.get(label, "images")
    of = f"{used} of " if used is not None and used < count else ""
    return f" of {of}{count} {noun[:-1] if count == 1 else noun}{kept}"


_NAMED_CHOICE = re.compile(r"([^\s(\[,;]+)=auto (\S+?)(?=[\s,;)\]]|$)")
"""A setting chosen automatically as a layer name says it: ``reg=auto 0.0093``."""


def _said_by(key: str, value: str, named: str) -> bool:
    """Whether ``named`` says choice ``key`` = ``value``: a ``<label>=auto <value>`` with
    that exact value whose label begins ``key`` ("reg" for "regularization", "TV" for "TV
    strength")."""
    return any(
        number == value and key.lower().startswith(label.lower())
        for label, number in _NAMED_CHOICE.findall(named)
    )


def _automatic(record: dict, named: str = "") -> str:
    """The record's automatic choices ("; automatic: sensitivity 2"), but those ``named``
    already says ("reg=auto 0.0093" in the settings of a layer name).

    Examples
    --------
    >>> record = {"automatic": {"regularization": "0.01", "TV strength": "0.01"}}
    >>> _automatic(record, "phase (TV=auto 0.01)")
    '; automatic: regularization 0.01'
    >>> _automatic({"automatic": {"regularization": "0.001"}}, "phase (reg=auto 0.0012)")
    '; automatic: regularization 0.001'
    """
    choices = record.get(AUTOMATIC_KEY)
    if not isinstance(choices, dict) or not choices:
        return ""
    choices = {
        key: value for key, value in choices.items() if not _said_by(key, str(value), named)
    }
    if not choices:
        return ""
    return "; automatic: " + ", ".join(f"{key} {value}" for key, value in choices.items())


def _head(layer: Layer, record: dict, layers: Sequence[Layer]) -> str:
    """What one result layer is: its kind, the frames it used, its settings."""
    parts = split_result_name(layer.name)
    kind = parts[0] if parts is not None else str(record.get("method") or layer.name)
    settings = f" ({parts[2]})" if parts is not None and parts[2] else ""
    return f"{kind}{_frames(layer, layers)}{settings}"


_MARKS = {"Vectors": "arrows", "Points": "points", "Shapes": "shapes", "Tracks": "tracks"}


def _marks(layer: Layer) -> str:
    """What an annotation layer of a named result shows: "tilt shown by arrows"."""
    parts = split_result_name(layer.name)
    kind = parts[0] if parts is not None else layer.name
    return f"{kind} shown by {_MARKS.get(layer.__class__.__name__, 'marks')}"


def _resolution(record: dict, layers: Sequence[Layer]) -> str:
    """ "; resolution ≤ 304 nm (FRC)" when the run measured a valid resolution (its result's
    ``decorrelation`` headline, in output pixels: the input's pixel over the magnification,
    as the dock's status says it); nothing when none was valid (a pixel-limited
    decorrelation) or the input layer, whose pixel size it needs, is gone."""
    facts = record.get("result")
    measured = facts.get("decorrelation") if isinstance(facts, dict) else None
    head = measured.get("headline") if isinstance(measured, dict) else None
    parameters = record.get("parameters")
    m = parameters.get("magnification") if isinstance(parameters, dict) else None
    source = _input_layer_of(record, layers)
    if not isinstance(head, dict) or not isinstance(m, int | float) or m <= 0 or source is None:
        return ""
    # Here, not at the top: eSRRF's package loads torch, and the batch's status and validate
    # commands (which import export through the store's colours) must stay light.
    from napari_gpuscope.compute.esrrf._resolution import format_length

    physical = pixel_of(source)  # None: in pixels (napari's default unit), as the dock says
    if physical is None:
        length = format_length(float(head["output_px"]), None, "", "output")
    else:
        size, unit = physical
        length = format_length(float(head["output_px"]), size / float(m), unit, "output")
    bound = "≤ " if head.get("measure") == "FRC" and measured.get("frc_floor_limited") else ""
    return f"; resolution {bound}{length} ({head.get('measure')})"


def _note(record: dict) -> str:
    note = record.get(NOTE_KEY)
    return f". {note.strip().rstrip('.')}" if isinstance(note, str) and note.strip() else ""


def result_sentence(layer: Layer, layers: Sequence[Layer]) -> str:
    """What one result layer is: kind, frames used, key parameters and automatic choices.

    Parameters
    ----------
    layer : napari.layers.Layer
        A layer with a provenance record (``""`` for any other).
    layers : sequence of Layer
        The viewer's layers, where the result's input is looked up by name.

    Returns
    -------
    str

    Examples
    --------
    >>> from types import SimpleNamespace as L
    >>> import numpy as np
    >>> stack = L(name="cells", ndim=3, data=np.zeros((100, 4, 4)), axis_labels=("t", "y", "x"))
    >>> record = {"method": "esrrf", "input": "cells", "automatic": {"sensitivity": "2"}}
    >>> result = L(name="eSRRF · cells [mag=5]", ndim=2, metadata={"napari_gpuscope": record})
    >>> result_sentence(result, [stack, result])
    'eSRRF of 100 frames (mag=5); automatic: sensitivity 2'
    """
    record = provenance_of(layer)
    if not isinstance(record, dict):
        return ""
    head = _head(layer, record, layers)
    return f"{head}{_automatic(record, head)}{_note(record)}"


def _run_key(record: dict) -> str:
    """Which run a record comes from: its outputs' records differ at most by a note."""
    return json.dumps(
        {k: v for k, v in record.items() if k != NOTE_KEY}, sort_keys=True, default=str
    )


def _samples(layer: Layer, axis: int, ndim: int) -> int | None:
    """How many samples an image or labels layer has on world ``axis`` (None for others)."""
    shapes = getattr(layer, "level_shapes", None)
    if shapes is None or len(shapes) == 0:
        return None
    return int(shapes[0][axis - (ndim - layer.ndim)])


def plane_caption(viewer: Viewer, layers: Sequence[Layer]) -> str:
    """Where the shown plane lies on the axes not displayed that ``layers`` span with more than
    one sample, e.g. "z = 6.4 µm (index 16 of 32)", or "tile index 23 of 48" on an axis without
    unit or scale."""
    parts = []
    ndim = viewer.dims.ndim
    for position in _panels.slider_positions(viewer):
        spanning = [layer for layer in layers if position.axis >= ndim - layer.ndim]
        # A layer with one sample on the axis (eSRRF's single time point of all frames) shows
        # the same whatever the slider: where it stands says nothing about the picture.
        spanning = [layer for layer in spanning if _samples(layer, position.axis, ndim) != 1]
        if position.steps <= 1 or not spanning:
            continue
        unit = ""
        for layer in spanning:
            units = getattr(layer, "units", None)
            if units is not None:
                unit = f"{units[position.axis - (ndim - layer.ndim)]:~}"
                break
        unit = "" if unit in ("", "px", "pixel") else f" {unit}"  # napari's default: no unit
        if not unit and position.world == position.index:
            # A plain count (tiles, positions): "tile = 23 (index 23 of 48)" says it twice.
            parts.append(f"{position.label} index {position.index} of {position.steps}")
            continue
        parts.append(
            f"{position.label} = {position.world:.4g}{unit} "
            f"(index {position.index} of {position.steps})"
        )
    return ", ".join(parts)


def figure_caption(viewer: Viewer, seen: Sequence[Layer]) -> str:
    """The results' sentences, then the plane's position, joined by ". ".

    One sentence per run: the outputs of one run (eSRRF's image and widefield mean, BaSiC's
    flatfield, darkfield and corrected tiles) are named together, their automatic choices and
    note said once. Pictures come before annotations (top layer first, as the panel titles);
    an annotation carrying a picture's record (the phase's tilt arrows) adds what its marks
    show ("tilt shown by arrows"), not a sentence. Automatic choices the settings already say
    ("reg=auto 0.0093") are not repeated.
    """
    top_first = list(reversed(seen))
    ordered = [layer for layer in top_first if _panels.is_picture(layer)]
    ordered += [layer for layer in top_first if not _panels.is_picture(layer)]
    everything = list(viewer.layers)
    runs: dict[str, tuple[list[str], list[str], dict]] = {}  # key -> heads, notes, record
    for layer in ordered:
        record = provenance_of(layer)
        if not isinstance(record, dict):
            continue
        key = _run_key(record)
        heads, notes, _ = runs.setdefault(key, ([], [], record))
        if not _panels.is_picture(layer) and heads:
            # An annotation of a run already named: say what its marks are, once.
            head = _marks(layer)
        else:
            head = _head(layer, record, everything)
        if head not in heads:
            heads.append(head)
        note = _note(record)
        if note and note not in notes:
            notes.append(note)
    sentences, said = [], set()
    for heads, notes, record in runs.values():
        automatic = _automatic(record, ", ".join(heads))
        # A run that used another's choices (BaSiC's apply, with the fitted profile) repeats
        # them: said once, with the first run that made them.
        sentences.append(", ".join(heads) + ("" if automatic in said else automatic))
        sentences[-1] += _resolution(record, everything)
        sentences[-1] += "".join(notes)
        said.add(automatic)
    plane = plane_caption(viewer, seen)
    if plane and sentences:  # a sentence of its own ("... exact. tile index 24" read as a typo)
        plane = f"Plane shown: {plane}"
    return ". ".join([*sentences, *([plane] if plane else [])])
