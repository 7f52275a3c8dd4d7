"""The batch output: an OME-Zarr store with one image group per position, and its markers.

One idea: where each position's group and completion marker lie, when they are written, and
when a position counts as done. How one image group is written (OME-NGFF) is
:mod:`napari_gpuscope.batch.ngff`; the run lock is :mod:`napari_gpuscope.batch.lock`.

``OUT.zarr/<position>/`` is an OME-Zarr image group (NGFF 0.5) with the recipe and the
provenance under its attribute ``"napari_gpuscope"``. Further result layers of a position are
image groups ``OUT.zarr/<position>/extra/<name>/``. Text files a result gives (its optional
``files(geometry)``, e.g. eSRRF's ``drift.csv``) lie in the group, listed in ``"files"``. A task
owns its position's group outright: it deletes whatever an interrupted attempt left there (a
torn write) and writes it anew, so no two tasks ever write into one chunk.

Completion markers live beside the store, in ``OUT.zarr.batch/``:

``run.json``
    The recipe, its hash and every position's identity, written before any task starts.
``done/<position>.json``
    Written by the task *after* its group is complete (groups are written under a temporary
    name ``OUT.zarr/.writing-*`` and renamed into place), atomically (write, then rename); holds
    the marker key (hash of the recipe hash and the input's identity), the SHA-256 of the
    group's files as written (``checksum``), timings and the summary.
``failed/<position>.json``
    The reason a position failed (removed when it later succeeds).
``lock.json``
    The running run's pid, host and start time (:mod:`~napari_gpuscope.batch.lock`).

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
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from napari_gpuscope.batch.ngff import check_file_name, read_image, safe_label, write_image

if TYPE_CHECKING:
    from napari_gpuscope.compute._types import JSONDict
    from napari_gpuscope.compute.results import LayerDataTuple

__all__ = ["HOST", "LOCK_NAME", "BatchStore", "StoreError", "marker_key", "process_gone"]

LOCK_NAME = "lock.json"
"""The store's lock file in ``OUT.zarr.batch/`` (:class:`~napari_gpuscope.batch.lock.StoreLock`)."""

HOST = platform.node()
"""This host's name, as the lock and the staging folders record their writer's."""


class StoreError(RuntimeError):
    """The output store cannot be used (unwritable, a corrupt record, locked by another run);
    the message names the file and what to do."""


def marker_key(recipe_hash: str, identity: str) -> str:
    """The completion marker's key: SHA-256 of the recipe hash and the input's identity."""
    return hashlib.sha256(f"{recipe_hash}\n{identity}".encode()).hexdigest()


def _write_json_atomic(path: Path, data: JSONDict, *, durable: bool = True) -> None:
    """Write ``path`` whole or not at all (aside, then renamed); ``durable``: fsynced first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(data, stream, indent=2, sort_keys=True, default=str)
            if durable:
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
    def prepare(self, run: JSONDict, *, overwrite: bool = False) -> None:
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

    def run_record(self) -> JSONDict | None:
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

    def done_record(self, name: str) -> JSONDict | None:
        """A position's completion marker, or None."""
        return self._read(self.markers / "done" / f"{name}.json")

    def failed_record(self, name: str) -> JSONDict | None:
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
    def _read(path: Path) -> JSONDict | None:
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
        layers: list[LayerDataTuple],
        attrs: JSONDict,
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
            write_image(group, images[0], attrs)
            for index, layer in enumerate(images[1:], start=1):
                label = safe_label(layer[1].get("name", ""), index)
                if label in written_labels:  # two layers of one kind: keep both
                    label = f"{label}_{index}"
                written_labels.add(label)
                child = group.require_group("extra").create_group(label, overwrite=True)
                write_image(child, layer, attrs)
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

    def mark_done(self, name: str, record: JSONDict) -> None:
        """Write the completion marker (after the group is complete); clear a failure. Atomic,
        not fsynced: ``--resume`` trusts a marker only while the files match its checksum."""
        _write_json_atomic(self.markers / "done" / f"{name}.json", record, durable=False)
        (self.markers / "failed" / f"{name}.json").unlink(missing_ok=True)

    def mark_failed(self, name: str, record: JSONDict) -> None:
        """Record why a position failed (atomic, not fsynced: as :meth:`mark_done`)."""
        _write_json_atomic(self.markers / "failed" / f"{name}.json", record, durable=False)

    def read_position(self, name: str) -> np.ndarray:
        """A position's full-resolution result (tests, checks)."""
        return read_image(self.out / name / "0")


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
    pid = int(owner[0])
    return pid <= 0 or process_gone(pid)


def process_gone(pid: int) -> bool:
    """Whether no process with this (positive) pid runs on this host: a staging folder's or a
    lock's writer is gone (a process of another user is alive)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # beyond a C int: no process has that pid
        return True
    except PermissionError:
        return False  # alive, another user's
    return False
