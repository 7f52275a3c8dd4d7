"""The sampling geometry of eSRRF: Catmull-Rom weight matrices and the per-phase tap table.

Coordinates follow the research note (``docs/esrrf.md``): in the continuous coordinate ``u``
input pixel ``k`` spans ``[k, k + 1)``. NanoPyx's magnified image samples ``u = i / M`` (half an
output pixel off a pixel-centred grid), its Roberts-cross gradients live at block corners, and
its radial gradient convergence (RGC) only ever reads the x2M-magnified gradients at every M-th
sample, i.e. on a half-pixel lattice ``u = n / 2``. All geometric terms of the RGC depend only on
the output pixel's sub-pixel phase ``(r mod M, c mod M)``, so they are tabulated once per phase
(:class:`TapTable`).

``geometry="centred"`` evaluates the same method with output pixel ``i`` centred at
``u = (i + 0.5) / M``: the intensity samples move by half an output pixel and the RGC reads the
gradient lattice one half-pixel further (``lattice_shift = 1``); the tap distances are the same.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

__all__ = ["TapTable", "catmull_rom_matrix", "half_lattice_positions", "magnified_positions"]


def _keys(s: np.ndarray) -> np.ndarray:
    """Catmull-Rom (Keys a = -0.5) kernel weights."""
    s = np.abs(s)
    near = 1.5 * s**3 - 2.5 * s**2 + 1.0
    far = -0.5 * s**3 + 2.5 * s**2 - 4.0 * s + 2.0
    return np.where(s < 1.0, near, np.where(s < 2.0, far, 0.0))


def catmull_rom_matrix(n_in: int, positions: np.ndarray) -> np.ndarray:
    """``(len(positions), n_in)`` float64 matrix sampling a signal at continuous ``u`` positions.

    Taps outside ``[0, n_in)`` are dropped without renormalisation (NanoPyx's zero padding), and
    a position outside ``[0, n_in)`` gives a zero row.

    Examples
    --------
    >>> m = catmull_rom_matrix(4, np.array([1.5, 0.0]))
    >>> m[0].tolist(), float(m[1].sum())
    ([0.0, 1.0, 0.0, 0.0], 0.5)
    """
    positions = np.asarray(positions, dtype=np.float64)
    out = np.zeros((positions.size, n_in))
    inside = (positions >= 0) & (positions < n_in)
    base = np.floor(positions - 0.5).astype(np.int64)
    rows = np.arange(positions.size)
    for tap in range(4):
        k = base - 1 + tap
        ok = inside & (k >= 0) & (k < n_in)
        np.add.at(out, (rows[ok], k[ok]), _keys(positions[ok] - (k[ok] + 0.5)))
    return out


def magnified_positions(n_in: int, magnification: int, centred: bool) -> np.ndarray:
    """Sample positions ``u`` of the magnified image's pixels along one axis.

    NanoPyx computes ``i / M`` in float32 (then uses it in double), which is kept here.
    """
    i = np.arange(n_in * magnification, dtype=np.float32)
    if centred:
        i = i + np.float32(0.5)
    return (i / np.float32(magnification)).astype(np.float64)


def half_lattice_positions(n_in: int, magnification: int, centred: bool) -> np.ndarray:
    """Positions of the ``2 * n_in + 1`` half-lattice gradient samples along one axis.

    Sample ``n < 2 n_in`` is at ``u = n / 2``. NanoPyx clamps its x2M index to ``2 M n_in - 1``,
    so every lattice index ``>= 2 n_in`` reads the value at ``u = (2 M n_in - 1) / (2 M)``: sample
    ``2 n_in`` holds it (and reads beyond are clamped to it). The centred geometry continues the
    lattice instead (``u = n_in``).
    """
    u = np.arange(2 * n_in + 1, dtype=np.float64) / 2.0
    if not centred:
        last = np.float32(2 * magnification * n_in - 1) / np.float32(2 * magnification)
        u[-1] = float(last)
    return u


@dataclass(frozen=True)
class TapTable:
    """The RGC taps of every sub-pixel phase, shared by the kernel and its twin.

    For output row ``r = q M + s`` the tap with row offset ``j`` reads the half-lattice gradient
    row ``2 q + offset[s, j]`` (``offset = floor((2 s + 1) / M) + j + lattice_shift``) at
    distance ``dy[s, j]`` from the pixel's centre; columns likewise. A tap is kept where
    ``0 < d <= 2 sigma + 1`` (a phase constant) and its lattice index is at least 1 (NanoPyx's
    ``v > 0``: only the first rows and columns lose taps).

    Attributes
    ----------
    magnification : int
    radius : float
    lattice_shift : int
        0 for NanoPyx's geometry, 1 for the pixel-centred one.
    offsets : numpy.ndarray
        ``(M, J)`` int64 lattice offset per phase and tap row (the same table serves columns).
    distances : numpy.ndarray
        ``(M, J)`` float64 signed distance ``v - centre`` in input pixels.
    steps : numpy.ndarray
        ``(J,)`` int64 tap offsets ``j`` (``-floor(2R) ... floor(2R + 1) - 1``).
    """

    magnification: int
    radius: float
    lattice_shift: int
    offsets: np.ndarray
    distances: np.ndarray
    steps: np.ndarray

    @property
    def sigma(self) -> float:
        """The ring's sigma, ``radius / 2.355`` (NanoPyx)."""
        return self.radius / 2.355

    @property
    def max_distance(self) -> float:
        """Largest tap distance kept, ``2 sigma + 1``."""
        return 2.0 * self.sigma + 1.0

    def weight(self, d: np.ndarray) -> np.ndarray:
        """Distance weight ``(d exp(-d^2 / (2 sigma^2)))^4``."""
        return (d * np.exp(-d * d / (2.0 * self.sigma**2))) ** 4

    def phase_taps(self, s_row: int, s_col: int) -> list[tuple[int, int, float, float, float]]:
        """Kept taps of phase ``(s_row, s_col)``: ``(row offset, col offset, dx, dy, weight)``."""
        taps = []
        for a in range(len(self.steps)):
            dy = self.distances[s_row, a]
            for b in range(len(self.steps)):
                dx = self.distances[s_col, b]
                d = math.sqrt(dx * dx + dy * dy)
                if 0 < d <= self.max_distance:
                    weight = float(self.weight(np.array(d)))
                    taps.append(
                        (int(self.offsets[s_row, a]), int(self.offsets[s_col, b]), dx, dy, weight)
                    )
        return taps

    @property
    def taps_per_axis(self) -> int:
        """``J``, the tap rows (and columns) of every phase."""
        return len(self.steps)

    @property
    def first_offset(self) -> int:
        """Lattice offset of tap row 0 beyond ``floor((2 s + 1) / M)``: ``steps[0] + shift``."""
        return int(self.steps[0]) + self.lattice_shift

    def unit_table(self) -> np.ndarray:
        """``(J * J, M * M, 4)`` float32 table for the kernels: for tap ``(a, b)`` (row ``a``,
        column ``b``) of phase ``p = s_row * M + s_col``, ``(dx / d, dy / d, weight, 0)`` --
        the unit vector from the pixel to the tap and its weight -- or zeros for a tap that is
        not kept (the same test as :meth:`phase_taps`). Phases are the fastest axis, so the
        threads of a warp (consecutive columns) read adjacent records."""
        m, j = self.magnification, self.taps_per_axis
        out = np.zeros((j, j, m, m, 4), np.float64)
        for s_row in range(m):
            for s_col in range(m):
                for a in range(j):
                    dy = self.distances[s_row, a]
                    for b in range(j):
                        dx = self.distances[s_col, b]
                        d = math.sqrt(dx * dx + dy * dy)
                        if 0 < d <= self.max_distance:
                            weight = float(self.weight(np.array(d)))
                            out[a, b, s_row, s_col] = (dx / d, dy / d, weight, 0.0)
        return out.reshape(j * j, m * m, 4).astype(np.float32)

    def counts(self) -> np.ndarray:
        """``(M * M,)`` number of kept taps per phase."""
        m = self.magnification
        return np.array([len(self.phase_taps(sr, sc)) for sr in range(m) for sc in range(m)])


@functools.lru_cache(maxsize=64)
def tap_table(magnification: int, radius: float, centred: bool) -> TapTable:
    """The :class:`TapTable` of one setting (cached)."""
    m = magnification
    steps = np.arange(-int(2.0 * radius), int(2.0 * radius + 1.0))
    s = np.arange(m)
    # floor(2 * (s + 0.5) / M) in exact integer arithmetic: 0 or 1.
    base = (2 * s + 1) // m
    offsets = base[:, None] + steps[None, :]
    distances = offsets / 2.0 - (s[:, None] + 0.5) / m
    return TapTable(
        magnification=m,
        radius=float(radius),
        lattice_shift=1 if centred else 0,
        offsets=offsets + (1 if centred else 0),
        distances=distances,
        steps=steps,
    )
