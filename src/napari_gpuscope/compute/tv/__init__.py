"""Total-variation (ROF) denoising on the GPU.

Solves ``min_u 1/2 ||u - f||^2 + weight * TV(u)`` with isotropic TV built from per-axis weighted
forward differences, for 2D, 3D, time-lapse and 4D images with an optional channel axis:

- ``method="fgp"`` (default): fast gradient projection on the dual (Beck & Teboulle 2009), with
  fused CUDA kernels (``tv_fgp.cu`` beside their torch twins in :mod:`._ops`), an optional
  non-negativity constraint and a certified convergence test (the relative duality gap);
- ``method="chambolle"``: Chambolle's projection exactly as
  :func:`skimage.restoration.denoise_tv_chambolle` (same step, stopping rule and output).

Independent problems (channels, and axes whose spacing weight is 0 such as a frame-by-frame time
axis) are solved together as one batch. Volumes larger than device memory are split into chunks
along their first smoothed axis and still solved as one problem (FGP runs the unchunked
iterations chunk by chunk; the stitched result is certified in float64); :func:`halo` gives the
overlap a Dask ``map_overlap`` would need. :func:`iter_denoise` is the progress-reporting job
behind :func:`denoise`; :class:`TVParams` holds every parameter; :func:`resolve_weight` tells
which weight (and noise level, camera model) a job will use on an image, without solving.

Modules: :mod:`._params` (the parameter model), :mod:`._weight` (input checks and the weight),
:mod:`._job` (the job and its result), :mod:`._context` (what the chunks of a job share),
:mod:`._scale` (intensity scaling and what float32 cannot hold), :mod:`._split` and
:mod:`._certificate` (split volumes and their duality gap), :mod:`._halo` (the public halo),
:mod:`._fgp` and :mod:`._chambolle` (solvers; :mod:`._numpy_sum` reproduces NumPy's float32 sums
for scikit-image parity), :mod:`._ops` (operators and fused kernels), :mod:`._preview` (the
dock's live preview of the displayed plane: :func:`preview_job`, :class:`WholeImageWeights`).
"""

from .._lazy import attach

__all__ = [
    "HALO_PLANES",
    "MAX_HALO_STRENGTH",
    "METHODS",
    "NOISE_MODELS",
    "OUTPUT",
    "ResolvedWeight",
    "TVParams",
    "TVPreview",
    "TVResult",
    "WholeImageWeights",
    "denoise",
    "halo",
    "iter_denoise",
    "preview_job",
    "resolve_weight",
    "spacing_from_scale",
]

# Each name imports its module when first used (PEP 562, compute/_lazy.py): the parameter
# models and the registry's metadata load without torch (recipe, validate, status).
__getattr__, __dir__ = attach(
    __name__,
    globals(),
    {
        "..geometry": ["spacing_from_scale"],
        "._halo": ["HALO_PLANES", "MAX_HALO_STRENGTH", "halo"],
        "._job": ["OUTPUT", "TVResult", "denoise", "iter_denoise"],
        "._params": ["METHODS", "NOISE_MODELS", "TVParams"],
        "._preview": ["TVPreview", "WholeImageWeights", "preview_job"],
        "._prox": ["prox"],  # tensor-in, tensor-out step for solvers (phase ADMM)
        "._weight": ["ResolvedWeight", "resolve_weight"],
    },
)
