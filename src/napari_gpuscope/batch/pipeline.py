"""Keeping a worker busy: the next position read ahead while it computes, each position
written in the background while the next one computes.

One idea: overlap a worker's reading and writing with its computing, bounded to one position
read ahead and one being written, without changing what a task computes or when it counts as
done.

- **Write behind.** A task computes its position, brings its layers to the host, then takes
  its worker's one *write slot* and leaves the worker's thread pool (``secede``): the worker
  starts its next position while this task writes, verifies and marks its own. The task still
  returns only after its marker is written, so the driver counts a position done only then,
  and a write error fails that position as before. A task that finds the slot taken waits for
  it *before* leaving the pool, so a worker never holds more than one computed, unwritten
  position.
- **Read ahead.** A task is told which position its worker most likely computes next; while it
  computes, one background thread reads that position's files once (into the operating
  system's page cache, nothing kept in Python), so the next task's memory-mapped read finds
  them in memory. The next task still reads its pixels itself, the same way: results are
  byte for byte those of a run without read-ahead.

Outside a Dask worker (a task called directly) neither happens: the task runs start to end.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from napari_gpuscope.batch.inputs import Position

__all__ = ["position_files", "read_ahead", "worker_busy", "worker_label", "write_slot"]

_LOCK = threading.Lock()
_SLOTS: dict[str, threading.Semaphore] = {}
_READING: dict[str, threading.Thread] = {}
_BLOCK = 1 << 20


def _worker_address() -> str | None:
    """This task's worker (None outside a worker's task thread)."""
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError, AttributeError):
        return None


def worker_label() -> dict[str, str | None]:
    """The worker running this task: its name and the GPUs it sees (for the report's busy
    time per worker and GPU); ``{}`` outside a worker.

    Examples
    --------
    >>> worker_label()
    {}
    """
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError, AttributeError):
        return {}
    return {
        "name": str(worker.name),
        "address": str(worker.address),
        "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


@contextlib.contextmanager
def write_slot() -> Iterator[None]:
    """Hold this worker's one write slot, and let the worker start its next position
    meanwhile (see the module docstring); outside a worker, only the slot.

    Examples
    --------
    >>> with write_slot():
    ...     pass
    """
    address = _worker_address()
    with _LOCK:
        slot = _SLOTS.setdefault(address or "", threading.Semaphore(1))
    with slot:
        if address is not None:
            from distributed import secede

            secede()  # the worker's thread is free for the next position from here on
        yield


def position_files(position: Position) -> list[Path]:
    """The files holding a position's pixels: its TIFF, or its Zarr array's chunks.

    Examples
    --------
    >>> from napari_gpuscope.batch.inputs import Position
    >>> position_files(Position("a", "tiff", "a.tif"))
    [PosixPath('a.tif')]
    """
    if position.kind == "tiff":
        return [Path(position.path)]
    root = Path(position.path) / position.array
    return sorted(path for path in root.rglob("*") if path.is_file())


def _read_through(files: list[Path]) -> None:
    for path in files:
        # A vanished or unreadable file is the task's own error to report, not the read-ahead's.
        with contextlib.suppress(OSError), open(path, "rb", buffering=0) as stream:
            while stream.read(_BLOCK):
                pass


def read_ahead(position: Position | None) -> threading.Thread | None:
    """Read ``position``'s files once in a background thread (one per worker at a time: none is
    started while the last one still reads); returns the thread, or None.

    Examples
    --------
    >>> read_ahead(None) is None
    True
    """
    if position is None:
        return None
    key = _worker_address() or ""
    with _LOCK:
        running = _READING.get(key)
        if running is not None and running.is_alive():
            return None
        try:
            files = position_files(position)
        except OSError:
            return None
        thread = threading.Thread(
            target=_read_through, args=(files,), name="gpuscope-read-ahead", daemon=True
        )
        _READING[key] = thread
        thread.start()
    return thread


def worker_busy(summaries: list[dict]) -> dict[str, dict[str, object]]:
    """Each worker's busy time from its tasks' summaries: the union of their ``busy``
    intervals (a position being written overlaps the next one computing), its positions and
    the GPUs it saw.

    Examples
    --------
    >>> worker_busy([
    ...     {"worker": {"name": "gpu-0", "gpu": "0"}, "busy": [0.0, 2.0]},
    ...     {"worker": {"name": "gpu-0", "gpu": "0"}, "busy": [1.5, 3.0]},
    ... ])
    {'gpu-0': {'busy_seconds': 3.0, 'positions': 2, 'gpu': '0'}}
    """
    spans: dict[str, list[tuple[float, float]]] = {}
    gpus: dict[str, str | None] = {}
    for summary in summaries:
        worker, busy = summary.get("worker"), summary.get("busy")
        if not isinstance(worker, dict) or not isinstance(busy, list) or len(busy) != 2:
            continue
        label = str(worker.get("name") or f"{worker.get('host')}:{worker.get('pid')}")
        spans.setdefault(label, []).append((float(busy[0]), float(busy[1])))
        gpus[label] = worker.get("gpu")
    result: dict[str, dict[str, object]] = {}
    for label, intervals in sorted(spans.items()):
        total, end = 0.0, float("-inf")
        for start, stop in sorted(intervals):
            total += max(0.0, stop - max(start, end))
            end = max(end, stop)
        result[label] = {"busy_seconds": round(total, 4), "positions": len(intervals)}
        result[label]["gpu"] = gpus[label]
    return result
