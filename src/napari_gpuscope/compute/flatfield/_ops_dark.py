"""The darkfield step of a BaSiC ALM iteration as fused ops (``basic_dark_shape`` and
``basic_dark_finish`` in ``basic_alm.cu``): the image the darkfield's smoothness step works on,
then the new darkfield folded into the next flatfield step (the launch table is in :mod:`._ops`).
"""

from __future__ import annotations

import numpy as np
import torch

from ..kernels import Backend, FusedOp
from . import _examples
from ._alm_state import AlmState
from ._geometry import dc_scale
from ._ops_shared import SOURCE, _flat_mean, _shrink, _where_active

__all__ = ["basic_dark_finish", "basic_dark_shape"]


def _dark_shape_launch(backend: Backend, s: AlmState) -> None:
    p = s.flat.shape[0]
    m = s.flat[0].numel()
    inputs = (s.pixel_sums, s.flat, s.flat_hat, s.offset, s.dark_values, s.active, s.work)
    backend.launch(
        backend.function(SOURCE, "basic_dark_shape"),
        p * m,
        [
            *(backend.array(x) for x in inputs),
            np.float32(dc_scale(m)),
            np.int64(m),
            np.int64(p * m),
        ],
    )


def basic_dark_shape_twin(s: AlmState) -> None:
    """``work = pixel_sums[:, 1] / count - b_mean S - center - D_Z (mean S - S)`` (active)."""
    count, b_mean, center = (v[:, None, None] for v in s.dark_values.unbind(dim=1))
    z = s.offset[:, None, None] * (_flat_mean(s.flat_hat)[:, None, None] - s.flat)
    new = s.pixel_sums[:, 1] / count.clamp_min(1) - b_mean * s.flat - center - z
    _where_active(s.active, new, s.work)


basic_dark_shape = FusedOp(
    "basic_dark_shape",
    launch=_dark_shape_launch,
    twin=basic_dark_shape_twin,
    example=_examples.dark_shape_example,
    outputs=((0, "work"),),
    atol=1e-4,
)
"""``basic_dark_shape(state)``: the image the darkfield's smoothness step works on (into
``state.work``)."""


def _dark_finish_launch(backend: Backend, s: AlmState) -> None:
    p = s.flat.shape[0]
    m = s.flat[0].numel()
    # The kernel's signature, in order (``work`` is its ``smooth``).
    tensors = (
        s.work,
        s.thr_dark,
        s.flat,
        s.flat_hat,
        s.offset,
        s.dark_values,
        s.active,
        s.dark,
        s.dark_before,
        s.column,
    )
    backend.launch(
        backend.function(SOURCE, "basic_dark_finish"),
        p * m,
        [
            *(backend.array(x) for x in tensors),
            np.float32(dc_scale(m)),
            np.int64(m),
            np.int64(p * m),
        ],
    )


def basic_dark_finish_twin(s: AlmState) -> None:
    """``D_R = shrink(work, thr_dark) + D_Z (mean S - S)`` where some image has ``B < 1``
    (else unchanged); ``column -= D_R - D_R(old)``; ``dark_before = D_R(old)`` (active)."""
    z = s.offset[:, None, None] * (_flat_mean(s.flat_hat)[:, None, None] - s.flat)
    updated = _shrink(s.work, s.thr_dark[:, None, None]) + z
    updated = torch.where(s.dark_values[:, 0, None, None] > 0, updated, s.dark)
    _where_active(s.active, s.column - (updated - s.dark), s.column)
    _where_active(s.active, s.dark, s.dark_before)
    _where_active(s.active, updated, s.dark)


basic_dark_finish = FusedOp(
    "basic_dark_finish",
    launch=_dark_finish_launch,
    twin=basic_dark_finish_twin,
    example=_examples.dark_finish_example,
    outputs=((0, "dark"), (0, "dark_before"), (0, "column")),
    atol=1e-4,
)
"""``basic_dark_finish(state)``: the new darkfield (from the smoothed ``state.work``), folded
into the next flatfield step's column mean."""
