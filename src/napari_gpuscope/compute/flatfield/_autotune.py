"""Autotune: the flatfield smoothness by BaSiCPy's entropy + Fourier-L0 cost, candidates batched.

Every candidate smoothness is fitted as one batch of independent problems, on about 50 of the
images (as BaSiCPy): all at once on a GPU, a few at a time on a CPU (:data:`CPU_GROUP_BYTES`;
the same numbers within float32 rounding, the same choice, faster there). Each candidate's
cost (:mod:`._autotune_scores`) is the entropy
of the corrected intensities' histogram (shading smears it) plus 30 x the fraction of
significant high-frequency DCT coefficients of its flatfield (ripple). The winner is then fitted
on all images, so the returned profile is the best one (BaSiCPy left a non-optimal flatfield
behind). A candidate whose fit has stopped reweighting never changes again, so it is scored at
once: the progress after each reweighting pass counts the candidates scored and names the best
so far, and between ALM iterations inside a pass it names the pass, the candidates fitting and
the iteration (where a cancel lands too).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._types import ArrayLike
from ..arrays import InvalidInputError
from ..devices import device_context
from ..job_control import PreviewThrottle
from ..job_parts import mapped
from ..jobs import Job, Progress, blocking
from ..results import Geometry, LayerDataTuple
from ..signatures import takes_params
from ._alm import AlmTick, reweighting_steps
from ._autotune_scores import _Scores, autotune_cost
from ._fit import _check_weight, broadcast_weight, working_stack
from ._fit import _run as _fit_job
from ._params import BasicParams
from ._profile import ShadingProfile
from ._stack import StackLayout, check_images, resize_frames, working_shape

__all__ = ["CANDIDATES", "AutotuneResult", "autotune", "autotune_cost", "iter_autotune"]

CANDIDATES = (0.01, 0.1, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4, 5, 6, 7, 8, 10)
"""BaSiCPy 2.0's pool of flatfield smoothness values."""
SEARCH_FRAMES = 50
CPU_GROUP_BYTES = 8 * 2**20
"""A CPU fits the candidates a few at a time, each group's ``(K, T, m, n)`` stacks within
this (2 at the default working size): a group's arrays stay in the caches and its temporaries
are reused, where the whole batch's (57 MB each on the flat-field sample) page-fault at every
allocation; 3-4x less CPU time per ALM iteration at low load (``benchmarks/README.md``)."""
PROGRESS_INTERVAL = 0.5
"""Seconds between two progress updates inside a reweighting pass (a CPU pass takes tens)."""


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
        so far; inside a pass, at most every :data:`PROGRESS_INTERVAL` seconds: the pass, the
        candidates fitting and the ALM iteration); returns an :class:`AutotuneResult` whose
        ``profile`` is fitted on all images with the chosen smoothness.

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
        # A problem that stopped reweighting is frozen (its state never changes again), so
        # its cost is scored as soon as it stops: the progress counts the candidates scored
        # and names the best so far, with the costs scoring them all at the end would give.
        scores = _Scores(stack[0], len(candidates), params.reweighting_tol)
        group = _group_size(stack.shape, dev)
        yield Progress(
            0.1,
            f"autotune: fitting {len(candidates)} candidates "
            f"{'at once' if group is None else f'{group} at a time'} on {stack.shape[1]} "
            f"images; candidates are scored as they converge (after reweighting passes, at "
            f"most {params.max_reweight_iterations})",
        )
        yield from _search(stack, mask, lambdas, params, scores, candidates, group)
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


def _group_size(shape: torch.Size, device: torch.device) -> int | None:
    """How many problems a CPU fits at a time: as many as keep one ``(K, T, m, n)`` float32
    array within :data:`CPU_GROUP_BYTES`, at least 2. ``None`` on a GPU (all at once)."""
    if device.type != "cpu":
        return None
    return max(2, CPU_GROUP_BYTES // (4 * math.prod(shape[1:])))


def _search(
    stack: torch.Tensor,
    mask: torch.Tensor | None,
    lambdas: torch.Tensor,
    params: BasicParams,
    scores: _Scores,
    candidates: tuple[float, ...],
    group: int | None,
) -> Generator[Progress, object, None]:
    """Fit every candidate (and the reference, problem 0) until each stopped reweighting and
    score it then: progress after each pass and, at most every
    :data:`PROGRESS_INTERVAL` seconds, between ALM iterations inside one (where a cancel
    lands too)."""
    max_passes = params.max_reweight_iterations
    throttle = PreviewThrottle(PROGRESS_INTERVAL)
    state, expected = None, params.max_iterations
    for step in reweighting_steps(
        stack.expand(len(lambdas), -1, -1, -1),
        lam_flat=lambdas,
        lam_dark=0.1 * lambdas,
        get_darkfield=params.get_darkfield,
        max_iterations=params.max_iterations,
        optimization_tol=params.optimization_tol,
        max_reweight_iterations=max_passes,
        reweighting_tol=params.reweighting_tol,
        epsilon=params.epsilon,
        fitting_mask=None if mask is None else mask.expand(len(lambdas), -1, -1, -1),
        group_size=group,
    ):
        if isinstance(step, AlmTick):
            if throttle.due():
                yield Progress(
                    0.1 + 0.6 * scores.fraction_within(step, state, max_passes, expected),
                    "autotune: " + scores.describe_within(step, candidates),
                )
            continue
        state = step
        # A pass's share inside the next one: its iterations of the last pass's most.
        expected = int(state.alm_iterations.max())
        scores.update(state, ~state.active.cpu())
        passes = int(state.passes.max())
        yield Progress(
            0.1 + 0.6 * scores.fraction(state, max_passes),
            f"autotune: {scores.describe(candidates)} (reweighting pass {passes})",
            passes,
        )
    assert state is not None
    scores.update(state, torch.ones(len(lambdas), dtype=torch.bool))


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
