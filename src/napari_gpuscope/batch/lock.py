"""The run lock of a batch store: one run at a time writes ``OUT.zarr``.

One idea: ``OUT.zarr.batch/lock.json`` (:data:`~napari_gpuscope.batch.store.LOCK_NAME`) holds
the running run's pid, host and start time (:class:`StoreLock`); a lock whose process is gone is
stale and taken over. The store and its markers are :mod:`napari_gpuscope.batch.store`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from napari_gpuscope.batch.store import HOST, LOCK_NAME, BatchStore, StoreError, process_gone

if TYPE_CHECKING:
    from napari_gpuscope.compute._types import JSONDict

__all__ = ["StoreLock"]


class StoreLock:
    """One run at a time per store: ``OUT.zarr.batch/lock.json`` holds the owner's pid, host and
    start time while a run writes.

    The file is created atomically with its content (written aside, then hard-linked into
    place), so another run sees no lock or a whole one. A lock whose process is gone (same host,
    pid not running) or that cannot be read is stale: it is reported and taken over. A lock held
    by a live process, or by another host (whose processes cannot be checked), makes
    :meth:`acquire` raise :class:`StoreError`, or wait for it with ``wait=True``. A process that
    holds the lock may take it again (nested: the CLI and :func:`run_batch` both take it).

    Taking over is atomic among any number of contenders, however slow the file system: each
    version of the lock file is a generation named by the hash of its bytes (every record
    holds a random token), and only the contender that creates ``lock.json.takeover-<hash>``
    exclusively (``O_EXCL``) may replace that generation, after reading that the file still
    holds it. Deleting the stale file and creating a new one (what every contender that judged
    it stale did before) let a late contender delete a fresh lock: two runs held the store.

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
            if self.path.is_dir():
                raise StoreError(
                    f"{self.path} is a folder, not a lock file; remove it (no run holds it)"
                )
            content = self._read()
            if content is None:  # released meanwhile
                created = self._try_create()
                continue
            owner = _record(content)
            if owner is None or self.is_stale(owner):
                created = self._take_over(content, owner)
                if created:
                    self.on_stale(f"replaced a stale lock of {self.describe(owner)} ({self.path})")
                    continue
                time.sleep(min(self.poll, 0.05))  # another contender takes it over: look again
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
        if owner is not None and owner.get("pid") == os.getpid() and owner.get("host") == HOST:
            self.path.unlink(missing_ok=True)

    def owner(self) -> JSONDict | None:
        """The lock's record (pid, host, since), None when absent or unreadable."""
        content = self._read()
        return None if content is None else _record(content)

    def _read(self) -> bytes | None:
        """The lock file's bytes, None when there is none (or it cannot be read)."""
        try:
            return self.path.read_bytes()
        except OSError:
            return None

    def _take_over(self, content: bytes, owner: JSONDict | None) -> bool:
        """Replace the stale generation ``content`` with this process's lock, if this contender
        is the one that takes that generation over; whether it did."""
        generation = hashlib.sha256(content).hexdigest()[:32]
        claim = self.path.with_name(f"{self.path.name}.takeover-{generation}")
        try:
            descriptor = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False  # another contender takes this generation over
        os.close(descriptor)
        try:
            if self._read() != content:  # replaced or released since it was judged stale
                return False
            temporary = self._write_record()
            try:
                os.replace(temporary, self.path)
            except OSError:
                Path(temporary).unlink(missing_ok=True)
                raise
            return True
        finally:
            # A late contender that claims this generation again reads another file: it
            # backs off, so the claim need not outlive the replacement.
            claim.unlink(missing_ok=True)

    @staticmethod
    def describe(owner: JSONDict | None) -> str:
        """``"pid 123 on host since 2026-..."`` (or that the lock is unreadable)."""
        if owner is None:
            return "an unreadable lock"
        return f"pid {owner.get('pid')} on {owner.get('host')} since {owner.get('since')}"

    def _write_record(self) -> str:
        """This process's record in a new file beside the lock; its path."""
        record = {
            "pid": os.getpid(),
            "host": HOST,
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "token": uuid.uuid4().hex,  # every generation's bytes differ
        }
        handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".lock.", suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(record, stream)
        return temporary

    def _try_create(self) -> bool:
        temporary = self._write_record()
        try:
            try:
                os.link(temporary, self.path)  # fails when the lock exists: atomic
            except FileExistsError:
                return False
            return True
        finally:
            Path(temporary).unlink(missing_ok=True)

    @staticmethod
    def is_stale(owner: JSONDict) -> bool:
        """Whether a lock's owner is gone: its pid runs no process on this host (a lock of
        another host is never stale: its processes cannot be checked from here)."""
        pid = owner.get("pid")
        if owner.get("host") != HOST or not isinstance(pid, int) or pid <= 0:
            return not isinstance(pid, int) or pid <= 0
        return process_gone(pid)


def _record(content: bytes) -> JSONDict | None:
    """A lock file's record, None when it is not one (unreadable: stale)."""
    try:
        record = json.loads(content.decode("utf-8"))
    except ValueError:  # not UTF-8 or not JSON
        return None
    return record if isinstance(record, dict) else None
