"""What a fit hands on: the full-size fields as lazy outputs after every reweighting pass, and
the :class:`~._profile.ShadingProfile` at the end (with its convergence flags, or a refusal when
no finite flatfield is left)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..arrays import InvalidInputError, to_host
from ..jobs import Output
from ..params import ParameterError
from ._profile import ShadingProfile

__all__: list[str] = []


def _upsample(small: torch.Tensor, frame: tuple[int, int]) -> torch.Tensor:
    if tuple(small.shape[-2:]) == tuple(frame):
        return small
    return F.interpolate(small[:, None], size=frame, mode="bilinear", align_corners=True)[:, 0]


def _full_fields(state, frame, dark_full) -> tuple[torch.Tensor, torch.Tensor]:
    flat = _upsample(state.flatfield, frame)
    dark = dark_full if dark_full is not None else _upsample(state.darkfield, frame)
    return flat, dark


def _outputs(state, frame, dark_full) -> dict[str, Output]:
    def flat():
        return _squeeze(to_host(_upsample(state.flatfield, frame)))

    def dark():
        return _squeeze(to_host(_full_fields(state, frame, dark_full)[1]))

    def base():
        return _squeeze(to_host(state.baseline))

    return {"flatfield": Output(flat), "darkfield": Output(dark), "baseline": Output(base)}


def _squeeze(array: np.ndarray) -> np.ndarray:
    return array[0] if array.shape[0] == 1 else array


def _profile(
    state, params, layout, frame, shape, dark_full, source, lam_flat, lam_dark, stopped
) -> ShadingProfile:
    flat, dark = _full_fields(state, frame, dark_full)
    if source == "none":
        dark = torch.zeros_like(flat)
    residual = state.alm_residual
    flat_ok = torch.isfinite(state.flatfield).flatten(1).all(dim=1)
    converged = (
        (state.reweight_score <= params.reweighting_tol)
        & (residual <= params.optimization_tol)
        & torch.isfinite(residual)
        & flat_ok
    )
    if params.max_reweight_iterations == 1:  # one pass: nothing to compare; the ALM decides
        converged = (residual <= params.optimization_tol) & flat_ok
    converged = converged & ~torch.tensor(stopped, device=converged.device)
    if not bool(flat_ok.all()):  # never handed on, even flagged as not converged
        used = ", ".join(f"{float(v):.3g}" for v in lam_flat.cpu())
        if params.smoothness_flatfield is not None:
            raise ParameterError(
                f"smoothness_flatfield={params.smoothness_flatfield:g} is too strong for these "
                "images: the fit shrank the whole flatfield away (no finite profile is left); "
                "lower it, or leave it automatic (None)"
            )
        raise InvalidInputError(
            "the images do not follow BaSiC's model (intensity = flatfield x baseline + "
            f"darkfield, with a positive mean): the fit, at smoothness {used}, left no finite "
            "flatfield. Their mean is too close to zero for their spread (a camera "
            "offset subtracted twice?): fit the raw images and give camera_offset instead"
        )
    return ShadingProfile(
        flatfield=_squeeze(to_host(flat).astype(np.float32)),
        darkfield=_squeeze(to_host(dark.contiguous()).astype(np.float32)),
        baseline=_squeeze(to_host(state.baseline).astype(np.float32)),
        params=params,
        smoothness_flatfield=tuple(float(v) for v in lam_flat.cpu()),
        smoothness_darkfield=tuple(float(v) for v in lam_dark.cpu())
        if source == "estimated"
        else (),
        darkfield_source=source,
        converged=tuple(bool(v) for v in converged.cpu()),
        reweight_passes=tuple(int(v) for v in state.passes.cpu()),
        alm_iterations=tuple(int(v) for v in state.alm_iterations.cpu()),
        alm_residual=tuple(float(v) for v in residual.cpu()),
        reweight_score=tuple(float(v) for v in state.reweight_score.cpu()),
        offset=tuple(float(v) for v in state.offset.cpu()),
        working_shape=shape,
        stopped_early=stopped,
        batch_axis=layout.batch_axis,
    )
