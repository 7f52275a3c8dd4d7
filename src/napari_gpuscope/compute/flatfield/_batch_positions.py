"""The positions of a flat-field batch run as the one fit sees them: screened before the fit
(:func:`screen`), then read lazily as one stack (:func:`_lazy_frames`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._params import BasicParams

__all__ = ["screen"]


def _ranks(batch_axis: int | None) -> tuple[int, ...]:
    """The position ranks a fit takes: tiles and stacks, and 4D with an independent axis."""
    return (2, 3) if batch_axis is None else (2, 3, 4)


def _lazy_frames(tiles: Sequence[Callable[[], Any]], batch_axis: int | None = None) -> Any:
    """All positions' frames as one lazy Dask array (a position is read when the fit's reader
    reaches its frames, and never kept): ``(T, Y, X)``, or for 4D positions with
    ``batch_axis`` the positions' frames joined along the other leading axis, so each
    independent problem (a channel, a z-plane) is fitted on every position's frames of it, as
    the dock fits one 4D layer."""
    import dask
    import dask.array as da

    first = np.asarray(tiles[0]())
    if first.ndim not in _ranks(batch_axis):
        four = "" if batch_axis is None else f", or 4D with the independent axis {batch_axis}"
        raise ValueError(
            f"flat-field batch: positions must be (Y, X) tiles or (T, Y, X) stacks{four}, the "
            f"first has shape {first.shape}"
        )

    def read(reader: Callable[[], Any]) -> np.ndarray:
        array = np.asarray(reader())
        if array.shape != first.shape:
            raise ValueError(
                f"flat-field batch: every position must have the first's shape {first.shape} "
                f"to share one profile; one has {array.shape}"
            )
        return array

    parts = [
        da.from_delayed(dask.delayed(read)(reader), first.shape, first.dtype) for reader in tiles
    ]
    if first.ndim == 2:
        return da.stack(parts)
    return da.concatenate(parts, axis=0 if first.ndim == 3 else 1 - int(batch_axis or 0))


def screen(params: BasicParams, tiles: Sequence[Callable[[], Any]]) -> dict[int, str]:
    """Positions that must not enter the fit, by index, with the reason.

    Every position is read once (and let go) before the fit: one that cannot be read, is not a
    ``(Y, X)`` tile or ``(T, Y, X)`` stack (or 4D, with the recipe's ``batch_axis``), holds NaN
    or infinite pixels, or has another shape than most positions (ties: the first's) would sink
    the fit of all of them; the batch run
    leaves it out of the fit and fails it with this reason, and the others are fitted and
    corrected as if it were absent.

    Examples
    --------
    >>> import numpy as np
    >>> good = np.ones((4, 4), np.float32)
    >>> nan = good.copy(); nan[1, 2] = np.nan
    >>> bad = screen(BasicParams(), [lambda: good, lambda: nan, lambda: good[:3], lambda: good])
    >>> for index, reason in bad.items():
    ...     print(index, reason)
    1 contains 1 NaN or infinite pixel(s) (first at (1, 2))
    2 shape (3, 4), most positions have (4, 4): one profile needs one shape
    """
    from collections import Counter

    ranks = _ranks(params.batch_axis)
    bad: dict[int, str] = {}
    shapes: dict[int, tuple[int, ...]] = {}
    for index, reader in enumerate(tiles):
        try:
            array = np.asarray(reader())
        except Exception as exc:
            bad[index] = f"unreadable: {type(exc).__name__}: {exc}"
            continue
        if array.ndim not in ranks or array.size == 0:
            what = "" if params.batch_axis is None else " or a 4D stack"
            bad[index] = f"shape {array.shape}: not a (Y, X) tile or a (T, Y, X) stack{what}"
        elif not (
            np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
        ):
            bad[index] = f"dtype {array.dtype}: not an image of numbers"
        elif np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            where = np.argwhere(~np.isfinite(array))
            bad[index] = (
                f"contains {len(where)} NaN or infinite pixel(s) (first at "
                f"{tuple(int(i) for i in where[0])})"
            )
        else:
            shapes[index] = array.shape
        del array
    if shapes:
        common = Counter(shapes.values()).most_common(1)[0][0]
        for index, shape in shapes.items():
            if shape != common:
                bad[index] = (
                    f"shape {shape}, most positions have {common}: one profile needs one shape"
                )
    return dict(sorted(bad.items()))
