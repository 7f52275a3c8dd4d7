"""How an input's axes map onto a solver's ``(batch, coupled...)`` problem layout
(:class:`AxisLayout`): independent axes (time, channels, zero-weight axes) become the batch, the
others are coupled. :mod:`.chunking`, which chunks such inputs, is its public home.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class AxisLayout:
    """How the input's axes map onto a solver's ``(batch, coupled...)`` problem layout.

    Attributes
    ----------
    shape : tuple of int
        Input shape.
    batch_axes : tuple of int
        Independent axes (channel, zero-weight axes), in input order.
    coupled_axes : tuple of int
        Axes the solver couples, in input order.
    coupled_spacing : tuple of float
        Difference weight of each coupled axis.

    Examples
    --------
    >>> layout = AxisLayout.of((5, 8, 9), spacing=(0.0, 1.0, 1.0))
    >>> layout.batch_axes, layout.coupled_axes
    ((0,), (1, 2))
    """

    shape: tuple[int, ...]
    batch_axes: tuple[int, ...]
    coupled_axes: tuple[int, ...]
    coupled_spacing: tuple[float, ...]

    @staticmethod
    def of(
        shape: Sequence[int], spacing: Sequence[float], channel_axis: int | None = None
    ) -> AxisLayout:
        """Layout of an input of ``shape``: axes with a zero weight and the channel are batch.

        Parameters
        ----------
        shape : sequence of int
            Input shape.
        spacing : sequence of float
            One weight per non-channel axis.
        channel_axis : int, optional
            Axis holding independent channels (non-negative index).
        """
        shape = tuple(int(s) for s in shape)
        spatial = [a for a in range(len(shape)) if a != channel_axis]
        weight_of = dict(zip(spatial, spacing, strict=True))
        coupled = tuple(a for a in spatial if weight_of[a] > 0)
        batch = tuple(a for a in range(len(shape)) if a not in coupled)
        return AxisLayout(shape, batch, coupled, tuple(float(weight_of[a]) for a in coupled))

    @property
    def perm(self) -> tuple[int, ...]:
        """Axis permutation from input order to ``batch + coupled`` order."""
        return self.batch_axes + self.coupled_axes

    def to_problem(self, region: torch.Tensor) -> torch.Tensor:
        """Region tensor (input axis order) -> contiguous ``(batch, coupled...)`` tensor."""
        permuted = region.permute(self.perm)
        coupled_shape = permuted.shape[len(self.batch_axes) :]
        return permuted.reshape(-1, *coupled_shape).contiguous()

    def from_problem(self, problem: torch.Tensor, region_shape: Sequence[int]) -> torch.Tensor:
        """Inverse of :meth:`to_problem` (a view, input axis order)."""
        permuted_shape = [region_shape[a] for a in self.perm]
        inverse = np.argsort(self.perm).tolist()
        return problem.reshape(permuted_shape).permute(inverse)
