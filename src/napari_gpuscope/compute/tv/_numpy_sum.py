"""NumPy's float32 sum, bit for bit, on any torch device.

scikit-image's Chambolle stopping rule compares energies that NumPy sums in float32 with its
*pairwise* summation (``numpy/_core/src/umath/loops_utils.h.src``, ``pairwise_sum``). A sum in
another order or precision rounds differently, and on small images that moves the stop by an
iteration. :class:`PairwiseSum` reproduces NumPy's order exactly, for a batch of problems:

- ``n < 8`` elements: ``((0 + a_0) + a_1) + ...`` in order;
- ``8 <= n <= 128`` (a *leaf*): eight running sums ``r_j = a_j + a_{j+8} + ...`` over the
  complete groups of eight, combined as ``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``,
  then the last ``n % 8`` elements added one by one;
- ``n > 128``: ``sum(a[:m]) + sum(a[m:])`` with ``m = n // 2`` rounded down to a multiple of 8.

A full reduction adds the result to the identity ``0``. Every leaf starts at a multiple of 8
and, except the last, holds whole groups of eight, so the leaves are evaluated together with
one gather per group row, and the tree above them as a perfect binary tree in which missing
nodes are zeros (adding ``+0.0`` to a sum of non-negative numbers is exact), one vector add per
level.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["PairwiseSum"]

_BLOCK = 128
_LANES = 8


class PairwiseSum:
    """Float32 sums of ``(B, n)`` rows in NumPy's pairwise order.

    Parameters
    ----------
    n : int
        Elements per row.
    device : torch.device
        Where the sums run (the index tables live there).

    Examples
    --------
    >>> import numpy as np
    >>> values = np.random.default_rng(0).random((2, 1000)).astype(np.float32) ** 2
    >>> sums = PairwiseSum(1000, torch.device("cpu"))(torch.from_numpy(values))
    >>> bool((sums.numpy() == values.sum(axis=1)).all())
    True
    """

    def __init__(self, n: int, device: torch.device) -> None:
        self.n = int(n)
        self.device = device
        self.tail = self.n % _LANES  # added one by one to the last leaf
        if self.n < _LANES:
            return
        starts, lengths, depths, paths = _leaves(self.n)
        self.depth = int(depths.max())
        # A leaf at depth k on path p sits, in the perfect tree of depth D, at the leftmost
        # descendant slot p * 2^(D - k); the other slots stay 0.
        slots = paths << (self.depth - depths)
        groups = lengths // _LANES
        self.rows = int(groups.max())
        self.last_group = self.n // _LANES - 1
        self.first_group = torch.from_numpy(starts // _LANES).to(device)
        self.groups = torch.from_numpy(groups).to(device)
        self.slots = torch.from_numpy(slots).to(device)

    def __call__(self, values: torch.Tensor) -> torch.Tensor:
        """Row sums of a contiguous float32 ``(B, n)`` tensor, as ``values.numpy().sum(1)``."""
        batch = values.shape[0]
        if self.n < _LANES:
            total = values.new_zeros(batch)
            for i in range(self.n):
                total = total + values[:, i]
            return total
        groups = values[:, : self.n - self.tail].view(batch, -1, _LANES)
        lanes = groups.index_select(1, self.first_group)
        for t in range(1, self.rows):
            index = (self.first_group + t).clamp_(max=self.last_group)
            mask = (self.groups > t).to(values.dtype)
            # mask is 1.0 or 0.0: lanes + row * 1 rounds like lanes + row, and + 0 is exact.
            lanes.addcmul_(groups.index_select(1, index), mask[None, :, None])
        pairs = lanes[..., 0::2] + lanes[..., 1::2]
        quads = pairs[..., 0::2] + pairs[..., 1::2]
        leaf = quads[..., 0] + quads[..., 1]
        for i in range(self.n - self.tail, self.n):
            leaf[:, -1] += values[:, i]
        tree = values.new_zeros((batch, 1 << self.depth))
        tree[:, self.slots] = leaf
        while tree.shape[1] > 1:
            tree = tree[:, 0::2] + tree[:, 1::2]
        return tree[:, 0] + 0.0


def _leaves(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """NumPy's recursion, level by level: each leaf's first element, length, depth and path
    (the left/right turns from the root as bits), in order."""
    starts = np.zeros(1, dtype=np.int64)
    lengths = np.full(1, n, dtype=np.int64)
    depths = np.zeros(1, dtype=np.int64)
    paths = np.zeros(1, dtype=np.int64)
    while (lengths > _BLOCK).any():
        split = lengths > _BLOCK
        half = lengths // 2
        half -= half % _LANES
        # Each node becomes one (a leaf) or two entries, keeping the order.
        count = np.where(split, 2, 1)
        position = np.cumsum(count) - count
        total = int(count.sum())
        new = [np.empty(total, dtype=np.int64) for _ in range(4)]
        for array, left, right in zip(
            new,
            (
                starts,
                np.where(split, half, lengths),
                depths + split,
                2 * paths * split + paths * ~split,
            ),
            (starts + half, lengths - half, depths + 1, 2 * paths + 1),
            strict=True,
        ):
            array[position] = left
            array[position[split] + 1] = right[split]
        starts, lengths, depths, paths = new
    return starts, lengths, depths, paths
