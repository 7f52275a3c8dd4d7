"""The tensors of one inexact-ALM pass, as the fused ops (:mod:`._ops`) read and write them.

One :class:`AlmState` holds every iterate, input and per-problem scalar of a pass over ``P``
problems. The ALM loop (:mod:`._alm`) builds it once and hands it to each op; each op's CuPy
launcher passes the fields its kernel takes in the order of the ``.cu`` signature, and its
torch twin reads the same fields by name, so no argument list is written twice. The fused
dispatch (:class:`~napari_gpuscope.compute.kernels.FusedOp`) treats the dataclass as a
structure of tensors: it decides the path on all of them, and its self-test clones them and
compares the op's output fields.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch

from ._geometry import scratch_for

__all__ = ["AlmState"]


@dataclass
class AlmState:
    """Every tensor of one ALM pass over ``P`` problems of ``T`` images of ``m x n`` pixels.

    All float32 and contiguous on one device for the fused kernels (the twins take any float
    dtype). Per-problem flags and counters are float32 too: the kernels read one dtype.
    """

    images: torch.Tensor
    """(P, T, m, n) ``I``, the working-size stacks."""
    weight: torch.Tensor
    """(P, T, m, n) ``W``, the reweighting's weights."""
    sparse: torch.Tensor
    """(P, T, m, n) ``I_R``, the sparse (foreground) part."""
    dual: torch.Tensor
    """(P, T, m, n) ``Y``, the dual variable."""
    baseline: torch.Tensor
    """(P, T) ``B``, relative (mean 1)."""
    rows: torch.Tensor
    """(P, T, 2) per image: sum of ``I - I_R``, and over pixels with ``S >= mean S``."""
    flat: torch.Tensor
    """(P, m, n) ``S``, the flatfield."""
    flat_hat: torch.Tensor
    """(P, m, n) the flatfield's DCT (its DC term gives ``mean S``)."""
    dark: torch.Tensor
    """(P, m, n) ``D_R``, the darkfield's shape."""
    dark_before: torch.Tensor
    """(P, m, n) ``D_R`` before the last darkfield step (``dark`` itself without the darkfield)."""
    column: torch.Tensor
    """(P, m, n) the next flatfield step's column mean ``mean_T(I - I_R - I_B + Y / mu)``."""
    work: torch.Tensor
    """(P, m, n) the darkfield step's image (shape, then its smoothed version)."""
    pixel_sums: torch.Tensor
    """(P, 1 or 3, m, n) per-pixel sums over images; 3 rows with the darkfield."""
    totals: torch.Tensor
    """(P, 1 or 3) ``pixel_sums`` summed over pixels."""
    image_norm: torch.Tensor
    """(P,) ``||I||``."""
    offset_max: torch.Tensor
    """(P,) upper bound of the darkfield offset (the stack's minimum)."""
    lam_flat: torch.Tensor
    """(P,) the flatfield's smoothness."""
    lam_dark: torch.Tensor
    """(P,) the darkfield's smoothness."""
    mu: torch.Tensor
    """(P,) the penalty, growing by ``rho`` per iteration."""
    mu_max: torch.Tensor
    """(P,) the penalty's cap."""
    thr_flat: torch.Tensor
    """(P,) the flatfield step's threshold ``lam_flat / mu``."""
    thr_dark: torch.Tensor
    """(P,) the darkfield step's threshold."""
    offset: torch.Tensor
    """(P,) ``D_Z``, the flat part of the darkfield."""
    iterations: torch.Tensor
    """(P,) iterations run (float32)."""
    ratio: torch.Tensor
    """(P,) ``||I - I_R - I_B|| / ||I||``, the convergence measure."""
    active: torch.Tensor
    """(P,) 1 while a problem iterates, 0 once frozen."""
    active_next: torch.Tensor
    """(P,) the flags of the next iteration (swapped with ``active`` between iterations)."""
    dark_values: torch.Tensor
    """(P, 3) the darkfield heuristic's count, baseline mean and centre."""
    scratch: torch.Tensor
    """float64 partial sums as float32 (:func:`._geometry.scratch_for`; the twins ignore it)."""

    @property
    def with_dark(self) -> bool:
        """Whether the pass estimates the darkfield (``pixel_sums`` holds its two extra rows)."""
        return self.pixel_sums.shape[1] == 3

    def clone(self) -> AlmState:
        """A copy with every tensor cloned."""
        return replace(self, **{f.name: getattr(self, f.name).clone() for f in fields(self)})

    def swap_flags(self) -> None:
        """Make the next iteration's flags current (the old ones become the next's buffer)."""
        self.active, self.active_next = self.active_next, self.active

    @classmethod
    def filled(
        cls,
        p: int,
        t: int,
        shape: tuple[int, int],
        device: torch.device,
        *,
        with_dark: bool = True,
        **given: torch.Tensor,
    ) -> AlmState:
        """A state of the given sizes: the ``given`` fields, zeros for the others (examples and
        tests, where each op reads a few fields).

        Examples
        --------
        >>> state = AlmState.filled(2, 3, (4, 5), torch.device("cpu"), with_dark=False)
        >>> tuple(state.images.shape), tuple(state.pixel_sums.shape), state.with_dark
        ((2, 3, 4, 5), (2, 1, 4, 5), False)
        """
        sums = 3 if with_dark else 1
        shapes = {
            **dict.fromkeys(("images", "weight", "sparse", "dual"), (p, t, *shape)),
            "baseline": (p, t),
            "rows": (p, t, 2),
            **dict.fromkeys(
                ("flat", "flat_hat", "dark", "dark_before", "column", "work"), (p, *shape)
            ),
            "pixel_sums": (p, sums, *shape),
            "totals": (p, sums),
            "dark_values": (p, 3),
        }
        values: dict[str, torch.Tensor] = {}
        for field in fields(cls):
            if field.name == "scratch":
                continue
            size = shapes.get(field.name, (p,))
            values[field.name] = given.get(field.name, torch.zeros(size, device=device))
        images = values["images"]
        # Zeroed: a copy of never-written device memory is what compute-sanitizer's initcheck
        # reports (the self-test copies every argument; the kernels write it first).
        scratch = given.get("scratch", scratch_for(images, with_dark).zero_())
        unknown = set(given) - set(values) - {"scratch"}
        if unknown:
            raise TypeError(f"AlmState has no fields {sorted(unknown)}")
        return cls(**values, scratch=scratch)
