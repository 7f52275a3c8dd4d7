"""The batch output: an OME-Zarr store with one image group per position, and its markers.

``OUT.zarr/<position>/`` is an OME-Zarr image (NGFF 0.5 on zarr v3) whose full-resolution
array is ``0``; the multiscales metadata is written by ome-zarr-py
(:func:`ome_zarr.writer.write_multiscales_metadata`), the recipe and the provenance under the
group attribute ``"napari_gpuscope"``. Further result layers of a position (methods with
several outputs) are image groups ``OUT.zarr/<position>/extra/<name>/``. A task owns its
position's group outright: it deletes whatever an interrupted attempt left there (a torn write)
and writes it anew, so no two tasks ever write into one chunk.

Completion markers live beside the store, in ``OUT.zarr.batch/``:

``run.json``
    The recipe (YAML), its hash and every position with its identity, written by the driver
    before any task starts (``status`` reads it).
``done/<position>.json``
    Written by the task *after* its group is complete (groups are written under a temporary
    name ``OUT.zarr/.writing-*`` and renamed into place), atomically (write, then rename); holds
    the marker key (hash of the recipe hash and the input's identity), timings and the summary.
``failed/<position>.json``
    The reason a position failed (removed when it later succeeds).

``--resume`` skips exactly the positions whose ``done`` marker has the current key and whose
group exists; everything else is computed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ATTRIBUTE", "BatchStore", "marker_key"]

ATTRIBUTE = "napari_gpuscope"
"""The namespaced group attribute holding the recipe and provenance of each position."""


def marker_key(recipe_hash: str, identity: str) -> str:
    """The completion marker's key: SHA-256 of the recipe hash and the input's identity."""
    return hashlib.sha256(f"{recipe_hash}\n{identity}".encode()).hexdigest()


def _write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(data, stream, indent=2, sort_keys=True, default=str)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)  # a reader sees the old marker or the whole new one
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class BatchStore:
    """One batch output and its markers (see the module docstring).

    Parameters
    ----------
    out : str or Path
        The OME-Zarr store, e.g. ``"results.zarr"``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> store = BatchStore(pathlib.Path(tempfile.mkdtemp()) / "out.zarr")
    >>> store.markers.name
    'out.zarr.batch'
    """

    def __init__(self, out: str | os.PathLike[str]) -> None:
        self.out = Path(out)
        self.markers = self.out.with_name(self.out.name + ".batch")

    # ---------------------------------------------------------------- driver side
    def prepare(self, run: dict[str, Any], *, overwrite: bool = False) -> None:
        """Create the store and write ``run.json``; ``overwrite`` first deletes every earlier
        output and marker."""
        import zarr

        if overwrite:
            shutil.rmtree(self.out, ignore_errors=True)
            shutil.rmtree(self.markers, ignore_errors=True)
        zarr.open_group(str(self.out), mode="a", zarr_format=3)
        _write_json_atomic(self.markers / "run.json", run)

    def run_record(self) -> dict[str, Any] | None:
        """The last run's ``run.json`` (None when the store was never run)."""
        path = self.markers / "run.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def done_record(self, name: str) -> dict[str, Any] | None:
        """A position's completion marker, or None."""
        return self._read(self.markers / "done" / f"{name}.json")

    def failed_record(self, name: str) -> dict[str, Any] | None:
        """A position's failure record, or None."""
        return self._read(self.markers / "failed" / f"{name}.json")

    def is_complete(self, name: str, key: str) -> bool:
        """Whether ``name`` is done with this marker key and its group exists."""
        record = self.done_record(name)
        return (
            record is not None
            and record.get("key") == key
            and (self.out / name / "zarr.json").is_file()
        )

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None  # missing, or unreadable: treated as not done

    # ---------------------------------------------------------------- task side
    def discard(self, name: str) -> None:
        """Forget a position before computing it: its marker, then whatever group is there."""
        (self.markers / "done" / f"{name}.json").unlink(missing_ok=True)
        shutil.rmtree(self.out / name, ignore_errors=True)

    def write_position(
        self, name: str, layers: list[tuple[Any, dict[str, Any], str]], attrs: dict[str, Any]
    ) -> list[str]:
        """Write a position's image layers as OME-Zarr image groups; returns their paths.

        The group is written under a temporary name and renamed into place, so
        ``OUT.zarr/<name>`` is always absent or complete, even when a cancelled attempt that
        is still running elsewhere writes the same position.
        """
        import zarr

        images = [layer for layer in layers if layer[2] == "image"]
        if not images:
            raise ValueError("the method returned no image layer to write")
        others = [
            f"{layer[1].get('name', '')} ({layer[2]})" for layer in layers if layer[2] != "image"
        ]
        if others:  # e.g. vectors: not an OME-Zarr image; say so rather than drop them silently
            attrs = {**attrs, "layers_not_written": others}
        staging = self.out / f".writing-{name}-{uuid.uuid4().hex[:12]}"
        written = [name]
        try:
            group = zarr.open_group(str(staging), mode="w", zarr_format=3)
            _write_image(group, images[0], attrs)
            for index, layer in enumerate(images[1:], start=1):
                label = safe_label(layer[1].get("name", ""), index)
                child = group.require_group("extra").create_group(label, overwrite=True)
                _write_image(child, layer, attrs)
                written.append(f"{name}/extra/{label}")
            self._move_into_place(staging, self.out / name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return written

    @staticmethod
    def _move_into_place(staging: Path, final: Path) -> None:
        for _ in range(3):  # another attempt may put its (identical) group there in between
            shutil.rmtree(final, ignore_errors=True)
            try:
                os.rename(staging, final)
                return
            except OSError:
                continue
        raise OSError(f"could not move the written group into place at {final}")

    def mark_done(self, name: str, record: dict[str, Any]) -> None:
        """Write the completion marker (after the group is complete); clear a failure."""
        _write_json_atomic(self.markers / "done" / f"{name}.json", record)
        (self.markers / "failed" / f"{name}.json").unlink(missing_ok=True)

    def mark_failed(self, name: str, record: dict[str, Any]) -> None:
        """Record why a position failed."""
        _write_json_atomic(self.markers / "failed" / f"{name}.json", record)

    def read_position(self, name: str) -> np.ndarray:
        """A position's full-resolution result (tests, checks)."""
        import zarr

        return np.asarray(zarr.open_array(str(self.out / name / "0"), mode="r")[...])


def safe_label(layer_name: str, index: int) -> str:
    """A group name for an extra layer: the bracketed tag of its layer name, else its index."""
    tag = layer_name.rsplit("[", 1)[-1].rstrip("]") if "[" in layer_name else ""
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in tag).strip("._")
    return cleaned or f"layer{index}"


_SPACE = {"x", "y", "z"}


def _axes(labels: tuple[str, ...] | None, ndim: int, units: Any) -> list[dict[str, str]]:
    """NGFF axes: the layer's labels when they are valid NGFF names, else the usual trailing
    ``(t, c, z, y, x)``."""
    names = [str(label).lower() for label in labels] if labels else []
    if len(names) != ndim or len(set(names)) != ndim or not set(names) <= {"t", "c", *_SPACE}:
        names = ["t", "c", "z", "y", "x"][-ndim:] if ndim <= 5 else [f"d{i}" for i in range(ndim)]
    axes = []
    for i, axis in enumerate(names):
        kind = "space" if axis in _SPACE else {"t": "time", "c": "channel"}.get(axis, "other")
        entry = {"name": axis, "type": kind}
        unit = ngff_unit(units[i]) if units is not None and i < len(units) else None
        if unit and kind in ("space", "time"):
            entry["unit"] = unit
        axes.append(entry)
    return axes


_UNITS = {
    "µm": "micrometer",
    "um": "micrometer",
    "nm": "nanometer",
    "mm": "millimeter",
    "s": "second",
    "ms": "millisecond",
    "m": "meter",
}


def ngff_unit(unit: Any) -> str | None:
    """The NGFF (UDUNITS) name of a unit as napari or ImageJ write it; None when unknown.

    Examples
    --------
    >>> ngff_unit("µm"), ngff_unit("um"), ngff_unit("micrometer"), ngff_unit("px")
    ('micrometer', 'micrometer', 'micrometer', None)
    """
    if not unit:
        return None
    text = str(unit)
    return _UNITS.get(text, text if text.isalpha() and len(text) > 2 else None)


def _write_image(group: Any, layer: tuple[Any, dict[str, Any], str], attrs: dict[str, Any]) -> None:
    from ome_zarr.format import FormatV05
    from ome_zarr.writer import write_multiscales_metadata

    data, kwargs, _ = layer
    array = np.asarray(data)
    if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
        # NaN is written only where the layer says what it means (e.g. a sweep's "not
        # measured"); an unexplained NaN or any infinity is a failed computation.
        explained = bool(kwargs.get("metadata", {}).get("nan")) and not np.isinf(array).any()
        if not explained:
            raise ValueError("the result holds non-finite values (NaN or infinity); not written")
    # One chunk per plane keeps reads of a plane cheap; a task owns all of its chunks.
    chunks = (1,) * max(array.ndim - 2, 0) + array.shape[-2:]
    group.create_array("0", data=array, chunks=chunks)
    scale = kwargs.get("scale")
    scale = [float(s) for s in scale] if scale is not None else [1.0] * array.ndim
    write_multiscales_metadata(
        group,
        datasets=[{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": scale}]}],
        fmt=FormatV05(),
        axes=_axes(kwargs.get("axis_labels"), array.ndim, kwargs.get("units")),
        name=str(kwargs.get("name", "")),
    )
    group.attrs[ATTRIBUTE] = attrs
