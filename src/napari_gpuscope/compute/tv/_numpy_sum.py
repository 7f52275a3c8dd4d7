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
        if self.n < _LANES:
            return
        leaves: list[tuple[int, int, int, int]] = []  # (first element, length, depth, path)

        def visit(start: int, length: int, depth: int, path: int) -> None:
            if length <= _BLOCK:
                leaves.append((start, length, depth, path))
                return
            half = length // 2
            half -= half % _LANES
            visit(start, half, depth + 1, 2 * path)
            visit(start + half, length - half, depth + 1, 2 * path + 1)

        visit(0, self.n, 0, 0)
        self.depth = max(depth for _, _, depth, _ in leaves)
        # A leaf at depth k on path p sits, in the perfect tree of depth D, at the leftmost
        # descendant slot p * 2^(D - k); the other slots stay 0.
        slots = [path << (self.depth - depth) for _, _, depth, path in leaves]
        groups = [length // _LANES for _, length, _, _ in leaves]
        self.rows = max(groups)
        first_group = torch.tensor([start // _LANES for start, *_ in leaves], dtype=torch.int64)
        counts = torch.tensor(groups, dtype=torch.int64)
        self.row_index = [
            (first_group + t).clamp(max=self.n // _LANES - 1).to(device) for t in range(self.rows)
        ]
        self.row_mask = [(t < counts).to(torch.float32).to(device) for t in range(self.rows)]
        self.slots = torch.tensor(slots, dtype=torch.int64, device=device)
        self.tail = self.n % _LANES  # added one by one to the last leaf

    def __call__(self, values: torch.Tensor) -> torch.Tensor:
        """Row sums of a contiguous float32 ``(B, n)`` tensor, as ``values.numpy().sum(1)``."""
        batch = values.shape[0]
        if self.n < _LANES:
            total = values.new_zeros(batch)
            for i in range(self.n):
                total = total + values[:, i]
            return total
        groups = values[:, : self.n - self.tail].view(batch, -1, _LANES)
        lanes = groups.index_select(1, self.row_index[0])
        for index, mask in zip(self.row_index[1:], self.row_mask[1:], strict=True):
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
