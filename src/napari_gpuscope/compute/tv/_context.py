"""What every chunk of a TV job shares: reading, the solver call, previews, the output mapping."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..arrays import to_device, to_host
from ..camera import CameraModel
from ..chunking import AxisLayout, Region
from ..job_parts import mapped
from ..jobs import Job, Output, Progress
from ..noise import anscombe_forward, anscombe_inverse
from . import _solvers as solvers
from ._params import TVParams
from ._scale import DataScale, ScaledView, unscale

if TYPE_CHECKING:
    from .._types import ArrayLike

__all__ = ["OUTPUT", "NumericalError", "SolveContext", "StopAll", "Totals", "fraction_done"]

OUTPUT = "denoised"
"""Name of the job's (only) output in ``Progress.outputs``."""


class NumericalError(ArithmeticError):
    """A solve produced NaN or infinity (never returned as a result)."""


class StopAll(Exception):
    """A solve was stopped early: later chunks are not started."""


@dataclass
class Totals:
    """Facts accumulated over the chunks of a job.

    ``written`` lists the parts of the output that hold their final values; ``unreached`` counts
    voxels inside those parts that a stopped run never solved (left as the solver's start).
    """

    iterations: int = 0
    relative_gap: float = 0.0
    converged: bool = True
    stopped: bool = False
    chunks: int = 0
    unreached: int = 0
    written: list[tuple[slice, ...]] = field(default_factory=list)

    def add(self, iterations: int, relative_gap: float, converged: bool) -> None:
        self.iterations = max(self.iterations, iterations)
        self.relative_gap = max(self.relative_gap, relative_gap)
        self.converged = self.converged and converged


SolverFactory = Callable[[torch.Tensor, "SolveContext"], solvers.Solver]


@dataclass
class SolveContext:
    """One job's fixed inputs, and the operations its chunks are made of.

    Attributes
    ----------
    image : array-like
        The input (never modified).
    params : TVParams
        The parameters.
    layout : AxisLayout
        How the input maps onto solver problems.
    weight : float
        The weight the solver uses (times the data scale).
    noise_sigma : float or None
        The noise level the weight was derived from (Gaussian model with a strength).
    scale : DataScale
        How the data is brought to magnitude ~1.
    camera : CameraModel or None
        Poisson mode's camera.
    device : torch.device
        Where the solves run.
    out : numpy.ndarray
        The float32 output, written chunk by chunk.
    solver : callable
        ``solver(f, context)`` returning a solver generator for the problems ``f``.
    bytes_per_element : int
        Device bytes per voxel the solver needs (the chunk plan).
    totals : Totals
        Accumulated facts.
    """

    image: ArrayLike
    params: TVParams
    layout: AxisLayout
    weight: float
    noise_sigma: float | None
    scale: DataScale
    camera: CameraModel | None
    device: torch.device
    out: np.ndarray
    solver: SolverFactory
    bytes_per_element: int
    totals: Totals = field(default_factory=Totals)

    @property
    def lo(self) -> float:
        """Lower bound of the box the solver enforces: 0 for FGP in non-negative Gaussian mode.

        The one place the non-negative rule is decided: elsewhere (Chambolle, which has no box,
        and Poisson mode, whose solver works in the Anscombe domain where 0 is not the
        transform's 0) the output is clipped at 0 instead (:meth:`to_output`).
        """
        box = self.params.method == "fgp" and self.params.nonnegative and self.camera is None
        return 0.0 if box else -math.inf

    def read(self, region: tuple[slice, ...]) -> torch.Tensor:
        """The solver's data for an input region: ``(batch, coupled...)`` float32 on the device,
        transformed (Poisson mode) and scaled."""
        if self.scale.on_host:
            f = to_device(ScaledView(self.image, self.scale.factor)[region], self.device)
        else:
            f = to_device(self.image, self.device, region=region)
            if self.camera is not None:
                f = anscombe_forward(f, self.camera)
            if self.scale.factor != 1.0:
                f.mul_(self.scale.factor)
        return self.layout.to_problem(f)

    def to_output(self, u: torch.Tensor, region: Region) -> torch.Tensor:
        """A problem-layout estimate of ``region.read`` -> its core in the input's layout and
        units (unscaled, back from the Anscombe domain, clipped in non-negative mode)."""
        u = self.layout.from_problem(u, region.read_shape)[region.keep]
        if self.scale.factor != 1.0:
            u = unscale(u, self.scale.factor)
        if self.camera is not None:
            u = anscombe_inverse(u, self.camera, exact=True)
        if self.params.nonnegative and self.lo < 0:  # not enforced by the solver: clip
            u = u.clamp_min(0.0)
        return u

    def solve(self, region: Region, f: torch.Tensor) -> Job[solvers.SolveResult]:
        """Run the solver on ``f`` (the data of ``region.read``) with progress and previews of
        the region's core; refuse a non-finite result."""
        params = self.params
        first_gap = None
        fraction = 0.0  # FGP's gap is not monotone; the bar must not move backwards
        output_region = None if region.whole else region.core

        def report(tick: solvers.Tick) -> Progress:
            nonlocal first_gap, fraction
            if first_gap is None:
                first_gap = tick.relative_gap
            done = fraction_done(tick.iteration, tick.relative_gap, first_gap, params)
            fraction = max(fraction, done)
            estimate = tick.estimate
            return Progress(
                fraction,
                f"iteration {tick.iteration}/{params.max_iterations}, gap {tick.relative_gap:.1e}",
                step=tick.iteration,
                metrics={"iteration": tick.iteration, "relative_gap": tick.relative_gap},
                outputs={
                    OUTPUT: Output(
                        lambda: to_host(self.to_output(estimate, region)),
                        region=output_region,
                        shape=self.out.shape,
                    )
                },
            )

        solver = self.solver(f, self)
        result: solvers.SolveResult = yield from mapped(solver, report)
        self.refuse_non_finite(
            bool(torch.isfinite(result.image).all()) and not math.isnan(result.relative_gap)
        )
        return result

    def refuse_non_finite(self, finite: bool) -> None:
        """Raise :class:`NumericalError` unless a solve's image and gap were finite: a NaN
        result is never returned, let alone as converged."""
        if not finite:
            raise NumericalError(
                f"TV denoising ({self.params.method}) produced NaN or infinite values although "
                "the input was finite and scaled to magnitude ~1; this is a bug, please report "
                f"it with the parameters ({self.params.to_json()}) and the input's value range."
            )


def fraction_done(iteration: int, gap: float, first_gap: float, params: TVParams) -> float:
    """Progress of a solve: iterations used, or the way from the first gap to the tolerance on
    a log scale, whichever is further.

    Runs usually stop on the gap long before ``max_iterations``; counting iterations alone
    would make the bar jump from a fraction to 100 %.

    Examples
    --------
    >>> params = TVParams(tolerance=1e-3, max_iterations=1000)
    >>> fraction_done(50, 1e-2, 1e-1, params)  # half way from 1e-1 to 1e-3
    0.5
    """
    tolerance = params.tolerance
    by_iterations = iteration / params.max_iterations
    usable = math.isfinite(gap) and math.isfinite(first_gap) and gap > 0
    if tolerance <= 0 or not usable or first_gap <= tolerance:
        return min(1.0, by_iterations)
    by_gap = math.log(first_gap / max(gap, tolerance)) / math.log(first_gap / tolerance)
    return min(1.0, max(by_iterations, by_gap))
