"""Device memory of a reconstruction, counted from the arrays the code allocates.

A region's normal equations (:meth:`~._reconstruct.Reconstructor.system`) and its solve run as
passes that follow one another; each frees its temporaries before the next. What the call
keeps (the optics it makes, and per slice the transfer functions and defocus spectra it
builds) adds to all of them. :class:`MemoryPlan` is that sum, the largest pass, for ``c``
slices at once:

- ``setup``: the grid's and the illumination pupil's temporaries (when they are made);
- ``build``: the transfer-function build, a group of slices at a time (two complex oversampled
  planes per slice, three when the defocus spectra are not kept);
- ``spectrum``: the contrast of ``c`` slices written into a complex array and its FFT;
- ``sums``: the spectra and the normal equations (two sets while chunks are summed);
- ``solve`` (Tikhonov: the two spectra and their inverse FFTs), or the TV option's three ADMM
  passes (its state and the x-step, the z-step, the inverse FFT).

FFT work areas are counted apart, in bytes of the transform's output: the CPU's FFT allocates
none, cuFFT as much as its plan asks for (:data:`~._optics.FFT_WORK_PLANES` per output is the
bound the plan uses). ``tests/compute/test_phase_memory.py`` checks the plan against the CPU
allocator; the GPU kit checks it against ``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._types import Device
from ..memory import plan_chunk
from ..tv import _ops as tv_ops
from ._optics import FFT_WORK_PLANES

__all__ = ["SMALL_BYTES", "SUMS_PER_ELEMENT", "MemoryPlan", "Pass", "admm_passes", "solve_passes"]

SUMS_PER_ELEMENT = 32
"""Bytes of the normal equations per frequency: two float32 and three complex64 fields."""
SMALL_BYTES = 1 << 16
"""The small tensors of a call (slice means, crop indices, frequency vectors, scalars): ~20 KiB
for a 64 x 64 x 11 stack, measured; a little more on a GPU, whose allocator rounds every
allocation up to 512 bytes."""


@dataclass(frozen=True)
class Pass:
    """Bytes one pass holds beyond what the call keeps: fixed and per slice, and of those the
    outputs of its FFTs (whose work areas come on top)."""

    fixed: int = 0
    per_slice: int = 0
    fft: int = 0
    fft_per_slice: int = 0
    group: int | None = None
    """At most this many slices at once (the build's groups); None: all of them."""

    def bytes(self, slices: int, fft_work: float) -> int:
        """Bytes of the pass for ``slices`` slices, FFT work areas of ``fft_work`` outputs."""
        n = slices if self.group is None else min(slices, self.group)
        return int(self.fixed + n * self.per_slice + fft_work * (self.fft + n * self.fft_per_slice))


@dataclass(frozen=True)
class MemoryPlan:
    """Device bytes of one region's normal equations and solve, ``c`` slices at a time.

    ``peak(c) = SMALL_BYTES + stored + c * stored_per_slice + max(pass(c) for every pass)``.
    """

    stored: int
    stored_per_slice: int
    passes: dict[str, Pass] = field(default_factory=dict)
    keep: bool = True
    """Whether the built transfer functions (and defocus spectra) stay in the cache."""

    def peak(self, slices: int, fft_work: float = FFT_WORK_PLANES) -> int:
        """Planned device bytes with ``slices`` slices per chunk."""
        largest = max((p.bytes(slices, fft_work) for p in self.passes.values()), default=0)
        return SMALL_BYTES + self.stored + slices * self.stored_per_slice + largest

    def breakdown(self, slices: int, fft_work: float = FFT_WORK_PLANES) -> dict[str, int]:
        """Each pass's total (what is kept, plus the pass) for ``slices`` slices: JSON-able."""
        kept = SMALL_BYTES + self.stored + slices * self.stored_per_slice
        return {name: kept + p.bytes(slices, fft_work) for name, p in self.passes.items()}

    def chunk(self, n_z: int, device: Device, budget: int | None, what: str) -> int:
        """The most slices (<= ``n_z``) whose :meth:`peak` fits the usable memory.

        Raises :class:`~napari_gpuscope.compute.memory.DeviceMemoryError` when one does not.
        """
        usable = plan_chunk(2**62, 1, device, budget=budget, what=what)  # bytes, as 1-byte items
        if self.peak(1) > usable:
            plan_chunk(1, self.peak(1), device, budget=budget, what=what)  # raises, with advice
        low, high = 1, n_z
        while low < high:  # the peak grows with the chunk
            middle = (low + high + 1) // 2
            low, high = (middle, high) if self.peak(middle) <= usable else (low, middle - 1)
        return low


def solve_passes(plane: int, *, fused: bool) -> dict[str, Pass]:
    """The Tikhonov solve beyond the normal equations: the two spectra, then their inverse
    FFTs one after the other (both results kept); the twin's products where the fused
    kernel does not run."""
    complex_plane = 8 * plane
    extra = 0 if fused else 3 * complex_plane
    return {"solve": Pass(fixed=4 * complex_plane + extra, fft=complex_plane)}


def admm_passes(plane: int, *, fused_tv: bool) -> dict[str, Pass]:
    """The TV option's ADMM (:func:`~._reconstruct.admm_tv`) beyond the normal equations.

    Its state: the absorption spectrum, ``z``, ``u``, the shifted diagonal, the dual (two
    planes) and the right-hand side. Then the largest of: the x-step's right-hand side (the
    residual, its complex copy and spectrum), the inverse FFT of the solve (both spectra and the
    result, the old absorption spectrum released), and the z-step (the phase as a complex
    array, the TV target, the proximal step's two extrapolated duals, and the twins' work
    buffers where the fused TV kernels do not run).
    """
    real, complex_ = 4 * plane, 8 * plane
    state = complex_ + 3 * real + 2 * real + complex_
    twin = 0 if fused_tv else tv_ops.TWIN_WORK_BUFFERS * real
    return {
        "tv x-step": Pass(fixed=state + real + 2 * complex_, fft=complex_),
        "tv inverse FFT": Pass(fixed=state + 2 * complex_, fft=complex_),
        "tv z-step": Pass(fixed=state + complex_ + real + 2 * 2 * real + twin),
    }
