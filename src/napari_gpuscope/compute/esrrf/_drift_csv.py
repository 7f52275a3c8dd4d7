"""The CSV file of a drift trace: what a trace is written as, and how a trace file is read
back (with its checks and the file's name in every error)."""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..params import ParameterError
from ._drift_correct import check_shifts

__all__ = ["load_drift_trace", "trace_csv_text"]


def trace_csv_text(
    shifts: np.ndarray,
    *,
    estimated_with: str | None,
    block_note: str | None,
    unmeasured: str | None,
    pixel_size: float | None,
    unit: str,
) -> str:
    """The text of :meth:`~._drift_result.DriftResult.csv_text`: the header lines (the
    estimate's parameters as JSON, how the block length was set, which blocks were not
    measured), then ``frame, dy_px, dx_px`` rows for ``shifts`` (and in ``unit`` with a pixel
    size). Plain values, not the result, so this module does not import the result's."""
    if pixel_size is not None and not (
        isinstance(pixel_size, (int, float)) and math.isfinite(pixel_size) and pixel_size > 0
    ):
        raise ParameterError(f"pixel_size must be a positive number, got {pixel_size!r}")
    buffer = io.StringIO()
    buffer.write("# napari-gpuscope drift trace\n")
    buffer.write(
        "# (dy, dx) of each frame relative to frame 0: frame t shows frame 0's content "
        "moved by +(dy, dx); correct by moving frame t by -(dy, dx)\n"
    )
    buffer.write("# unit: px (input pixels)\n")
    if pixel_size is not None:
        buffer.write(f"# pixel_size: {float(pixel_size)!r} {unit}\n")
    if estimated_with is not None:
        buffer.write(f"# estimated with: {estimated_with}\n")
        if block_note is not None:
            buffer.write(f"# frames per block (time_averaging): {block_note}\n")
    if unmeasured:
        buffer.write(
            f"# not measured (no structure in common with their reference): {unmeasured}; "
            "interpolated from the measured blocks, held beyond the first and last\n"
        )
    writer = csv.writer(buffer, lineterminator="\n")
    header = ["frame", "dy_px", "dx_px"]
    if pixel_size is not None:
        header += [f"dy_{unit}", f"dx_{unit}"]
    writer.writerow(header)
    for t, (dy, dx) in enumerate(shifts):
        row = [t, repr(float(dy)), repr(float(dx))]
        if pixel_size is not None:
            row += [repr(float(dy) * pixel_size), repr(float(dx) * pixel_size)]
        writer.writerow(row)
    return buffer.getvalue()


def load_drift_trace(path: str | Path) -> np.ndarray:
    """float64 ``(T, 2)`` ``(dy, dx)`` in pixels from a drift-trace CSV.

    Raises
    ------
    ValueError
        Naming the file and what is wrong: not UTF-8 text, no ``dy_px, dx_px`` columns (or
        ``dy_<unit>, dx_<unit>`` with a positive finite ``# pixel_size``), a short row, a value
        that is not a finite number, frames other than 0, 1, 2, ... in order.

    Examples
    --------
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "drift.csv")
    >>> lines = ["# pixel_size: 0.1 um", "frame,dy_um,dx_um", "0,0,0", "1,0.05,-0.1"]
    >>> _ = open(path, "w").write(chr(10).join(lines))
    >>> load_drift_trace(path).tolist()
    [[0.0, 0.0], [0.5, -1.0]]
    """
    path = Path(path)
    try:
        return _read_trace(path)
    except _TraceError as error:
        raise ParameterError(f"{path}: {error}") from None
    except csv.Error as error:  # e.g. a field beyond csv's size limit
        raise ParameterError(f"{path}: not a drift-trace CSV ({error})") from None
    except UnicodeDecodeError:
        raise ParameterError(f"{path}: not UTF-8 text; a drift trace is a CSV file") from None


class _TraceError(Exception):
    """What is wrong with a trace file (load_drift_trace adds the file's name)."""


def _number(text: Any, what: str) -> float:
    """A finite number from a CSV field, or a :class:`_TraceError` naming ``what``."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise _TraceError(f"{what} is {text!r}, not a number") from None
    if not math.isfinite(value):
        raise _TraceError(f"{what} is {text!r}; it must be a finite number")
    return value


def _read_trace(path: Path) -> np.ndarray:
    text = path.read_text(encoding="utf-8")
    pixel_size, size_unit = None, None
    lines = []
    for line in text.splitlines():
        if line.startswith("#"):
            match = re.match(r"#\s*pixel_size:\s*(\S+)\s*(\S*)", line)
            if match:
                pixel_size, size_unit = _number(match.group(1), "pixel_size"), match.group(2)
                if pixel_size <= 0:
                    raise _TraceError(f"pixel_size is {pixel_size!r}; it must be positive")
        elif line.strip():
            lines.append(line)
    reader = csv.reader(lines)
    header = next(reader, None)
    rows = list(reader)
    if not header or not rows:
        raise _TraceError("no drift trace rows (expected columns frame, dy_px, dx_px)")
    columns = [name.strip() for name in header]
    if {"dy_px", "dx_px"} <= set(columns):
        keys, factor = ("dy_px", "dx_px"), 1.0
    elif pixel_size and size_unit and {f"dy_{size_unit}", f"dx_{size_unit}"} <= set(columns):
        keys, factor = (f"dy_{size_unit}", f"dx_{size_unit}"), 1.0 / pixel_size
    else:
        raise _TraceError(
            f"columns {columns}; a drift trace needs dy_px and dx_px (or dy_<unit>, "
            "dx_<unit> with a '# pixel_size: <value> <unit>' line)"
        )
    where = [columns.index(key) for key in keys]
    frame = columns.index("frame") if "frame" in columns else None
    shifts = np.empty((len(rows), 2))
    for k, row in enumerate(rows):
        if len(row) != len(columns):
            raise _TraceError(f"row {k + 1} has {len(row)} fields for {len(columns)} columns")
        if frame is not None:
            number = _number(row[frame], f"row {k + 1}'s frame")
            if number != k:
                raise _TraceError(
                    f"row {k + 1}'s frame is {row[frame]!r}; frames must be 0, 1, 2, ... in "
                    "order, one row each"
                )
        for j, column in enumerate(where):
            shifts[k, j] = _number(row[column], f"row {k + 1}'s {keys[j]}") * factor
    return check_shifts(shifts, shifts.shape[0], name=str(path))
