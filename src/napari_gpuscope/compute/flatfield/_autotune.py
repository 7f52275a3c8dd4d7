"""Autotune: the flatfield smoothness by BaSiCPy's entropy + Fourier-L0 cost, candidates batched.

Every candidate smoothness is fitted at once, as one batch of independent problems on the
device, on about 50 of the images (as BaSiCPy); each candidate's cost is the entropy of the
corrected intensities' histogram (shading smears it) plus 30 x the fraction of significant
high-frequency DCT coefficients of its flatfield (ripple). The winner is then fitted on all
images, so the returned profile is the best one (BaSiCPy left a non-optimal flatfield behind).
A candidate whose fit has stopped reweighting never changes again, so it is scored at once: the
progress after each reweighting pass counts the candidates scored and names the best so far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._types import ArrayLike
from ..arrays import InvalidInputError
from ..devices import device_context
from ..jobs import Job, Progress, blocking, mapped
from ..results import Geometry, LayerDataTuple
from ..signatures import takes_params
from ._alm import FitState, reweighting_passes
from ._dct import dct2
from ._fit import _check_weight, broadcast_weight, working_stack
from ._fit import _run as _fit_job
from ._params import BasicParams
from ._profile import ShadingProfile
from ._stack import StackLayout, check_images, resize_frames, working_shape

__all__ = ["CANDIDATES", "AutotuneResult", "autotune", "autotune_cost", "iter_autotune"]

CANDIDATES = (0.01, 0.1, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4, 5, 6, 7, 8, 10)
"""BaSiCPy 2.0's pool of flatfield smoothness values."""
SEARCH_FRAMES = 50
HISTOGRAM_BINS = 1000
QUANTILES = (0.01, 0.99)
VMIN_FACTOR, VRANGE_FACTOR = 0.6, 1.5
L0_IMAGE_THRESHOLD, L0_RADIUS, L0_COST = 0.1, 10.0, 30.0


def _entropy(values: torch.Tensor, low: float, high: float) -> float:
    """Differential entropy ``-sum p log p dx`` of a density histogram on ``[low, high]``."""
    inside = values[(values >= low) & (values <= high)]
    if inside.numel() == 0 or not high > low:
        return math.inf
    counts = torch.histc(inside.double(), bins=HISTOGRAM_BINS, min=low, max=high)
    width = (high - low) / HISTOGRAM_BINS
    density = counts / (counts.sum() * width)
    density = density[density > 0]
    return float(-(density * density.log()).sum() * width)


def _fourier_l0(flat: torch.Tensor) -> float:
    """Fraction of the DCT coefficients beyond radius 10 (both indices > 0) whose magnitude in
    the un-normalised DCT-II (torch-dct's, as BaSiCPy) exceeds 0.1."""
    m, n = flat.shape
    # Un-normalised = orthonormal x sqrt(2m) sqrt(2n) off the first row and column.
    spectrum = dct2(flat.double()).abs() * 2.0 * math.sqrt(m * n)
    i = torch.arange(m, device=flat.device)[:, None]
    j = torch.arange(n, device=flat.device)[None, :]
    outside = (i**2 + j**2 > L0_RADIUS**2) & (i > 0) & (j > 0)
    return float((spectrum[outside] > L0_IMAGE_THRESHOLD).double().mean())


def autotune_cost(corrected: torch.Tensor, flat: torch.Tensor, value_range: float) -> float:
    """BaSiCPy's autotune cost of one candidate: entropy + 30 x Fourier L0 of the flatfield.

    ``corrected`` is the candidate's corrected working-size stack, ``flat`` its flatfield
    (mean 1) and ``value_range`` the histogram span fixed by a first fit.
    """
    values = corrected.flatten()
    low = float(torch.quantile(values[:: max(1, values.numel() // 2**24)], QUANTILES[0]))
    low *= VMIN_FACTOR
    return _entropy(values, low, low + value_range) + L0_COST * _fourier_l0(flat)


@dataclass(frozen=True)
class AutotuneResult:
    """The chosen smoothness, every candidate's cost, and the profile fitted with the winner."""

    smoothness_flatfield: float
    smoothness_darkfield: float | None
    candidates: tuple[float, ...]
    costs: tuple[float, ...]
    profile: ShadingProfile
    stopped_early: bool = False

    def summary(self) -> dict[str, Any]:
        return {
            "smoothness_flatfield": self.smoothness_flatfield,
            "smoothness_darkfield": self.smoothness_darkfield,
            "candidates": list(self.candidates),
            "costs": [c if math.isfinite(c) else None for c in self.costs],
            "profile": self.profile.summary(),
        }

    def describe(self) -> str:
        finite = sum(math.isfinite(c) for c in self.costs)
        return (
            f"autotune chose smoothness {self.smoothness_flatfield:g} ({finite} of "
            f"{len(self.costs)} candidates converged); then {self.profile.describe()}"
        )

    def layers(
        self,
        name: str = "images",
        geometry: Geometry | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[LayerDataTuple]:
        return self.profile.layers(name, geometry, metadata)


def _search_indices(n_frames: int) -> np.ndarray:
    return np.arange(0, n_frames, max(n_frames // SEARCH_FRAMES, 1))


class _Subset:
    """Every k-th frame of a ``(T, Y, X)`` array, still lazy."""

    def __init__(self, images: ArrayLike, indices: np.ndarray) -> None:
        self.images, self.indices = images, indices
        self.shape = (len(indices), *tuple(images.shape[1:]))
        self.dtype = images.dtype

    def __getitem__(self, key: slice) -> Any:
        picked = self.indices[key]
        return np.stack([np.asarray(self.images[int(i)]) for i in picked])


class _Scores:
    """Each candidate's cost, scored once its problem has stopped reweighting.

    Problem 0 is the reference fit (the mean smoothness of BaSiCPy's pool) that fixes the
    histogram's span; candidate ``k`` is problem ``k + 1``.
    """

    def __init__(self, stack: torch.Tensor, count: int, tolerance: float) -> None:
        self.stack, self.tolerance = stack, tolerance  # the (T, Y, X) working stack
        self.value_range: float | None = None
        self.scored: dict[int, float] = {}
        self.count = count

    def update(self, state: FitState, done: torch.Tensor) -> None:
        """Score the candidates whose problems are done (and, first, the reference's span)."""
        if self.value_range is None:
            if not bool(done[0]):
                return
            corrected = self._corrected(state, 0)
            quantiles = torch.tensor(QUANTILES, device=corrected.device)
            low, high = torch.quantile(corrected.flatten(), quantiles)
            self.value_range = float((high - low * VMIN_FACTOR) * VRANGE_FACTOR)
        for k in range(self.count):
            if k not in self.scored and bool(done[k + 1]):
                self.scored[k] = self._cost(state, k + 1)

    def _corrected(self, state: FitState, problem: int) -> torch.Tensor:
        return (self.stack - state.darkfield[problem]) / state.flatfield[problem]

    def _cost(self, state: FitState, problem: int) -> float:
        assert self.value_range is not None
        flat, corrected = state.flatfield[problem], self._corrected(state, problem)
        converged = bool(state.reweight_score[problem] <= self.tolerance) and bool(
            torch.isfinite(state.alm_residual[problem])
        )
        bad = (
            not converged
            or not bool(torch.isfinite(corrected).all())
            or float((flat - 1).abs().max()) < 1e-6
        )
        return math.inf if bad else autotune_cost(corrected, flat, self.value_range)

    @property
    def costs(self) -> tuple[float, ...]:
        """Every candidate's cost (after the last update, which scores them all)."""
        return tuple(self.scored[k] for k in range(self.count))

    def fraction(self, state: FitState, max_passes: int) -> float:
        """The share of the search done: a problem done counts 1, one still reweighting its
        passes over the most it may make."""
        done = (~state.active).double()
        passes = state.passes.double() / max(max_passes, 1)
        return float(torch.maximum(done, passes.clamp(max=1.0)).mean())

    def describe(self, candidates: tuple[float, ...]) -> str:
        """E.g. ``"5 of 17 candidates scored, best so far smoothness 1.5"``."""
        text = f"{len(self.scored)} of {self.count} candidates scored"
        finite = {k: c for k, c in self.scored.items() if math.isfinite(c)}
        if finite:
            best = min(finite, key=lambda k: (finite[k], k))
            text += f", best so far smoothness {candidates[best]:g}"
        return text


@takes_params(BasicParams)
def iter_autotune(
    images: ArrayLike,
    params: BasicParams,
    *,
    candidates: tuple[float, ...] = CANDIDATES,
    dark_frame: Any = None,
    fitting_weight: Any = None,
    device: str | torch.device | None = None,
) -> Job[AutotuneResult]:
    """Choose the flatfield smoothness (BaSiCPy's autotune cost), as a job.

    Parameters
    ----------
    images : array-like
        ``(T, Y, X)`` (one problem; tune channels one at a time).
    {params}
    params : BasicParams, optional
        The fit's other parameters (``smoothness_flatfield`` is what is searched; the
        darkfield smoothness, when estimated, is 0.1 x each candidate, as BaSiCPy).
    candidates : tuple of float
        Smoothness values to try (default BaSiCPy's pool), all fitted together.
    dark_frame : array-like, optional
        As for :func:`fit_basic`.
    fitting_weight : array-like, optional
        As for :func:`fit_basic` (pixels > 0 are fitted): every candidate and the final fit
        use it, so the profile is the one a run with this mask fits.
    device : str or torch.device, optional
        ``None`` = first GPU; ``"cpu"`` when named.

    Returns
    -------
    generator
        Yields progress (after each reweighting pass: the candidates scored of all, the best
        so far); returns an :class:`AutotuneResult` whose ``profile`` is fitted on all images
        with the chosen smoothness.

    Examples
    --------
    >>> import numpy as np
    >>> from napari_gpuscope.compute.flatfield import autotune
    >>> rng = np.random.default_rng(0)
    >>> yy, xx = np.mgrid[:32, :32]
    >>> flat = 1.2 - ((yy - 16) ** 2 + (xx - 16) ** 2) / 800
    >>> tiles = rng.uniform(100, 300, (12, 1, 1)) * flat * rng.lognormal(0, 0.1, (12, 32, 32))
    >>> result = autotune(tiles, candidates=(0.5, 2.0), device="cpu")
    >>> result.smoothness_flatfield in (0.5, 2.0)
    True
    """
    layout = check_images(images, None)
    if fitting_weight is not None:
        fitting_weight = broadcast_weight(fitting_weight, layout.shape)
    if not candidates or any(not (c > 0 and math.isfinite(c)) for c in candidates):
        raise InvalidInputError(f"candidates must be positive numbers, got {candidates!r}")
    chosen = tuple(float(c) for c in candidates)
    return _run(images, params, layout, chosen, dark_frame, fitting_weight, device)


def _run(
    images, params, layout, candidates, dark_frame, fitting_weight, device
) -> Job[AutotuneResult]:  # fmt: skip
    with torch.no_grad(), device_context(device) as dev:
        indices = _search_indices(layout.n_frames)
        subset = _Subset(images, indices) if len(indices) < layout.n_frames else images
        sub_layout = StackLayout((len(indices), *layout.frame_shape), None)
        shape = working_shape(layout.frame_shape, params.working_size)
        stack = yield from mapped(
            working_stack(subset, sub_layout, shape, dev),
            # Reading is the first 10 % (its own share is 20 %), never past the search's start.
            lambda u: Progress(min(0.1, 0.5 * (u.fraction or 0)), "autotune: " + u.message),
        )
        dark = torch.zeros(shape, device=dev)
        if dark_frame is not None:
            frame = torch.as_tensor(np.asarray(dark_frame, dtype=np.float32), device=dev)
            dark = resize_frames(frame[None], shape)[0]
        elif params.camera_offset is not None:
            dark = torch.full(shape, float(params.camera_offset), device=dev)
        stack = stack - dark
        mask = None
        if fitting_weight is not None:  # the search subset's frames of the mask
            picked = (
                _Subset(fitting_weight, indices)
                if len(indices) < layout.n_frames
                else (fitting_weight)
            )
            block = torch.as_tensor(np.asarray(picked[:], dtype=np.float32), device=dev)
            mask = (resize_frames(block, shape, "nearest") > 0)[None]
            _check_weight(mask)
        if params.sort_intensity:
            order = torch.argsort(stack, dim=1)
            stack = torch.take_along_dim(stack, order, dim=1)
            if mask is not None:
                mask = torch.take_along_dim(mask, order, dim=1)
        lambdas = torch.tensor((sum(CANDIDATES) / len(CANDIDATES), *candidates), device=dev)
        batch = stack.expand(len(lambdas), -1, -1, -1)
        # A problem that stopped reweighting is frozen (its state never changes again), so
        # its cost is scored as soon as it stops: the progress counts the candidates scored
        # and names the best so far, with the costs scoring them all at the end would give.
        scores = _Scores(stack[0], len(candidates), params.reweighting_tol)
        # A pass is one whole ALM per problem: the next update comes after the first pass.
        yield Progress(
            0.1,
            f"autotune: fitting {len(candidates)} candidates at once on {stack.shape[1]} "
            f"images; candidates are scored as they converge (after reweighting passes, at "
            f"most {params.max_reweight_iterations})",
        )
        state = None
        for state in reweighting_passes(
            batch,
            lam_flat=lambdas,
            lam_dark=0.1 * lambdas,
            get_darkfield=params.get_darkfield,
            max_iterations=params.max_iterations,
            optimization_tol=params.optimization_tol,
            max_reweight_iterations=params.max_reweight_iterations,
            reweighting_tol=params.reweighting_tol,
            epsilon=params.epsilon,
            fitting_mask=None if mask is None else mask.expand(len(lambdas), -1, -1, -1),
        ):
            scores.update(state, ~state.active.cpu())
            passes = int(state.passes.max())
            yield Progress(
                0.1 + 0.6 * scores.fraction(state, params.max_reweight_iterations),
                f"autotune: {scores.describe(candidates)} (reweighting pass {passes})",
                passes,
            )
        assert state is not None
        scores.update(state, torch.ones(len(lambdas), dtype=torch.bool))
        costs = scores.costs
        if not any(math.isfinite(c) for c in costs):
            raise RuntimeError(
                "autotune: no candidate smoothness gave a converged, finite fit; raise "
                "max_reweight_iterations or check the images"
            )
        best = candidates[int(np.argmin(costs))]
        yield Progress(0.7, f"autotune chose smoothness {best:g}; fitting all images with it")
        chosen = params.replace(
            smoothness_flatfield=best,
            smoothness_darkfield=0.1 * best if params.get_darkfield else None,
        )
        profile = yield from mapped(
            _fit_job(images, chosen, layout, dark_frame, fitting_weight, dev),
            lambda u: Progress(
                0.7 + 0.3 * (u.fraction or 0), u.message, u.step, u.metrics, u.outputs
            ),
        )
        return AutotuneResult(
            best,
            chosen.smoothness_darkfield,
            candidates,
            tuple(costs),
            profile,
            profile.stopped_early,
        )


autotune = blocking(iter_autotune)
autotune.__doc__ = """Choose the flatfield smoothness (blocking :func:`iter_autotune`).

Examples
--------
>>> import numpy as np
>>> from napari_gpuscope.compute.flatfield import autotune
>>> yy, xx = np.mgrid[:32, :32]
>>> flat = 1.2 - ((yy - 16) ** 2 + (xx - 16) ** 2) / 800
>>> tiles = np.random.default_rng(1).uniform(100, 300, (12, 1, 1)) * flat
>>> autotune(tiles, candidates=(1.0,), device="cpu").smoothness_flatfield
1.0
"""
