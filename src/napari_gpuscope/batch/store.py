"""The batch output: an OME-Zarr store with one image group per position, and its markers.

``OUT.zarr/<position>/`` is an OME-Zarr image (NGFF 0.5 on zarr v3) whose full-resolution
array is ``0``; the multiscales metadata is written by ome-zarr-py
(:func:`ome_zarr.writer.write_multiscales_metadata`), the recipe and the provenance under the
group attribute ``"napari_gpuscope"``. Further result layers of a position (methods with
several outputs) are image groups ``OUT.zarr/<position>/extra/<name>/``. Text files a result
gives (its optional ``files(geometry)``, e.g. eSRRF's drift trace) lie in the group beside
them, ``OUT.zarr/<position>/drift.csv``, and are listed in the attribute's ``"files"``. A task
owns its position's group outright: it deletes whatever an interrupted attempt left there (a
torn write) and writes it anew, so no two tasks ever write into one chunk.

Completion markers live beside the store, in ``OUT.zarr.batch/``:

``run.json``
    The recipe (YAML), its hash and every position with its identity, written by the driver
    before any task starts (``status`` reads it).
``done/<position>.json``
    Written by the task *after* its group is complete (groups are written under a temporary
    name ``OUT.zarr/.writing-*`` and renamed into place), atomically (write, then rename); holds
    the marker key (hash of the recipe hash and the input's identity), the SHA-256 of the
    group's files as written (``checksum``), timings and the summary.
``failed/<position>.json``
    The reason a position failed (removed when it later succeeds).

``lock.json``
    The running run's pid, host and start time (:class:`StoreLock`): one run at a time.

``--resume`` skips exactly the positions whose ``done`` marker has the current key, whose
group exists and whose files still match the marker's checksum; everything else is computed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from napari_gpuscope.compute.results import split_result_name

__all__ = ["ATTRIBUTE", "BatchStore", "StoreError", "StoreLock", "check_file_name", "marker_key"]

LOCK_NAME = "lock.json"
"""The store's lock file in ``OUT.zarr.batch/`` (see :class:`StoreLock`)."""

ATTRIBUTE = "napari_gpuscope"
"""The namespaced group attribute holding the recipe and provenance of each position."""


class StoreError(RuntimeError):
    """The output store cannot be used (unwritable, a corrupt record, locked by another run);
    the message names the file and what to do."""


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
            self._clear_markers()
        try:
            zarr.open_group(str(self.out), mode="a", zarr_format=3)
            _write_json_atomic(self.markers / "run.json", run)
        except OSError as exc:
            where = exc.filename or self.out
            raise StoreError(
                f"cannot write the output store {where}: {exc.strerror or exc}; give --out a "
                "folder you can write to"
            ) from None

    def clean_staging(self, *, max_age: float = 3600.0) -> list[str]:
        """Delete the ``.writing-*`` folders an interrupted run left in the store; returns
        their names.

        A folder is named after the process writing it (:func:`_staging_name`): it is left
        alone while that process runs on this host (a cancelled attempt of an earlier run in
        this very process may still be writing it), or, for another host, until it is
        ``max_age`` seconds old.
        """
        if not self.out.is_dir():
            return []
        stale = sorted(
            p
            for p in self.out.iterdir()
            if p.name.startswith(".writing-") and _abandoned(p, max_age)
        )
        for path in stale:
            shutil.rmtree(path, ignore_errors=True)
        return [path.name for path in stale]

    def _clear_markers(self) -> None:
        """Delete every marker and record (not the lock: the run deleting them holds it)."""
        if not self.markers.is_dir():
            return
        for child in self.markers.iterdir():
            if child.name == LOCK_NAME:
                continue
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)

    def run_record(self) -> dict[str, Any] | None:
        """The last run's ``run.json`` (None when the store was never run).

        Raises
        ------
        StoreError
            ``run.json`` is unreadable or not a run record.
        """
        path = self.markers / "run.json"
        if not path.is_file():
            return None
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problem = exc.strerror if isinstance(exc, OSError) else f"not JSON ({exc})"
            record, reason = None, problem
        else:
            reason = "not a run record (no recipe_hash or positions)"
        if (
            not isinstance(record, dict)
            or not {"recipe_hash", "positions"} <= record.keys()
            or not isinstance(record["positions"], list)
            or not all(isinstance(e, dict) and "name" in e for e in record["positions"])
        ):
            raise StoreError(
                f"{path} is corrupt: {reason}; rerun with --overwrite to start again (or delete "
                "the file and rerun with --resume: the completion markers still count)"
            )
        return record

    def done_record(self, name: str) -> dict[str, Any] | None:
        """A position's completion marker, or None."""
        return self._read(self.markers / "done" / f"{name}.json")

    def failed_record(self, name: str) -> dict[str, Any] | None:
        """A position's failure record, or None."""
        return self._read(self.markers / "failed" / f"{name}.json")

    def is_complete(self, name: str, key: str) -> bool:
        """Whether ``name`` is done with this marker key, its group exists and its files still
        have the checksum the marker recorded (a truncated or altered chunk: not complete)."""
        record = self.done_record(name)
        if (
            record is None
            or record.get("key") != key
            or not (self.out / name / "zarr.json").is_file()
        ):
            return False
        recorded = record.get("checksum")
        return recorded is None or recorded == self.checksum(name)  # None: an older marker

    def checksum(self, name: str) -> str:
        """SHA-256 over every file of a position's group: relative path, size and bytes."""
        root = self.out / name
        digest = hashlib.sha256()
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            relative = path.relative_to(root).as_posix()
            digest.update(f"{relative}\0{path.stat().st_size}\0".encode())
            with open(path, "rb") as handle:
                for block in iter(lambda handle=handle: handle.read(1 << 20), b""):
                    digest.update(block)
        return digest.hexdigest()

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
        self,
        name: str,
        layers: list[tuple[Any, dict[str, Any], str]],
        attrs: dict[str, Any],
        files: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Write a position's image layers as OME-Zarr image groups, and its text files beside
        them; returns the groups' paths.

        The group, files included, is written under a temporary name and renamed into place,
        so ``OUT.zarr/<name>`` is always absent or complete, even when a cancelled attempt
        that is still running elsewhere writes the same position; the completion checksum
        (:meth:`checksum`) covers the files as it covers the chunks.

        Parameters
        ----------
        name : str
            The position (the group's name).
        layers : list of tuple
            ``result.layers()``: the first image layer is the group's array ``0``, the other
            image layers ``extra/<kind>``. Other layers (Tracks, vectors) are no OME-Zarr
            image: the attribute ``"layers_in_files"`` names those whose data a file holds (a
            layer whose ``metadata["quantity"]`` is the file's stem: the ``"drift"`` track in
            ``drift.csv``), ``"layers_not_written"`` the rest.
        attrs : dict
            The group attribute ``napari_gpuscope`` (``"files"`` is added).
        files : mapping of str to str, optional
            File name -> text (the result's ``files(geometry)``), written as UTF-8 in the
            group; names are checked by :func:`check_file_name`.

        Raises
        ------
        ValueError
            No image layer, a non-finite image, a file name that is not a plain name (or
            collides with the group's own entries), or a file whose content is not text.
        """
        import zarr

        images = [layer for layer in layers if layer[2] == "image"]
        if not images:
            raise ValueError("the method returned no image layer to write")
        files = dict(files or {})
        for file_name, text in files.items():
            check_file_name(file_name)
            if not isinstance(text, str):
                raise ValueError(
                    f"the result's file {file_name!r} is {type(text).__name__}, not text (str); "
                    "files(geometry) must map file names to their text"
                )
        stems = {file_name.rsplit(".", 1)[0]: file_name for file_name in files}
        in_files: dict[str, str] = {}
        others: list[str] = []
        for _, kwargs, kind in layers:
            if kind == "image":
                continue
            label = f"{kwargs.get('name', '')} ({kind})"
            quantity = (kwargs.get("metadata") or {}).get("quantity")
            if isinstance(quantity, str) and quantity in stems:
                in_files[label] = stems[quantity]
            else:
                others.append(label)
        if files:
            attrs = {**attrs, "files": sorted(files)}
        if in_files:
            attrs = {**attrs, "layers_in_files": in_files}
        if others:  # e.g. vectors: not an OME-Zarr image; say so rather than drop them silently
            attrs = {**attrs, "layers_not_written": others}
        staging = self.out / _staging_name(name)
        written = [name]
        written_labels: set[str] = set()
        try:
            group = zarr.open_group(str(staging), mode="w", zarr_format=3)
            _write_image(group, images[0], attrs)
            for index, layer in enumerate(images[1:], start=1):
                label = safe_label(layer[1].get("name", ""), index)
                if label in written_labels:  # two layers of one kind: keep both
                    label = f"{label}_{index}"
                written_labels.add(label)
                child = group.require_group("extra").create_group(label, overwrite=True)
                _write_image(child, layer, attrs)
                written.append(f"{name}/extra/{label}")
            for file_name, text in sorted(files.items()):
                # newline="": the text's own line ends, byte for byte on every platform.
                with open(staging / file_name, "w", encoding="utf-8", newline="") as stream:
                    stream.write(text)
            self._move_into_place(staging, self.out / name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return written

    @staticmethod
    def _move_into_place(staging: Path, final: Path) -> None:
        """Rename ``staging`` to ``final``; a group already there is first moved aside and put
        back when the rename fails (e.g. ``staging`` vanished), so a complete group is never
        deleted for nothing."""
        for _ in range(3):  # another attempt may put its (identical) group there in between
            aside = final.with_name(_staging_name(final.name))
            try:
                os.rename(final, aside)
                moved = True
            except FileNotFoundError:
                moved = False
            except OSError:
                continue
            try:
                os.rename(staging, final)
            except OSError:
                if moved:
                    with contextlib.suppress(OSError):
                        os.rename(aside, final)
                if not staging.is_dir():
                    raise OSError(f"the written group {staging} is gone; not moved") from None
                continue
            finally:
                if moved and aside.exists():
                    shutil.rmtree(aside, ignore_errors=True)
            return
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


def _staging_name(name: str) -> str:
    """``.writing-<pid>@<host>@<random>-<name>``: a temporary group, named after its writer."""
    return f".writing-{os.getpid()}@{platform.node()}@{uuid.uuid4().hex[:12]}-{name}"


def _abandoned(path: Path, max_age: float) -> bool:
    """Whether a ``.writing-*`` folder's writer is gone (see :meth:`BatchStore.clean_staging`)."""
    owner = path.name.removeprefix(".writing-").split("@")
    if len(owner) < 3 or not owner[0].isdigit():
        return True  # an older name without its writer
    if owner[1] != platform.node():
        try:
            return time.time() - path.stat().st_mtime > max_age
        except OSError:
            return False
    return StoreLock.is_stale({"pid": int(owner[0]), "host": owner[1]})


_RESERVED = {"zarr.json", "extra", "0"}
"""Entries of a position group that the image writer owns (lower case: case-insensitive
file systems)."""


def check_file_name(file_name: str) -> str:
    """Refuse a result file name that is not a plain file name of the position's group.

    A name is letters, digits and ``._-`` (no path separator, so the file stays in its
    group), does not start with a dot (no ``..``, nothing hidden like the ``.writing-*``
    staging folders) and is none of the group's own entries (``zarr.json``, ``extra``, the
    array ``0``), in any letter case.

    Returns
    -------
    str
        The name.

    Raises
    ------
    ValueError
        Naming the file and what is valid.

    Examples
    --------
    >>> check_file_name("drift.csv")
    'drift.csv'
    >>> check_file_name("../drift.csv")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: the result's file name '../drift.csv' is not valid: a file name is letters, ...
    """
    valid = (
        isinstance(file_name, str)
        and bool(file_name)
        and all(c.isascii() and (c.isalnum() or c in "._-") for c in file_name)
        and not file_name.startswith(".")
        and file_name.lower() not in _RESERVED
    )
    if not valid:
        raise ValueError(
            f"the result's file name {file_name!r} is not valid: a file name is letters, digits "
            "and '._-' (no path separators), does not start with '.', and is not zarr.json, "
            "extra or 0"
        )
    return file_name


def safe_label(layer_name: str, index: int) -> str:
    """A group name for an extra layer: the kind its name starts with (``"absorption ·
    cells [reg=0.001]"`` -> ``absorption``), else the bracketed tag of an older name, else
    its index.

    The kind, not the settings, names the group, so ``extra/absorption`` is the same path
    whatever the parameters. Stores written before named groups after the tag
    (``extra/absorption_reg_0.001``); the reader lists ``extra/`` and takes each layer's name
    from its metadata, so those open as before.

    Examples
    --------
    >>> safe_label("tilt zenith · A01", 1)
    'tilt_zenith'
    >>> safe_label("A01 [absorption reg=0.001]", 1)
    'absorption_reg_0.001'
    >>> safe_label("", 2)
    'layer2'
    """
    parts = split_result_name(layer_name)
    if parts is not None:
        tag = parts[0]
    else:
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
    "pixel": None,  # napari's "no unit": NGFF has no such unit, so none is written
}


def ngff_unit(unit: Any) -> str | None:
    """The NGFF (UDUNITS) name of a unit as napari or ImageJ write it; None when unknown.

    Examples
    --------
    >>> ngff_unit("µm"), ngff_unit("um"), ngff_unit("micrometer"), ngff_unit("px")
    ('micrometer', 'micrometer', 'micrometer', None)
    >>> ngff_unit("pixel") is None
    True
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


class StoreLock:
    """One run at a time per store: ``OUT.zarr.batch/lock.json`` holds the owner's pid, host and
    start time while a run writes.

    The file is created atomically with its content (written aside, then hard-linked into
    place), so another run sees no lock or a whole one. A lock whose process is gone (same host,
    pid not running) or that cannot be read is stale: it is reported and taken over. A lock held
    by a live process, or by another host (whose processes cannot be checked), makes
    :meth:`acquire` raise :class:`StoreError`, or wait for it with ``wait=True``. A process that
    holds the lock may take it again (nested: the CLI and :func:`run_batch` both take it).

    Parameters
    ----------
    store : BatchStore
    wait : bool
        Wait for a held lock to go instead of refusing.
    poll : float
        Seconds between looks while waiting.
    on_stale : callable, optional
        Called with a message when a stale lock is taken over (default: print to stderr).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> store = BatchStore(pathlib.Path(tempfile.mkdtemp()) / "out.zarr")
    >>> with StoreLock(store):
    ...     (store.markers / "lock.json").is_file()
    True
    >>> (store.markers / "lock.json").exists()
    False
    """

    _held: ClassVar[dict[str, int]] = {}

    def __init__(
        self,
        store: BatchStore,
        *,
        wait: bool = False,
        poll: float = 1.0,
        on_stale: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.path = store.markers / LOCK_NAME
        self.wait = wait
        self.poll = poll
        self.on_stale = on_stale or (
            lambda text: print(f"napari-gpuscope: {text}", file=sys.stderr)
        )

    def __enter__(self) -> StoreLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock (see the class docstring)."""
        key = str(self.path.resolve())
        if self._held.get(key):
            self._held[key] += 1
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            created = self._try_create()
        except OSError as exc:
            raise StoreError(
                f"cannot write beside the output store at {exc.filename or self.path.parent}: "
                f"{exc.strerror or exc}; give --out a folder you can write to"
            ) from None
        while True:
            if created:
                self._held[key] = 1
                return
            owner = self.owner()
            if owner is None or self.is_stale(owner):
                self.on_stale(f"removing a stale lock of {self.describe(owner)} ({self.path})")
                self.path.unlink(missing_ok=True)
                created = self._try_create()
                continue
            if not self.wait:
                raise StoreError(
                    f"{self.store.out} is locked by another run ({self.describe(owner)}); wait "
                    f"for it to finish, pass --wait, or, if no such run exists, delete "
                    f"{self.path}"
                )
            time.sleep(self.poll)
            created = self._try_create()

    def release(self) -> None:
        """Let go of the lock (the file goes when the outermost holder lets go)."""
        key = str(self.path.resolve())
        count = self._held.get(key, 0)
        if count > 1:
            self._held[key] = count - 1
            return
        self._held.pop(key, None)
        owner = self.owner()
        if owner is not None and owner.get("pid") == os.getpid() and owner.get("host") == _HOST:
            self.path.unlink(missing_ok=True)

    def owner(self) -> dict[str, Any] | None:
        """The lock's record (pid, host, since), None when absent or unreadable."""
        try:
            record = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    @staticmethod
    def describe(owner: dict[str, Any] | None) -> str:
        """``"pid 123 on host since 2026-..."`` (or that the lock is unreadable)."""
        if owner is None:
            return "an unreadable lock"
        return f"pid {owner.get('pid')} on {owner.get('host')} since {owner.get('since')}"

    def _try_create(self) -> bool:
        record = {
            "pid": os.getpid(),
            "host": _HOST,
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".lock.", suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                json.dump(record, stream)
            try:
                os.link(temporary, self.path)  # fails when the lock exists: atomic
            except FileExistsError:
                return False
            return True
        finally:
            Path(temporary).unlink(missing_ok=True)

    @staticmethod
    def is_stale(owner: dict[str, Any]) -> bool:
        """Whether a lock's owner is gone: its pid runs no process on this host (a lock of
        another host is never stale: its processes cannot be checked from here)."""
        pid = owner.get("pid")
        if owner.get("host") != _HOST or not isinstance(pid, int) or pid <= 0:
            return not isinstance(pid, int) or pid <= 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # alive, another user's
        return False


_HOST = platform.node()
