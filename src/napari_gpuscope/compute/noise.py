"""Noise models: a robust Gaussian noise level, a Poisson-Gaussian camera fit and the GAT.

Fluorescence images are photon counts seen through a camera::

    x_ADU = gain * Poisson(lambda) + offset + N(0, read_noise^2)

Two ways to denoise such data with a Gaussian-noise method such as TV (ROF):

- **Gaussian model** -- denoise the raw image with a weight relative to the estimated noise level
  (:func:`estimate_noise_sigma`). Simple, but the noise of a bright region is larger than that of
  a dim one, so a single weight over-smooths one and under-smooths the other.
- **Poisson model** -- apply the generalized Anscombe transform (GAT, :func:`anscombe_forward`),
  which makes the noise approximately unit-variance Gaussian everywhere, denoise in those units,
  and return with the *exact unbiased* inverse (:func:`anscombe_inverse`). The camera parameters
  come from the user, the camera's metadata or :func:`estimate_poisson_gaussian`.

Everything here is pure array code (NumPy/torch); tensors stay on the device they arrive on.
The GAT and its inverse are in :mod:`._anscombe`; this module is their public home.

References
----------
J. Immerkaer, "Fast noise variance estimation", Computer Vision and Image Understanding 64(2),
300-302 (1996).
M. Makitalo and A. Foi, "A closed-form approximation of the exact unbiased inverse of the
Anscombe variance-stabilizing transformation", IEEE Trans. Image Process. 20(9), 2697-2698 (2011).
M. Makitalo and A. Foi, "Optimal inversion of the generalized Anscombe transformation for
Poisson-Gaussian noise", IEEE Trans. Image Process. 22(1), 91-103 (2013).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ._anscombe import anscombe_forward, anscombe_inverse
from .camera import CameraModel

__all__ = [
    "CameraModel",
    "PoissonGaussian",
    "anscombe_forward",
    "anscombe_inverse",
    "estimate_noise_sigma",
    "estimate_poisson_gaussian",
]

# Immerkaer's kernel [[1, -2, 1], [-2, 4, -2], [1, -2, 1]] is the difference of two
# Laplacians (the outer product of two second differences); it annihilates constants, ramps and
# bilinear terms. Its coefficients' squares sum to 36, so white noise of std sigma gives a
# residual of std 6 * sigma.
_IMMERKAER_GAIN = 6.0
# median(|N(0, 1)|): turns a median absolute value into a standard deviation.
_MAD_TO_STD = 0.6744897501960817
# Upper bound on residual values used by the estimators (deterministic subsampling above it):
# ample for a <1 % statistical error, and keeps the median cheap on huge volumes.
_MAX_SAMPLES = 1 << 22
# Row bands taken from a single very large plane (the residual of a band loses 2 rows).
_BAND_ROWS = 66
# Block selection for the camera fit: a block is rejected when edge residuals (plain vs robust
# residual variance) or un-detrended structure (pixel vs residual variance) exceed these ratios.
_EDGE_RATIO = 1.5
_FLAT_RATIO = 1.5


PoissonGaussian = CameraModel
"""The camera model under its noise-model name (the same class as :class:`CameraModel`)."""


def _as_float32(plane: object) -> np.ndarray:
    """A float32 copy of one plane (NumPy, dask or zarr); refuses complex or non-numeric data."""
    array = np.asarray(plane)
    if array.dtype.kind not in "fiub":
        raise TypeError(f"expected a real-valued image, got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.float32)


def _planes(image: np.ndarray | torch.Tensor, max_samples: int = _MAX_SAMPLES) -> torch.Tensor:
    """Float32 ``(P, H, W)`` stack of (a deterministic subset of) the 2D planes of ``image``.

    Planes are taken evenly spaced over all leading axes; when even one plane is larger than the
    sample budget, evenly spaced bands of rows are taken from each selected plane instead.
    """
    if not isinstance(image, torch.Tensor) and not hasattr(image, "shape"):
        image = np.asarray(image)  # nested lists and other array-likes
    if len(image.shape) < 2:
        raise ValueError(f"expected an image with at least 2 dimensions, got {len(image.shape)}")
    height, width = int(image.shape[-2]), int(image.shape[-1])
    if height < 3 or width < 3:
        raise ValueError(f"the last two axes must be at least 3 long, got {(height, width)}")
    n_planes = math.prod(int(n) for n in image.shape[:-2])
    plane_samples = (height - 2) * (width - 2)
    keep = max(1, min(n_planes, max_samples // plane_samples))
    picks = np.unique(np.linspace(0, n_planes - 1, keep).round().astype(np.int64))

    if isinstance(image, torch.Tensor):
        stack = image.reshape(n_planes, height, width)[torch.as_tensor(picks, device=image.device)]
        stack = stack.to(torch.float32)
    else:
        # Index plane by plane before converting: a huge (or lazy dask/zarr) volume is never
        # read or copied whole.
        lead_shape = tuple(int(n) for n in image.shape[:-2])
        planes = [_as_float32(image[np.unravel_index(int(i), lead_shape)]) for i in picks]
        stack = torch.from_numpy(np.stack(planes))

    if plane_samples > max_samples and height > _BAND_ROWS:
        n_bands = max(1, max_samples // (width * (_BAND_ROWS - 2)))
        starts = np.linspace(0, height - _BAND_ROWS, n_bands).round().astype(np.int64)
        stack = torch.cat([stack[:, s : s + _BAND_ROWS] for s in np.unique(starts)], dim=0)
    return stack


def _residual(planes: torch.Tensor) -> torch.Tensor:
    """Immerkaer residual divided by 6: ``(P, H-2, W-2)``, std = sigma for white noise.

    The kernel is the outer product of two second differences, applied as
    ``(x[i-1] + x[i+1]) - 2 x[i]`` along each axis and divided by 6 last: a constant image gives
    exactly 0 in any rounding order. (A convolution with the kernel divided by 6 first left
    1e-7 on a flat image of 5.0 on one CPU, which read as noise and let a noise-free image
    through as "noisy".)
    """
    rows = (planes[:, :, :-2] + planes[:, :, 2:]) - 2 * planes[:, :, 1:-1]
    return ((rows[:, :-2] + rows[:, 2:]) - 2 * rows[:, 1:-1]) / _IMMERKAER_GAIN


def estimate_noise_sigma(image: np.ndarray | torch.Tensor) -> float:
    """Estimate the standard deviation of additive white Gaussian noise in one pass.

    Immerkaer's estimator: the image is filtered with the Laplacian-difference kernel
    ``[[1, -2, 1], [-2, 4, -2], [1, -2, 1]]`` over its last two axes, which cancels locally
    constant, linear and bilinear signal and leaves a residual of standard deviation
    ``6 * sigma``. All planes (leading axes: z, time, channels) are pooled, and the noise level is
    read from the **median absolute residual**: ``sigma = median(|r|) / (0.6745 * 6)``.

    Why the median and not Immerkaer's mean absolute residual
    (``sqrt(pi/2) * mean(|r|) / 6``): edges, thin filaments and puncta leave large residuals
    that the mean averages in, while the median ignores them as long as they cover well under
    half of the pixels. Measured on the fluorescence phantoms of
    :mod:`napari_gpuscope.sample_data` (512 x 512 2D and 16 x 128 x 128 3D, additive Gaussian
    noise), the mean overestimates sigma by 37 % / 27 % at sigma = 0.01, 10 % / 8 % at 0.03 and
    1 % at 0.1; the median's error is at most 4 % / 3 % over the same range.

    Parameters
    ----------
    image : numpy.ndarray or torch.Tensor
        Image with at least two axes; the last two are the image plane. Any real dtype; tensors
        are processed on their own device; dask and zarr arrays are read plane by plane.
        Inputs with more than ~4 million residual samples are subsampled deterministically
        (evenly spaced planes, then bands of rows).

    Returns
    -------
    float
        Estimated noise standard deviation in the image's units (0 for noise-free smooth data).

    Notes
    -----
    For Poisson or Poisson-Gaussian data the result is a typical (median-weighted) noise level of
    the image, not a single true sigma; use :func:`estimate_poisson_gaussian` for those.
    """
    residual = _residual(_planes(image))
    return float(residual.abs().flatten().median()) / _MAD_TO_STD


def estimate_poisson_gaussian(
    image: np.ndarray | torch.Tensor, *, block_size: int = 16, n_bins: int = 16
) -> CameraModel:
    """Fit a Poisson-Gaussian camera model to a single image (a one-image photon-transfer curve).

    The image is cut into non-overlapping ``block_size x block_size`` blocks. In each block the
    noise variance is the variance of the Immerkaer residual (divided by 6, so it has the noise's
    variance) and the signal level is the block mean. Blocks containing edges are rejected
    (their plain residual variance exceeds 1.5 times the robust, median-based one), so are blocks
    whose pixels vary more than the noise once a bilinear trend is removed, and the remaining
    blocks are grouped into ``n_bins`` equally populated bins of mean intensity, and a robust
    Theil-Sen line ``variance = gain * mean + beta`` is fitted through the bins' medians.

    Parameters
    ----------
    image : numpy.ndarray or torch.Tensor
        Raw camera image in ADU (not background-subtracted, not rescaled), at least 2D. It must
        contain a range of intensities -- a perfectly uniform frame cannot separate gain from
        read noise.
    block_size : int
        Side of the square blocks (in residual pixels).
    n_bins : int
        Number of intensity bins for the line fit.

    Returns
    -------
    CameraModel
        ``gain`` as fitted, ``offset = -beta / gain``, ``read_noise = 0`` and
        ``floor_variance`` the fitted variance at the darkest homogeneous blocks (their 1st
        percentile level), where the transform turns linear.

    Raises
    ------
    ValueError
        If there are too few usable blocks, the intensities span no usable range, or the noise
        variance does not grow measurably with intensity (then the Gaussian model fits better).

    Notes
    -----
    From one image, offset and read noise cannot be told apart: both enter the variance line
    only through ``beta = read_noise**2 - gain * offset``. The generalized Anscombe transform
    depends on exactly ``gain`` and ``beta``, so the returned model, which puts all of ``beta``
    into the offset, gives the same forward transform and the same inverses as the true camera
    model (except that the inverse's zero-photon floor sits ``read_noise**2 / gain`` lower) --
    exact for denoising purposes, although ``offset`` is then not the camera's bias.
    """
    planes = _planes(image)
    residual = _residual(planes)
    signal = planes[:, 1:-1, 1:-1]  # aligned with the residual's pixels
    n_planes, height, width = residual.shape
    rows, cols = height // block_size, width // block_size
    if rows * cols * n_planes < 3 * n_bins:
        raise ValueError(
            f"image too small to fit a noise model: {rows * cols * n_planes} blocks of "
            f"{block_size} x {block_size}, need at least {3 * n_bins}"
        )

    def blocks(t: torch.Tensor) -> torch.Tensor:
        t = t[:, : rows * block_size, : cols * block_size]
        t = t.reshape(n_planes, rows, block_size, cols, block_size).permute(0, 1, 3, 2, 4)
        return t.reshape(-1, block_size * block_size).to(torch.float64)

    res_blocks = blocks(residual)
    sig_blocks = blocks(signal)
    block_mean = sig_blocks.mean(dim=1)
    block_var = res_blocks.var(dim=1)
    robust_var = (res_blocks.abs().median(dim=1).values / _MAD_TO_STD) ** 2
    # A block is usable when (a) no edge residuals inflate its variance beyond the robust value
    # and (b) the image itself is flat there up to a bilinear trend (vignetting, ramps): its
    # detrended pixel variance is then just the noise variance again.
    basis = _bilinear_basis(block_size, sig_blocks.dtype, sig_blocks.device)
    centred = sig_blocks - block_mean[:, None]
    trend_energy = ((centred @ basis) ** 2).sum(dim=1)
    detrended_var = ((centred**2).sum(dim=1) - trend_energy) / (block_size**2 - 4)
    homogeneous = (block_var <= _EDGE_RATIO * robust_var) & (
        detrended_var <= _FLAT_RATIO * robust_var
    )
    means = block_mean[homogeneous].cpu().numpy()
    variances = block_var[homogeneous].cpu().numpy()
    if means.size < 3 * n_bins:
        raise ValueError(
            f"only {means.size} homogeneous blocks found; need at least {3 * n_bins} to fit a "
            "noise model (is the image mostly edges, or saturated?)"
        )

    order = np.argsort(means, kind="stable")
    bins = np.array_split(order, n_bins)
    bin_mean = np.array([np.median(means[b]) for b in bins])
    bin_var = np.array([np.median(variances[b]) for b in bins])
    spread = bin_mean[-1] - bin_mean[0]
    typical_var = float(np.median(variances))
    # Block means scatter by about sqrt(var)/block_size from noise alone; an intensity range
    # not well above that cannot carry a slope.
    if not spread > 20.0 * math.sqrt(max(typical_var, 0.0)) / block_size:
        raise ValueError(
            "the image has no usable intensity range: gain cannot be separated from read noise "
            "with a uniform frame; pass gain/offset/read_noise explicitly"
        )

    i, j = np.triu_indices(n_bins, k=1)
    dx = bin_mean[j] - bin_mean[i]
    ok = dx > 1e-12 * spread
    gain = float(np.median((bin_var[j] - bin_var[i])[ok] / dx[ok]))
    beta = float(np.median(bin_var - gain * bin_mean))
    gain, beta = _refine_line(means, variances, gain, beta)
    # The noise must grow measurably (>10 % of its typical variance) over the intensity range.
    if not (math.isfinite(gain) and gain * spread > 0.1 * typical_var):
        raise ValueError(
            f"fitted gain {gain:.3g}: the noise variance does not grow measurably with intensity, "
            "so the data look Gaussian rather than Poisson -- use the Gaussian noise model or "
            "pass the camera gain explicitly"
        )
    darkest = max(gain * float(np.percentile(means, 1.0)) + beta, 0.0)
    return CameraModel(gain=gain, offset=-beta / gain, read_noise=0.0, floor_variance=darkest)


def _refine_line(
    means: np.ndarray, variances: np.ndarray, gain: float, beta: float, rounds: int = 3
) -> tuple[float, float]:
    """Refine a robust start of ``variance = gain * mean + beta`` by weighted least squares.

    A block variance's scatter is proportional to its expectation, so each block is weighted by
    ``1 / predicted**2``; blocks more than 50 % off the current line are left out as outliers.
    The Theil-Sen start alone wastes most of the data (medians of medians); this uses all of it.
    """
    for _ in range(rounds):
        predicted = gain * means + beta
        if not np.all(predicted > 0):
            break
        inliers = np.abs(variances / predicted - 1.0) < 0.5
        if inliers.sum() < 3:
            break
        weights = 1.0 / predicted[inliers] ** 2
        design = np.stack([means[inliers], np.ones(inliers.sum())], axis=1)
        sqrt_w = np.sqrt(weights)[:, None]
        solution, *_ = np.linalg.lstsq(
            design * sqrt_w, variances[inliers] * sqrt_w[:, 0], rcond=None
        )
        gain, beta = float(solution[0]), float(solution[1])
    return gain, beta


def _bilinear_basis(size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Orthonormal ``(size**2, 3)`` basis of zero-mean ``y``, ``x`` and ``x*y`` over a block."""
    coords = torch.arange(size, dtype=dtype, device=device) - (size - 1) / 2
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    columns = torch.stack([yy.flatten(), xx.flatten(), (xx * yy).flatten()], dim=1)
    return torch.linalg.qr(columns - columns.mean(dim=0)).Q
