"""Voxel geometry shared by the methods: difference weights from physical pixel sizes.

napari stores a layer's physical step per axis in ``layer.scale`` (a flipped axis has a
negative step). Methods that couple neighbouring voxels (TV, later the phase solver's
regulariser) weight each axis by ``x_step / step``, so a 0.4 µm z-step with 0.1 µm pixels
couples z four times more weakly than x.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

__all__ = ["MAX_SPACING", "MIN_SPACING", "spacing_from_scale"]

MIN_SPACING = 1e-4
"""Smallest non-zero difference weight: a step 10 000 times the pixel size. Smaller weights
are numerically indistinguishable from 0 (no coupling) and only lose precision."""
MAX_SPACING = 1e4
"""Largest difference weight: a step 10 000 times smaller than the pixel size."""


def spacing_from_scale(scale: Sequence[float], uncoupled: Sequence[int] = ()) -> tuple[float, ...]:
    """Difference weights ``spacing`` for voxels of the given physical size.

    Parameters
    ----------
    scale : sequence of float
        Physical step per axis (e.g. napari ``layer.scale``); the last axis (x) is the reference.
        Only magnitudes count: a flipped axis (negative step) is the same voxel grid.
    uncoupled : sequence of int
        Axes processed independently, e.g. a time axis (weight 0).

    Returns
    -------
    tuple of float
        ``|x_step| / |step|`` per axis, clipped to ``[MIN_SPACING, MAX_SPACING]`` (1 for x; 0.25
        for 0.4 µm z-steps with 0.1 µm pixels); 0 for the uncoupled axes, and 1 where a step is
        zero or not a finite number (napari never stores such a scale).

    Raises
    ------
    ValueError
        If ``scale`` is not a sequence of numbers.

    Examples
    --------
    >>> spacing_from_scale((0.4, 0.1, 0.1))
    (0.25, 1.0, 1.0)
    >>> spacing_from_scale((0.4, 0.1, -0.1))
    (0.25, 1.0, 1.0)
    >>> spacing_from_scale((2.0, 0.4, 0.1, 0.1), uncoupled=[0])
    (0.0, 0.25, 1.0, 1.0)
    """
    if isinstance(scale, str | bytes) or not isinstance(scale, Sequence):
        try:
            scale = list(scale)  # numpy arrays, napari's scale arrays
        except TypeError:
            raise ValueError(f"scale must be a sequence of numbers, got {scale!r}") from None
    steps = []
    for step in scale:
        if isinstance(step, bool) or not isinstance(step, numbers.Real):
            raise ValueError(f"scale must be a sequence of numbers, got {list(scale)!r}")
        value = abs(float(step))
        steps.append(value if math.isfinite(value) and value > 0 else 0.0)
    reference = steps[-1] if steps and steps[-1] > 0 else 1.0
    skip = {a % len(steps) for a in uncoupled} if steps else set()
    out = []
    for axis, step in enumerate(steps):
        if axis in skip:
            out.append(0.0)
        elif step == 0:
            out.append(1.0)
        else:
            out.append(min(MAX_SPACING, max(MIN_SPACING, reference / step)))
    return tuple(out)
